// The llama arch as a plugin built for ABI 1.0: compiled against tests/abi10/include alone, with the 1.0
// plumbing (arch_plugin_1_0.hpp), under its own name so that a manifest can pick it beside the in-tree llama.
#include "arch_plugin_1_0.hpp"
#include "forward.hpp"
#include "model.hpp"

// Proof that the frozen headers, not abi/, are the ones on the include path.
#ifndef CELLM_CELLM_H
#error "cellm-llama10 must be built against tests/abi10/include (the ABI 1.0 headers)"
#endif
#ifdef CELLM_ABI_H
#error "cellm-llama10 sees abi/cellm/abi.h: the current headers are on its include path"
#endif
static_assert(CELLM_ABI_MAJOR == 1 && CELLM_ABI_MINOR == 0, "cellm-llama10 must be built against the ABI 1.0 headers");

namespace cellm::llama10 {
namespace {

struct Llama10 {
    static constexpr const char* kName = "llama10";
    static constexpr const char* kVersion = "0.1.0";
    static constexpr const char* kDescription = "the llama arch built against the frozen ABI 1.0 headers (conformance test)";
    static constexpr const char* const kArchitectures[] = {"llama", nullptr};

    using Model = llama::Model;
    static Model load(const cellm_model_view& view) { return llama::load_model(view); }
    static void build_forward(const Model& model, const cellm_batch_shape& shape, transformer::GraphBuilder& g) {
        llama::build_forward(model, shape, g);
    }
};

}  // namespace
}  // namespace cellm::llama10

extern "C" CELLM_EXPORT const cellm_plugin_desc* cellm_plugin_entry(const cellm_host_api* host, uint32_t host_abi_major,
                                                                    uint32_t /*host_abi_minor*/) {
    return cellm::transformer::ArchPlugin<cellm::llama10::Llama10>::entry(host, host_abi_major);
}
