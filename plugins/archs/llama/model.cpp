#include "model.hpp"

#include "metadata.hpp"
#include "plugin_host.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <string_view>
#include <unordered_map>

namespace cellm::llama {
namespace {

using Shape = std::vector<int64_t>;

std::string shape_string(const int64_t* ne, size_t n) {
    std::string s = "[";
    for (size_t i = 0; i < n; ++i) s += (i > 0 ? ", " : "") + std::to_string(ne[i]);
    return s + "]";
}

// The view's tensors by name, with presence, shape and type checks that name the tensor when they fail.
class Tensors {
public:
    explicit Tensors(const cellm_model_view& view) : view_(view) {
        if (view.n_tensors > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
            throw plugin::Failure(CELLM_ERR_CORRUPT, "too many tensors: " + std::to_string(view.n_tensors));
        }
        for (uint64_t i = 0; i < view.n_tensors; ++i) {
            const cellm_string_ref& name = cellm_model_tensor(&view, i)->name;
            by_name_.emplace(std::string(name.data, name.len), static_cast<int32_t>(i));
        }
    }

    // kAbsent when the file has no tensor of that name.
    int32_t optional(const std::string& name, const Shape& shape, bool f32_only = false) const {
        const auto it = by_name_.find(name);
        if (it == by_name_.end()) return kAbsent;
        const cellm_tensor_info* t = cellm_model_tensor(&view_, static_cast<uint64_t>(it->second));
        check_shape(name, *t, shape);
        if (f32_only && t->type != CELLM_TYPE_F32) {
            throw plugin::Failure(CELLM_ERR_UNSUPPORTED, "tensor '" + name + "' has type " +
                                                             std::to_string(static_cast<int>(t->type)) +
                                                             ", expected F32 (0)");
        }
        return it->second;
    }

    int32_t required(const std::string& name, const Shape& shape, bool f32_only = false) const {
        const int32_t index = optional(name, shape, f32_only);
        if (index == kAbsent) throw plugin::Failure(CELLM_ERR_NOT_FOUND, "missing tensor '" + name + "'");
        return index;
    }

    // Rows of a 2-D tensor (ne[1]), or 0 when absent.
    int64_t rows(const std::string& name) const {
        const auto it = by_name_.find(name);
        return it == by_name_.end() ? 0 : cellm_model_tensor(&view_, static_cast<uint64_t>(it->second))->ne[1];
    }

private:
    static void check_shape(const std::string& name, const cellm_tensor_info& t, const Shape& shape) {
        bool match = t.n_dims <= CELLM_MAX_DIMS;
        for (size_t d = 0; match && d < CELLM_MAX_DIMS; ++d) match = t.ne[d] == (d < shape.size() ? shape[d] : 1);
        if (!match) {
            const size_t dims = std::min<size_t>(t.n_dims, CELLM_MAX_DIMS);
            throw plugin::Failure(CELLM_ERR_CORRUPT, "tensor '" + name + "' has shape " + shape_string(t.ne, dims) +
                                                         ", expected " + shape_string(shape.data(), shape.size()));
        }
    }

    const cellm_model_view& view_;
    std::unordered_map<std::string, int32_t> by_name_;
};

// A dimension read from the metadata: positive and at most 2^24, so that the products of two that matter
// (heads x head size) are checked against the same bound before they are formed in int32.
int32_t dimension(std::string_view key, uint32_t value) {
    if (value == 0 || value > (1u << 24)) {
        throw plugin::Failure(CELLM_ERR_CORRUPT, "metadata key '" + std::string(key) + "' has value " +
                                                     std::to_string(value) + ", expected 1..16777216");
    }
    return static_cast<int32_t>(value);
}

int32_t dimension(const Metadata& meta, std::string_view key) { return dimension(key, meta.u32(key)); }

int32_t dimension_or(const Metadata& meta, std::string_view key, int32_t fallback) {
    return dimension(key, meta.find_u32(key).value_or(static_cast<uint32_t>(fallback)));
}

Hparams read_hparams(const Metadata& meta, const Tensors& tensors) {
    Hparams hp;
    hp.n_embd = dimension(meta, "llama.embedding_length");
    hp.n_layer = dimension(meta, "llama.block_count");
    hp.n_ff = dimension(meta, "llama.feed_forward_length");
    hp.n_head = dimension(meta, "llama.attention.head_count");
    hp.n_head_kv = dimension_or(meta, "llama.attention.head_count_kv", hp.n_head);
    if (hp.n_head % hp.n_head_kv != 0) {
        throw plugin::Failure(CELLM_ERR_CORRUPT, "llama.attention.head_count (" + std::to_string(hp.n_head) +
                                                     ") is not a multiple of llama.attention.head_count_kv (" +
                                                     std::to_string(hp.n_head_kv) + ")");
    }
    if (hp.n_embd % hp.n_head != 0 && !meta.find("llama.attention.key_length")) {
        throw plugin::Failure(CELLM_ERR_CORRUPT, "llama.embedding_length (" + std::to_string(hp.n_embd) +
                                                     ") is not a multiple of llama.attention.head_count (" +
                                                     std::to_string(hp.n_head) + ")");
    }
    hp.head_dim = dimension_or(meta, "llama.attention.key_length", hp.n_embd / hp.n_head);
    if (static_cast<int64_t>(hp.n_head) * hp.head_dim > (1 << 24)) {
        throw plugin::Failure(CELLM_ERR_CORRUPT, "llama.attention.head_count x head size (" + std::to_string(hp.n_head) +
                                                     " x " + std::to_string(hp.head_dim) + ") is implausibly large");
    }
    const int32_t value_length = dimension_or(meta, "llama.attention.value_length", hp.head_dim);
    if (value_length != hp.head_dim) {
        throw plugin::Failure(CELLM_ERR_UNSUPPORTED, "llama.attention.value_length (" + std::to_string(value_length) +
                                                         ") differs from the key length (" +
                                                         std::to_string(hp.head_dim) + ")");
    }
    hp.rms_eps = meta.f32("llama.attention.layer_norm_rms_epsilon");
    if (!(hp.rms_eps >= 0.0f)) {
        throw plugin::Failure(CELLM_ERR_CORRUPT, "llama.attention.layer_norm_rms_epsilon is negative or NaN");
    }

    hp.rope_freq_base = meta.find_f32("llama.rope.freq_base").value_or(10000.0f);
    if (!(hp.rope_freq_base > 0.0f)) {
        throw plugin::Failure(CELLM_ERR_CORRUPT, "llama.rope.freq_base must be positive");
    }
    hp.n_rot = dimension_or(meta, "llama.rope.dimension_count", hp.head_dim);
    if (hp.n_rot > hp.head_dim || hp.n_rot % 2 != 0) {
        throw plugin::Failure(CELLM_ERR_CORRUPT, "llama.rope.dimension_count (" + std::to_string(hp.n_rot) +
                                                     ") must be even and at most the head size (" +
                                                     std::to_string(hp.head_dim) + ")");
    }
    const std::string scaling = meta.find_string("llama.rope.scaling.type").value_or("none");
    if (scaling == "linear") {
        // Linear scaling stretches positions by `factor`; llama.cpp treats a factor of 0 as none.
        const float factor = meta.find_f32("llama.rope.scaling.factor").value_or(0.0f);
        if (factor < 0.0f || std::isnan(factor)) {
            throw plugin::Failure(CELLM_ERR_CORRUPT, "llama.rope.scaling.factor must not be negative");
        }
        hp.rope_freq_scale = factor == 0.0f ? 1.0f : 1.0f / factor;
    } else if (scaling != "none") {
        throw plugin::Failure(CELLM_ERR_UNSUPPORTED, "llama.rope.scaling.type '" + scaling +
                                                         "' is not supported (none, linear)");
    }

    // GGUF's converter permutes Llama's Q and K rows so that rotated pairs are adjacent (2i, 2i+1): that is the
    // layout of every GGUF llama file. A format plugin that exposes Hugging Face-layout weights unpermuted
    // says so with "cellm.rope.layout" = "halves". The layout comes from the file, never from a switch.
    const std::string layout = meta.find_string("cellm.rope.layout").value_or("adjacent");
    if (layout == "halves") {
        hp.rope_mode = CELLM_ROPE_HALVES;
    } else if (layout != "adjacent") {
        throw plugin::Failure(CELLM_ERR_CORRUPT, "cellm.rope.layout '" + layout + "' is not adjacent or halves");
    }

    hp.n_ctx_train = dimension(meta, "llama.context_length");
    if (const auto vocab = meta.find_u32("llama.vocab_size")) {
        hp.n_vocab = dimension("llama.vocab_size", *vocab);
    } else {
        // Without the key the vocabulary is the embedding's row count; its shape is checked at load.
        const int64_t rows = tensors.rows("token_embd.weight");
        if (rows <= 0 || rows > (1 << 24)) {
            throw plugin::Failure(CELLM_ERR_NOT_FOUND, "missing llama.vocab_size and a usable 'token_embd.weight'");
        }
        hp.n_vocab = static_cast<int32_t>(rows);
    }
    return hp;
}

}  // namespace

Model load_model(const cellm_model_view& view) {
    if (view.n_tensors > 0 && (view.tensors == nullptr || view.tensor_stride < sizeof(cellm_tensor_info))) {
        throw plugin::Failure(CELLM_ERR_INVALID_ARGUMENT, "model view has no valid tensor array");
    }
    if (view.n_meta > 0 && view.meta == nullptr) {
        throw plugin::Failure(CELLM_ERR_INVALID_ARGUMENT, "model view has no metadata array");
    }
    const Metadata meta(view);
    const Tensors tensors(view);

    Model m;
    m.view = &view;
    m.hp = read_hparams(meta, tensors);
    const Hparams& hp = m.hp;
    const int64_t embd = hp.n_embd;

    m.token_embd = tensors.required("token_embd.weight", {embd, hp.n_vocab});
    m.output_norm = tensors.required("output_norm.weight", {embd}, true);
    m.output = tensors.optional("output.weight", {embd, hp.n_vocab});
    if (m.output == kAbsent) m.output = m.token_embd;
    m.rope_freqs = tensors.optional("rope_freqs.weight", {hp.n_rot / 2}, true);

    m.layers.resize(static_cast<size_t>(hp.n_layer));
    for (int32_t il = 0; il < hp.n_layer; ++il) {
        const std::string p = "blk." + std::to_string(il) + ".";
        Layer& l = m.layers[static_cast<size_t>(il)];
        l.attn_norm = tensors.required(p + "attn_norm.weight", {embd}, true);
        l.attn_q = tensors.required(p + "attn_q.weight", {embd, hp.q_dim()});
        l.attn_k = tensors.required(p + "attn_k.weight", {embd, hp.kv_dim()});
        l.attn_v = tensors.required(p + "attn_v.weight", {embd, hp.kv_dim()});
        l.attn_output = tensors.required(p + "attn_output.weight", {hp.q_dim(), embd});
        l.attn_q_bias = tensors.optional(p + "attn_q.bias", {hp.q_dim()}, true);
        l.attn_k_bias = tensors.optional(p + "attn_k.bias", {hp.kv_dim()}, true);
        l.attn_v_bias = tensors.optional(p + "attn_v.bias", {hp.kv_dim()}, true);
        l.attn_output_bias = tensors.optional(p + "attn_output.bias", {embd}, true);
        l.ffn_norm = tensors.required(p + "ffn_norm.weight", {embd}, true);
        l.ffn_gate = tensors.required(p + "ffn_gate.weight", {embd, hp.n_ff});
        l.ffn_up = tensors.required(p + "ffn_up.weight", {embd, hp.n_ff});
        l.ffn_down = tensors.required(p + "ffn_down.weight", {hp.n_ff, embd});
    }
    return m;
}

}  // namespace cellm::llama
