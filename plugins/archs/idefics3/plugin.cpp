// The idefics3 arch plugin (SmolVLM, Idefics3): a Llama text model that also takes images.
#include "arch_plugin.hpp"
#include "forward.hpp"
#include "model.hpp"
#include "plugin_host.hpp"
#include "vision.hpp"

namespace cellm::idefics3 {
namespace {

struct Idefics3 {
    static constexpr const char* kName = "idefics3";
    static constexpr const char* kVersion = "0.1.0";
    static constexpr const char* kDescription =
        "Idefics3 / SmolVLM: SigLIP vision encoder, pixel-shuffle projector, Llama text model";
    static constexpr const char* const kArchitectures[] = {"idefics3", nullptr};

    using Model = idefics3::Model;
    static Model load(const cellm_model_view& view) { return load_model(view); }
    static void build_forward(const Model& model, const cellm_batch_shape& shape, transformer::GraphBuilder& g) {
        idefics3::build_forward(model, shape, g);
    }

    static const Vision& vision_of(const Model& model) {
        if (!model.has_vision) {
            throw plugin::Failure(CELLM_ERR_UNSUPPORTED, "idefics3: this model file has no vision encoder (clip.vision.*)");
        }
        return model.vision;
    }
    static cellm_arch_vision_info vision_info(const Model& model) {
        const Vision& v = vision_of(model);
        cellm_arch_vision_info info{};
        info.struct_size = sizeof(info);
        info.image_size = v.image_size;
        info.patch_size = v.patch_size;
        info.tokens_per_image = v.tokens_per_image();
        info.n_embd = model.hp.n_embd;
        return info;
    }
    static void build_vision(const Model& model, int32_t n_images, transformer::GraphBuilder& g) {
        vision_of(model);
        idefics3::build_vision(model, n_images, g);
    }
};

}  // namespace
}  // namespace cellm::idefics3

extern "C" CELLM_EXPORT const cellm_plugin_desc* cellm_plugin_entry(const cellm_host_api* host, uint32_t host_abi_major,
                                                                    uint32_t /*host_abi_minor*/) {
    return cellm::transformer::ArchPlugin<cellm::idefics3::Idefics3>::entry(host, host_abi_major);
}
