// round_span(base, g): span g of the activations, starting at element `base` (a Q8 block of 32, a Q8_K block of
// 256, or one value), as a MATMUL's weight type sees it (blocks.h), in the reference's order. ROUNDING 1 and 2
// quantize to Q8_0 (for Q4_0, Q5_0, Q8_0) and Q8_1 (Q4_1, Q5_1) blocks for matmul_q8.comp, 3 to Q8_K blocks
// (Q4_K, Q5_K, Q6_K) for matmul_q8k.comp: ROUND_CODES(w, v) takes word w of the signed byte codes (four per
// word), ROUND_SCALE(g, d) the block's scale (fp16 for Q8_0/Q8_1) and ROUND_SUM(i, s) Q8_0/Q8_1's fp16 scale *
// sum of codes (i = g), or Q8_K's sum of codes r*16 .. r*16+15 (i = 16 g + r; small integers, exact in float).
// The others round values in place of the dot product's own conversion, through ROUND_OUT(i, v): 4 fp16, 5 bf16.
// ROUND_IN(i) reads element i.
#if ROUNDING == 1 || ROUNDING == 2
const uint SPAN = 32u;
#elif ROUNDING == 3
const uint SPAN = 256u;
#else
const uint SPAN = 1u;
#endif

void round_span(uint base, uint g) {
#if ROUNDING == 1 || ROUNDING == 2
    float amax = 0.0;
    for (uint j = 0u; j < 32u; ++j) amax = max(amax, abs(ROUND_IN(base + j)));
    const float d = div_ref(amax, 127.0);
    const float id = amax != 0.0 ? div_ref(127.0, amax) : 0.0;
    int sum = 0;
    for (uint w = 0u; w < 8u; ++w) {
        uint word = 0u;
        for (uint j = 0u; j < 4u; ++j) {
            precise float scaled = ROUND_IN(base + 4u * w + j) * id;
            const int q = int(roundEven(scaled));
            sum += q;
            word |= (uint(q) & 0xFFu) << (8u * j);
        }
        ROUND_CODES(base / 4u + w, word);
    }
    ROUND_SCALE(g, round_f16(d));
    precise float block_sum = d * float(sum);
    ROUND_SUM(g, round_f16(block_sum));
#elif ROUNDING == 3
    // blocks::quantize_q8_k: the scale comes from the value of largest magnitude (the first such), negated.
    float amax = 0.0, largest = 0.0;
    for (uint j = 0u; j < 256u; ++j) {
        const float v = ROUND_IN(base + j);
        if (abs(v) > amax) {
            amax = abs(v);
            largest = v;
        }
    }
    const float iscale = amax != 0.0 ? div_ref(-127.0, largest) : 0.0;
    ROUND_SCALE(g, amax != 0.0 ? div_ref(1.0, iscale) : 0.0);
    for (uint r = 0u; r < 16u; ++r) {
        int sum = 0;
        for (uint w = 0u; w < 4u; ++w) {
            uint word = 0u;
            for (uint j = 0u; j < 4u; ++j) {
                precise float scaled = iscale * ROUND_IN(base + 16u * r + 4u * w + j);
                const int q = int(min(127.0, roundEven(scaled)));
                sum += q;
                word |= (uint(q) & 0xFFu) << (8u * j);
            }
            ROUND_CODES(base / 4u + 4u * r + w, word);
        }
        ROUND_SUM(16u * g + r, float(sum));
    }
#elif ROUNDING == 4
    ROUND_OUT(base, round_f16(ROUND_IN(base)));
#elif ROUNDING == 5
    ROUND_OUT(base, round_bf16(ROUND_IN(base)));
#endif
}
