// The C side of an arch plugin built on this library: the cellm_arch_iface functions, which keep exceptions
// from crossing the ABI, the descriptor, and the entry point's body. An arch supplies a description type:
//
//   struct MyArch {
//       static constexpr const char* kName = "myarch";   // plugin name, and the prefix of its messages
//       static constexpr const char* kVersion = "0.1.0";
//       static constexpr const char* kDescription = "...";
//       static constexpr const char* const kArchitectures[] = {"myarch", nullptr};  // general.architecture
//       using Model = ...;  // has `const cellm_model_view* view` and `Hparams hp`
//       static Model load(const cellm_model_view& view);  // throws plugin::Failure
//       static void build_forward(const Model& model, const cellm_batch_shape& shape, GraphBuilder& g);
//       // Optional, for archs whose layers' KV pools differ or that have sliding-window layers (ABI 1.2's
//       // get_layer_info); without it every layer has hp.kv_dim() and hp.n_head_kv and reads the whole context.
//       static LayerKv layer_kv(const Model& model, int32_t layer);
//       // Optional, for archs that take images (ABI 1.3's get_vision_info and build_vision_graph): both throw
//       // plugin::Failure (UNSUPPORTED) for a model without a vision encoder.
//       static cellm_arch_vision_info vision_info(const Model& model);
//       static void build_vision(const Model& model, int32_t n_images, GraphBuilder& g);
//   };
#pragma once

#include "graph_builder.hpp"
#include "hparams.hpp"
#include "plugin_host.hpp"

#include <cellm/abi.h>

#include <cstdint>
#include <string>

namespace cellm::transformer {

// One layer's K/V row: its width (0 = no pools of its own) and its KV heads; and a recurrent layer's state
// sizes per sequence (cellm_arch_layer_info.state_size).
struct LayerKv {
    int32_t kv_dim = 0;
    int32_t n_head_kv = 0;
    int32_t state_size[2] = {0, 0};
    int32_t window = 0;  // sliding window of the layer's queries, 0 = whole context
};

template <class Arch>
class ArchPlugin {
public:
    // Stores the host's services and answers the descriptor; NULL for a host of another major.
    static const cellm_plugin_desc* entry(const cellm_host_api* host, uint32_t host_abi_major) {
        if (host == nullptr || host_abi_major != CELLM_ABI_MAJOR) return nullptr;
        plugin::host() = host;
        return &kDesc;
    }

private:
    using Model = typename Arch::Model;

    // The host holds the model only as the opaque pointer load() returned.
    static cellm_arch_model* opaque(Model* m) { return reinterpret_cast<cellm_arch_model*>(m); }
    static const Model& model_of(const cellm_arch_model* m) { return *reinterpret_cast<const Model*>(m); }

    static std::string where(const char* what) { return std::string(Arch::kName) + ": " + what; }

    static cellm_status* load(const cellm_model_view* view, cellm_arch_model** out) {
        return plugin::guard([&]() -> cellm_status* {
            if (view == nullptr || out == nullptr || view->struct_size < sizeof(cellm_model_view)) {
                return plugin::error(CELLM_ERR_INVALID_ARGUMENT, where("load needs a model view and an output"));
            }
            *out = opaque(new Model(Arch::load(*view)));
            return nullptr;
        });
    }

    static void destroy(cellm_arch_model* model) { delete reinterpret_cast<Model*>(model); }

    static cellm_status* get_info(const cellm_arch_model* model, cellm_arch_info* out) {
        return plugin::guard([&]() -> cellm_status* {
            // The caller sizes the struct: a 1.0 host's lacks the fields added since, which are then not written.
            if (model == nullptr || out == nullptr || !CELLM_HAS_FIELD(out, cellm_arch_info, kv_dim)) {
                return plugin::error(CELLM_ERR_INVALID_ARGUMENT, where("get_info needs a model and a cellm_arch_info"));
            }
            const Hparams& hp = model_of(model).hp;
            out->n_layer = hp.n_layer;
            out->n_vocab = hp.n_vocab;
            out->n_embd = hp.n_embd;
            out->n_ctx_train = hp.n_ctx_train;
            out->kv_dim = hp.kv_dim();
            if (CELLM_HAS_FIELD(out, cellm_arch_info, n_head_kv)) out->n_head_kv = hp.n_head_kv;
            return nullptr;
        });
    }

    static cellm_status* build_graph(const cellm_arch_model* model, const cellm_batch_shape* shape,
                                     const cellm_graph_builder* builder) {
        return plugin::guard([&]() -> cellm_status* {
            if (model == nullptr || shape == nullptr || builder == nullptr ||
                !CELLM_HAS_FIELD(shape, cellm_batch_shape, block_size) ||
                builder->struct_size < sizeof(cellm_graph_builder)) {
                return plugin::error(CELLM_ERR_INVALID_ARGUMENT, where("build_graph needs a model, shape and builder"));
            }
            const Model& m = model_of(model);
            GraphBuilder g(*builder, *m.view);
            Arch::build_forward(m, *shape, g);
            return nullptr;
        });
    }

    static cellm_status* get_layer_info(const cellm_arch_model* model, int32_t layer, cellm_arch_layer_info* out) {
        return plugin::guard([&]() -> cellm_status* {
            if (model == nullptr || out == nullptr || !CELLM_HAS_FIELD(out, cellm_arch_layer_info, n_head_kv)) {
                return plugin::error(CELLM_ERR_INVALID_ARGUMENT, where("get_layer_info needs a model and a cellm_arch_layer_info"));
            }
            const Model& m = model_of(model);
            if (layer < 0 || layer >= m.hp.n_layer) {
                return plugin::error(CELLM_ERR_INVALID_ARGUMENT, where("get_layer_info: no such layer"));
            }
            const LayerKv kv = Arch::layer_kv(m, layer);
            out->kv_dim = kv.kv_dim;
            out->n_head_kv = kv.n_head_kv;
            if (CELLM_HAS_FIELD(out, cellm_arch_layer_info, state_size)) {
                out->state_size[0] = kv.state_size[0];
                out->state_size[1] = kv.state_size[1];
            }
            if (CELLM_HAS_FIELD(out, cellm_arch_layer_info, window)) out->window = kv.window;
            return nullptr;
        });
    }

    // NULL for archs whose layers all share hp's geometry: the host then uses get_info's.
    static constexpr decltype(cellm_arch_iface::get_layer_info) layer_info_fn() {
        if constexpr (requires(const Model& m) { Arch::layer_kv(m, int32_t{0}); }) {
            return get_layer_info;
        } else {
            return nullptr;
        }
    }

    static constexpr bool kVision = requires(const Model& m, GraphBuilder& g) {
        Arch::vision_info(m);
        Arch::build_vision(m, int32_t{0}, g);
    };

    static cellm_status* get_vision_info(const cellm_arch_model* model, cellm_arch_vision_info* out) {
        return plugin::guard([&]() -> cellm_status* {
            if (model == nullptr || out == nullptr || !CELLM_HAS_FIELD(out, cellm_arch_vision_info, n_embd)) {
                return plugin::error(CELLM_ERR_INVALID_ARGUMENT, where("get_vision_info needs a model and a cellm_arch_vision_info"));
            }
            if constexpr (kVision) {
                const cellm_arch_vision_info info = Arch::vision_info(model_of(model));
                out->image_size = info.image_size;
                out->patch_size = info.patch_size;
                out->tokens_per_image = info.tokens_per_image;
                out->n_embd = info.n_embd;
            }
            return nullptr;
        });
    }

    static cellm_status* build_vision_graph(const cellm_arch_model* model, const cellm_vision_shape* shape,
                                            const cellm_graph_builder* builder) {
        return plugin::guard([&]() -> cellm_status* {
            if (model == nullptr || shape == nullptr || builder == nullptr ||
                !CELLM_HAS_FIELD(shape, cellm_vision_shape, n_images) || builder->struct_size < sizeof(cellm_graph_builder)) {
                return plugin::error(CELLM_ERR_INVALID_ARGUMENT, where("build_vision_graph needs a model, shape and builder"));
            }
            if (shape->n_images < 1) {
                return plugin::error(CELLM_ERR_INVALID_ARGUMENT,
                                     where("build_vision_graph: n_images ") + std::to_string(shape->n_images) + " is not positive");
            }
            if constexpr (kVision) {
                const Model& m = model_of(model);
                GraphBuilder g(*builder, *m.view);
                Arch::build_vision(m, shape->n_images, g);
            }
            return nullptr;
        });
    }

    static constexpr cellm_arch_iface kIface = {
        sizeof(cellm_arch_iface), Arch::kArchitectures, load, destroy, get_info, build_graph, layer_info_fn(),
        kVision ? get_vision_info : nullptr, kVision ? build_vision_graph : nullptr,
    };
    static constexpr cellm_plugin_desc kDesc = {
        sizeof(cellm_plugin_desc), CELLM_ABI_MAJOR, CELLM_ABI_MINOR, CELLM_PLUGIN_ARCH,
        Arch::kName,               Arch::kVersion,  Arch::kDescription, &kIface,
    };
};

}  // namespace cellm::transformer
