#include "vision/image_prompt.h"

#include "error.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace cellm {

namespace {

constexpr size_t max_cached_images = 16;
constexpr std::string_view image_marker = "<image>";

// FNV-1a over the file's bytes: the cache key of an image.
uint64_t content_key(std::span<const uint8_t> bytes) {
    uint64_t h = 1469598103934665603ull;
    for (uint8_t b : bytes) h = (h ^ b) * 1099511628211ull;
    return h;
}

std::array<float, 3> three_floats(const ModelFile& file, const std::string& key, std::array<float, 3> fallback) {
    const cellm_meta_value* v = file.find(key);
    if (v == nullptr) return fallback;
    if (v->type != CELLM_VALUE_ARRAY || v->v.arr.elem_type != CELLM_VALUE_F32 || v->v.arr.count != 3 || v->v.arr.data == nullptr) {
        throw Error("model '" + file.path().string() + "': " + key + " is not three F32 values");
    }
    std::array<float, 3> out{};
    std::memcpy(out.data(), v->v.arr.data, sizeof(out));
    return out;
}

}  // namespace

ImagePrompter::ImagePrompter(const Model& model, Backend& backend, const WeightStore& weights)
    : model_(&model), encoder_(model, backend, weights) {
    const ModelFile& file = model.file();
    const std::string where = "model '" + file.path().string() + "'";
    const auto edge = file.get_int("cellm.vision.longest_edge");
    const auto tile = file.get_int("cellm.vision.tile_size");
    if (!edge || !tile) throw Error(where + " has no image processor settings (preprocessor_config.json)");
    const cellm_arch_vision_info& v = *model.vision();
    if (*tile != v.image_size || *edge < *tile || *edge > 16384) {
        throw Error(where + ": the processor's tiles of " + std::to_string(*tile) + " pixels (longest edge " +
                    std::to_string(*edge) + ") do not fit the vision encoder's " + std::to_string(v.image_size));
    }
    config_.longest_edge = static_cast<int>(*edge);
    config_.tile = static_cast<int>(*tile);
    config_.split = file.get_bool("cellm.vision.do_image_splitting").value_or(true);
    config_.rescale_factor = file.get_float("cellm.vision.rescale_factor").value_or(1.0 / 255.0);
    config_.mean = three_floats(file, "cellm.vision.image_mean", config_.mean);
    config_.std = three_floats(file, "cellm.vision.image_std", config_.std);
    tokens_per_image_ = v.tokens_per_image;
    const int64_t seq_len = file.get_int("cellm.vision.image_seq_len").value_or(tokens_per_image_);
    if (seq_len != tokens_per_image_) {
        throw Error(where + ": the processor's image_seq_len " + std::to_string(seq_len) + " differs from the " +
                    std::to_string(tokens_per_image_) + " embeddings the vision encoder gives per tile");
    }
    const std::vector<int32_t> marker = model.tokenizer().encode(image_marker, false, true);
    if (marker.size() != 1) throw Error(where + ": the tokenizer has no single token for " + std::string(image_marker));
    image_token_ = marker[0];
    const auto id = file.get_int("cellm.vision.image_token_id");
    if (id && *id != image_token_) {
        throw Error(where + ": image_token_id " + std::to_string(*id) + " is not the tokenizer's " +
                    std::string(image_marker) + " (" + std::to_string(image_token_) + ")");
    }
}

std::shared_ptr<const ImagePrompter::Encoded> ImagePrompter::encode(std::span<const uint8_t> bytes, size_t index) {
    const uint64_t key = content_key(bytes);
    const auto hit = std::find_if(cache_.begin(), cache_.end(), [key](const auto& e) { return e->key == key; });
    if (hit != cache_.end()) {
        cache_.splice(cache_.begin(), cache_, hit);
        ++hits_;
        return cache_.front();
    }
    const vision::Image image = vision::decode_image(bytes, std::to_string(index + 1));
    auto e = std::make_shared<Encoded>();
    e->key = key;
    e->grid = vision::preprocess_idefics3(image, config_);
    e->embeddings = encoder_.encode(std::move(e->grid.pixels), e->grid.frames);
    e->grid.pixels = {};  // moved from: valid but unspecified, so emptied
    ++encoded_;
    cache_.push_front(std::move(e));
    if (cache_.size() > max_cached_images) cache_.pop_back();
    return cache_.front();
}

ImagePrompter::Prompt ImagePrompter::build(std::string_view text, std::span<const std::span<const uint8_t>> images,
                                           bool add_bos) {
    std::string marked(text);
    size_t markers = 0;
    for (size_t at = marked.find(image_marker); at != std::string::npos; at = marked.find(image_marker, at + 1)) ++markers;
    if (markers == 0) {
        std::string leading;
        for (size_t i = 0; i < images.size(); ++i) leading += image_marker;
        marked = leading + marked;
    } else if (markers != images.size()) {
        throw Error("the prompt has " + std::to_string(markers) + " " + std::string(image_marker) + " markers for " +
                    std::to_string(images.size()) + " images");
    }

    std::vector<std::shared_ptr<const Encoded>> encoded;
    std::vector<vision::Idefics3Image> grids;
    for (size_t i = 0; i < images.size(); ++i) {
        encoded.push_back(encode(images[i], i));
        grids.push_back(encoded.back()->grid);
    }
    const std::string expanded = vision::expand_image_tokens(marked, grids, tokens_per_image_);

    Prompt out;
    out.tokens = model_->tokenizer().encode(expanded, add_bos, true);
    auto embeddings = std::make_shared<PromptEmbeddings>();
    for (size_t i = 0; i < out.tokens.size(); ++i) {
        if (out.tokens[i] == image_token_) embeddings->positions.push_back(static_cast<int32_t>(i));
    }
    size_t rows = 0;
    for (const auto& e : encoded) rows += e->embeddings.size();
    const auto n_embd = static_cast<size_t>(model_->info().n_embd);
    if (embeddings->positions.size() * n_embd != rows) {
        throw Error("the prompt has " + std::to_string(embeddings->positions.size()) + " image tokens, but its images give " +
                    std::to_string(rows / n_embd) + " embeddings (is " + std::string(image_marker) +
                    " written in the text besides the images' markers?)");
    }
    embeddings->values.reserve(rows);
    for (const auto& e : encoded) embeddings->values.insert(embeddings->values.end(), e->embeddings.begin(), e->embeddings.end());
    if (!embeddings->positions.empty()) out.embeddings = std::move(embeddings);
    return out;
}

}  // namespace cellm
