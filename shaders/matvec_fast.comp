#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
// Precision "fast" (docs/vulkan.md): out = W x for up to 8 columns (decode), float activations, sums in whatever
// order is quickest. 32 invocations per row, each taking eight elements at a time, their partial sums added
// across the row through subgroup shuffles. What the plan folds in:
//  - NORM: x is an RMS_NORM's input; every workgroup takes the norm of its columns itself and multiplies by the
//    norm's weight as it reads x, so the norm needs no dispatch of its own (nor the barrier after it);
//  - GLU: a second weight w2 (the up projection) shares x, and out = act(W x) * (W2 x), SiLU or tanh GELU;
//  - RESIDUAL: out = W x + residual, for the ADD that was the product's only reader;
//  - ROPE: the rotary embedding of pairs of adjacent rows (GGUF's Llama Q/K layout), with the step's angles;
//  - STORE: the KV_STORE of the result: rows go to slot slots[c] of an F32 or F16 pool instead of out.
// A workgroup's four rows are two whole pairs, which meet in shared memory.
#include "common.glsl"
#include "weights.glsl"

layout(local_size_x = 128) in;
layout(push_constant, scalar) uniform Push {
    Words w;          // [k, m] of WEIGHT_TYPE
    Words w2;         // the same shape and type (GLU)
    Floats x;         // F32 [k, n]
    Floats norm;      // F32 [k] (NORM)
    Words out_;       // F32 [m, n], or the pool (STORE)
    Floats residual;  // F32 [m, n] (RESIDUAL)
    Floats angles;    // [2 * half_rot, n]: cos then sin (ROPE)
    Ints slots;       // [n] (STORE); out is the pool, [m, n_slots]
    uint k, m, n, flags;
    float eps;
    uint head_dim, half_rot, pool_type;
} pc;

const uint RESIDUAL = 1u, NORM = 2u, GLU = 4u, GELU = 8u, ROPE = 16u, STORE = 32u;
const uint THREADS = 128u, PER_ROW = 32u, ROWS = THREADS / PER_ROW, MAX_COLUMNS = 8u;
shared float pieces[THREADS];
shared float inv_rms[MAX_COLUMNS];
shared float results[ROWS][MAX_COLUMNS];

// The sum of v over aligned groups of `width` invocations (a power of two up to 32), for every invocation of
// the workgroup in uniform control flow: shuffles inside a subgroup, shared memory across subgroups.
float group_sum(float v, uint width) {
    const uint tid = gl_LocalInvocationID.x, span = min(gl_SubgroupSize, width);
    for (uint off = span / 2u; off > 0u; off >>= 1) v += subgroupShuffleXor(v, off);
    if (span == width) return v;
    barrier();
    pieces[tid] = v;
    barrier();
    const uint first = tid / width * width;
    float s = 0.0;
    for (uint i = first; i < first + width; i += span) s += pieces[i];
    return s;
}

// The largest of v over aligned groups of `width` invocations, as group_sum.
float group_max(float v, uint width) {
    const uint tid = gl_LocalInvocationID.x, span = min(gl_SubgroupSize, width);
    for (uint off = span / 2u; off > 0u; off >>= 1) v = max(v, subgroupShuffleXor(v, off));
    if (span == width) return v;
    barrier();
    pieces[tid] = v;
    barrier();
    const uint first = tid / width * width;
    float s = v;
    for (uint i = first; i < first + width; i += span) s = max(s, pieces[i]);
    return s;
}

#include "round_fast.glsl"

float silu(float g) { return g / (1.0 + exp(-g)); }
float gelu(float g) { return 0.5 * g * (1.0 + tanh(0.7978845608028654 * (g + 0.044715 * g * g * g))); }

void main() {
    const uint tid = gl_LocalInvocationID.x, lane = tid % PER_ROW, local = tid / PER_ROW;
    const bool norm = (pc.flags & NORM) != 0u, glu = (pc.flags & GLU) != 0u;

    if (norm) {
        // The whole workgroup takes each column's sum of squares (in groups of 32, then across the groups).
        for (uint c = 0u; c < pc.n; ++c) {
            float ss = 0.0;
            for (uint i = tid; i < pc.k; i += THREADS) {
                const float v = pc.x.f[c * pc.k + i];
                ss = fma(v, v, ss);
            }
            ss = group_sum(ss, PER_ROW);
            barrier();
            if (lane == 0u) pieces[tid / PER_ROW] = ss;
            barrier();
            if (tid == 0u) {
                float total = 0.0;
                for (uint r = 0u; r < ROWS; ++r) total += pieces[r];
                inv_rms[c] = 1.0 / sqrt(total / float(pc.k) + pc.eps);
            }
        }
        barrier();
    }

    const uint row = group_index() * ROWS + local;
    const bool live = row < pc.m;
    float acc[MAX_COLUMNS], acc2[MAX_COLUMNS];
    for (uint c = 0u; c < MAX_COLUMNS; ++c) {
        acc[c] = 0.0;
        acc2[c] = 0.0;
    }
    // Every row's invocations run the loop, dead rows on row 0, so that the activations' rounding may reduce
    // across invocations in uniform control flow.
    const uint o = (live ? row : 0u) * row_bytes(pc.k);
    for (uint e0 = 0u; e0 < pc.k / 8u; e0 += PER_ROW) {
        const uint e = min(e0 + lane, pc.k / 8u - 1u);
        const bool owner = e0 + lane < pc.k / 8u;  // a lane past the row's end repeats the last run, unused
        float wv[8], uv[8];
        weights8(pc.w, o, e, wv);
        if (glu) weights8(pc.w2, o, e, uv);
        float nw[8];
        for (uint i = 0u; i < 8u; ++i) nw[i] = norm ? pc.norm.f[8u * e + i] : 1.0;
        for (uint c = 0u; c < pc.n; ++c) {
            float xv[8];
            for (uint i = 0u; i < 8u; ++i) xv[i] = pc.x.f[c * pc.k + 8u * e + i] * (norm ? nw[i] * inv_rms[c] : 1.0);
            round_activations8(xv);
            float s = 0.0, s2 = 0.0;
            for (uint i = 0u; i < 8u; ++i) {
                s = fma(wv[i], xv[i], s);
                if (glu) s2 = fma(uv[i], xv[i], s2);
            }
            if (owner) {
                acc[c] += s;
                acc2[c] += s2;
            }
        }
    }
    for (uint c = 0u; c < pc.n; ++c) {
        float v = group_sum(acc[c], PER_ROW);
        float u = glu ? group_sum(acc2[c], PER_ROW) : 0.0;
        if (glu) v = ((pc.flags & GELU) != 0u ? gelu(v) : silu(v)) * u;
        if (lane == 0u) results[local][c] = v;
    }
    barrier();
    const bool even = row % 2u == 0u;
    for (uint c = 0u; live && lane == 0u && c < pc.n; ++c) {
        float v = results[local][c], partner = results[local ^ 1u][c];
        const uint pair = row % pc.head_dim / 2u;
        if ((pc.flags & ROPE) != 0u && pair < pc.half_rot) {
            const float cs = pc.angles.f[c * 2u * pc.half_rot + pair], sn = pc.angles.f[c * 2u * pc.half_rot + pc.half_rot + pair];
            const float a = even ? v : partner, b = even ? partner : v;
            v = even ? a * cs - b * sn : a * sn + b * cs;
            partner = even ? a * sn + b * cs : a * cs - b * sn;
        }
        if ((pc.flags & STORE) == 0u) {
            const uint at = c * pc.m + row;
            if ((pc.flags & RESIDUAL) != 0u) v += pc.residual.f[at];
            pc.out_.w[at] = floatBitsToUint(v);
        } else if (pc.pool_type == T_F32) {
            pc.out_.w[uint(pc.slots.i[c]) * pc.m + row] = floatBitsToUint(v);
        } else if (even) {  // an F16 pool's word holds the pair: the even row writes it
            pc.out_.w[(uint(pc.slots.i[c]) * pc.m + row) / 2u] = f16_bits(v) | (f16_bits(partner) << 16);
        }
    }
}
