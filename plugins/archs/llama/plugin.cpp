// The llama arch plugin: its entry point over the shared transformer plumbing.
#include "arch_plugin.hpp"
#include "forward.hpp"
#include "model.hpp"

namespace cellm::llama {
namespace {

struct Llama {
    static constexpr const char* kName = "llama";
    static constexpr const char* kVersion = "0.1.0";
    static constexpr const char* kDescription =
        "Llama-family decoder (SmolLM2, Llama 3.x, TinyLlama): RMSNorm, RoPE, GQA, SwiGLU";
    static constexpr const char* const kArchitectures[] = {"llama", nullptr};

    using Model = llama::Model;
    static Model load(const cellm_model_view& view) { return load_model(view); }
    static void build_forward(const Model& model, const cellm_batch_shape& shape, GraphBuilder& g) {
        llama::build_forward(model, shape, g);
    }
};

}  // namespace
}  // namespace cellm::llama

extern "C" CELLM_EXPORT const cellm_plugin_desc* cellm_plugin_entry(const cellm_host_api* host, uint32_t host_abi_major,
                                                                    uint32_t /*host_abi_minor*/) {
    return cellm::transformer::ArchPlugin<cellm::llama::Llama>::entry(host, host_abi_major);
}
