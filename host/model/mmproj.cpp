#include "model/mmproj.h"

#include "error.h"

#include <cstring>
#include <set>
#include <string_view>
#include <utility>

namespace fs = std::filesystem;

namespace cellm {
namespace {

// llama.cpp's projector types (clip.projector_type) cellm runs, and the arch that runs each.
constexpr std::pair<std::string_view, std::string_view> projector_archs[] = {
    {"idefics3", "idefics3"},  // SmolVLM, Idefics3
};

cellm_meta_kv entry(std::string_view key, cellm_meta_value value) {
    return {{key.data(), key.size()}, value};
}

cellm_meta_value u32_value(int64_t v) {
    cellm_meta_value value{};
    value.type = CELLM_VALUE_U32;
    value.v.u64 = static_cast<uint64_t>(v);
    return value;
}

}  // namespace

WithMmproj attach_mmproj(const PluginRegistry& registry, std::unique_ptr<ModelFile> text, const fs::path& mmproj) {
    const std::string where = "mmproj '" + mmproj.string() + "'";
    std::error_code ec;
    if (!fs::exists(mmproj, ec)) throw Error(where + " does not exist");
    std::unique_ptr<ModelFile> vision = ModelFile::open(registry, mmproj);

    const std::string kind = vision->get_string("general.architecture").value_or("");
    if (kind != "clip") {
        throw Error(where + " is not an mmproj file: its general.architecture is '" + kind +
                    "', llama.cpp's mmproj files say 'clip'");
    }
    if (!vision->get_bool("clip.has_vision_encoder").value_or(false)) {
        throw Error(where + " has no vision encoder (clip.has_vision_encoder)");
    }
    const std::string projector = vision->get_string("clip.projector_type").value_or("");
    std::string architecture;
    std::string known;
    for (const auto& [type, arch] : projector_archs) {
        if (projector == type) architecture = arch;
        known += (known.empty() ? "" : ", ") + std::string(type);
    }
    if (architecture.empty()) {
        throw Error(where + ": projector type '" + projector + "' is not supported (clip.projector_type: " + known + ")");
    }
    const std::string text_arch = text->get_string("general.architecture").value_or("");
    const std::string width_key = text_arch + ".embedding_length";
    const auto width = text->get_int(width_key);
    const auto projection = vision->get_int("clip.vision.projection_dim");
    if (!width) throw Error("model '" + text->path().string() + "' has no " + width_key + " for " + where);
    if (!projection) throw Error(where + " has no clip.vision.projection_dim (the text model's width it projects into)");
    if (*projection != *width) {
        throw Error(where + " projects into " + std::to_string(*projection) + " values, but the text model '" +
                    text->path().string() + "' is " + std::to_string(*width) + " wide (" + width_key + ")");
    }
    const auto tile = vision->get_int("clip.vision.image_size");
    if (!tile) throw Error(where + " has no clip.vision.image_size");

    ModelFile::Tables t;
    std::set<std::string_view> keys;
    const cellm_model_view& tv = text->view();
    const cellm_model_view& vv = vision->view();
    for (uint64_t i = 0; i < tv.n_meta; ++i) {
        t.meta.push_back(tv.meta[i]);
        keys.insert(to_string_view(tv.meta[i].key));
    }
    for (uint64_t i = 0; i < vv.n_meta; ++i) {
        const std::string_view key = to_string_view(vv.meta[i].key);
        if (key.starts_with("general.") || !keys.insert(key).second) continue;
        t.meta.push_back(vv.meta[i]);
    }
    // The image processor as llama.cpp runs it for idefics3 (mtmd_image_preprocessor_idefics3): the longest side
    // resized to clip.vision.preproc_image_size, which the converter takes from the processor's size.longest_edge
    // (without it, one tile: the whole image resized to clip.vision.image_size), always split into tiles of
    // clip.vision.image_size, normalised with clip.vision.image_mean and image_std.
    auto derive = [&](std::string_view key, const cellm_meta_value& value) {
        if (keys.insert(key).second) t.meta.push_back(entry(key, value));
    };
    derive("cellm.vision.tile_size", u32_value(*tile));
    derive("cellm.vision.longest_edge", u32_value(vision->get_int("clip.vision.preproc_image_size").value_or(*tile)));
    cellm_meta_value split{};
    split.type = CELLM_VALUE_BOOL;
    split.v.u64 = 1;
    derive("cellm.vision.do_image_splitting", split);
    if (const cellm_meta_value* mean = vision->find("clip.vision.image_mean")) derive("cellm.vision.image_mean", *mean);
    if (const cellm_meta_value* sd = vision->find("clip.vision.image_std")) derive("cellm.vision.image_std", *sd);

    std::set<std::string_view> names;
    for (uint64_t i = 0; i < tv.n_tensors; ++i) {
        cellm_tensor_info info{};
        std::memcpy(&info, cellm_model_tensor(&tv, i), sizeof(info));
        info.struct_size = sizeof(info);
        names.insert(to_string_view(info.name));
        t.tensors.push_back(info);
    }
    for (uint64_t i = 0; i < vv.n_tensors; ++i) {
        cellm_tensor_info info{};
        std::memcpy(&info, cellm_model_tensor(&vv, i), sizeof(info));
        info.struct_size = sizeof(info);
        const std::string_view name = to_string_view(info.name);
        if (!names.insert(name).second) {
            throw Error(where + ": tensor '" + std::string(name) + "' is also in the text model '" +
                        text->path().string() + "'");
        }
        // A convolution of stride = kernel, stored [kx, ky, channel, out]: each output's p * p * 3 weights are
        // contiguous, so the kernel is the product [3 p p, out] over PATCHES' columns, byte for byte.
        if (name == "v.patch_embd.weight" && info.n_dims == 4) {
            info.n_dims = 2;
            info.ne[0] = info.ne[0] * info.ne[1] * info.ne[2];
            info.ne[1] = info.ne[3];
            info.ne[2] = info.ne[3] = 1;
        }
        t.tensors.push_back(info);
    }

    std::vector<std::unique_ptr<ModelFile>> parts;
    parts.push_back(std::move(text));
    parts.push_back(std::move(vision));
    return {ModelFile::compose(std::move(parts), std::move(t)), architecture};
}

}  // namespace cellm
