// Block formats against gguf's reference dequantizer (tests/data/blocks/reference.bin, written by
// scripts/make_blocks_reference.py), quantizer round trips, and half/bfloat16 rounding.
#include "blocks.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <stdexcept>
#include <vector>

namespace {

using namespace cellm::blocks;

struct Record {
    cellm_dtype type;
    int64_t n;
    std::vector<uint8_t> blocks;
    std::vector<float> values;
};

std::vector<Record> load_reference() {
    std::ifstream in(CELLM_BLOCKS_REFERENCE, std::ios::binary);
    const std::vector<uint8_t> bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    size_t at = 0;
    auto u32 = [&] {
        uint32_t v = 0;
        if (at + 4 <= bytes.size()) std::memcpy(&v, bytes.data() + at, 4);
        at += 4;
        return v;
    };
    std::vector<Record> records;
    if (bytes.size() < 8 || std::memcmp(bytes.data(), "CBLK", 4) != 0) return records;
    at = 4;
    for (uint32_t count = u32(); count > 0 && at < bytes.size(); --count) {
        Record r;
        r.type = static_cast<cellm_dtype>(u32());
        r.n = u32();
        const uint32_t n_bytes = u32();
        if (at + n_bytes + 4 * static_cast<size_t>(r.n) > bytes.size()) break;
        r.blocks.assign(bytes.begin() + static_cast<std::ptrdiff_t>(at),
                        bytes.begin() + static_cast<std::ptrdiff_t>(at + n_bytes));
        at += n_bytes;
        r.values.resize(static_cast<size_t>(r.n));
        std::memcpy(r.values.data(), bytes.data() + at, 4 * r.values.size());
        at += 4 * r.values.size();
        records.push_back(std::move(r));
    }
    return records;
}

const cellm_dtype all_types[] = {CELLM_TYPE_F32,  CELLM_TYPE_F16,  CELLM_TYPE_BF16, CELLM_TYPE_Q8_0,
                                 CELLM_TYPE_Q4_0, CELLM_TYPE_Q4_1, CELLM_TYPE_Q5_0, CELLM_TYPE_Q5_1,
                                 CELLM_TYPE_Q4_K, CELLM_TYPE_Q5_K, CELLM_TYPE_Q6_K,
                                 CELLM_TYPE_I8S_G32, CELLM_TYPE_I8S_G64, CELLM_TYPE_I8S_G128,
                                 CELLM_TYPE_I4S_G32, CELLM_TYPE_I4S_G64, CELLM_TYPE_I4S_G128,
                                 CELLM_TYPE_Q4A_G32, CELLM_TYPE_Q4A_G64, CELLM_TYPE_Q4A_G128};

TEST(Blocks, SizesMatchTheAbiTable) {
    for (cellm_dtype t : all_types) {
        EXPECT_TRUE(supported(t)) << t;
        EXPECT_EQ(block_size(t), cellm_dtype_block_size(t)) << t;
        EXPECT_EQ(row_bytes(t, 2 * block_size(t)), static_cast<uint64_t>(2 * cellm_dtype_type_size(t))) << t;
    }
    EXPECT_FALSE(supported(CELLM_TYPE_Q2_K));
    EXPECT_EQ(row_bytes(CELLM_TYPE_Q4_0, 33), 0u);
    EXPECT_EQ(row_bytes(CELLM_TYPE_Q2_K, 256), 0u);
}

TEST(Blocks, DequantizeMatchesGgufBitForBit) {
    const std::vector<Record> records = load_reference();
    ASSERT_EQ(records.size(), 10u) << "missing or truncated " << CELLM_BLOCKS_REFERENCE;
    for (const Record& r : records) {
        ASSERT_EQ(row_bytes(r.type, r.n), r.blocks.size()) << "type " << r.type;
        std::vector<float> out(static_cast<size_t>(r.n));
        dequantize_row(r.type, r.blocks.data(), out.data(), r.n);
        for (size_t i = 0; i < out.size(); ++i)
            ASSERT_EQ(std::bit_cast<uint32_t>(out[i]), std::bit_cast<uint32_t>(r.values[i]))
                << "type " << r.type << " element " << i << ": " << out[i] << " vs " << r.values[i];
    }
}

// A Q4_K block built by hand: sub-block s has scale s+1 and min s (sub-blocks 4-7 use the split encoding),
// and every code is 3, so element values are d*(s+1)*3 - dmin*s.
TEST(Blocks, HandBuiltQ4K) {
    std::vector<uint8_t> block(144, 0);
    const uint16_t d = fp32_to_fp16(0.5f), dmin = fp32_to_fp16(0.25f);
    std::memcpy(block.data(), &d, 2);
    std::memcpy(block.data() + 2, &dmin, 2);
    uint8_t* s = block.data() + 4;
    for (int j = 0; j < 4; ++j) {
        s[j] = static_cast<uint8_t>(j + 1);
        s[j + 4] = static_cast<uint8_t>(j);
        s[j + 8] = static_cast<uint8_t>((j + 5) | ((j + 4) << 4));  // scale and min of sub-block j+4 (< 16)
    }
    std::memset(block.data() + 16, 0x33, 128);
    std::vector<float> out(256);
    dequantize_row(CELLM_TYPE_Q4_K, block.data(), out.data(), 256);
    for (int e = 0; e < 256; ++e) {
        const int sub = e / 32;
        EXPECT_EQ(out[static_cast<size_t>(e)], 0.5f * static_cast<float>(sub + 1) * 3.0f - 0.25f * static_cast<float>(sub))
            << e;
    }
}

// Worst-case absolute error of the reference quantizer for data uniform in [-1, 1]. Symmetric formats
// map the largest magnitude to the most negative code, so the opposite extreme may clamp by a whole step
// (amax/8 for Q4_0, amax/16 for Q5_0, amax/32 for Q6_K, amax/128 for Q8_0); affine formats are off by at
// most half a step (range/15 or range/31), K-quants a little more for their rounded sub-block scales.
struct Bound {
    cellm_dtype type;
    float max_error;
};
const Bound bounds[] = {
    {CELLM_TYPE_F32, 0.0f},     {CELLM_TYPE_F16, 0.0005f},  {CELLM_TYPE_BF16, 0.004f},
    {CELLM_TYPE_Q8_0, 0.008f},  {CELLM_TYPE_Q4_0, 0.126f},  {CELLM_TYPE_Q4_1, 0.068f},
    {CELLM_TYPE_Q5_0, 0.063f},  {CELLM_TYPE_Q5_1, 0.033f},  {CELLM_TYPE_Q4_K, 0.075f},
    {CELLM_TYPE_Q5_K, 0.038f},  {CELLM_TYPE_Q6_K, 0.035f},
    // cellm's groups: half a step of amax/127 or amax/7, or of range/15 (plus the f16 rounding of the scale).
    {CELLM_TYPE_I8S_G32, 0.0041f},  {CELLM_TYPE_I8S_G64, 0.0041f},  {CELLM_TYPE_I8S_G128, 0.0041f},
    {CELLM_TYPE_I4S_G32, 0.072f},   {CELLM_TYPE_I4S_G64, 0.072f},   {CELLM_TYPE_I4S_G128, 0.072f},
    {CELLM_TYPE_Q4A_G32, 0.068f},   {CELLM_TYPE_Q4A_G64, 0.068f},   {CELLM_TYPE_Q4A_G128, 0.068f},
};

TEST(Blocks, QuantizeRoundTripWithinBound) {
    std::mt19937 rng(7);
    std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
    const int64_t n = 1024;
    std::vector<float> x(n), y(n);
    for (float& v : x) v = uniform(rng);
    for (const Bound& b : bounds) {
        std::vector<uint8_t> stored(row_bytes(b.type, n));
        quantize_row(b.type, x.data(), stored.data(), n);
        dequantize_row(b.type, stored.data(), y.data(), n);
        float worst = 0.0f;
        for (int64_t i = 0; i < n; ++i) worst = std::max(worst, std::fabs(x[i] - y[i]));
        EXPECT_LE(worst, b.max_error) << "type " << b.type;
    }
}

TEST(Blocks, QuantizeHandlesAllZeroRows) {
    std::vector<float> x(256, 0.0f), y(256, 1.0f);
    for (const Bound& b : bounds) {
        std::vector<uint8_t> stored(row_bytes(b.type, 256));
        quantize_row(b.type, x.data(), stored.data(), 256);
        dequantize_row(b.type, stored.data(), y.data(), 256);
        for (float v : y) ASSERT_EQ(v, 0.0f) << "type " << b.type;
    }
}

// cellm's group types by hand: scale 0.5 (and bias -1 for Q4A), codes chosen per element; the values are what
// abi/cellm/tensor.h defines.
TEST(Blocks, HandBuiltCellmGroups) {
    const uint16_t half = fp32_to_fp16(0.5f), minus_one = fp32_to_fp16(-1.0f);
    std::vector<float> out(32);

    std::vector<uint8_t> i8(34);
    std::memcpy(i8.data(), &half, 2);
    for (int j = 0; j < 32; ++j) i8[static_cast<size_t>(2 + j)] = static_cast<uint8_t>(static_cast<int8_t>(j - 16));
    dequantize_row(CELLM_TYPE_I8S_G32, i8.data(), out.data(), 32);
    for (int j = 0; j < 32; ++j) EXPECT_EQ(out[static_cast<size_t>(j)], 0.5f * static_cast<float>(j - 16)) << j;

    std::vector<uint8_t> i4(18);
    std::memcpy(i4.data(), &half, 2);
    for (int j = 0; j < 16; ++j) i4[static_cast<size_t>(2 + j)] = static_cast<uint8_t>(j | ((15 - j) << 4));
    dequantize_row(CELLM_TYPE_I4S_G32, i4.data(), out.data(), 32);
    for (int j = 0; j < 32; ++j) {
        const int u = j % 2 == 0 ? j / 2 : 15 - j / 2;  // even elements in the low nibble
        EXPECT_EQ(out[static_cast<size_t>(j)], 0.5f * static_cast<float>(u - 8)) << j;
    }

    std::vector<uint8_t> q4a(20);
    std::memcpy(q4a.data(), &half, 2);
    std::memcpy(q4a.data() + 2, &minus_one, 2);
    std::memcpy(q4a.data() + 4, i4.data() + 2, 16);
    dequantize_row(CELLM_TYPE_Q4A_G32, q4a.data(), out.data(), 32);
    for (int j = 0; j < 32; ++j) {
        const int u = j % 2 == 0 ? j / 2 : 15 - j / 2;
        EXPECT_EQ(out[static_cast<size_t>(j)], 0.5f * static_cast<float>(u) - 1.0f) << j;
    }
}

TEST(Blocks, RejectsBadArguments) {
    float x[32] = {};
    uint8_t b[64] = {};
    EXPECT_THROW(dequantize_row(CELLM_TYPE_Q2_K, b, x, 256), std::invalid_argument);
    EXPECT_THROW(quantize_row(CELLM_TYPE_Q4_0, x, b, 16), std::invalid_argument);
}

TEST(Half, RoundsToNearestEven) {
    EXPECT_EQ(fp32_to_fp16(1.0f), 0x3c00);
    EXPECT_EQ(fp32_to_fp16(-2.0f), 0xc000);
    EXPECT_EQ(fp32_to_fp16(65504.0f), 0x7bff);
    EXPECT_EQ(fp32_to_fp16(65519.0f), 0x7bff);  // below the halfway point to 65536
    EXPECT_EQ(fp32_to_fp16(65520.0f), 0x7c00);  // halfway, rounds to even = infinity
    EXPECT_EQ(fp32_to_fp16(1.0f + 0x1p-11f), 0x3c00);              // tie: stays on the even mantissa
    EXPECT_EQ(fp32_to_fp16(1.0f + 3 * 0x1p-11f), 0x3c02);          // tie: goes up to the even mantissa
    EXPECT_EQ(fp32_to_fp16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);   // just above the tie
    EXPECT_EQ(fp32_to_fp16(0x1p-24f), 0x0001);                     // smallest subnormal
    EXPECT_EQ(fp32_to_fp16(0x1p-25f), 0x0000);                     // tie to even (zero)
    EXPECT_EQ(fp32_to_fp16(3 * 0x1p-25f), 0x0002);                 // tie to even (two)
    EXPECT_EQ(fp32_to_fp16(-0.0f), 0x8000);
    EXPECT_EQ(fp32_to_fp16(INFINITY), 0x7c00);
    EXPECT_EQ(fp32_to_fp16(NAN) & 0x7e00, 0x7e00);
    EXPECT_EQ(fp16_to_fp32(0x0001), 0x1p-24f);
    EXPECT_EQ(fp16_to_fp32(0x03ff), 1023 * 0x1p-24f);
    EXPECT_EQ(fp16_to_fp32(0xfbff), -65504.0f);
    EXPECT_TRUE(std::isinf(fp16_to_fp32(0x7c00)));
    EXPECT_TRUE(std::isnan(fp16_to_fp32(0x7e00)));
    for (uint32_t h = 0; h < 0x10000; ++h) {
        const auto half = static_cast<uint16_t>(h);
        if ((half & 0x7c00) == 0x7c00 && (half & 0x3ff) != 0) continue;  // NaN payloads are not preserved
        ASSERT_EQ(fp32_to_fp16(fp16_to_fp32(half)), half) << h;
    }
}

TEST(BFloat16, RoundsToNearestEven) {
    EXPECT_EQ(fp32_to_bf16(1.0f), 0x3f80);
    EXPECT_EQ(fp32_to_bf16(std::bit_cast<float>(0x3f808000u)), 0x3f80);  // tie: even stays
    EXPECT_EQ(fp32_to_bf16(std::bit_cast<float>(0x3f818000u)), 0x3f82);  // tie: odd goes up
    EXPECT_EQ(fp32_to_bf16(std::bit_cast<float>(0x3f808001u)), 0x3f81);
    EXPECT_EQ(fp32_to_bf16(std::bit_cast<float>(0x7f7fffffu)), 0x7f80);  // max float rounds to infinity
    EXPECT_TRUE(std::isnan(bf16_to_fp32(fp32_to_bf16(NAN))));
    EXPECT_EQ(bf16_to_fp32(0xc040), -3.0f);
}

}  // namespace
