// Prompts with images for a model that takes them (Model::vision()): each image is decoded, preprocessed as the
// model's processor does, encoded by the vision encoder and spliced in place of its image tokens. Encoded images
// are kept by content, so a second question about the same image does not encode it again.
//
// The processor is Idefics3's (SmolVLM), the only one cellm has; its settings are the model's cellm.vision.* keys
// (the safetensors plugin reads them from preprocessor_config.json).
#pragma once

#include "model/model.h"
#include "schedule/session.h"
#include "vision/idefics3_processor.h"
#include "vision/vision_encoder.h"

#include <cstdint>
#include <list>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace cellm {

class ImagePrompter {
public:
    // Throws cellm::Error when the model takes no images or its file lacks the processor's settings.
    ImagePrompter(const Model& model, Backend& backend, const WeightStore& weights);

    struct Prompt {
        std::vector<int32_t> tokens;
        std::shared_ptr<const PromptEmbeddings> embeddings;
    };
    // `text` holds one "<image>" per image, in order (none: the images go first, as SmolVLM's chat template puts them).
    // Each image is a PNG or JPEG file's bytes (borrowed for the call); `name` says which in messages.
    // Throws cellm::Error naming the image or the mismatch. Not thread-safe: it runs the backend.
    Prompt build(std::string_view text, std::span<const std::span<const uint8_t>> images, bool add_bos);

    int64_t images_encoded() const { return encoded_; }
    int64_t cache_hits() const { return hits_; }

private:
    struct Encoded {
        uint64_t key;
        vision::Idefics3Image grid;  // rows and cols (its pixels are dropped once encoded)
        std::vector<float> embeddings;
    };
    std::shared_ptr<const Encoded> encode(std::span<const uint8_t> bytes, size_t index);

    const Model* model_;
    VisionEncoder encoder_;
    vision::Idefics3Config config_;
    int32_t image_token_ = -1;
    int32_t tokens_per_image_ = 0;
    std::list<std::shared_ptr<const Encoded>> cache_;  // most recently used first
    int64_t encoded_ = 0, hits_ = 0;
};

}  // namespace cellm
