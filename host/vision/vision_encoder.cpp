#include "vision/vision_encoder.h"

#include "error.h"

namespace cellm {

namespace {
constexpr size_t max_cached_graphs = 8;
}

VisionEncoder::VisionEncoder(const Model& model, Backend& backend, const WeightStore& weights)
    : model_(&model), backend_(&backend), weights_(&weights) {
    if (!model.vision()) throw Error("model '" + model.file().path().string() + "' has no vision encoder");
}

VisionEncoder::~VisionEncoder() = default;

std::vector<float> VisionEncoder::encode(std::vector<float> pixels, int32_t n_images) {
    const cellm_arch_vision_info& v = *model_->vision();
    const auto side = static_cast<size_t>(v.image_size);
    if (n_images < 1 || pixels.size() != static_cast<size_t>(n_images) * 3 * side * side) {
        throw Error("the vision encoder takes " + std::to_string(n_images) + " images of 3 x " + std::to_string(side) +
                    " x " + std::to_string(side) + " values, not " + std::to_string(pixels.size()) + " values");
    }
    auto it = graphs_.find(n_images);
    if (it == graphs_.end()) {
        if (graphs_.size() >= max_cached_graphs) graphs_.erase(graphs_.begin());
        const cellm_vision_shape shape{sizeof(cellm_vision_shape), n_images};
        it = graphs_.emplace(n_images, std::make_unique<StepGraph>(*model_, *backend_, *weights_, shape)).first;
    }
    StepGraph::Inputs inputs;
    inputs.pixels = std::move(pixels);
    std::vector<float> out(static_cast<size_t>(v.n_embd) * static_cast<size_t>(v.tokens_per_image) *
                           static_cast<size_t>(n_images));
    it->second->execute(inputs, out.data(), out.size());
    return out;
}

}  // namespace cellm
