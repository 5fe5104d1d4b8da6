#include "hf_folder_writer.h"

#include "model/model_file.h"
#include "test_support.h"

#include <cstring>
#include <fstream>
#include <map>
#include <stdexcept>

namespace fs = std::filesystem;
using nlohmann::json;

namespace cellm::testing {
namespace {

const std::map<std::string, std::string> layer_names = {
    {"attn_norm.weight", "input_layernorm.weight"},      {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_q.bias", "self_attn.q_proj.bias"},            {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_k.bias", "self_attn.k_proj.bias"},            {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_v.bias", "self_attn.v_proj.bias"},            {"attn_output.weight", "self_attn.o_proj.weight"},
    {"attn_q_norm.weight", "self_attn.q_norm.weight"},   {"attn_k_norm.weight", "self_attn.k_norm.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"}, {"ffn_gate.weight", "mlp.gate_proj.weight"},
    {"ffn_up.weight", "mlp.up_proj.weight"},             {"ffn_down.weight", "mlp.down_proj.weight"},
};

std::string hf_name(const std::string& gguf) {
    if (gguf == "token_embd.weight") return "model.embed_tokens.weight";
    if (gguf == "output_norm.weight") return "model.norm.weight";
    if (gguf == "output.weight") return "lm_head.weight";
    const size_t dot = gguf.find('.', 4);
    return "model.layers." + gguf.substr(4, dot - 4) + "." + layer_names.at(gguf.substr(dot + 1));
}

std::string dtype_of(cellm_dtype type) {
    switch (type) {
    case CELLM_TYPE_F32: return "F32";
    case CELLM_TYPE_F16: return "F16";
    case CELLM_TYPE_BF16: return "BF16";
    default: throw std::invalid_argument("no safetensors dtype for this GGUF type");
    }
}

// The inverse of convert_hf_to_gguf.py's permute: GGUF row h*rows_per_head + 2i + j came from HF row
// h*rows_per_head + j*half + i.
std::vector<uint8_t> unpermute(const uint8_t* data, uint64_t size, int64_t rows, int64_t n_head) {
    std::vector<uint8_t> out(size);
    const uint64_t row_bytes = size / static_cast<uint64_t>(rows);
    const int64_t half = rows / n_head / 2;
    for (int64_t h = 0; h < n_head; ++h) {
        for (int64_t i = 0; i < half; ++i) {
            for (int64_t j = 0; j < 2; ++j) {
                const auto from = static_cast<uint64_t>(h * 2 * half + 2 * i + j);
                const auto to = static_cast<uint64_t>(h * 2 * half + j * half + i);
                std::memcpy(out.data() + to * row_bytes, data + from * row_bytes, row_bytes);
            }
        }
    }
    return out;
}

json tokenizer_json(const ModelFile& gguf) {
    const cellm_meta_value* tokens = gguf.find("tokenizer.ggml.tokens");
    const cellm_meta_value* types = gguf.find("tokenizer.ggml.token_type");
    const cellm_meta_value* merges = gguf.find("tokenizer.ggml.merges");
    const auto* texts = static_cast<const cellm_string_ref*>(tokens->v.arr.data);
    json vocab = json::object(), added = json::array(), merge_list = json::array();
    for (uint64_t i = 0; i < tokens->v.arr.count; ++i) {
        int32_t type = 0;
        std::memcpy(&type, static_cast<const char*>(types->v.arr.data) + i * 4, 4);
        const std::string text(texts[i].data, texts[i].len);
        if (type == 3) {
            added.push_back({{"id", i}, {"content", text}, {"special", true}});
        } else {
            vocab[text] = i;
        }
    }
    const auto* merge_texts = static_cast<const cellm_string_ref*>(merges->v.arr.data);
    for (uint64_t i = 0; i < merges->v.arr.count; ++i) merge_list.push_back(std::string(merge_texts[i].data, merge_texts[i].len));
    const std::string pre = gguf.get_string("tokenizer.ggml.pre").value_or("");
    json pre_tokenizer;
    if (pre == "smollm") {
        pre_tokenizer = {{"type", "Sequence"},
                         {"pretokenizers",
                          {{{"type", "Digits"}, {"individual_digits", true}},
                           {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}}}};
    } else {
        const std::string regex =
            "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
            "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
        pre_tokenizer = {{"type", "Sequence"},
                         {"pretokenizers",
                          {{{"type", "Split"}, {"pattern", {{"Regex", regex}}}, {"behavior", "Isolated"}, {"invert", false}},
                           {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false}, {"use_regex", false}}}}};
    }
    return {{"version", "1.0"},
            {"added_tokens", added},
            {"pre_tokenizer", pre_tokenizer},
            {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", merge_list}, {"byte_fallback", false}}}};
}

}  // namespace

std::vector<uint8_t> safetensors_bytes(const std::vector<StTensor>& tensors) {
    json header = json::object();
    header["__metadata__"] = {{"format", "pt"}};
    uint64_t at = 0;
    for (const StTensor& t : tensors) {
        header[t.name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {at, at + t.data.size()}}};
        at += t.data.size();
    }
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');  // the reference writer pads the header to 8 bytes
    const uint64_t len = text.size();
    std::vector<uint8_t> out(8 + text.size());
    std::memcpy(out.data(), &len, 8);
    std::memcpy(out.data() + 8, text.data(), text.size());
    for (const StTensor& t : tensors) out.insert(out.end(), t.data.begin(), t.data.end());
    return out;
}

void write_bytes(const fs::path& path, const std::vector<uint8_t>& bytes) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
    if (!out) throw std::runtime_error("cannot write " + path.string());
}

void write_json(const fs::path& path, const json& value) {
    std::ofstream out(path, std::ios::trunc);
    out << value.dump(2);
    if (!out) throw std::runtime_error("cannot write " + path.string());
}

fs::path write_tensor_folder(const fs::path& dir, const json& config, const std::vector<StTensor>& tensors) {
    fs::remove_all(dir);
    fs::create_directories(dir);
    write_json(dir / "config.json", config);
    write_bytes(dir / "model.safetensors", safetensors_bytes(tensors));
    return dir;
}

void write_hf_folder(const fs::path& gguf_path, const fs::path& dir, const FolderOptions& options,
                     const std::function<void(StTensor&)>& transform) {
    fs::create_directories(dir);
    const auto gguf = ModelFile::open(registry(), gguf_path);
    const std::string arch = *gguf->get_string("general.architecture");
    const auto num = [&](const std::string& key) { return *gguf->get_int(arch + "." + key); };
    const int64_t n_head = num("attention.head_count");
    const int64_t n_head_kv = num("attention.head_count_kv");

    json config = {{"model_type", arch},
                   {"hidden_size", num("embedding_length")},
                   {"num_hidden_layers", num("block_count")},
                   {"intermediate_size", num("feed_forward_length")},
                   {"num_attention_heads", n_head},
                   {"num_key_value_heads", n_head_kv},
                   {"max_position_embeddings", num("context_length")},
                   {"rms_norm_eps", static_cast<float>(*gguf->get_float(arch + ".attention.layer_norm_rms_epsilon"))},
                   {"rope_theta", static_cast<float>(*gguf->get_float(arch + ".rope.freq_base"))},
                   {"rope_scaling", nullptr},
                   {"tie_word_embeddings", gguf->tensor("output.weight") == nullptr}};
    if (const auto key_length = gguf->get_int(arch + ".attention.key_length")) config["head_dim"] = *key_length;

    std::vector<StTensor> tensors;
    const cellm_model_view& view = gguf->view();
    for (uint64_t i = 0; i < view.n_tensors; ++i) {
        const cellm_tensor_info* t = cellm_model_tensor(&view, i);
        const std::string name(t->name.data, t->name.len);
        StTensor st{hf_name(name), dtype_of(t->type), {}, {}};
        for (uint32_t d = t->n_dims; d-- > 0;) st.shape.push_back(t->ne[d]);
        const auto* bytes = static_cast<const uint8_t*>(t->data);
        const bool q = name.ends_with("attn_q.weight"), k = name.ends_with("attn_k.weight");
        if (arch == "llama" && (q || k)) {
            st.data = unpermute(bytes, t->size, st.shape[0], q ? n_head : n_head_kv);
        } else {
            st.data.assign(bytes, bytes + t->size);
        }
        if (transform) transform(st);
        tensors.push_back(std::move(st));
    }
    for (const StTensor& t : tensors) {
        if (t.name == "model.embed_tokens.weight") config["vocab_size"] = t.shape[0];
    }
    write_json(dir / "config.json", config);

    if (options.shards == 1) {
        write_bytes(dir / "model.safetensors", safetensors_bytes(tensors));
    } else {
        json weight_map = json::object();
        const auto n = static_cast<size_t>(options.shards);
        for (size_t s = 0; s < n; ++s) {
            const std::string file = "model-0000" + std::to_string(s + 1) + "-of-0000" + std::to_string(n) + ".safetensors";
            std::vector<StTensor> part;
            for (size_t i = s; i < tensors.size(); i += n) {
                part.push_back(tensors[i]);
                weight_map[tensors[i].name] = file;
            }
            write_bytes(dir / file, safetensors_bytes(part));
        }
        write_json(dir / "model.safetensors.index.json", {{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}});
    }

    if (options.tokenizer) {
        write_json(dir / "tokenizer.json", tokenizer_json(*gguf));
        const auto token = [&](const char* key) {
            const auto id = *gguf->get_int(key);
            const auto* texts = static_cast<const cellm_string_ref*>(gguf->find("tokenizer.ggml.tokens")->v.arr.data);
            return std::string(texts[id].data, texts[id].len);
        };
        write_json(dir / "tokenizer_config.json",
                   {{"bos_token", token("tokenizer.ggml.bos_token_id")},
                    {"eos_token", {{"content", token("tokenizer.ggml.eos_token_id")}, {"special", true}}},
                    {"add_bos_token", *gguf->get_bool("tokenizer.ggml.add_bos_token")},
                    {"chat_template", *gguf->get_string("tokenizer.chat_template")}});
    }
}

}  // namespace cellm::testing
