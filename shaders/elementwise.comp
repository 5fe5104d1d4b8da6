#version 450
#extension GL_GOOGLE_include_directive : require
// The element-wise ops of graph.h, one invocation per output element; src1 broadcasts (each of its dims equals
// the output's or is 1).
#include "common.glsl"

layout(local_size_x = 256) in;
layout(push_constant, scalar) uniform Push {
    Floats a;
    Floats b;
    Floats out_;
    uint ne[4];    // output shape
    uint bne[4];   // src1 shape (broadcast)
    uint op;
    float scale;
} pc;

const uint ADD = 0u, MUL = 1u, SCALE = 2u, SILU = 3u, GELU = 4u, TANH = 5u, SWIGLU = 6u, GEGLU = 7u, SIGMOID = 8u,
           SOFTPLUS = 9u;

// As the reference writes them; exp, log1p and the division correctly rounded (common.glsl), where the reference
// takes glibc's expf and log1pf, which are not always (docs/vulkan.md). tanh is the device's, so GELU is close to
// the reference, not bit-equal.
float silu(float x) {
    precise float denominator = 1.0 + exp_ref(-x);
    return div_ref(x, denominator);
}
float sigmoid(float x) {
    precise float denominator = 1.0 + exp_ref(-x);
    return div_ref(1.0, denominator);
}
// x itself above 20, as torch.
float softplus(float x) { return x > 20.0 ? x : log1p_ref(exp_ref(x)); }
float gelu(float x) {
    precise float inner = 0.7978845608028654 * (x + 0.044715 * x * x * x);
    precise float y = 0.5 * x * (1.0 + tanh(inner));
    return y;
}

void main() {
    const uint e = (group_index() * gl_WorkGroupSize.x + gl_LocalInvocationID.x);
    const uint total = pc.ne[0] * pc.ne[1] * pc.ne[2] * pc.ne[3];
    if (e >= total) return;
    const float x = pc.a.f[e];
    float y;
    if (pc.op <= MUL) {
        uint rest = e, bi = 0u, stride = 1u;
        for (uint d = 0u; d < 4u; ++d) {
            const uint i = rest % pc.ne[d];
            rest /= pc.ne[d];
            bi += (pc.bne[d] == 1u ? 0u : i) * stride;
            stride *= pc.bne[d];
        }
        precise float r = pc.op == ADD ? x + pc.b.f[bi] : x * pc.b.f[bi];
        y = r;
    } else if (pc.op == SCALE) {
        precise float r = x * pc.scale;
        y = r;
    } else if (pc.op == SILU) {
        y = silu(x);
    } else if (pc.op == GELU) {
        y = gelu(x);
    } else if (pc.op == TANH) {
        y = tanh(x);
    } else if (pc.op == SIGMOID) {
        y = sigmoid(x);
    } else if (pc.op == SOFTPLUS) {
        y = softplus(x);
    } else {
        precise float product = (pc.op == SWIGLU ? silu(x) : gelu(x)) * pc.b.f[e];
        y = product;
    }
    pc.out_.f[e] = y;
}
