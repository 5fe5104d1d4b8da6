// The gemma3 arch plugin: Gemma 3 text models (270M, 1B and the text stack of the larger ones), over the shared
// transformer plumbing.
#include "arch_plugin.hpp"
#include "forward.hpp"
#include "model.hpp"

namespace cellm::gemma3 {
namespace {

struct Gemma3 {
    static constexpr const char* kName = "gemma3";
    static constexpr const char* kVersion = "0.1.0";
    static constexpr const char* kDescription =
        "Gemma 3 text decoders: scaled embeddings, pre- and post-norms, Q/K head RMSNorm, GeGLU, sliding-window "
        "local layers and global layers with their own RoPE base";
    static constexpr const char* const kArchitectures[] = {"gemma3", nullptr};

    using Model = gemma3::Model;
    static Model load(const cellm_model_view& view) { return load_model(view); }
    static void build_forward(const Model& model, const cellm_batch_shape& shape, GraphBuilder& g) {
        gemma3::build_forward(model, shape, g);
    }
    // Local layers read only their window, so the host may give back the rows behind it.
    static transformer::LayerKv layer_kv(const Model& model, int32_t layer) {
        transformer::LayerKv kv{model.hp.kv_dim(), model.hp.n_head_kv};
        kv.window = model.attention(layer).window;
        return kv;
    }
};

}  // namespace
}  // namespace cellm::gemma3

extern "C" CELLM_EXPORT const cellm_plugin_desc* cellm_plugin_entry(const cellm_host_api* host, uint32_t host_abi_major,
                                                                    uint32_t /*host_abi_minor*/) {
    return cellm::transformer::ArchPlugin<cellm::gemma3::Gemma3>::entry(host, host_abi_major);
}
