#include "hf_folder.h"

#include "hf_config.h"
#include "hf_tokenizer.h"
#include "formats/limits.h"
#include "gemma4.h"
#include "idefics3.h"
#include "mlx_quantized.h"
#include "plugin_host.hpp"
#include "pytorch_zip.h"
#include "qwen35.h"
#include "shard.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <map>
#include <optional>
#include <set>

namespace fs = std::filesystem;

namespace cellm::safetensors_plugin {
namespace {

using nlohmann::json;

// A folder's weights, in the order they are looked for (transformers prefers safetensors too): an index naming
// shards, else a single file; PyTorch's zip checkpoints (pytorch_zip.h) after safetensors, a lone .pt last.
constexpr std::pair<const char*, const char*> weight_files[] = {
    {"model.safetensors.index.json", "model.safetensors"},
    {"pytorch_model.bin.index.json", "pytorch_model.bin"},
};

// Shards whose name says torch.save wrote them; every other shard is a safetensors file.
bool is_pytorch_zip_name(const std::string& name) { return name.ends_with(".bin") || name.ends_with(".pt"); }

// The .pt files of `folder`, sorted.
std::vector<std::string> pt_files(const fs::path& folder) {
    std::vector<std::string> out;
    std::error_code ec;
    for (fs::directory_iterator it(folder, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (name.ends_with(".pt") && it->is_regular_file(ec)) out.push_back(name);
    }
    std::sort(out.begin(), out.end());
    return out;
}

// Hugging Face's per-layer names and llama.cpp's, for the archs read_config accepts.
constexpr std::pair<std::string_view, std::string_view> layer_names[] = {
    {"input_layernorm.weight", "attn_norm.weight"},
    {"self_attn.q_proj.weight", "attn_q.weight"},
    {"self_attn.q_proj.bias", "attn_q.bias"},
    {"self_attn.k_proj.weight", "attn_k.weight"},
    {"self_attn.k_proj.bias", "attn_k.bias"},
    {"self_attn.v_proj.weight", "attn_v.weight"},
    {"self_attn.v_proj.bias", "attn_v.bias"},
    {"self_attn.o_proj.weight", "attn_output.weight"},
    {"self_attn.q_norm.weight", "attn_q_norm.weight"},
    {"self_attn.k_norm.weight", "attn_k_norm.weight"},
    {"post_attention_layernorm.weight", "ffn_norm.weight"},
    {"mlp.gate_proj.weight", "ffn_gate.weight"},
    {"mlp.up_proj.weight", "ffn_up.weight"},
    {"mlp.down_proj.weight", "ffn_down.weight"},
};

// The GGUF name of a Hugging Face tensor; nullopt for one the engine does not use (rotary_emb.inv_freq, a
// buffer older checkpoints saved).
std::optional<std::string> gguf_name(const std::string& hf, const std::string& file) {
    if (hf == "model.embed_tokens.weight") return "token_embd.weight";
    if (hf == "model.norm.weight") return "output_norm.weight";
    if (hf == "lm_head.weight") return "output.weight";
    if (hf.ends_with(".rotary_emb.inv_freq")) return std::nullopt;
    constexpr std::string_view layers = "model.layers.";
    if (hf.starts_with(layers)) {
        const size_t dot = hf.find('.', layers.size());
        const std::string index = hf.substr(layers.size(), dot == std::string::npos ? 0 : dot - layers.size());
        const bool numeric = !index.empty() && index.size() <= 6 &&
                             std::all_of(index.begin(), index.end(), [](char c) { return c >= '0' && c <= '9'; });
        if (numeric) {
            const std::string_view rest = std::string_view(hf).substr(dot + 1);
            for (const auto& [from, to] : layer_names) {
                if (rest == from) return "blk." + std::to_string(std::stoi(index)) + "." + std::string(to);
            }
        }
    }
    throw plugin::Failure(CELLM_ERR_UNSUPPORTED, file + ": tensor '" + hf + "' has no counterpart in cellm's archs");
}

// Llama's GGUF files store Q and K with each head's rows interleaved (the first and second halves of a head
// alternate) so that RoPE rotates adjacent pairs; Hugging Face keeps the halves apart. This is
// convert_hf_to_gguf.py's permute: reshape(n_head, 2, rows/n_head/2, cols).swapaxes(1, 2), on whole rows,
// so the bytes are exactly those of a converted GGUF file. With `widen`, each row is widened to F32 on the way.
void permute_rows(const ShardTensor& t, uint32_t n_head, bool widen, uint8_t* out, const std::string& file) {
    const auto rows = static_cast<uint64_t>(t.shape[0]);
    if (rows % (2 * uint64_t{n_head}) != 0) {
        throw plugin::Failure(CELLM_ERR_CORRUPT, file + ": tensor '" + t.name + "' has " + std::to_string(rows) +
                                                     " rows, not a multiple of 2 x " + std::to_string(n_head) + " heads");
    }
    const uint64_t row_bytes = t.size / rows;
    const uint64_t row_elements = row_bytes / static_cast<uint64_t>(cellm_dtype_type_size(t.type));
    const uint64_t out_row_bytes = widen ? row_elements * sizeof(float) : row_bytes;
    const uint64_t half = rows / n_head / 2;
    for (uint64_t h = 0; h < n_head; ++h) {
        for (uint64_t i = 0; i < half; ++i) {
            for (uint64_t j = 0; j < 2; ++j) {
                const uint64_t from = h * 2 * half + j * half + i;
                const uint64_t to = h * 2 * half + i * 2 + j;
                if (widen) {
                    widen_to_f32(t.type, t.data + from * row_bytes, row_elements, out + to * out_row_bytes);
                } else {
                    std::memcpy(out + to * out_row_bytes, t.data + from * row_bytes, row_bytes);
                }
            }
        }
    }
}

// Whether the tensor `t`, named `gguf` in the view, reaches the archs widened to F32 (exactly). Every BF16 tensor
// is: BF16 weights would make the backends round each matrix product's activations to bf16's 8 significant bits
// (MATMUL's definition, after llama.cpp), far from what the checkpoint computes in transformers. F16 matrices stay
// F16, half the memory, computed as llama.cpp computes an F16 GGUF file; only the F16 tensors the archs read as F32
// alone are widened, the set convert_hf_to_gguf.py always stores in F32: one-dimensional tensors (norm gains,
// biases, Qwen3.5's A_log and dt_bias), the DeltaNet's convolution and the vision position embeddings.
bool widened(const ShardTensor& t, const std::string& gguf) {
    if (t.type == CELLM_TYPE_BF16) return true;
    return t.type == CELLM_TYPE_F16 && (t.shape.size() == 1 || gguf.ends_with(".ssm_conv1d.weight") ||
                                         gguf == "v.position_embd.weight");
}

// Offsets in the folder's mapping of the tensors rewritten so far: begin -> (end, Hugging Face name).
using ByteRanges = std::map<uint64_t, std::pair<uint64_t, std::string>>;

// Records the bytes of `t`, a tensor to be rewritten, refusing any it shares with one rewritten before. Each
// rewritten tensor gets a copy of its own, so aliased sources would multiply the memory and overrun the area
// reserved for the copies. (Safetensors' reference reader refuses every overlap; cellm still lets the tensors it
// uses in place share bytes.)
void claim_bytes(ByteRanges& claimed, uint64_t begin, const ShardTensor& t, const std::string& file) {
    const uint64_t end = begin + t.size;
    const auto next = claimed.lower_bound(begin);
    auto clash = claimed.end();
    if (next != claimed.end() && next->first < end) clash = next;
    if (next != claimed.begin() && std::prev(next)->second.first > begin) clash = std::prev(next);
    if (clash != claimed.end()) {
        throw plugin::Failure(CELLM_ERR_CORRUPT, file + ": tensor '" + t.name + "' shares bytes with '" +
                                                     clash->second.second +
                                                     "' (their data_offsets overlap); tensors rewritten or widened on "
                                                     "load need data of their own");
    }
    claimed.emplace(begin, std::make_pair(end, t.name));
}

// "512 bytes", "216.0 KiB", "1.5 GiB": for the log.
std::string byte_size(uint64_t bytes) {
    constexpr const char* units[] = {"KiB", "MiB", "GiB", "TiB"};
    if (bytes < 1024) return std::to_string(bytes) + " bytes";
    double value = static_cast<double>(bytes) / 1024;
    size_t unit = 0;
    for (; value >= 1024 && unit + 1 < std::size(units); ++unit) value /= 1024;
    char text[32];
    std::snprintf(text, sizeof text, "%.1f %s", value, units[unit]);
    return text;
}

// A shard name from the index must stay inside the folder.
void check_shard_name(const std::string& name, const std::string& index) {
    if (name.empty() || name.find('/') != std::string::npos || name == "." || name == "..") {
        throw plugin::Failure(CELLM_ERR_CORRUPT, index + ": shard name '" + name + "' is not a file in the folder");
    }
}

}  // namespace

bool is_model_folder(const fs::path& folder) {
    std::error_code ec;
    if (!fs::is_regular_file(folder / "config.json", ec)) return false;
    for (const auto& [index, single] : weight_files) {
        if (fs::exists(folder / index, ec) || fs::exists(folder / single, ec)) return true;
    }
    return !pt_files(folder).empty();
}

std::vector<std::string> HfFolder::shard_names(const fs::path& folder, std::vector<std::pair<std::string, std::string>>& index) {
    std::error_code ec;
    fs::path index_path;
    for (const auto& [index_name, single] : weight_files) {
        if (fs::exists(folder / index_name, ec)) {
            index_path = folder / index_name;
            break;
        }
        if (fs::exists(folder / single, ec)) return {single};
    }
    if (index_path.empty()) {
        const std::vector<std::string> pt = pt_files(folder);
        if (pt.size() == 1) return pt;
        if (pt.empty()) {
            throw plugin::Failure(CELLM_ERR_NOT_FOUND, folder.string() +
                                                           ": has no weights (model.safetensors, pytorch_model.bin, "
                                                           "an index of their shards, or one .pt file)");
        }
        throw plugin::Failure(CELLM_ERR_INVALID_ARGUMENT, folder.string() + ": has " + std::to_string(pt.size()) +
                                                              " .pt files (" + pt[0] + ", " + pt[1] +
                                                              (pt.size() > 2 ? ", ..." : "") + "); keep the one to load");
    }
    index_file_ = index_path.filename().string();
    const json root = read_json_file(index_path);
    const auto map = root.is_object() ? root.find("weight_map") : root.end();
    if (map == root.end() || !map->is_object()) {
        throw plugin::Failure(CELLM_ERR_CORRUPT, index_path.string() + ": weight_map is missing or not an object");
    }
    if (map->size() > file_limits::max_tensors) {
        throw plugin::Failure(CELLM_ERR_CORRUPT, index_path.string() + ": weight_map " +
                                                     file_limits::exceeds("tensor count", map->size(), file_limits::max_tensors));
    }
    std::set<std::string> shards;
    for (const auto& [tensor, shard] : map->items()) {
        if (!shard.is_string()) throw plugin::Failure(CELLM_ERR_CORRUPT, index_path.string() + ": weight_map['" + tensor + "'] is not a string");
        check_shard_name(shard.get<std::string>(), index_path.string());
        shards.insert(shard.get<std::string>());
        index.emplace_back(tensor, shard.get<std::string>());
    }
    for (const std::string& shard : shards) {
        if (!fs::exists(folder / shard, ec)) {
            throw plugin::Failure(CELLM_ERR_NOT_FOUND, (folder / shard).string() + ": missing (a shard " + index_file_ + " names)");
        }
    }
    return {shards.begin(), shards.end()};
}

HfFolder::HfFolder(const fs::path& folder) {
    std::error_code ec;
    if (!fs::is_directory(folder, ec)) {
        throw plugin::Failure(CELLM_ERR_INVALID_ARGUMENT, folder.string() + ": not a folder (give the Hugging Face model folder)");
    }
    const fs::path config_path = folder / "config.json";
    const json config_json = read_json_file(config_path);
    const HfConfig config = read_config(config_json, config_path.string(), meta_);
    const std::optional<MlxQuantization> quant = read_mlx_quantization(config_json, config_path.string());
    read_tokenizer(folder, config, meta_);
    if (config.arch == "idefics3") read_idefics3_processor(folder, meta_);

    std::vector<std::pair<std::string, std::string>> index;
    const std::vector<std::string> shards = shard_names(folder, index);
    std::vector<std::string> paths;
    uint64_t total = 0;
    uint64_t pytorch_total = 0;  // the part of it in PyTorch zip shards
    for (const std::string& shard : shards) {
        paths.push_back((folder / shard).string());
        const uint64_t size = fs::file_size(paths.back(), ec);
        if (ec) continue;  // FolderMapping names the file and the error
        // Each size is below 2^63 and the total stays within the limit, so the sum cannot wrap.
        if (size > file_limits::max_model_bytes - total) {
            throw plugin::Failure(CELLM_ERR_UNSUPPORTED,
                                  paths.back() + ": " +
                                      file_limits::exceeds("total size of the shards", total + size,
                                                           file_limits::max_model_bytes, " bytes"));
        }
        total += size;
        if (is_pytorch_zip_name(shard)) pytorch_total += size;
    }
    // Rewritten tensors get copies in the mapping's owned area: Llama's Q/K, Qwen3.5's norm gains and A_log
    // (qwen35.h), and every tensor widened to F32 (widened()). claim_bytes keeps their sources disjoint, and the
    // sources lie in the shards' data areas. A copy takes at most twice its source (2-byte elements widened to 4)
    // plus 63 bytes of alignment, which twice its header entry outweighs (over 40 bytes even for a one-letter
    // name), so all copies fit in twice the shards' size. The dtypes are only known once the headers are read,
    // so every folder reserves that bound; it is address space only, committed as copies are made (FolderMapping).
    // MLX's 4-bit weights become Q4A blocks of exactly their packed size with scales and biases; its 8-bit ones
    // are widened to F32, at most four times the bytes of their codes.
    const bool permute = config.arch == "llama" || config.arch == "idefics3";
    const bool qwen35 = config.arch == "qwen35";
    const uint64_t rope_freqs_bytes = config.rope_freqs.size() * sizeof(float);
    // A pickle can describe a tensor in fewer bytes than a safetensors header entry (a storage and tuples reused
    // through the memo), but never in fewer than the 16 its distinct name takes (the shortest one cellm maps,
    // lm_head.weight, and its opcode), so PyTorch shards reserve four times their size.
    mapping_ = std::make_unique<FolderMapping>(
        paths, 2 * total + 2 * pytorch_total + (quant && quant->bits == 8 ? 4 * total : 0) +
                   (rope_freqs_bytes > 0 ? rope_freqs_bytes + 64 : 0));

    std::map<std::string, std::string, std::less<>> found;  // tensor -> shard holding it
    uint64_t tensor_bytes = 0;  // tensors may share bytes, so this can exceed the shards' size
    ByteRanges rewritten;
    struct Widened {
        uint64_t tensors = 0, stored = 0, served = 0;
    } widened_bf16, widened_f16;
    // Every shard's tensors first: an MLX weight's scales and biases may lie in another shard.
    std::vector<std::vector<ShardTensor>> shard_tensors(shards.size());
    std::map<std::string, const ShardTensor*, std::less<>> by_name;
    for (size_t s = 0; s < shards.size(); ++s) {
        const FolderMapping::File& f = mapping_->file(s);
        shard_tensors[s] = is_pytorch_zip_name(shards[s]) ? read_pytorch_zip(paths[s], f.data, f.size)
                                                          : read_shard(paths[s], f.data, f.size);
        for (const ShardTensor& t : shard_tensors[s]) by_name.emplace(t.name, &t);
    }
    const auto companion = [&](const std::string& weight, std::string_view suffix) -> const ShardTensor* {
        const auto it = by_name.find(weight.substr(0, weight.size() - std::string_view(".weight").size()) +
                                     std::string(suffix));
        return it == by_name.end() ? nullptr : it->second;
    };
    struct Packed {
        uint64_t tensors = 0, stored = 0, served = 0, inexact = 0;
    } packed_total;
    for (size_t s = 0; s < shards.size(); ++s) {
        for (const ShardTensor& t : shard_tensors[s]) {
            if (const auto [it, fresh] = found.emplace(t.name, shards[s]); !fresh) {
                throw plugin::Failure(CELLM_ERR_CORRUPT, folder.string() + ": duplicate tensor '" + t.name + "' in " +
                                                             it->second + " and " + shards[s]);
            }
            if (found.size() > file_limits::max_tensors) {
                throw plugin::Failure(CELLM_ERR_CORRUPT, folder.string() + ": " +
                                                             file_limits::exceeds("tensor count", found.size(),
                                                                                  file_limits::max_tensors));
            }
            // t.size lies within its shard, below the limit, so the sum cannot wrap.
            if (t.size > file_limits::max_model_bytes - tensor_bytes) {
                throw plugin::Failure(CELLM_ERR_UNSUPPORTED,
                                      paths[s] + ": with tensor '" + t.name + "', " +
                                          file_limits::exceeds("total tensor data size", tensor_bytes + t.size,
                                                               file_limits::max_model_bytes, " bytes"));
            }
            tensor_bytes += t.size;
            if (quant && (t.name.ends_with(".scales") || t.name.ends_with(".biases"))) {
                const std::string weight = t.name.substr(0, t.name.size() - 7) + ".weight";
                const auto it = by_name.find(weight);
                if (it != by_name.end() && it->second->type == CELLM_TYPE_I32) continue;  // read with the weight
            }
            std::optional<MlxWeight> mlx;
            if (t.type == CELLM_TYPE_I32) {
                if (!quant || !t.name.ends_with(".weight")) {
                    throw plugin::Failure(CELLM_ERR_UNSUPPORTED,
                                          paths[s] + ": tensor '" + t.name +
                                              "' has dtype U32, which only the packed weights of an MLX-quantized "
                                              "folder (config.json's \"quantization\") may have");
                }
                mlx = check_mlx_weight(*quant, t, companion(t.name, ".scales"), companion(t.name, ".biases"), paths[s]);
            }
            const std::optional<std::string> name =
                config.arch == "gemma4"   ? gemma4_tensor_name(t.name, paths[s])
                : config.arch == "qwen35"   ? qwen35_tensor_name(t.name, paths[s])
                : config.arch == "idefics3" ? idefics3_tensor_name(t.name, paths[s], gguf_name)
                                            : gguf_name(t.name, paths[s]);
            if (!name) continue;
            cellm_tensor_info info{};
            info.struct_size = sizeof(info);
            const std::string& kept = names_.emplace_back(*name);
            info.name = {kept.data(), kept.size()};
            const bool widen = !mlx && widened(t, *name);
            const uint64_t elements = t.size / static_cast<uint64_t>(cellm_dtype_type_size(t.type));
            info.type = mlx ? mlx_served_type(*quant) : widen ? CELLM_TYPE_F32 : t.type;
            info.n_dims = static_cast<uint32_t>(t.shape.size());
            for (uint32_t d = 0; d < CELLM_MAX_DIMS; ++d) {
                info.ne[d] = d < info.n_dims ? t.shape[info.n_dims - 1 - d] : 1;  // GGUF lists the innermost first
            }
            if (mlx) info.ne[0] = static_cast<int64_t>(mlx->columns);
            info.size = mlx ? mlx_served_bytes(*quant, *mlx) : widen ? elements * sizeof(float) : t.size;
            info.data = t.data;
            const bool is_q = name->ends_with("attn_q.weight") || name->ends_with("attn_q.bias");
            const bool is_k = name->ends_with("attn_k.weight") || name->ends_with("attn_k.bias");
            // Only the (Llama) text model's Q/K rotate; a vision encoder's (v.*) do not.
            const bool permuted = permute && (is_q || is_k) && !name->starts_with("v.");
            const bool rewritten_qwen35 = qwen35 && qwen35_rewrites(*name);
            if (mlx) {
                for (const ShardTensor* part : {mlx->weight, mlx->scales, mlx->biases}) {
                    claim_bytes(rewritten, static_cast<uint64_t>(part->data - mapping_->base()), *part, paths[s]);
                }
                uint8_t* copy = mapping_->allocate(info.size);
                if (permuted) {
                    std::vector<uint8_t> rows(info.size);
                    packed_total.inexact += write_mlx_weight(*quant, *mlx, rows.data());
                    const ShardTensor served{t.name, info.type, {info.ne[1], info.ne[0]}, rows.data(), info.size};
                    permute_rows(served, is_q ? config.n_head : config.n_head_kv, false, copy, paths[s]);
                } else {
                    packed_total.inexact += write_mlx_weight(*quant, *mlx, copy);
                }
                info.data = copy;
                ++packed_total.tensors;
                packed_total.served += info.size;
                for (const ShardTensor* part : {mlx->weight, mlx->scales, mlx->biases}) {
                    packed_total.stored += part->size;
                    mapping_->release(part->data, part->size);  // served from the copy from now on
                }
            } else if (permuted || rewritten_qwen35 || widen) {
                claim_bytes(rewritten, static_cast<uint64_t>(t.data - mapping_->base()), t, paths[s]);
                uint8_t* copy = mapping_->allocate(info.size);
                if (permuted) {
                    permute_rows(t, is_q ? config.n_head : config.n_head_kv, widen, copy, paths[s]);
                } else if (rewritten_qwen35 && widen) {
                    // qwen35_rewrite reads F32: it gets the widened values (small vectors: gains, A_log).
                    std::vector<uint8_t> values(info.size);
                    widen_to_f32(t.type, t.data, elements, values.data());
                    qwen35_rewrite(*name, {t.name, CELLM_TYPE_F32, t.shape, values.data(), info.size}, copy, paths[s]);
                } else if (rewritten_qwen35) {
                    qwen35_rewrite(*name, t, copy, paths[s]);
                } else {
                    widen_to_f32(t.type, t.data, elements, copy);
                }
                info.data = copy;
                if (widen) {
                    Widened& w = t.type == CELLM_TYPE_BF16 ? widened_bf16 : widened_f16;
                    ++w.tensors;
                    w.stored += t.size;
                    w.served += info.size;
                    mapping_->release(t.data, t.size);  // served from the copy from now on
                }
            }
            if (qwen35 && name->ends_with("ssm_conv1d.weight") && info.n_dims == 3 && info.ne[1] == 1) {
                // PyTorch's [channels, 1, kernel] is GGUF's [kernel, channels]: the same bytes, one dim fewer.
                info.n_dims = 2;
                info.ne[1] = info.ne[2];
                info.ne[2] = 1;
            }
            if (*name == "v.patch_embd.weight" && info.n_dims == 4) {
                // The convolution's [out, channels, p, p] is a product's [channels * p * p, out]: the same bytes.
                info.n_dims = 2;
                info.ne[0] *= info.ne[1] * info.ne[2];
                info.ne[1] = info.ne[3];
                info.ne[2] = info.ne[3] = 1;
            }
            tensors_.push_back(info);
        }
    }
    for (const auto& [tensor, shard] : index) {
        const auto it = found.find(tensor);
        if (it == found.end() || it->second != shard) {
            throw plugin::Failure(CELLM_ERR_CORRUPT, (folder / index_file_).string() + ": tensor '" + tensor + "' is not in " + shard);
        }
    }
    if (rope_freqs_bytes > 0) {
        // Gemma 4's proportional RoPE as llama.cpp's converter writes it: one divisor per rotary pair.
        uint8_t* data = mapping_->allocate(rope_freqs_bytes);
        std::memcpy(data, config.rope_freqs.data(), rope_freqs_bytes);
        cellm_tensor_info info{};
        info.struct_size = sizeof(info);
        const std::string& kept = names_.emplace_back("rope_freqs.weight");
        info.name = {kept.data(), kept.size()};
        info.type = CELLM_TYPE_F32;
        info.n_dims = 1;
        info.ne[0] = static_cast<int64_t>(config.rope_freqs.size());
        for (uint32_t d = 1; d < CELLM_MAX_DIMS; ++d) info.ne[d] = 1;
        info.size = rope_freqs_bytes;
        info.data = data;
        tensors_.push_back(info);
    }
    mapping_->seal();
    if (permute) meta_.add_string("cellm.rope.layout", "adjacent");
    if (packed_total.tensors > 0) {
        plugin::log(CELLM_LOG_INFO, "safetensors",
                    folder.string() + ": " + std::to_string(packed_total.tensors) + " MLX " +
                        std::to_string(quant->bits) + (packed_total.tensors == 1 ? "-bit weight" : "-bit weights") +
                        " (groups of " + std::to_string(quant->group_size) +
                        ") served as " + (quant->bits == 8 ? "F32" : "Q4A") + ": " + byte_size(packed_total.stored) +
                        " in the shards take " + byte_size(packed_total.served) + " of memory");
        if (packed_total.inexact > 0) {
            plugin::log(CELLM_LOG_WARN, "safetensors",
                        folder.string() + ": " + std::to_string(packed_total.inexact) +
                            " MLX scales or biases are not f16 values and were rounded to the nearest");
        }
    }
    if (widened_bf16.tensors + widened_f16.tensors > 0) {
        std::string counts;
        for (const auto& [w, type] : {std::pair{widened_bf16, "BF16"}, std::pair{widened_f16, "F16"}}) {
            if (w.tensors > 0) counts += (counts.empty() ? "" : " and ") + std::to_string(w.tensors) + " " + type;
        }
        const uint64_t stored = widened_bf16.stored + widened_f16.stored;
        const uint64_t served = widened_bf16.served + widened_f16.served;
        plugin::log(CELLM_LOG_INFO, "safetensors",
                    folder.string() + ": widened " + counts +
                        (widened_bf16.tensors + widened_f16.tensors == 1 ? " tensor" : " tensors") +
                        " to F32 on load: " + byte_size(stored) +
                        " in the shards take " + byte_size(served) + " of memory (" + std::to_string(stored) + " -> " +
                        std::to_string(served) + " bytes)");
    }

    view_.struct_size = sizeof(view_);
    view_.n_meta = meta_.entries().size();
    view_.meta = meta_.entries().data();
    view_.n_tensors = tensors_.size();
    view_.tensors = tensors_.data();
    view_.tensor_stride = sizeof(cellm_tensor_info);
    view_.mapping = mapping_->base();
    view_.mapping_size = mapping_->size();
}

}  // namespace cellm::safetensors_plugin
