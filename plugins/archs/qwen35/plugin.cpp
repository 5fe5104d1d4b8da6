// The qwen35 arch plugin: Qwen3.5 (text) files, gated DeltaNet and gated full-attention layers, over the shared
// transformer plumbing.
#include "arch_plugin.hpp"
#include "forward.hpp"
#include "model.hpp"

namespace cellm::qwen35 {
namespace {

struct Qwen35 {
    static constexpr const char* kName = "qwen35";
    static constexpr const char* kVersion = "0.1.0";
    static constexpr const char* kDescription =
        "Qwen3.5 hybrids: gated DeltaNet layers (causal convolution, gated delta rule, a recurrent state per "
        "sequence) between gated full-attention layers (Q/K head RMSNorm, partial NEOX RoPE, GQA); SwiGLU";
    static constexpr const char* const kArchitectures[] = {"qwen35", nullptr};

    using Model = qwen35::Model;
    static Model load(const cellm_model_view& view) { return load_model(view); }
    static void build_forward(const Model& model, const cellm_batch_shape& shape, GraphBuilder& g) {
        qwen35::build_forward(model, shape, g);
    }
    // Full-attention layers keep paged K/V; DeltaNet layers keep a convolution window and a state matrix per
    // value head instead.
    static transformer::LayerKv layer_kv(const Model& model, int32_t layer) {
        if (!model.layers[static_cast<size_t>(layer)].recurrent) return {model.hp.kv_dim(), model.hp.n_head_kv};
        transformer::LayerKv kv;
        kv.state_size[0] = static_cast<int32_t>(model.ssm.conv_state());
        kv.state_size[1] = static_cast<int32_t>(model.ssm.recurrent_state());
        return kv;
    }
};

}  // namespace
}  // namespace cellm::qwen35

extern "C" CELLM_EXPORT const cellm_plugin_desc* cellm_plugin_entry(const cellm_host_api* host, uint32_t host_abi_major,
                                                                    uint32_t /*host_abi_minor*/) {
    return cellm::transformer::ArchPlugin<cellm::qwen35::Qwen35>::entry(host, host_abi_major);
}
