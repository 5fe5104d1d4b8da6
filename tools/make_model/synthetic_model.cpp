#include "synthetic_model.h"

#include "synthetic_tokenizer.h"

#include <blocks.h>

#include <cmath>
#include <stdexcept>
#include <utility>
#include <vector>

namespace cellm::synthetic {
namespace {

constexpr Preset preset_table[] = {
    {"tiny", "llama", 512, 256, 512, 2, 4, 2, 64, 256, 10000.0f, 1e-5f, false},
    {"smollm2-135m", "llama", 49152, 576, 1536, 30, 9, 3, 64, 8192, 100000.0f, 1e-5f, true},
    {"qwen2-tiny", "qwen2", 512, 256, 512, 2, 4, 2, 64, 256, 1000000.0f, 1e-6f, true},
    {"qwen3-tiny", "qwen3", 512, 256, 512, 2, 4, 2, 128, 256, 1000000.0f, 1e-6f, false},
    {"gemma3-tiny", "gemma3", 512, 256, 512, 6, 4, 1, 128, 256, 1000000.0f, 1e-6f, true, 8},
    {"gemma3-tiny-softcap", "gemma3", 512, 256, 512, 6, 4, 1, 128, 256, 1000000.0f, 1e-6f, true, 8, 1.5f, 3.0f},
    // google/gemma-3-270m as llama.cpp's converter writes it (the local layers' RoPE base of 10000 and the
    // every-sixth-layer-global pattern are not in the file: the gemma3 plugin knows them).
    {"gemma3-270m", "gemma3", 262144, 640, 2048, 18, 4, 1, 256, 32768, 1000000.0f, 1e-6f, true, 512},
};

struct WeightType {
    std::string_view name;
    cellm_dtype type;
};
constexpr WeightType weight_types[] = {
    {"f32", CELLM_TYPE_F32},   {"f16", CELLM_TYPE_F16},   {"bf16", CELLM_TYPE_BF16}, {"q8_0", CELLM_TYPE_Q8_0},
    {"q4_0", CELLM_TYPE_Q4_0}, {"q4_1", CELLM_TYPE_Q4_1}, {"q5_0", CELLM_TYPE_Q5_0}, {"q5_1", CELLM_TYPE_Q5_1},
    {"q4_k", CELLM_TYPE_Q4_K}, {"q5_k", CELLM_TYPE_Q5_K}, {"q6_k", CELLM_TYPE_Q6_K},
};

constexpr std::string_view q4_k_m_name = "q4_k_m";

// How a tensor's values are drawn. Standard deviations keep activations O(1) through the layers:
// 1/sqrt(fan_in) for projections, 1 for embeddings, 1 plus a little noise for norm gains. Tied embeddings
// also serve as the classifier, where sd 1 would give logits of sd sqrt(n_embd) (one-hot softmax); 4/sqrt(n_embd)
// keeps logits around sd 4: clear top tokens that still differ between positions. Biases get sd 0.2: enough
// to change every logit, small next to the projections' outputs. Qwen3's per-head Q/K norm gains spread wider
// (sd 0.5 around 1) so that they visibly shape the attention scores.
enum class Init { norm_gain, head_norm_gain, projection, embedding, tied_embedding, bias };

struct TensorPlan {
    std::string name;
    std::vector<int64_t> ne;  // ne[0] innermost (the input dimension of a projection)
    Init init;
};

std::vector<TensorPlan> plan_tensors(const Preset& p) {
    const int64_t embd = p.n_embd, head_dim = p.head_dim;
    const int64_t q_dim = head_dim * p.n_head, kv_dim = head_dim * p.n_head_kv;
    const bool gemma3 = p.arch == "gemma3";
    const bool qkv_bias = p.arch == "qwen2", qk_norm = p.arch == "qwen3" || gemma3;
    const Init embedding = p.tied_embeddings ? Init::tied_embedding : Init::embedding;
    std::vector<TensorPlan> plan{{"token_embd.weight", {embd, p.n_vocab}, embedding}};
    for (uint32_t l = 0; l < p.n_layer; ++l) {
        const std::string blk = "blk." + std::to_string(l) + ".";
        plan.push_back({blk + "attn_norm.weight", {embd}, Init::norm_gain});
        plan.push_back({blk + "attn_q.weight", {embd, q_dim}, Init::projection});
        plan.push_back({blk + "attn_k.weight", {embd, kv_dim}, Init::projection});
        plan.push_back({blk + "attn_v.weight", {embd, kv_dim}, Init::projection});
        if (qkv_bias) {
            plan.push_back({blk + "attn_q.bias", {q_dim}, Init::bias});
            plan.push_back({blk + "attn_k.bias", {kv_dim}, Init::bias});
            plan.push_back({blk + "attn_v.bias", {kv_dim}, Init::bias});
        }
        if (qk_norm) {
            plan.push_back({blk + "attn_q_norm.weight", {head_dim}, Init::head_norm_gain});
            plan.push_back({blk + "attn_k_norm.weight", {head_dim}, Init::head_norm_gain});
        }
        plan.push_back({blk + "attn_output.weight", {q_dim, embd}, Init::projection});
        if (gemma3) plan.push_back({blk + "post_attention_norm.weight", {embd}, Init::norm_gain});
        plan.push_back({blk + "ffn_norm.weight", {embd}, Init::norm_gain});
        plan.push_back({blk + "ffn_gate.weight", {embd, p.n_ff}, Init::projection});
        plan.push_back({blk + "ffn_up.weight", {embd, p.n_ff}, Init::projection});
        plan.push_back({blk + "ffn_down.weight", {p.n_ff, embd}, Init::projection});
        if (gemma3) plan.push_back({blk + "post_ffw_norm.weight", {embd}, Init::norm_gain});
    }
    plan.push_back({"output_norm.weight", {embd}, Init::norm_gain});
    if (!p.tied_embeddings) plan.push_back({"output.weight", {embd, p.n_vocab}, Init::projection});
    return plan;
}

// llama.cpp's use_more_bits: the layers whose attn_v and ffn_down Q4_K_M keeps in Q6_K.
bool use_more_bits(int64_t layer, int64_t n_layer) {
    return layer < n_layer / 8 || layer >= 7 * n_layer / 8 || (layer - n_layer / 8) % 3 == 2;
}

bool ends_with(std::string_view s, std::string_view suffix) {
    return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
}

// The layer of a "blk.N." tensor, -1 for the others.
int64_t layer_of(std::string_view name) {
    if (name.substr(0, 4) != "blk.") return -1;
    int64_t layer = 0;
    for (size_t i = 4; i < name.size() && name[i] != '.'; ++i) layer = layer * 10 + (name[i] - '0');
    return layer;
}

// The type llama.cpp's quantizer gives a tensor for LLAMA_FTYPE_MOSTLY_Q4_K_M (llama_tensor_get_type, for the
// tensors these archs have), with its fallbacks for rows that K-quants cannot hold.
cellm_dtype q4_k_m_type(const Preset& p, const TensorPlan& t) {
    if (t.ne.size() != 2) return CELLM_TYPE_F32;
    const bool classifier = t.name == "output.weight" || (p.tied_embeddings && t.name == "token_embd.weight");
    cellm_dtype type = CELLM_TYPE_Q4_K;
    if (classifier) {
        type = CELLM_TYPE_Q6_K;
    } else if ((ends_with(t.name, ".attn_v.weight") || ends_with(t.name, ".ffn_down.weight")) &&
               use_more_bits(layer_of(t.name), p.n_layer)) {
        type = CELLM_TYPE_Q6_K;
    }
    if (t.ne[0] % cellm_dtype_block_size(type) != 0) type = type == CELLM_TYPE_Q6_K ? CELLM_TYPE_Q8_0 : CELLM_TYPE_Q5_0;
    return type;
}

cellm_dtype type_of(const Preset& p, const TensorPlan& t, const ModelOptions& options) {
    if (options.mix == TypeMix::q4_k_m) return q4_k_m_type(p, t);
    return t.ne.size() == 2 ? options.weight_type : CELLM_TYPE_F32;
}

std::string type_option_name(const ModelOptions& options) {
    if (options.mix == TypeMix::q4_k_m) return std::string(q4_k_m_name);
    return std::string(weight_type_name(options.weight_type));
}

// xoshiro256+ seeded through splitmix64: fast, and the same stream on every platform and compiler.
class Random {
public:
    explicit Random(uint64_t seed) {
        for (uint64_t& word : s_) {
            seed += 0x9E3779B97F4A7C15ull;
            uint64_t z = seed;
            z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
            z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
            word = z ^ (z >> 31);
        }
    }
    // Uniform in [-1, 1).
    float symmetric() {
        const uint64_t result = s_[0] + s_[3];
        const uint64_t t = s_[1] << 17;
        s_[2] ^= s_[0];
        s_[3] ^= s_[1];
        s_[1] ^= s_[2];
        s_[0] ^= s_[3];
        s_[2] ^= t;
        s_[3] = (s_[3] << 45) | (s_[3] >> 19);
        return static_cast<float>(result >> 40) * 0x1.0p-23f - 1.0f;
    }

private:
    uint64_t s_[4];
};

// Uniform draws with the wanted standard deviation (uniform on [-a, a] has sd a/sqrt(3)): cheaper than
// normal draws and free of libm differences, which keeps the files byte-identical across machines.
std::vector<uint8_t> generate(const TensorPlan& t, cellm_dtype type, Random& random) {
    const int64_t row = t.ne[0];
    const int64_t rows = t.ne.size() > 1 ? t.ne[1] : 1;
    const float inv_sqrt_row = 1.0f / std::sqrt(static_cast<float>(row));
    const float sd = t.init == Init::projection       ? inv_sqrt_row
                     : t.init == Init::tied_embedding ? 4.0f * inv_sqrt_row
                     : t.init == Init::embedding      ? 1.0f
                     : t.init == Init::bias           ? 0.2f
                     : t.init == Init::head_norm_gain ? 0.5f
                                                      : 0.05f;
    const float half_width = sd * std::sqrt(3.0f);
    const float center = t.init == Init::norm_gain || t.init == Init::head_norm_gain ? 1.0f : 0.0f;
    const uint64_t row_size = blocks::row_bytes(type, row);
    std::vector<uint8_t> bytes(row_size * static_cast<uint64_t>(rows));
    std::vector<float> values(static_cast<size_t>(row));
    for (int64_t r = 0; r < rows; ++r) {
        for (float& v : values) v = center + half_width * random.symmetric();
        blocks::quantize_row(type, values.data(), bytes.data() + row_size * static_cast<uint64_t>(r), row);
    }
    return bytes;
}

// The keys llama.cpp's converter writes for each arch: llama files carry vocab_size and rope.dimension_count,
// Qwen and Gemma files leave both to their defaults (token_embd's rows, the head size), qwen3 and gemma3 files
// state the head size because it is not n_embd / n_head, and gemma3 files the sliding window.
void add_metadata(gguf::Writer& w, const Preset& p) {
    const std::string arch(p.arch);
    w.add("general.architecture", arch);
    w.add("general.name", "synthetic-" + std::string(p.name));
    w.set_alignment(32);
    if (arch == "llama") w.add(arch + ".vocab_size", p.n_vocab);
    w.add(arch + ".context_length", p.n_ctx);
    w.add(arch + ".embedding_length", p.n_embd);
    w.add(arch + ".block_count", p.n_layer);
    w.add(arch + ".feed_forward_length", p.n_ff);
    w.add(arch + ".attention.head_count", p.n_head);
    w.add(arch + ".attention.head_count_kv", p.n_head_kv);
    w.add(arch + ".rope.freq_base", p.rope_theta);
    w.add(arch + ".attention.layer_norm_rms_epsilon", p.rms_eps);
    if (arch == "llama") w.add(arch + ".rope.dimension_count", p.head_dim);
    if (arch == "qwen3" || arch == "gemma3") {
        w.add(arch + ".attention.key_length", p.head_dim);
        w.add(arch + ".attention.value_length", p.head_dim);
    }
    if (arch == "gemma3") w.add(arch + ".attention.sliding_window", p.sliding_window);
    if (p.attn_softcap != 0.0f) w.add(arch + ".attn_logit_softcapping", p.attn_softcap);
    if (p.final_softcap != 0.0f) w.add(arch + ".final_logit_softcapping", p.final_softcap);

    const Vocabulary vocab = build_vocabulary(p.n_vocab);
    w.add("tokenizer.ggml.model", "gpt2");
    w.add("tokenizer.ggml.pre", arch == "llama" ? "smollm" : "qwen2");
    w.add_array("tokenizer.ggml.tokens", vocab.tokens);
    w.add_array("tokenizer.ggml.token_type", vocab.types);
    w.add_array("tokenizer.ggml.merges", vocab.merges);
    w.add("tokenizer.ggml.bos_token_id", vocab.bos_id);
    w.add("tokenizer.ggml.eos_token_id", vocab.eos_id);
    w.add("tokenizer.ggml.add_bos_token", false);
    w.add("tokenizer.chat_template", chatml_template);
}

}  // namespace

std::span<const Preset> presets() { return preset_table; }

const Preset& find_preset(std::string_view name) {
    std::string known;
    for (const Preset& p : preset_table) {
        if (p.name == name) return p;
        known += (known.empty() ? "" : ", ") + std::string(p.name);
    }
    throw std::invalid_argument("unknown preset '" + std::string(name) + "' (known: " + known + ")");
}

cellm_dtype parse_weight_type(std::string_view name) {
    std::string known;
    for (const WeightType& t : weight_types) {
        if (t.name == name) return t.type;
        known += (known.empty() ? "" : ", ") + std::string(t.name);
    }
    throw std::invalid_argument("unknown weight type '" + std::string(name) + "' (known: " + known + ")");
}

std::string_view weight_type_name(cellm_dtype type) {
    for (const WeightType& t : weight_types) {
        if (t.type == type) return t.name;
    }
    return "?";
}

void set_type(ModelOptions& options, std::string_view name) {
    if (name == q4_k_m_name) {
        options.mix = TypeMix::q4_k_m;
        return;
    }
    try {
        options.weight_type = parse_weight_type(name);
        options.mix = TypeMix::none;
    } catch (const std::invalid_argument& e) {
        throw std::invalid_argument(std::string(e.what()) + "; or the mix " + std::string(q4_k_m_name));
    }
}

namespace {

// The plan with each tensor's type, checked against the row lengths.
std::vector<std::pair<TensorPlan, cellm_dtype>> typed_plan(const Preset& preset, const ModelOptions& options) {
    if (options.mix == TypeMix::none && weight_type_name(options.weight_type) == "?") {
        throw std::invalid_argument("weight type " + std::to_string(options.weight_type) +
                                    " is not one the generator writes");
    }
    std::vector<std::pair<TensorPlan, cellm_dtype>> typed;
    for (TensorPlan& t : plan_tensors(preset)) {
        const cellm_dtype type = type_of(preset, t, options);
        const int64_t block = cellm_dtype_block_size(type);
        if (t.ne.size() == 2 && t.ne[0] % block != 0) {
            throw std::invalid_argument("preset " + std::string(preset.name) + " cannot use --type " +
                                        type_option_name(options) + ": '" + t.name + "' has rows of " +
                                        std::to_string(t.ne[0]) + " elements, not a multiple of the type's block of " +
                                        std::to_string(block));
        }
        typed.emplace_back(std::move(t), type);
    }
    return typed;
}

}  // namespace

std::vector<TensorSpec> tensor_specs(const ModelOptions& options) {
    std::vector<TensorSpec> specs;
    for (auto& [t, type] : typed_plan(find_preset(options.preset), options)) {
        specs.push_back({std::move(t.name), std::move(t.ne), type});
    }
    return specs;
}

gguf::Writer build_model(const ModelOptions& options) {
    const Preset& preset = find_preset(options.preset);
    const std::vector<std::pair<TensorPlan, cellm_dtype>> plan = typed_plan(preset, options);

    gguf::Writer writer;
    add_metadata(writer, preset);
    Random random(options.seed);
    for (const auto& [t, type] : plan) writer.add_tensor(t.name, type, t.ne, generate(t, type, random));
    return writer;
}

void write_model(const std::string& path, const ModelOptions& options) { build_model(options).write(path); }

}  // namespace cellm::synthetic
