// The qwen arch plugin: Qwen2 / Qwen2.5 and Qwen3 files, over the shared transformer plumbing.
#include "arch_plugin.hpp"
#include "forward.hpp"
#include "model.hpp"

namespace cellm::qwen {
namespace {

struct Qwen {
    static constexpr const char* kName = "qwen";
    static constexpr const char* kVersion = "0.1.0";
    static constexpr const char* kDescription =
        "Qwen2 / Qwen2.5 (Q, K, V biases) and Qwen3 (Q/K head RMSNorm) decoders: RMSNorm, NEOX RoPE, GQA, SwiGLU";
    static constexpr const char* const kArchitectures[] = {"qwen2", "qwen3", nullptr};

    using Model = qwen::Model;
    static Model load(const cellm_model_view& view) { return load_model(view); }
    static void build_forward(const Model& model, const cellm_batch_shape& shape, GraphBuilder& g) {
        qwen::build_forward(model, shape, g);
    }
};

}  // namespace
}  // namespace cellm::qwen

extern "C" CELLM_EXPORT const cellm_plugin_desc* cellm_plugin_entry(const cellm_host_api* host, uint32_t host_abi_major,
                                                                    uint32_t /*host_abi_minor*/) {
    return cellm::transformer::ArchPlugin<cellm::qwen::Qwen>::entry(host, host_abi_major);
}
