// cellm-host inspect: what a model file holds, without running it.
#include "commands.h"

#include "error.h"
#include "plugin/host_api.h"
#include "model/model_file.h"
#include "plugin/plugin_registry.h"
#include "tokenize/tokenizer.h"

#include <cstdio>
#include <cstring>
#include <map>
#include <string>

namespace cellm::cli {

namespace {

std::string scalar_text(const cellm_meta_value& v) {
    switch (v.type) {
    case CELLM_VALUE_STRING: {
        std::string s(to_string_view(v.v.str));
        return s.size() > 80 ? "\"" + s.substr(0, 77) + "...\"" : "\"" + s + "\"";
    }
    case CELLM_VALUE_F32: case CELLM_VALUE_F64: return std::to_string(v.v.f64);
    case CELLM_VALUE_BOOL: return v.v.u64 != 0 ? "true" : "false";
    case CELLM_VALUE_I8: case CELLM_VALUE_I16: case CELLM_VALUE_I32: case CELLM_VALUE_I64: return std::to_string(v.v.i64);
    case CELLM_VALUE_ARRAY: return "[" + std::to_string(v.v.arr.count) + " items]";
    default: return std::to_string(v.v.u64);
    }
}

}  // namespace

Command add_inspect(CLI::App& app) {
    auto path = std::make_shared<std::string>();
    app.add_option("model", *path, "Model file or folder")->required();
    return [path]() {
        PluginRegistry registry;
        registry.discover();
        auto file = ModelFile::open(registry, *path);
        const cellm_model_view& view = file->view();
        const std::string arch = file->get_string("general.architecture").value_or("(none)");
        std::printf("model:   %s\nformat:  %s\narch:    %s", path->c_str(), file->format().name(), arch.c_str());
        const Plugin* arch_plugin = registry.find_arch_for(arch);
        std::printf(" (%s)\n", arch_plugin != nullptr ? ("plugin " + std::string(arch_plugin->name())).c_str() : "no arch plugin");
        if (auto name = file->get_string("general.name")) std::printf("name:    %s\n", name->c_str());

        std::printf("\nhyperparameters:\n");
        for (uint64_t i = 0; i < view.n_meta; ++i) {
            const std::string key(to_string_view(view.meta[i].key));
            if (key.rfind(arch + ".", 0) == 0) std::printf("  %-44s %s\n", key.c_str(), scalar_text(view.meta[i].value).c_str());
        }

        // A vision tower's keys (llama.cpp's mmproj vocabulary) and the image processor's settings, when present.
        bool vision = false;
        for (uint64_t i = 0; i < view.n_meta; ++i) {
            const std::string key(to_string_view(view.meta[i].key));
            if (key.rfind("clip.vision.", 0) != 0 && key.rfind("cellm.vision.", 0) != 0) continue;
            if (!vision) std::printf("\nvision:\n");
            vision = true;
            const cellm_meta_value& v = view.meta[i].value;
            std::string text = scalar_text(v);
            if (v.type == CELLM_VALUE_ARRAY && v.v.arr.elem_type == CELLM_VALUE_F32 && v.v.arr.count <= 4 && v.v.arr.data != nullptr) {
                text = "[";
                for (uint64_t j = 0; j < v.v.arr.count; ++j) {
                    float f = 0.0f;
                    std::memcpy(&f, static_cast<const char*>(v.v.arr.data) + j * sizeof(float), sizeof(float));
                    text += (j > 0 ? ", " : "") + std::to_string(f);
                }
                text += "]";
            }
            std::printf("  %-44s %s\n", key.c_str(), text.c_str());
        }

        std::printf("\ntokenizer:\n");
        try {
            auto tokenizer = Tokenizer::from_model(view);
            std::printf("  model %s, pre %s, %d tokens, bos %d, eos %d, add_bos %s, chat template %s\n",
                        tokenizer->model().c_str(), tokenizer->pre().c_str(), tokenizer->n_vocab(), tokenizer->bos(),
                        tokenizer->eos(), tokenizer->add_bos() ? "yes" : "no",
                        tokenizer->chat_template().empty() ? "none" : "present");
        } catch (const Error& e) {
            std::printf("  unavailable: %s\n", e.what());
        }

        std::map<std::string, std::pair<int, uint64_t>> histogram;
        uint64_t total = 0, params = 0;
        for (uint64_t i = 0; i < view.n_tensors; ++i) {
            const cellm_tensor_info* t = cellm_model_tensor(&view, i);
            auto& [count, bytes] = histogram[dtype_name(t->type)];
            ++count;
            bytes += t->size;
            total += t->size;
            int64_t n = 1;
            for (uint32_t d = 0; d < t->n_dims; ++d) n *= t->ne[d];
            params += static_cast<uint64_t>(n);
        }
        std::printf("\ntensors: %llu (%.1f M parameters, %.1f MiB of weights; file %.1f MiB)\n",
                    static_cast<unsigned long long>(view.n_tensors), static_cast<double>(params) / 1e6,
                    static_cast<double>(total) / 1048576.0, static_cast<double>(file->file_size()) / 1048576.0);
        for (const auto& [type, entry] : histogram) {
            std::printf("  %-6s %5d tensors %10.1f MiB\n", type.c_str(), entry.first, static_cast<double>(entry.second) / 1048576.0);
        }
        return 0;
    };
}

}  // namespace cellm::cli
