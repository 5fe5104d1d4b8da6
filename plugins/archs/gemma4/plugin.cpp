// The gemma4 arch plugin: Gemma 4 text decoders (the dense E2B / E4B / 31B shapes; not the MoE 26B-A4B), over the
// shared transformer plumbing. Layers differ in head size, KV heads and whether they keep K/V at all, which the
// host learns through get_layer_info.
#include "arch_plugin.hpp"
#include "forward.hpp"
#include "model.hpp"

#include <algorithm>

namespace cellm::gemma4 {
namespace {

struct Gemma4 {
    static constexpr const char* kName = "gemma4";
    static constexpr const char* kVersion = "0.1.0";
    static constexpr const char* kDescription =
        "Gemma 4 text decoders: per-layer embeddings, sliding-window local and wider global layers, K = V and "
        "proportional RoPE on global layers, KV shared across the last layers, GeGLU, final soft-cap";
    static constexpr const char* const kArchitectures[] = {"gemma4", nullptr};

    using Model = gemma4::Model;
    static Model load(const cellm_model_view& view) { return load_model(view); }
    static void build_forward(const Model& model, const cellm_batch_shape& shape, GraphBuilder& g) {
        gemma4::build_forward(model, shape, g);
    }
    // A layer that reads another's K/V keeps no pools of its own.
    static transformer::LayerKv layer_kv(const Model& model, int32_t layer) {
        const LayerShape& s = model.shape[static_cast<size_t>(layer)];
        if (s.kv_source != layer) return {};
        transformer::LayerKv kv{s.kv_dim(), s.n_head_kv};
        // The window bounds what every reader of these pools looks back (local layers share only local pools).
        const bool all_local = std::all_of(model.shape.begin(), model.shape.end(), [&](const LayerShape& reader) {
            return reader.kv_source != layer || reader.sliding;
        });
        kv.window = all_local ? model.sliding_window : 0;
        return kv;
    }
};

}  // namespace
}  // namespace cellm::gemma4

extern "C" CELLM_EXPORT const cellm_plugin_desc* cellm_plugin_entry(const cellm_host_api* host, uint32_t host_abi_major,
                                                                    uint32_t /*host_abi_minor*/) {
    return cellm::transformer::ArchPlugin<cellm::gemma4::Gemma4>::entry(host, host_abi_major);
}
