// The llama arch plugin: entry point and the cellm_arch_iface table.
#include "forward.hpp"
#include "model.hpp"
#include "plugin_host.hpp"

#include <cellm/cellm.h>

struct cellm_arch_model {
    cellm::llama::Model model;
};

namespace cellm::llama {
namespace {

const char* const kArchitectures[] = {"llama", nullptr};

cellm_status* load(const cellm_model_view* view, cellm_arch_model** out) {
    return plugin::guard([&]() -> cellm_status* {
        if (view == nullptr || out == nullptr || view->struct_size < sizeof(cellm_model_view)) {
            return plugin::error(CELLM_ERR_INVALID_ARGUMENT, "llama: load needs a model view and an output");
        }
        *out = new cellm_arch_model{load_model(*view)};
        return nullptr;
    });
}

void destroy(cellm_arch_model* model) { delete model; }

cellm_status* get_info(const cellm_arch_model* model, cellm_arch_info* out) {
    if (model == nullptr || out == nullptr || out->struct_size < sizeof(cellm_arch_info)) {
        return plugin::error(CELLM_ERR_INVALID_ARGUMENT, "llama: get_info needs a model and a cellm_arch_info");
    }
    const Hparams& hp = model->model.hp;
    out->n_layer = hp.n_layer;
    out->n_vocab = hp.n_vocab;
    out->n_embd = hp.n_embd;
    out->n_ctx_train = hp.n_ctx_train;
    out->kv_dim = hp.kv_dim();
    return nullptr;
}

cellm_status* build_graph(const cellm_arch_model* model, const cellm_batch_shape* shape,
                          const cellm_graph_builder* builder) {
    return plugin::guard([&]() -> cellm_status* {
        if (model == nullptr || shape == nullptr || builder == nullptr ||
            shape->struct_size < sizeof(cellm_batch_shape) || builder->struct_size < sizeof(cellm_graph_builder)) {
            return plugin::error(CELLM_ERR_INVALID_ARGUMENT, "llama: build_graph needs a model, shape and builder");
        }
        GraphBuilder g(*builder, *model->model.view);
        build_forward(model->model, *shape, g);
        return nullptr;
    });
}

const cellm_arch_iface kIface = {
    sizeof(cellm_arch_iface), kArchitectures, load, destroy, get_info, build_graph,
};

const cellm_plugin_desc kDesc = {
    sizeof(cellm_plugin_desc), CELLM_ABI_MAJOR, CELLM_ABI_MINOR, CELLM_PLUGIN_ARCH, "llama", "0.1.0",
    "Llama-family decoder (SmolLM2, Llama 3.x, TinyLlama): RMSNorm, RoPE, GQA, SwiGLU", &kIface,
};

}  // namespace
}  // namespace cellm::llama

extern "C" CELLM_EXPORT const cellm_plugin_desc* cellm_plugin_entry(const cellm_host_api* host, uint32_t host_abi_major,
                                                                    uint32_t /*host_abi_minor*/) {
    if (host == nullptr || host_abi_major != CELLM_ABI_MAJOR) return nullptr;
    cellm::plugin::host() = host;
    return &cellm::llama::kDesc;
}
