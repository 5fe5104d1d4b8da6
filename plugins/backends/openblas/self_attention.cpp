#include "self_attention.hpp"

#include "reference_kernels.hpp"

#include <cblas.h>

namespace cellm::openblas {

void self_attention(cpu::Plan& plan, int32_t index, ThreadPool& pool, SelfAttentionScratch& scratch) {
    const cpu::Node& node = plan.nodes[static_cast<size_t>(index)];
    const cpu::Node& q = plan.nodes[static_cast<size_t>(node.src[0])];
    const cpu::Node& k = plan.nodes[static_cast<size_t>(node.src[1])];
    const cpu::Node& v = plan.nodes[static_cast<size_t>(node.src[2])];
    const int64_t n_head = node.iparams[0], n_head_kv = node.iparams[1], head_dim = node.iparams[2];
    const int64_t group = node.iparams[3], n_groups = q.ne[2] / group, per_kv_head = n_head / n_head_kv;
    // Row strides, in floats, of one token's heads: queries and outputs hold n_head, keys and values n_head_kv.
    const auto q_stride = static_cast<blasint>(n_head * head_dim), kv_stride = static_cast<blasint>(n_head_kv * head_dim);
    cpu::AttentionShape a;  // attention_weights reads the scale and the soft-cap only
    a.scale = node.fparams[0];
    scratch.scores.resize(static_cast<size_t>(pool.size()));
    pool.run(n_groups * n_head, [&](int64_t task, int thread) {
        const int64_t g = task / n_head, h = task % n_head, kv_head = h / per_kv_head;
        std::vector<float>& scores = scratch.scores[static_cast<size_t>(thread)];
        scores.resize(static_cast<size_t>(group * group));
        const float* qh = q.f32() + g * group * q_stride + h * head_dim;
        const float* kh = k.f32() + g * group * kv_stride + kv_head * head_dim;
        const float* vh = v.f32() + g * group * kv_stride + kv_head * head_dim;
        float* out = node.f32() + g * group * q_stride + h * head_dim;
        const auto n = static_cast<blasint>(group), d = static_cast<blasint>(head_dim);
        // scores[i][j] = q_i . k_j, then each row becomes its softmax weights as the reference makes them.
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, n, d, 1.0f, qh, q_stride, kh, kv_stride, 0.0f,
                    scores.data(), n);
        for (int64_t i = 0; i < group; ++i) cpu::attention_weights(a, scores.data() + i * group, group);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, d, n, 1.0f, scores.data(), n, vh, kv_stride, 0.0f,
                    out, q_stride);
    });
}

}  // namespace cellm::openblas
