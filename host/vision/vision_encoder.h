// An arch's vision encoder (ABI 1.3's build_vision_graph) run on the engine's backend: preprocessed images in,
// the embeddings that replace their image tokens out. One prepared graph per image count, as the engine keeps
// one per batch shape.
#pragma once

#include "engine/step_graph.h"
#include "model/model.h"
#include "model/weights.h"
#include "plugin/backend.h"

#include <map>
#include <memory>
#include <utility>
#include <vector>

namespace cellm {

class VisionEncoder {
public:
    // The model must have vision(). All three are borrowed and must outlive the encoder; the backend is driven
    // by one thread at a time, so the caller serialises encode() with the engine's steps.
    VisionEncoder(const Model& model, Backend& backend, const WeightStore& weights);
    ~VisionEncoder();

    // `pixels`: n_images planar RGB images of image_size x image_size, normalised as the model's processor does
    // (taken, not copied: they are the graph's input). Returns n_embd * tokens_per_image * n_images floats, image by
    // image. Throws cellm::Error.
    std::vector<float> encode(std::vector<float> pixels, int32_t n_images);

private:
    const Model* model_;
    Backend* backend_;
    const WeightStore* weights_;
    std::map<int32_t, std::unique_ptr<StepGraph>> graphs_;  // by image count
};

}  // namespace cellm
