#version 450
#extension GL_GOOGLE_include_directive : require
// Row t of the new keys or values goes to slot slots[t] of the pool, converted to the pool's type (POOL_TYPE):
// one invocation per 32-bit word of the pool (one float, two halves or four int8 codes), so no two invocations
// share a word. An I8 pool's word also computes its group's scale (graph.h); the word that starts a group
// writes it. Slots were checked on the host.
#include "common.glsl"

layout(local_size_x = 256) in;
layout(push_constant, scalar) uniform Push {
    Floats rows;    // F32 [kv_dim, n_tokens]
    Ints slots;     // I32 [n_tokens]
    Words pool;     // [kv_dim, n_slots]
    Words scales;   // [n_groups, n_slots]: F32 (I8) or F16 (R4, R3)
    uint kv_dim, n_tokens, n_groups;
} pc;

#if POOL_TYPE == T_F32
const uint PER_WORD = 1u;
#elif POOL_TYPE == T_F16
const uint PER_WORD = 2u;
#else
const uint PER_WORD = 4u;
#endif

#if POOL_TYPE == T_R4 || POOL_TYPE == T_R3
// A coded pool: one invocation per (token, group), which writes the group's words of codes (whole words: the host
// checks the groups fill them) and its half of a scale word, beside another group's (or slot's) half.
void main() {
    const uint width = pc.kv_dim / pc.n_groups, bits = code_bits(POOL_TYPE), half_levels = 1u << (bits - 1u);
    const uint g = group_index() * gl_WorkGroupSize.x + gl_LocalInvocationID.x;
    if (g >= pc.n_groups * pc.n_tokens) return;
    const uint t = g / pc.n_groups, group = g % pc.n_groups;
    const uint slot = uint(pc.slots.i[t]), src = t * pc.kv_dim + group * width;
    precise float sum_sq = 0.0;
    for (uint i = 0u; i < width; ++i) sum_sq = fma_ref(pc.rows.f[src + i], pc.rows.f[src + i], sum_sq);
    precise float along = 0.0, length = 0.0;
    uint word = 0u, filled = 0u, at = (slot * pc.kv_dim + group * width) * bits / 32u;
    for (uint i = 0u; i < width; ++i) {
        const float y = pc.rows.f[src + i];
        precise float lhs = (y * y) * float(width);
        uint k = 0u;
        for (uint c = 0u; c + 1u < half_levels; ++c) {
            const float th = POOL_TYPE == T_R4 ? THRESHOLDS_R4[c] : THRESHOLDS_R3[c];
            precise float rhs = (th * th) * sum_sq;
            if (lhs > rhs) ++k;
        }
        const uint code = y < 0.0 ? half_levels - 1u - k : half_levels + k;
        const float level = coded_level(POOL_TYPE, code);
        along = fma_ref(y, level, along);
        length = fma_ref(level, level, length);
        word |= code << filled;
        filled += bits;
        if (filled >= 32u) {
            pc.pool.w[at++] = word;
            filled -= 32u;
            word = filled > 0u ? code >> (bits - filled) : 0u;
        }
    }
    if (filled > 0u) pc.pool.w[at] = word;
    const uint index = slot * pc.n_groups + group, shift = (index & 1u) * 16u;
    atomicAnd(pc.scales.w[index >> 1], ~(0xFFFFu << shift));
    atomicOr(pc.scales.w[index >> 1], f16_bits(div_ref(along, length)) << shift);
}
#else
void main() {
    const uint words = pc.kv_dim / PER_WORD;
    const uint g = (group_index() * gl_WorkGroupSize.x + gl_LocalInvocationID.x);
    if (g >= words * pc.n_tokens) return;
    const uint t = g / words, wi = g % words, i0 = wi * PER_WORD;
    const uint slot = uint(pc.slots.i[t]);
    const uint src = t * pc.kv_dim + i0, dst = slot * words + wi;
#if POOL_TYPE == T_F32
    pc.pool.w[dst] = floatBitsToUint(pc.rows.f[src]);
#elif POOL_TYPE == T_F16
    pc.pool.w[dst] = f16_bits(pc.rows.f[src]) | (f16_bits(pc.rows.f[src + 1u]) << 16);
#else
    const uint width = pc.kv_dim / pc.n_groups;
    uint packed = 0u;
    for (uint e = 0u; e < 4u; ++e) {
        const uint i = i0 + e, group = i / width;
        float amax = 0.0;
        for (uint j = group * width; j < (group + 1u) * width; ++j) amax = max(amax, abs(pc.rows.f[t * pc.kv_dim + j]));
        const float scale = amax / 127.0;
        if (i == group * width) pc.scales.w[slot * pc.n_groups + group] = floatBitsToUint(scale);
        float code = 0.0;
        if (scale != 0.0) {
            const float v = pc.rows.f[src + e] / scale;
            code = roundEven(min(v >= -127.0 ? v : -127.0, 127.0));  // NaN codes as -127, as the reference
        }
        packed |= (uint(int(code)) & 0xFFu) << (8u * e);
    }
    pc.pool.w[dst] = packed;
#endif
}
#endif
