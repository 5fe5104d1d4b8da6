// round_span(base, g): span g of the activations, starting at element `base` (a Q8 block of 32, a Q8_K block of
// 256, or one value), rounded as a MATMUL's weight type sees it (blocks.h, round_activations), in the reference's
// order. ROUNDING: 1 Q8_0 (for Q4_0, Q5_0, Q8_0), 2 Q8_1 (Q4_1, Q5_1: also the block's fp16 sum correction),
// 3 Q8_K (K-quants), 4 fp16, 5 bf16. The includer defines where values come from and go: ROUND_IN(i),
// ROUND_OUT(i, v) and ROUND_SUM(g, v).
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
    const float d = amax / 127.0;
    const float id = amax != 0.0 ? 127.0 / amax : 0.0;
    const float d16 = round_f16(d);
    int sum = 0;
    for (uint j = 0u; j < 32u; ++j) {
        const float q = roundEven(ROUND_IN(base + j) * id);
        sum += int(q);
        ROUND_OUT(base + j, q * d16);
    }
#if ROUNDING == 2
    precise float correction = round_f16(d * float(sum)) - d16 * float(sum);
    ROUND_SUM(g, correction);
#endif
#elif ROUNDING == 3
    float amax = 0.0, largest = 0.0;
    for (uint j = 0u; j < 256u; ++j) {
        const float v = ROUND_IN(base + j);
        if (abs(v) > amax) {
            amax = abs(v);
            largest = v;
        }
    }
    if (amax == 0.0) {
        for (uint j = 0u; j < 256u; ++j) ROUND_OUT(base + j, 0.0);
        return;
    }
    const float iscale = -127.0 / largest;
    const float d = 1.0 / iscale;
    for (uint j = 0u; j < 256u; ++j) ROUND_OUT(base + j, min(127.0, roundEven(iscale * ROUND_IN(base + j))) * d);
#elif ROUNDING == 4
    ROUND_OUT(base, round_f16(ROUND_IN(base)));
#elif ROUNDING == 5
    ROUND_OUT(base, round_bf16(ROUND_IN(base)));
#endif
}
