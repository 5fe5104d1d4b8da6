// weight_at(p, o, i): element i of the row that starts at byte o of a WEIGHT_TYPE tensor, with the float operations
// in the order of blocks.cpp (and ggml), so values are bit-equal to the reference's. For the types whose
// products meet Q8 activation blocks (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0), lane_codes gives the integer codes of one
// lane of a block (see matmul_q8.comp) and block_scale / block_min its fp16 scale and min; for the K-quants,
// k_codes and the sub-block scales below serve matmul_q8k.comp.
#if WEIGHT_TYPE == T_Q4_1 || WEIGHT_TYPE == T_Q5_1
#define AFFINE 1
#endif
#if WEIGHT_TYPE == T_Q4_0 || WEIGHT_TYPE == T_Q4_1 || WEIGHT_TYPE == T_Q5_0 || WEIGHT_TYPE == T_Q5_1 || WEIGHT_TYPE == T_Q8_0
#define Q8_DOT 1
#endif
#if WEIGHT_TYPE == T_Q4_K || WEIGHT_TYPE == T_Q5_K || WEIGHT_TYPE == T_Q6_K
#define Q8K_DOT 1
#endif

#if WEIGHT_TYPE == T_F32
const uint BLOCK = 1u, BLOCK_BYTES = 4u;
#elif WEIGHT_TYPE == T_F16 || WEIGHT_TYPE == T_BF16
const uint BLOCK = 1u, BLOCK_BYTES = 2u;
#elif WEIGHT_TYPE == T_Q4_0
const uint BLOCK = 32u, BLOCK_BYTES = 18u;
#elif WEIGHT_TYPE == T_Q4_1
const uint BLOCK = 32u, BLOCK_BYTES = 20u;
#elif WEIGHT_TYPE == T_Q5_0
const uint BLOCK = 32u, BLOCK_BYTES = 22u;
#elif WEIGHT_TYPE == T_Q5_1
const uint BLOCK = 32u, BLOCK_BYTES = 24u;
#elif WEIGHT_TYPE == T_Q8_0
const uint BLOCK = 32u, BLOCK_BYTES = 34u;
#elif WEIGHT_TYPE == T_Q4_K
const uint BLOCK = 256u, BLOCK_BYTES = 144u;
#elif WEIGHT_TYPE == T_Q5_K
const uint BLOCK = 256u, BLOCK_BYTES = 176u;
#elif WEIGHT_TYPE == T_Q6_K
const uint BLOCK = 256u, BLOCK_BYTES = 210u;
#else
#error unknown WEIGHT_TYPE
#endif

// Q4_K/Q5_K: the 6-bit scale and min of sub-block s (ggml's get_scale_min_k4); the 12 bytes start at byte b.
void k_scale_min(Words p, uint b, uint s, out uint sc, out uint mn) {
    if (s < 4u) {
        sc = byte_at(p, b + s) & 63u;
        mn = byte_at(p, b + s + 4u) & 63u;
    } else {
        sc = (byte_at(p, b + s + 4u) & 0xFu) | ((byte_at(p, b + s - 4u) >> 6) << 4);
        mn = (byte_at(p, b + s + 4u) >> 4) | ((byte_at(p, b + s) >> 6) << 4);
    }
}

float weight_at(Words p, uint o, uint i) {
#if WEIGHT_TYPE == T_F32
    return uintBitsToFloat(word_at(p, o + 4u * i));
#elif WEIGHT_TYPE == T_F16
    return half_at(p, o + 2u * i);
#elif WEIGHT_TYPE == T_BF16
    return uintBitsToFloat(half_bits_at(p, o + 2u * i) << 16);
#else
    const uint b = o + (i / BLOCK) * BLOCK_BYTES, j = i % BLOCK;
#if WEIGHT_TYPE == T_Q8_0
    const int q = int(byte_at(p, b + 2u + j) << 24) >> 24;
    precise float v = float(q) * half_at(p, b);
    return v;
#elif WEIGHT_TYPE == T_Q4_0 || WEIGHT_TYPE == T_Q4_1 || WEIGHT_TYPE == T_Q5_0 || WEIGHT_TYPE == T_Q5_1
#if WEIGHT_TYPE == T_Q4_0 || WEIGHT_TYPE == T_Q5_0
    const uint codes = b + (WEIGHT_TYPE == T_Q4_0 ? 2u : 6u);
#else
    const uint codes = b + (WEIGHT_TYPE == T_Q4_1 ? 4u : 8u);
#endif
    uint u = byte_at(p, codes + (j & 15u));
    u = j < 16u ? (u & 0xFu) : (u >> 4);
#if WEIGHT_TYPE == T_Q5_0 || WEIGHT_TYPE == T_Q5_1
    u |= ((word_at(p, b + (WEIGHT_TYPE == T_Q5_0 ? 2u : 4u)) >> j) & 1u) << 4;
#endif
#if WEIGHT_TYPE == T_Q4_0
    precise float v = float(int(u) - 8) * half_at(p, b);
#elif WEIGHT_TYPE == T_Q5_0
    precise float v = float(int(u) - 16) * half_at(p, b);
#else
    precise float v = float(u) * half_at(p, b) + half_at(p, b + 2u);
#endif
    return v;
#elif WEIGHT_TYPE == T_Q4_K || WEIGHT_TYPE == T_Q5_K
    const uint s = j / 32u, l = j % 32u;  // sub-block of 32
    uint sc, mn;
    k_scale_min(p, b + 4u, s, sc, mn);
    const uint codes = b + (WEIGHT_TYPE == T_Q4_K ? 16u : 48u);
    uint u = byte_at(p, codes + 32u * (s / 2u) + l);
    u = (s & 1u) == 0u ? (u & 0xFu) : (u >> 4);
#if WEIGHT_TYPE == T_Q5_K
    u |= ((byte_at(p, b + 16u + l) >> s) & 1u) << 4;
#endif
    precise float step = half_at(p, b) * float(sc);
    precise float bias = half_at(p, b + 2u) * float(mn);
    precise float v = step * float(u) - bias;
    return v;
#elif WEIGHT_TYPE == T_Q6_K
    const uint h = j / 128u, k = (j % 128u) / 32u, l = j % 32u;
    const uint low = (byte_at(p, b + 64u * h + l + 32u * (k % 2u)) >> (k < 2u ? 0u : 4u)) & 0xFu;
    const uint high = (byte_at(p, b + 128u + 32u * h + l) >> (2u * k)) & 3u;
    const int q = int(low | (high << 4)) - 32;
    const int sc = int(byte_at(p, b + 192u + j / 16u) << 24) >> 24;
    precise float step = half_at(p, b + 208u) * float(sc);
    precise float v = step * float(q);
    return v;
#endif
#endif
}

#ifdef Q8_DOT
float block_scale(Words p, uint b) { return half_at(p, b); }
float block_min(Words p, uint b) { return half_at(p, b + 2u); }

// Codes of elements 4 l .. 4 l + 3 of the block at byte b, as signed bytes of one word (element 4 l lowest). The
// 4- and 5-bit layouts keep element j < 16 in the low nibble of byte j and j + 16 in the high one, so lane l
// reads one word of nibbles; the fifth bits are bits 4 l .. 4 l + 3 of qh.
uint lane_codes(Words p, uint b, uint l) {
#if WEIGHT_TYPE == T_Q8_0
    return word_at(p, b + 2u + 4u * l);
#else
#if WEIGHT_TYPE == T_Q4_0 || WEIGHT_TYPE == T_Q5_0
    const uint codes = b + (WEIGHT_TYPE == T_Q4_0 ? 2u : 6u);
    const int offset = WEIGHT_TYPE == T_Q4_0 ? 8 : 16;
#else
    const uint codes = b + (WEIGHT_TYPE == T_Q4_1 ? 4u : 8u);
    const int offset = 0;
#endif
    const uint nibbles = (word_at(p, codes + 4u * (l % 4u)) >> (l < 4u ? 0u : 4u)) & 0x0F0F0F0Fu;
#if WEIGHT_TYPE == T_Q5_0 || WEIGHT_TYPE == T_Q5_1
    const uint high = word_at(p, b + (WEIGHT_TYPE == T_Q5_0 ? 2u : 4u)) >> (4u * l);
    const uint fifth = (high & 1u) | ((high & 2u) << 7) | ((high & 4u) << 14) | ((high & 8u) << 21);
    const uint u = nibbles | (fifth << 4);
#else
    const uint u = nibbles;
#endif
    uint word = 0u;
    for (uint i = 0u; i < 4u; ++i) word |= (uint(int((u >> (8u * i)) & 0xFFu) - offset) & 0xFFu) << (8u * i);
    return word;
#endif
}
#endif

#ifdef Q8K_DOT
// The K-quants, whose products meet Q8_K activation blocks (matmul_q8k.comp): a block of 256 is SUBS sub-blocks
// of SUB elements, each with an integer scale and (Q4_K, Q5_K) min, under the block's fp16 scale (and min).
// k_codes gives the codes of elements 4 w .. 4 w + 3 of the block at byte b as the bytes of one word (element
// 4 w lowest); Q6_K's are the stored 0 .. 63, without their offset of 32.
#if WEIGHT_TYPE == T_Q6_K
const uint SUB = 16u;
float block_scale(Words p, uint b) { return half_at(p, b + 208u); }
#else
#define K_AFFINE 1
const uint SUB = 32u;
float block_scale(Words p, uint b) { return half_at(p, b); }
float block_min(Words p, uint b) { return half_at(p, b + 2u); }
#endif
const uint SUBS = 256u / SUB;

// Sub-block s's scale and min (Q6_K: a signed scale, min 0).
void sub_scale_min(Words p, uint b, uint s, out int scale, out int min) {
#if WEIGHT_TYPE == T_Q6_K
    scale = int(byte_at(p, b + 192u + s) << 24) >> 24;
    min = 0;
#else
    uint sc, mn;
    k_scale_min(p, b + 4u, s, sc, mn);
    scale = int(sc);
    min = int(mn);
#endif
}

uint k_codes(Words p, uint b, uint w) {
#if WEIGHT_TYPE == T_Q6_K
    const uint e = 4u * w, h = e / 128u, k = (e % 128u) / 32u, l = e % 32u;
    const uint low = (word_at(p, b + 64u * h + l + 32u * (k % 2u)) >> (k < 2u ? 0u : 4u)) & 0x0F0F0F0Fu;
    const uint high = (word_at(p, b + 128u + 32u * h + l) >> (2u * k)) & 0x03030303u;
    return low | (high << 4);
#else
    const uint s = w / 8u, l = 4u * (w % 8u);
    const uint codes = b + (WEIGHT_TYPE == T_Q4_K ? 16u : 48u) + 32u * (s / 2u) + l;
    const uint low = (word_at(p, codes) >> (4u * (s & 1u))) & 0x0F0F0F0Fu;
#if WEIGHT_TYPE == T_Q5_K
    return low | (((word_at(p, b + 16u + l) >> s) & 0x01010101u) << 4);
#else
    return low;
#endif
#endif
}
#endif

// Bytes of one row of k elements.
uint row_bytes(uint k) { return k / BLOCK * BLOCK_BYTES; }

// Elements 8 c .. 8 c + 7 of the row that starts at byte o, for the fast kernels (docs/vulkan.md, precision
// "fast"): the same values as weight_at, each block's scale read once for the eight.
void weights8(Words p, uint o, uint c, out float v[8]) {
#if WEIGHT_TYPE == T_Q8_0
    const uint b = o + (c / 4u) * BLOCK_BYTES, q = c % 4u;
    const float d = half_at(p, b);
    const uint words[2] = uint[](word_at(p, b + 2u + 8u * q), word_at(p, b + 6u + 8u * q));
    for (uint i = 0u; i < 8u; ++i) v[i] = d * float(bitfieldExtract(int(words[i / 4u]), int(8u * (i % 4u)), 8));
#elif WEIGHT_TYPE == T_Q4_0 || WEIGHT_TYPE == T_Q4_1 || WEIGHT_TYPE == T_Q5_0 || WEIGHT_TYPE == T_Q5_1
    // Element j < 16 of a block is the low nibble of code byte j, j + 16 the high one.
    const uint b = o + (c / 4u) * BLOCK_BYTES, q = c % 4u;
#if WEIGHT_TYPE == T_Q4_0
    const uint codes = b + 2u;
#elif WEIGHT_TYPE == T_Q5_0
    const uint codes = b + 6u;
#elif WEIGHT_TYPE == T_Q4_1
    const uint codes = b + 4u;
#else
    const uint codes = b + 8u;
#endif
    const uint shift = (q / 2u) * 4u, at = codes + 8u * (q % 2u);
    const uint words[2] = uint[](word_at(p, at), word_at(p, at + 4u));
    const float d = half_at(p, b);
#if WEIGHT_TYPE == T_Q5_0 || WEIGHT_TYPE == T_Q5_1
    const uint high = word_at(p, b + (WEIGHT_TYPE == T_Q5_0 ? 2u : 4u)) >> (8u * q);
#endif
#if WEIGHT_TYPE == T_Q4_1 || WEIGHT_TYPE == T_Q5_1
    const float m = half_at(p, b + 2u);
#endif
    for (uint i = 0u; i < 8u; ++i) {
        uint u = (words[i / 4u] >> (8u * (i % 4u) + shift)) & 0xFu;
#if WEIGHT_TYPE == T_Q5_0 || WEIGHT_TYPE == T_Q5_1
        u |= ((high >> i) & 1u) << 4;
#endif
#if WEIGHT_TYPE == T_Q4_0
        v[i] = float(int(u) - 8) * d;
#elif WEIGHT_TYPE == T_Q5_0
        v[i] = float(int(u) - 16) * d;
#else
        v[i] = fma(float(u), d, m);
#endif
    }
#elif WEIGHT_TYPE == T_Q4_K || WEIGHT_TYPE == T_Q5_K
    // Eight elements of one 32-element sub-block: one scale and min.
    const uint b = o + (c / 32u) * BLOCK_BYTES, j0 = 8u * (c % 32u), s = j0 / 32u, l0 = j0 % 32u;
    uint sc, mn;
    k_scale_min(p, b + 4u, s, sc, mn);
    const float step = half_at(p, b) * float(sc), bias = half_at(p, b + 2u) * float(mn);
    const uint at = b + (WEIGHT_TYPE == T_Q4_K ? 16u : 48u) + 32u * (s / 2u) + l0, shift = (s & 1u) * 4u;
    const uint words[2] = uint[](p.w[at >> 2], p.w[(at >> 2) + 1u]);
#if WEIGHT_TYPE == T_Q5_K
    const uint hw[2] = uint[](p.w[(b + 16u + l0) >> 2], p.w[((b + 16u + l0) >> 2) + 1u]);
#endif
    for (uint i = 0u; i < 8u; ++i) {
        uint u = (words[i / 4u] >> (8u * (i % 4u) + shift)) & 0xFu;
#if WEIGHT_TYPE == T_Q5_K
        u |= ((hw[i / 4u] >> (8u * (i % 4u) + s)) & 1u) << 4;
#endif
        v[i] = fma(step, float(u), -bias);
    }
#elif WEIGHT_TYPE == T_Q6_K
    // Eight elements share a 16-element scale; their low nibbles and high bits are runs of bytes.
    const uint b = o + (c / 32u) * BLOCK_BYTES, j0 = 8u * (c % 32u);
    const uint h = j0 / 128u, k = (j0 % 128u) / 32u, l0 = j0 % 32u;
    const uint lo_at = b + 64u * h + l0 + 32u * (k % 2u), hi_at = b + 128u + 32u * h + l0;
    const uint lo[2] = uint[](word_at(p, lo_at), word_at(p, lo_at + 4u));
    const uint hi[2] = uint[](word_at(p, hi_at), word_at(p, hi_at + 4u));
    const int sc = int(byte_at(p, b + 192u + j0 / 16u) << 24) >> 24;
    const float step = half_at(p, b + 208u) * float(sc);
    for (uint i = 0u; i < 8u; ++i) {
        const uint low = (lo[i / 4u] >> (8u * (i % 4u) + (k < 2u ? 0u : 4u))) & 0xFu;
        const uint high = (hi[i / 4u] >> (8u * (i % 4u) + 2u * k)) & 3u;
        v[i] = step * float(int(low | (high << 4)) - 32);
    }
#else
    for (uint i = 0u; i < 8u; ++i) v[i] = weight_at(p, o, 8u * c + i);
#endif
}
