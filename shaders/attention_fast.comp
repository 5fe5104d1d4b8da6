#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_KHR_shader_subgroup_shuffle : require
// Precision "fast" (docs/vulkan.md): causal paged attention (graph.h, CELLM_OP_ATTENTION) with an online softmax,
// for F32 and F16 pools. As in llama.cpp's CPU path, q meets an F16 key pool rounded to fp16; the weights stay
// float (rounding them before the sum is known moved SmolLM2's logits further from llama.cpp).
//
// A workgroup holds 16 rows, PARTS invocations to a row, each with DIMS of the head's dimensions of q and of the
// output (every PARTS-th); a score is their partial dots added through shuffles. Keys come through shared memory, a tile at
// a time, loaded by the whole workgroup and read by every row of the tile's sequence:
//  - by_token 1 (decode): a workgroup's rows are the heads of one token, and a tile holds every KV head;
//  - by_token 0 (prefill): its rows are 16 consecutive tokens of one head, and a tile holds that head's KV head.
// Rows of several sequences take turns, one sequence per pass. A row's keys may also be split into equal chunks
// along the grid's z (flash-decoding, for decode): with one chunk the rows are written out directly; with more, each chunk writes its
// maximum, its sum of exponentials and its unnormalised output, and attention_combine.comp merges them. The block
// table, sequence rows and positions were checked on the host.
#include "common.glsl"

// PARTS invocations share a row (4, 8 or 16: at most the subgroup size), each holding DIMS of its dimensions.
const uint ROWS = 16u, THREADS = ROWS * PARTS, TILE_FLOATS = 4096u, NONE = 0xFFFFFFFFu;
layout(local_size_x = THREADS) in;
// Pools are read 16 bytes at a time: their rows and head offsets are multiples of 16 bytes (the plan checks).
layout(buffer_reference, std430, buffer_reference_align = 16) buffer Quads { uvec4 q[]; };
layout(push_constant, scalar) uniform Push {
    Floats q;        // [head_dim, n_head, n_tokens]
    Quads k_pool;    // [kv_dim, n_slots]
    Quads v_pool;
    Ints table;      // [max_blocks, n_seqs]
    Ints seqs;       // [n_tokens]
    Ints positions;  // [n_tokens]
    Floats out_;     // [head_dim * n_head, n_tokens], or the chunks' partials: [head_dim + 2, rows, chunks]
    uint n_head, group, block_size, window, max_blocks, kv_dim, k_type, v_type, n_tokens, chunks, by_token;
    float scale, softcap;
} pc;

const uint HEAD_DIM = PARTS * DIMS;
shared float ks[TILE_FLOATS], vs[TILE_FLOATS];
shared uint tile_slot[TILE_FLOATS / 64u];  // a tile holds at most 4096 / 64 keys
shared uint pass_seq, pass_first, pass_last;

// Keys [0, n) of the tile from POOL (of TYPE) into DEST as floats: 16-byte loads, four issued before any is used.
#define LOAD_TILE(POOL, TYPE, DEST)                                                                         \
    {                                                                                                       \
        const uint per = TYPE == T_F16 ? 8u : 4u, quads = tile_width / per, total = n * quads;              \
        const uint row_quads = pc.kv_dim / per, first_quad = tile_first / per;                              \
        for (uint e0 = tid; e0 < total; e0 += 4u * THREADS) {                                               \
            uvec4 got[4];                                                                                   \
            for (uint u = 0u; u < 4u; ++u) {                                                                \
                const uint e = min(e0 + u * THREADS, total - 1u);                                           \
                got[u] = POOL.q[tile_slot[e / quads] * row_quads + first_quad + e % quads];                \
            }                                                                                               \
            for (uint u = 0u; u < 4u && e0 + u * THREADS < total; ++u) {                                    \
                const uint e = e0 + u * THREADS, at = e / quads * tile_width + e % quads * per;             \
                for (uint w = 0u; w < 4u; ++w) {                                                            \
                    if (TYPE == T_F16) {                                                                    \
                        const vec2 pair = unpackHalf2x16(got[u][w]);                                        \
                        DEST[at + 2u * w] = pair.x;                                                         \
                        DEST[at + 2u * w + 1u] = pair.y;                                                    \
                    } else {                                                                                \
                        DEST[at + w] = uintBitsToFloat(got[u][w]);                                          \
                    }                                                                                       \
                }                                                                                           \
            }                                                                                               \
        }                                                                                                   \
    }

void main() {
    const uint tid = gl_LocalInvocationID.x, part = tid % PARTS, local = tid / PARTS, wg = group_index();
    uint h, t;
    if (pc.by_token != 0u) {
        const uint per_token = (pc.n_head + ROWS - 1u) / ROWS;
        t = wg / per_token;
        h = wg % per_token * ROWS + local;
    } else {
        const uint per_head = (pc.n_tokens + ROWS - 1u) / ROWS;
        h = wg / per_head;
        t = wg % per_head * ROWS + local;
    }
    const bool live = h < pc.n_head && t < pc.n_tokens;
    // The tile's columns: every KV head, or this workgroup's one.
    const uint tile_first = pc.by_token != 0u ? 0u : min(h, pc.n_head - 1u) / pc.group * HEAD_DIM;
    const uint tile_width = pc.by_token != 0u ? pc.kv_dim : HEAD_DIM, tile_keys = TILE_FLOATS / tile_width;

    uint row = 0u, first = 0u, last = 0u;  // the row's sequence and keys [first, last)
    if (live) {
        row = uint(pc.seqs.i[t]);
        const uint p = uint(pc.positions.i[t]);
        first = pc.window > 0u && p + 1u > pc.window ? p + 1u - pc.window : 0u;
        last = p + 1u;
        if (pc.chunks > 1u) {  // this chunk's equal share of the row's keys
            const uint share = (last - first + pc.chunks - 1u) / pc.chunks, begin = first + gl_WorkGroupID.z * share;
            last = min(last, begin + share);
            first = min(begin, last);
        }
    }
    // The row's invocation `part` holds dimensions part + PARTS i: neighbouring invocations read neighbouring
    // floats of a tile, so their shared-memory reads fall in different banks.
    const uint kv = (live ? h / pc.group * HEAD_DIM : 0u) + part - tile_first;
    const uint q_at = (t * pc.n_head + h) * HEAD_DIM + part;
    float q[DIMS], acc[DIMS];
    for (uint i = 0u; i < DIMS; ++i) {
        const float v = live ? pc.q.f[q_at + PARTS * i] : 0.0;
        q[i] = pc.k_type == T_F16 ? round_f16(v) : v;
        acc[i] = 0.0;
    }
    float best = -1.0 / 0.0, total = 0.0;

    bool done = !live;
    for (uint turn = 0u; turn < ROWS; ++turn) {
        // The pass's sequence: the smallest of the rows not done yet; its keys: the union of their ranges.
        barrier();
        if (tid == 0u) {
            pass_seq = NONE;
            pass_first = NONE;
            pass_last = 0u;
        }
        barrier();
        if (!done && part == 0u) atomicMin(pass_seq, row);
        barrier();
        const uint seq = pass_seq;
        if (seq == NONE) break;
        const bool mine = !done && row == seq;
        if (mine && part == 0u && first < last) {
            atomicMin(pass_first, first);
            atomicMax(pass_last, last);
        }
        barrier();
        const uint lo = pass_first, hi = pass_last;
        for (uint j0 = lo; lo < hi && j0 < hi; j0 += tile_keys) {
            const uint n = min(tile_keys, hi - j0);
            barrier();
            if (tid < n) {
                const uint j = j0 + tid;
                tile_slot[tid] = uint(pc.table.i[seq * pc.max_blocks + j / pc.block_size]) * pc.block_size + j % pc.block_size;
            }
            barrier();
            LOAD_TILE(pc.k_pool, pc.k_type, ks)
            LOAD_TILE(pc.v_pool, pc.v_type, vs)
            barrier();
            if (!mine) continue;
            for (uint key = 0u; key < n; ++key) {
                const uint j = j0 + key;
                if (j < first || j >= last) continue;  // the same for the row's four invocations
                const uint at = key * tile_width + kv;
                float dot = 0.0;
                for (uint i = 0u; i < DIMS; ++i) dot = fma(q[i], ks[at + PARTS * i], dot);
                for (uint off = 1u; off < PARTS; off <<= 1) dot += subgroupShuffleXor(dot, off);
                float s = pc.scale * dot;
                if (pc.softcap > 0.0) s = pc.softcap * tanh(s / pc.softcap);
                if (s > best) {
                    const float shrink = exp(best - s);
                    total *= shrink;
                    for (uint i = 0u; i < DIMS; ++i) acc[i] *= shrink;
                    best = s;
                }
                const float e = exp(s - best);
                total += e;
                for (uint i = 0u; i < DIMS; ++i) acc[i] = fma(e, vs[at + PARTS * i], acc[i]);
            }
        }
        if (mine) done = true;
    }
    if (!live) return;
    if (pc.chunks == 1u) {
        for (uint i = 0u; i < DIMS; ++i) pc.out_.f[q_at + PARTS * i] = acc[i] / total;
        return;
    }
    const uint base = (gl_WorkGroupID.z * pc.n_head * pc.n_tokens + t * pc.n_head + h) * (HEAD_DIM + 2u);
    if (part == 0u) {
        pc.out_.f[base] = best;
        pc.out_.f[base + 1u] = total;
    }
    for (uint i = 0u; i < DIMS; ++i) pc.out_.f[base + 2u + part + PARTS * i] = acc[i];
}
