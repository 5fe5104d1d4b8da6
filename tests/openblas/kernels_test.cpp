// The openblas backend's kernel tables against the reference block code (blocks::), for every table this CPU
// can run: dequantization and quantized dot products are bit-exact, float loops agree up to summation order.
#include "blocks.h"
#include "kernels.hpp"
#include "reference_kernels.hpp"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>
#include <vector>

namespace {

using cellm::openblas::Kernels;

std::vector<float> random_floats(size_t n, unsigned seed, float scale = 1.0f) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(-scale, scale);
    std::vector<float> v(n);
    for (float& x : v) x = u(rng);
    // A few outliers, as real activations have.
    for (size_t i = 0; i < n; i += 97) v[i] *= 20.0f;
    return v;
}

const std::vector<const Kernels*>& runnable_tables() { return cellm::openblas::runnable_kernels(); }

TEST(OpenblasKernels, QuantizedRowsMatchTheReference) {
    const int64_t k = 576;
    for (const Kernels* table : runnable_tables()) {
        for (cellm_dtype type : {CELLM_TYPE_Q8_0, CELLM_TYPE_Q4_0, CELLM_TYPE_Q4_1, CELLM_TYPE_Q5_0, CELLM_TYPE_Q5_1}) {
            SCOPED_TRACE(std::string(table->isa) + " type " + std::to_string(type));
            const int s = cellm::openblas::slot(type);
            ASSERT_GE(s, 0);
            std::vector<uint8_t> row(cellm::blocks::row_bytes(type, k));
            cellm::blocks::quantize_row(type, random_floats(k, 1).data(), row.data(), k);
            std::vector<float> want(k), got(k);
            cellm::blocks::dequantize_row(type, row.data(), want.data(), k);
            if (table->dequantize[s] != nullptr) {
                table->dequantize[s](row.data(), got.data(), k / 32);
                EXPECT_EQ(got, want);
            }
        }
    }
}

// Tiles of rows and columns with remainders on both sides, 7 rows against: 15 columns (pair groups of 8 and 6,
// then one), 16 and 32 (whole lane groups of 16), 23 (a lane group, then pairs and one), 29 (a padded lane group)
// and 40 (two lane groups, then a group of 8 pairs); rows of 256 (one span of blocks) and 1024 (spans of 14 and
// the rest, which the lane tiles carry their sums across).
TEST(OpenblasKernels, QuantizedProductsMatchTheReference) {
    for (const Kernels* table : runnable_tables())
        for (cellm_dtype type : {CELLM_TYPE_Q8_0, CELLM_TYPE_Q4_0, CELLM_TYPE_Q4_1, CELLM_TYPE_Q5_0, CELLM_TYPE_Q5_1})
            for (const int64_t k : {256, 1024})
                for (const int64_t n : {15, 16, 23, 29, 32, 40}) {
                    SCOPED_TRACE(std::string(table->isa) + " type " + std::to_string(type) + ", k " +
                                 std::to_string(k) + ", columns " + std::to_string(n));
                    const int s = cellm::openblas::slot(type);
                    if (table->dot_q8[s] == nullptr) continue;
                    const int64_t m = 7, nb = k / 32;
                    const uint64_t row_bytes = cellm::blocks::row_bytes(type, k);
                    std::vector<uint8_t> rows(row_bytes * m);
                    cellm::blocks::quantize_row(type, random_floats(k * m, 5).data(), rows.data(), k * m);
                    // The columns as this table's quantizer writes them (checked against blocks:: below).
                    std::vector<int8_t> codes(k * n);
                    std::vector<float> scales(nb * n), sums(nb * n);
                    std::vector<int32_t> offsets(nb * 8 * n);
                    for (int64_t c = 0; c < n; ++c)
                        table->quantize_q8(random_floats(k, 10 + unsigned(c), 3.0f).data(), k, codes.data() + c * k,
                                           scales.data() + c * nb, sums.data() + c * nb, offsets.data() + c * nb * 8);
                    cellm::openblas::Q8Columns columns{codes.data(), scales.data(), sums.data(), offsets.data(), nb};
                    std::vector<std::byte> packed;
                    if (table->pack_columns != nullptr) {
                        // In three parts, as three threads would.
                        packed.resize(table->pack_columns(columns, n, s, nullptr, 0, 1));
                        for (int64_t part : {2, 0, 1}) table->pack_columns(columns, n, s, packed.data(), part, 3);
                        columns.packed = packed.data();
                    }
                    std::vector<float> y(m * n, std::nanf(""));
                    table->dot_q8[s](rows.data(), row_bytes, m, columns, n, y.data(), m);
                    for (int64_t c = 0; c < n; ++c)
                        for (int64_t r = 0; r < m; ++r)
                            EXPECT_EQ(y[c * m + r],
                                      cellm::blocks::dot_q8(type, rows.data() + r * row_bytes, codes.data() + c * k,
                                                            scales.data() + c * nb, sums.data() + c * nb, k))
                                << "row " << r << " column " << c;
                }
}

// K-quant rows against Q8_K columns: every table's integer dot equals blocks::dot_q8_k bit for bit, and that
// reference equals the dequantized row times the rounded activations up to float rounding (so its integer
// decomposition, the mins and Q6_K's +32, means what the dequantizer means).
// Column counts: 6 (four, then rows of one), 16 and 32 (whole lane groups of 16), 23 (a lane group, then the
// row kernels), 29 (a padded lane group); 7 rows leave a remainder after tiles of 4.
TEST(OpenblasKernels, KQuantRowsMatchTheReference) {
    const int64_t k = 768, m = 7, nb = k / 256;
    for (cellm_dtype type : {CELLM_TYPE_Q4_K, CELLM_TYPE_Q5_K, CELLM_TYPE_Q6_K})
    for (const int64_t n : {6, 16, 23, 29, 32}) {
        SCOPED_TRACE("type " + std::to_string(type) + ", columns " + std::to_string(n));
        const uint64_t row_bytes = cellm::blocks::row_bytes(type, k), block_bytes = row_bytes / nb;
        std::vector<uint8_t> rows(row_bytes * m);
        cellm::blocks::quantize_row(type, random_floats(k * m, 5).data(), rows.data(), k * m);
        // Rows 4-6: every byte but the fp16 scales random, so scales, mins and codes take their whole ranges.
        std::mt19937 rng(9);
        for (int64_t r = 4; r < m; ++r)
            for (uint64_t b = 0; b < row_bytes; ++b) {
                const uint64_t in_block = b % block_bytes;
                const bool scale_byte = type == CELLM_TYPE_Q6_K ? in_block >= 208 : in_block < 4;
                if (!scale_byte) rows[r * row_bytes + b] = static_cast<uint8_t>(rng());
            }
        std::vector<int8_t> codes(k * n);
        std::vector<float> scales(nb * n);
        std::vector<int16_t> sums(nb * 16 * n);
        std::vector<std::vector<float>> x(n);
        for (int64_t c = 0; c < n; ++c) {
            x[c] = random_floats(k, 10 + unsigned(c), 3.0f);
            if (c == 1) std::fill(x[c].begin(), x[c].begin() + 256, 0.0f);  // a block of zeros: scale 0
            cellm::blocks::quantize_q8_k(x[c].data(), k, codes.data() + c * k, scales.data() + c * nb,
                                         sums.data() + c * nb * 16);
        }
        for (int64_t c = 0; c < n; ++c) {
            std::vector<float> rounded(k), w(k);
            cellm::blocks::round_activations(type, x[c].data(), rounded.data(), k);
            for (int64_t r = 0; r < m; ++r) {
                cellm::blocks::dequantize_row(type, rows.data() + r * row_bytes, w.data(), k);
                double want = 0.0, magnitude = 0.0;
                for (int64_t i = 0; i < k; ++i) {
                    want += static_cast<double>(w[i]) * rounded[i];
                    magnitude += std::fabs(static_cast<double>(w[i]) * rounded[i]);
                }
                const float got = cellm::blocks::dot_q8_k(type, rows.data() + r * row_bytes, codes.data() + c * k,
                                                          scales.data() + c * nb, sums.data() + c * nb * 16, k);
                EXPECT_NEAR(got, want, 1e-5 * magnitude + 1e-6) << "row " << r << " column " << c;
            }
        }
        const int s = cellm::openblas::k_slot(type);
        ASSERT_GE(s, 0);
        for (const Kernels* table : runnable_tables()) {
            SCOPED_TRACE(table->isa);
            if (table->dot_q8k[s] == nullptr) continue;
            std::vector<float> y(m * n, std::nanf(""));
            cellm::openblas::Q8KColumns columns{codes.data(), scales.data(), sums.data(), nb};
            std::vector<std::byte> packed;
            if (table->pack_k_columns != nullptr) {
                packed.resize(table->pack_k_columns(columns, n, nullptr, 0, 1));
                for (int64_t part : {1, 0}) table->pack_k_columns(columns, n, packed.data(), part, 2);
                columns.packed = packed.data();
            }
            table->dot_q8k[s](rows.data(), row_bytes, m, columns, n, y.data(), m);
            for (int64_t c = 0; c < n; ++c)
                for (int64_t r = 0; r < m; ++r)
                    EXPECT_EQ(y[c * m + r], cellm::blocks::dot_q8_k(type, rows.data() + r * row_bytes, codes.data() + c * k,
                                                                   scales.data() + c * nb, sums.data() + c * nb * 16, k))
                        << "row " << r << " column " << c;
        }
    }
}

TEST(OpenblasKernels, QuantizedActivationsMatchTheReference) {
    const int64_t n = 64 * 32;
    std::vector<float> x = random_floats(n, 7, 4.0f);
    std::fill(x.begin() + 32, x.begin() + 64, 0.0f);  // an all-zero block: scale 0, codes 0
    x[70] = -x[70] * 1000.0f;                           // a block whose largest magnitude is negative
    x[100] = 0.5f;
    x[101] = -0.5f;                                     // ties in x * (127 / amax) round to even
    std::vector<int8_t> want_codes(n);
    std::vector<float> want_scales(n / 32), want_sums(n / 32);
    cellm::blocks::quantize_q8(x.data(), n, want_codes.data(), want_scales.data(), want_sums.data());
    for (const Kernels* table : runnable_tables()) {
        SCOPED_TRACE(table->isa);
        std::vector<int8_t> codes(n);
        std::vector<float> scales(n / 32), sums(n / 32);
        std::vector<int32_t> offsets(n / 4);
        table->quantize_q8(x.data(), n, codes.data(), scales.data(), sums.data(), offsets.data());
        EXPECT_EQ(codes, want_codes);
        EXPECT_EQ(scales, want_scales);
        EXPECT_EQ(sums, want_sums);
        for (int64_t g = 0; g < n / 4; ++g)
            ASSERT_EQ(offsets[g], -128 * (codes[4 * g] + codes[4 * g + 1] + codes[4 * g + 2] + codes[4 * g + 3]))
                << "group " << g;
    }
}

// Q8_K activations: every table's quantizer writes blocks::quantize_q8_k's codes, scales and run sums.
TEST(OpenblasKernels, KQuantActivationsMatchTheReference) {
    const int64_t n = 8 * 256;
    std::vector<float> x = random_floats(n, 11, 4.0f);
    std::fill(x.begin() + 256, x.begin() + 512, 0.0f);  // a block of zeros: scale 0, codes 0
    x[600] = -500.0f;                                    // a block whose largest magnitude is negative
    x[800] = 300.0f;
    x[900] = -300.0f;                                    // equal magnitudes: the first gives the sign
    x[1100] = std::nanf("");                             // a NaN is skipped for the scale and codes 127
    x[1300] = 127.0f * 0.5f;
    x[1301] = 0.0f;                                      // some product lands on a tie somewhere
    std::vector<int8_t> want_codes(n), codes(n);
    std::vector<float> want_scales(n / 256), scales(n / 256);
    std::vector<int16_t> want_sums(n / 16), sums(n / 16);
    cellm::blocks::quantize_q8_k(x.data(), n, want_codes.data(), want_scales.data(), want_sums.data());
    for (const Kernels* table : runnable_tables()) {
        SCOPED_TRACE(table->isa);
        table->quantize_q8k(x.data(), n, codes.data(), scales.data(), sums.data());
        EXPECT_EQ(codes, want_codes);
        for (size_t b = 0; b < scales.size(); ++b) EXPECT_EQ(scales[b], want_scales[b]) << "block " << b;
        EXPECT_EQ(sums, want_sums);
    }
}

TEST(OpenblasKernels, FloatAndHalfLoops) {
    const int64_t n = 67;  // not a multiple of the vector width
    const std::vector<float> a = random_floats(n, 3), b = random_floats(n, 4);
    std::vector<uint16_t> h(n);
    for (int64_t i = 0; i < n; ++i) h[i] = cellm::blocks::fp32_to_fp16(b[i]);
    const float want_f32 = cellm::cpu::dot_in_lanes(a.data(), [&](int64_t i) { return b[i]; }, n);
    const float want_f16 = cellm::cpu::dot_in_lanes(a.data(), [&](int64_t i) { return cellm::blocks::fp16_to_fp32(h[i]); }, n);
    for (const Kernels* table : runnable_tables()) {
        SCOPED_TRACE(table->isa);
        EXPECT_EQ(table->dot_f32(a.data(), b.data(), n), want_f32);
        EXPECT_EQ(table->dot_f16(a.data(), h.data(), n), want_f16);
        std::vector<float> y32(a), y16(a);
        table->axpy_f32(0.5f, b.data(), y32.data(), n);
        table->axpy_f16(0.5f, h.data(), y16.data(), n);
        for (int64_t i = 0; i < n; ++i) {
            EXPECT_EQ(y32[i], a[i] + 0.5f * b[i]);
            EXPECT_EQ(y16[i], a[i] + 0.5f * cellm::blocks::fp16_to_fp32(h[i]));
        }
        // Rounding to fp16 across the range halves cover: subnormals, ties, the largest finite, overflow.
        std::vector<float> r = random_floats(n, 5, 70000.0f);
        r[0] = 1e-6f, r[1] = 3e-8f, r[2] = 1.0f + 0x1p-11f, r[3] = 65504.0f, r[4] = 65520.0f, r[5] = -0.0f;
        std::vector<float> rounded(n);
        table->round_f16(r.data(), rounded.data(), n);
        for (int64_t i = 0; i < n; ++i)
            EXPECT_EQ(rounded[i], cellm::blocks::fp16_to_fp32(cellm::blocks::fp32_to_fp16(r[i]))) << r[i];
        // The bits too, NaNs with payloads among them (a vector holding one goes one value at a time).
        r[40] = std::bit_cast<float>(0x7fc01234u), r[41] = std::bit_cast<float>(0xffa00001u);
        std::vector<uint16_t> halves(n);
        table->to_f16(r.data(), halves.data(), n);
        for (int64_t i = 0; i < n; ++i) EXPECT_EQ(halves[i], cellm::blocks::fp32_to_fp16(r[i])) << r[i];
    }
}

// The tables' exp against std::exp, bit for bit, on every 127th float pattern (a prime stride, so every exponent
// and the low mantissa bits vary), in runs that straddle the vector loop's edge cases: NaN and inf, the
// magnitudes from 88 on that go to std::exp, results that underflow to subnormals or zero.
TEST(OpenblasKernels, ExpEqualsStdExpBitForBit) {
    for (const Kernels* table : runnable_tables()) {
        if (table->exp_f32 == nullptr) continue;
        SCOPED_TRACE(table->isa);
        std::vector<float> x, y;
        for (uint64_t bits = 0; bits < (uint64_t{1} << 32); bits += 127) x.push_back(std::bit_cast<float>(static_cast<uint32_t>(bits)));
        for (float v : {87.99999f, -87.99999f, 88.0f, -88.0f, 88.72283f, 88.72284f, -103.97208f, -103.97209f, -87.33654f})
            x.push_back(v);
        y.resize(x.size());
        table->exp_f32(x.data(), y.data(), static_cast<int64_t>(x.size()));
        int64_t wrong = 0;
        for (size_t i = 0; i < x.size(); ++i) {
            const float want = std::exp(x[i]);
            const bool same = std::bit_cast<uint32_t>(y[i]) == std::bit_cast<uint32_t>(want) || (std::isnan(want) && std::isnan(y[i]));
            if (!same && ++wrong <= 5) {
                ADD_FAILURE() << "exp(" << x[i] << "): " << y[i] << ", std::exp " << want;
            }
        }
        EXPECT_EQ(wrong, 0) << "of " << x.size();
    }
#if defined(__x86_64__) || defined(__aarch64__)
    // This project's CI libm is glibc's, which the x86 and ARM tables follow: the vector path must be the one in
    // use.
    if (cellm::openblas::kernels().exp_f32 != nullptr) {
        EXPECT_NE(cellm::openblas::libm_exp(), nullptr);
    }
#endif
}

// The many-row attention loops against the one-row loops they stand for, bit for bit: 1 to 8 query heads
// sharing the rows (chunks of up to four, as even as possible), head sizes with and without a 64-wide part and
// a tail (67 is odd), and row counts around the two to four rows dots_f16 takes at once.
TEST(OpenblasKernels, ManyRowAttentionLoopsEqualTheOneRowLoops) {
    for (const cellm::openblas::Kernels* table : cellm::openblas::runnable_kernels()) {
        if (table->dots_f16 == nullptr) continue;
        SCOPED_TRACE(table->isa);
        for (int64_t n : {8, 36, 64, 67, 72, 128, 256}) {
            const int64_t stride = n + 8, n_rows = 11;
            std::vector<uint16_t> pool(static_cast<size_t>(stride * n_rows));
            const std::vector<float> values = random_floats(pool.size(), 31, 3.0f);
            for (size_t i = 0; i < pool.size(); ++i) pool[i] = cellm::blocks::fp32_to_fp16(values[i]);
            for (int64_t heads : {1, 2, 3, 4, 5, 8}) {
                const std::vector<float> q = random_floats(static_cast<size_t>(heads * n), 32);
                for (int64_t count : {1, 2, 3, 4, 5, 9}) {
                    SCOPED_TRACE("n " + std::to_string(n) + ", heads " + std::to_string(heads) + ", rows " +
                                 std::to_string(count));
                    std::vector<int64_t> rows;
                    for (int64_t j = 0; j < count; ++j) rows.push_back(((j * 7) % n_rows) * stride + 4);
                    const auto scores = static_cast<size_t>(heads * count);
                    std::vector<float> got(scores), want(scores);
                    table->dots_f16(q.data(), heads, pool.data(), rows.data(), count, n, got.data());
                    for (int64_t g = 0; g < heads; ++g)
                        for (int64_t j = 0; j < count; ++j)
                            want[static_cast<size_t>(g * count + j)] =
                                table->dot_f16(q.data() + g * n, pool.data() + rows[static_cast<size_t>(j)], n);
                    EXPECT_EQ(got, want) << "dots";
                    const std::vector<float> weights = random_floats(scores, 33);
                    std::vector<float> sum(static_cast<size_t>(heads * n), -1.0f), expected(sum.size(), 0.0f);
                    table->weighted_sum_f16(weights.data(), heads, pool.data(), rows.data(), count, n, sum.data());
                    for (int64_t g = 0; g < heads; ++g)
                        for (int64_t j = 0; j < count; ++j)
                            table->axpy_f16(weights[static_cast<size_t>(g * count + j)],
                                            pool.data() + rows[static_cast<size_t>(j)], expected.data() + g * n, n);
                    EXPECT_EQ(sum, expected) << "weighted sum";
                }
            }
        }
    }
}

}  // namespace
