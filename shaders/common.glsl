// Shared by every cellm compute shader: tensors are reached through buffer device addresses passed in push
// constants, read and written as 32-bit words (so any block layout works without 8- or 16-bit storage), and the
// roundings the reference backend defines (fp16, bf16) are done in integer arithmetic, exactly.
#extension GL_EXT_buffer_reference : require
#extension GL_EXT_scalar_block_layout : require

layout(buffer_reference, std430, buffer_reference_align = 4) buffer Words { uint w[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer Floats { float f[]; };
layout(buffer_reference, std430, buffer_reference_align = 4) buffer Ints { int i[]; };

uint byte_at(Words p, uint o) { return (p.w[o >> 2] >> ((o & 3u) * 8u)) & 0xFFu; }
// o is even.
uint half_bits_at(Words p, uint o) { return (p.w[o >> 2] >> ((o & 2u) * 8u)) & 0xFFFFu; }
float half_at(Words p, uint o) { return unpackHalf2x16(half_bits_at(p, o)).x; }
// o is even.
uint word_at(Words p, uint o) { return (o & 2u) == 0u ? p.w[o >> 2] : half_bits_at(p, o) | (half_bits_at(p, o + 2u) << 16); }

// fp32 -> fp16 bits, round to nearest even, as blocks::fp32_to_fp16.
uint f16_bits(float f) {
    const uint bits = floatBitsToUint(f);
    const uint sign = (bits >> 16) & 0x8000u;
    const uint magnitude = bits & 0x7fffffffu;
    if (magnitude > 0x7f800000u) return sign | 0x7e00u;
    if (magnitude >= 0x477ff000u) return sign | 0x7c00u;
    if (magnitude < 0x38800000u) {
        // Below the smallest normal half: count 2^-24 units and round half to even.
        const uint exponent = magnitude >> 23;
        if (exponent < 102u) return sign;  // below half of 2^-24 (and zero)
        const uint mantissa = (magnitude & 0x7fffffu) | 0x800000u;
        const uint shift = 126u - exponent;  // mantissa * 2^(exponent - 150) / 2^-24
        const uint units = mantissa >> shift;
        const uint rest = mantissa & ((1u << shift) - 1u), half_unit = 1u << (shift - 1u);
        const uint up = (rest > half_unit || (rest == half_unit && (units & 1u) == 1u)) ? 1u : 0u;
        return sign | (units + up);
    }
    const uint odd = (magnitude >> 13) & 1u;
    return sign | ((magnitude - (112u << 23) + 0xfffu + odd) >> 13);
}
float round_f16(float f) { return unpackHalf2x16(f16_bits(f)).x; }

uint bf16_bits(float f) {
    const uint bits = floatBitsToUint(f);
    if ((bits & 0x7fffffffu) > 0x7f800000u) return (bits >> 16) | 64u;
    return (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
}
float round_bf16(float f) { return uintBitsToFloat(bf16_bits(f) << 16); }

// Element types (cellm_dtype values).
#define T_F32 0
#define T_F16 1
#define T_Q4_0 2
#define T_Q4_1 3
#define T_Q5_0 6
#define T_Q5_1 7
#define T_Q8_0 8
#define T_Q4_K 12
#define T_Q5_K 13
#define T_Q6_K 14
#define T_I8 24
#define T_BF16 30
#define T_R4 120
#define T_R3 121

// The coded KV types' levels and thresholds (graph.h, "Coded pools"); a row's codes are one little-endian bit
// stream, value i at bits BITS * i.
const float LEVELS_R4[16] = float[](-2.7322, -2.0685, -1.6175, -1.2557, -0.9419, -0.6564, -0.3878, -0.1283, 0.1283,
                                    0.3878, 0.6564, 0.9419, 1.2557, 1.6175, 2.0685, 2.7322);
const float THRESHOLDS_R4[7] = float[](0.25805, 0.5221, 0.79915, 1.0988, 1.4366, 1.843, 2.40035);
const float LEVELS_R3[8] = float[](-2.1520, -1.3440, -0.7561, -0.2451, 0.2451, 0.7561, 1.3440, 2.1520);
const float THRESHOLDS_R3[3] = float[](0.5006, 1.05005, 1.748);
uint code_bits(uint type) { return type == T_R4 ? 4u : 3u; }
float coded_level(uint type, uint code) { return type == T_R4 ? LEVELS_R4[code] : LEVELS_R3[code]; }
// Code `index` of a pool whose rows are bit streams.
uint code_at(Words p, uint type, uint index) {
    const uint bits = code_bits(type), at = index * bits, shift = at & 31u;
    uint v = p.w[at >> 5] >> shift;
    if (shift + bits > 32u) v |= p.w[(at >> 5) + 1u] << (32u - shift);
    return v & ((1u << bits) - 1u);
}

// Grids wider than 65535 workgroups wrap into y (the host's grid()), so a workgroup's number is this.
uint group_index() { return gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x; }

// The eight lanes of a dot product added as the reference adds them (ggml's x86 horizontal sum, blocks.cpp and
// cpu::dot_in_lanes): ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)).
float sum_of_lanes(float l[8]) {
    precise float even = (l[0] + l[4]) + (l[2] + l[6]);
    precise float odd = (l[1] + l[5]) + (l[3] + l[7]);
    precise float sum = even + odd;
    return sum;
}

// The reference backend's scalar arithmetic, where the shading language leaves it loose. Vulkan lets division,
// sqrt and exp be a few ULP off and may or may not fuse fma(); the reference divides and takes roots correctly
// rounded, fuses its fma, and takes glibc's expf, which is within 0.502 ULP (it rounds the other way from the
// correctly rounded value on 1 float in 12,400 of [-30, 0]: docs/vulkan.md). With EXACT (devices with
// shaderFloat64, which the plugin picks), each is done in double and rounded once to float, which gives the
// correctly rounded float for division and sqrt, and for fma and exp except within about 2^-29 of a rounding
// boundary. Without it they are the device's float operations: close to the reference, not bit-equal.
#if EXACT
float fma_ref(float a, float b, float c) {
    precise double r = double(a) * double(b) + double(c);  // the product is exact in double
    return float(r);
}
float div_ref(float a, float b) { return float(double(a) / double(b)); }
float sqrt_ref(float a) { return float(sqrt(double(a))); }
// e^x as exp(r) * 2^k with |r| <= ln(2)/2 and a degree-13 Taylor polynomial, whose truncation error (under
// 1e-17 relative) is far below a float ULP.
float exp_ref(float x) {
    if (isnan(x)) return x;
    if (x > 89.0) return 1.0 / 0.0;
    if (x < -104.0) return 0.0;
    const double k = roundEven(double(x) * 1.4426950408889634LF);
    // ln 2 split in two so that k * LN2_HI is exact for |k| < 2^11.
    const double r = (double(x) - k * 0.6931471803691238LF) - k * 1.9082149292705877e-10LF;
    double p = 1.0LF / 6227020800.0LF;
    const double inverse_factorials[13] = double[](1.0LF / 479001600.0LF, 1.0LF / 39916800.0LF, 1.0LF / 3628800.0LF,
        1.0LF / 362880.0LF, 1.0LF / 40320.0LF, 1.0LF / 5040.0LF, 1.0LF / 720.0LF, 1.0LF / 120.0LF, 1.0LF / 24.0LF,
        1.0LF / 6.0LF, 0.5LF, 1.0LF, 1.0LF);
    for (int i = 0; i < 13; ++i) p = p * r + inverse_factorials[i];
    return float(ldexp(p, int(k)));
}
// log(1 + y) for y > -1, correctly rounded but within about 2^-29 of a rounding boundary (libm's log1pf, which the
// reference calls, is not always correctly rounded: docs/vulkan.md). Below 2^-29, y itself is the rounded result.
// Otherwise 1 + y is exact in double: write it m 2^e with m in [sqrt(1/2), sqrt(2)); then
// log(m) = 2 atanh(f), f = (m - 1) / (m + 1), |f| <= 0.1716, whose series to f^25 is below 1e-17 relative.
float log1p_ref(float y) {
    if (isnan(y) || isinf(y) || abs(y) < 1.0 / 536870912.0) return y;
    const double u = 1.0LF + double(y);
    const uvec2 bits = unpackDouble2x32(u);
    int e = int((bits.y >> 20) & 0x7ffu) - 1022;                                   // u = m 2^e, m in [0.5, 1)
    double m = packDouble2x32(uvec2(bits.x, (bits.y & 0x800fffffu) | 0x3fe00000u));
    if (m < 0.70710678118654752LF) {
        m = m * 2.0LF;
        e -= 1;
    }
    const double f = (m - 1.0LF) / (m + 1.0LF), f2 = f * f;
    double series = 1.0LF / 25.0LF;
    for (int k = 23; k >= 1; k -= 2) series = series * f2 + 1.0LF / double(k);
    const double log_m = 2.0LF * f * series;
    return float(double(e) * 0.6931471803691238LF + (double(e) * 1.9082149292705877e-10LF + log_m));
}
#else
float fma_ref(float a, float b, float c) { return fma(a, b, c); }
float div_ref(float a, float b) { return a / b; }
float sqrt_ref(float a) { return sqrt(a); }
float exp_ref(float x) { return exp(x); }
// log(1 + y) without losing small y, which the device's log near 1 would (Vulkan allows it an absolute error of
// 2^-21 there): below 1/2 in magnitude 2 atanh(f), f = y / (2 + y), |f| <= 1/3, summed to f^17.
float log1p_ref(float y) {
    if (abs(y) >= 0.5) return log(1.0 + y);
    const float f = y / (2.0 + y), f2 = f * f;
    float series = 1.0 / 17.0;
    for (int k = 15; k >= 1; k -= 2) series = series * f2 + 1.0 / float(k);
    return 2.0 * f * series;
}
#endif
