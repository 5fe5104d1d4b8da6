// Precision "fast": activations rounded as the weight type's dot product sees them in llama.cpp and in the
// reference (Q8 blocks of 32, Q8_K blocks of 256, fp16, bf16), then multiplied in float. Eight consecutive
// elements per invocation; a block's invocations are neighbours, so their scale comes from group_max (the
// includer's, over aligned groups of invocations, in uniform control flow). NO_Q8_K leaves K-quant activations
// unrounded, for kernels whose invocations never hold a whole block of 256.
void round_activations8(inout float x[8]) {
#if WEIGHT_TYPE == T_Q4_0 || WEIGHT_TYPE == T_Q4_1 || WEIGHT_TYPE == T_Q5_0 || WEIGHT_TYPE == T_Q5_1 || WEIGHT_TYPE == T_Q8_0
    float amax = 0.0;
    for (uint i = 0u; i < 8u; ++i) amax = max(amax, abs(x[i]));
    amax = group_max(amax, 4u);
    const float id = amax != 0.0 ? 127.0 / amax : 0.0, d = round_f16(amax / 127.0);
    for (uint i = 0u; i < 8u; ++i) x[i] = roundEven(x[i] * id) * d;
#elif (WEIGHT_TYPE == T_Q4_K || WEIGHT_TYPE == T_Q5_K || WEIGHT_TYPE == T_Q6_K) && !defined(NO_Q8_K)
    float amax = 0.0, top = 0.0;
    for (uint i = 0u; i < 8u; ++i) {
        amax = max(amax, abs(x[i]));
        top = max(top, x[i]);
    }
    amax = group_max(amax, 32u);
    top = group_max(top, 32u);
    const float iscale = amax != 0.0 ? -127.0 / (top == amax ? amax : -amax) : 0.0;
    for (uint i = 0u; i < 8u; ++i) x[i] = iscale != 0.0 ? min(127.0, roundEven(iscale * x[i])) / iscale : 0.0;
#elif WEIGHT_TYPE == T_F16
    for (uint i = 0u; i < 8u; ++i) x[i] = round_f16(x[i]);
#elif WEIGHT_TYPE == T_BF16
    for (uint i = 0u; i < 8u; ++i) x[i] = round_bf16(x[i]);
#endif
}
