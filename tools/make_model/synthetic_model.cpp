#include "synthetic_model.h"

#include "synthetic_tokenizer.h"

#include <blocks.h>

#include <cmath>
#include <stdexcept>
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

gguf::Writer build_model(const ModelOptions& options) {
    const Preset& preset = find_preset(options.preset);
    const std::vector<TensorPlan> plan = plan_tensors(preset);
    const cellm_dtype type = options.weight_type;
    if (weight_type_name(type) == "?") {
        throw std::invalid_argument("weight type " + std::to_string(type) + " is not one the generator writes");
    }
    const int64_t block = cellm_dtype_block_size(type);
    for (const TensorPlan& t : plan) {
        if (t.ne.size() == 2 && t.ne[0] % block != 0) {
            throw std::invalid_argument("preset " + std::string(preset.name) + " cannot use --type " +
                                        std::string(weight_type_name(type)) + ": '" + t.name + "' has rows of " +
                                        std::to_string(t.ne[0]) + " elements, not a multiple of the type's block of " +
                                        std::to_string(block));
        }
    }

    gguf::Writer writer;
    add_metadata(writer, preset);
    Random random(options.seed);
    for (const TensorPlan& t : plan) {
        const cellm_dtype stored = t.ne.size() == 2 ? type : CELLM_TYPE_F32;
        writer.add_tensor(t.name, stored, t.ne, generate(t, stored, random));
    }
    return writer;
}

void write_model(const std::string& path, const ModelOptions& options) { build_model(options).write(path); }

}  // namespace cellm::synthetic
