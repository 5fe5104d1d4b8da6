// Fast precision's repacked block products (repacked.hpp) against the reference dot product: the same sums in
// another order, so equal up to float rounding, over row and column counts with tails on both sides.
#include "blocks.h"
#include "repacked.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace {

using namespace cellm::openblas;

std::vector<float> random_floats(size_t n, unsigned seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> v(n);
    for (float& x : v) x = u(rng);
    for (size_t i = 0; i < n; i += 97) v[i] *= 20.0f;  // outliers, as real activations have
    return v;
}

struct Weight {
    std::vector<uint8_t> bytes;
    cellm_buffer buffer;
    cellm::cpu::Node node;
};

Weight make_weight(cellm_dtype type, int64_t k, int64_t m, unsigned seed) {
    Weight w;
    const uint64_t row_bytes = cellm::blocks::row_bytes(type, k);
    w.bytes.resize(row_bytes * static_cast<uint64_t>(m));
    const std::vector<float> values = random_floats(static_cast<size_t>(k * m), seed);
    for (int64_t r = 0; r < m; ++r)
        cellm::blocks::quantize_row(type, values.data() + r * k, w.bytes.data() + r * row_bytes, k);
    w.buffer.data = reinterpret_cast<std::byte*>(w.bytes.data());
    w.buffer.size = w.bytes.size();
    w.buffer.writable = false;
    w.node.op = CELLM_OP_WEIGHT;
    w.node.type = type;
    w.node.ne = {k, m, 1, 1};
    w.node.buffer = &w.buffer;
    w.node.data = w.buffer.data;
    return w;
}

TEST(RepackedProducts, FollowTheReferenceUpToRounding) {
    const RepackedDot dot = repacked_dot();
    if (dot == nullptr) GTEST_SKIP() << "this CPU has no repacked kernel (AVX-512 VNNI or ARM SDOT)";
    ThreadPool pool(2);
    for (cellm_dtype type : {CELLM_TYPE_Q8_0, CELLM_TYPE_Q4_0, CELLM_TYPE_Q4_1, CELLM_TYPE_Q5_0, CELLM_TYPE_Q5_1})
        for (const int64_t k : {64, 576})
            for (const int64_t m : {1, 16, 35})
                for (const int64_t n : {1, 3, 8, 9, 17}) {
                    SCOPED_TRACE("type " + std::to_string(type) + ", k " + std::to_string(k) + ", rows " +
                                 std::to_string(m) + ", columns " + std::to_string(n));
                    Weight w = make_weight(type, k, m, static_cast<unsigned>(k + m));
                    const int64_t nb = k / 32;
                    const std::vector<float> x = random_floats(static_cast<size_t>(n * k), 7);
                    std::vector<int8_t> codes(static_cast<size_t>(n * k));
                    std::vector<float> scales(static_cast<size_t>(n * nb)), sums(scales.size());
                    std::vector<int32_t> starts(scales.size());
                    for (int64_t c = 0; c < n; ++c)
                        cellm::blocks::quantize_q8(x.data() + c * k, k, codes.data() + c * k, scales.data() + c * nb,
                                                   sums.data() + c * nb);
                    const int32_t bias = repacked_format(type)->bias;
                    for (int64_t b = 0; b < n * nb; ++b) {
                        int32_t sum = 0;
                        for (int e = 0; e < 32; ++e) sum += codes[static_cast<size_t>(b * 32 + e)];
                        starts[static_cast<size_t>(b)] = -bias * sum;
                    }
                    RepackedWeights repacked;
                    const RepackedWeight& rows = repacked.get(w.node, pool);
                    const Q8Columns columns{codes.data(), scales.data(), sums.data(), nullptr, nb};
                    std::vector<float> got(static_cast<size_t>(n * m), NAN);
                    dot(rows, 0, rows.groups(), columns, starts.data(), n, got.data(), m);

                    const uint64_t row_bytes = cellm::blocks::row_bytes(type, k);
                    std::vector<float> dequantized(static_cast<size_t>(k));
                    for (int64_t r = 0; r < m; ++r) {
                        cellm::blocks::dequantize_row(type, w.bytes.data() + r * row_bytes, dequantized.data(), k);
                        for (int64_t c = 0; c < n; ++c) {
                            const float want = cellm::blocks::dot_q8(type, w.bytes.data() + r * row_bytes,
                                                                     codes.data() + c * k, scales.data() + c * nb,
                                                                     sums.data() + c * nb, k);
                            // The size of what is summed: float rounding is relative to it, a wrong code or
                            // scale is not.
                            double magnitude = 0;
                            for (int64_t e = 0; e < k; ++e)
                                magnitude += std::fabs(double(dequantized[static_cast<size_t>(e)]) *
                                                       scales[static_cast<size_t>(c * nb + e / 32)] *
                                                       codes[static_cast<size_t>(c * k + e)]);
                            const float value = got[static_cast<size_t>(c * m + r)];
                            ASSERT_NEAR(value, want, 1e-5 * magnitude + 1e-6) << "row " << r << ", column " << c;
                        }
                    }
                }
}

TEST(RepackedProducts, FollowTheirBufferAndShape) {
    if (repacked_dot() == nullptr) GTEST_SKIP() << "this CPU has no repacked kernel (AVX-512 VNNI or ARM SDOT)";
    ThreadPool pool(1);
    Weight w = make_weight(CELLM_TYPE_Q4_1, 64, 20, 3);
    RepackedWeights repacked;
    const uint64_t bytes = repacked.get(w.node, pool).bytes;
    EXPECT_EQ(bytes, 2u * 2u * 320u);  // two groups of two blocks
    repacked.get(w.node, pool);
    EXPECT_EQ(repacked.take_new().first, 1);  // the second use found the first's
    // The same address as another shape (a later model in a reused mapping) is repacked again.
    w.node.ne = {32, 40, 1, 1};
    repacked.get(w.node, pool);
    EXPECT_EQ(repacked.take_new().first, 1);
    EXPECT_EQ(repacked.bytes(), 3u * 320u);
    // Freeing the buffer drops it.
    repacked.forget(w.buffer.data, w.buffer.size);
    EXPECT_EQ(repacked.bytes(), 0u);
}

}  // namespace
