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

// Grids wider than 65535 workgroups wrap into y (the host's grid()), so a workgroup's number is this.
uint group_index() { return gl_WorkGroupID.y * gl_NumWorkGroups.x + gl_WorkGroupID.x; }
