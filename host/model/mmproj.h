// A text model file with llama.cpp's mmproj file beside it (the vision tower: general.architecture "clip", clip.*
// keys, v.* and mm.* tensors) presented as one model view, which the arch reads as it reads a single file.
#pragma once

#include "model/model_file.h"

#include <filesystem>
#include <memory>
#include <string>

namespace cellm {

struct WithMmproj {
    std::unique_ptr<ModelFile> file;  // the combined view; it keeps both files open
    std::string architecture;         // the arch the projector needs ("idefics3")
};

// Opens `mmproj` through the format plugins and combines it with `text`: the text file's metadata and tensors,
// then the mmproj's (but its general.* keys: the text file names the model), the mmproj's convolution kernel
// v.patch_embd.weight [p, p, 3, d] as the product [3 p p, d] it is (same bytes), and the image processor
// settings llama.cpp derives from the mmproj as cellm.vision.* keys (docs/vision.md). Throws cellm::Error with
// one line naming the mmproj when it is missing, not an mmproj, has no vision encoder or a projector cellm does
// not run, or projects into another width than the text model's.
WithMmproj attach_mmproj(const PluginRegistry& registry, std::unique_ptr<ModelFile> text,
                         const std::filesystem::path& mmproj);

}  // namespace cellm
