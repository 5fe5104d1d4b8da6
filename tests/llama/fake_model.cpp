#include "fake_model.hpp"

#include <iterator>
#include <stdexcept>

namespace cellm::testing {

FakeModel::FakeModel(const LlamaConfig& c, uint32_t seed) : rng_(seed) {
    set_string("general.architecture", "llama");
    set_u32("llama.embedding_length", static_cast<uint32_t>(c.n_embd));
    set_u32("llama.block_count", static_cast<uint32_t>(c.n_layer));
    set_u32("llama.feed_forward_length", static_cast<uint32_t>(c.n_ff));
    set_u32("llama.attention.head_count", static_cast<uint32_t>(c.n_head));
    set_u32("llama.attention.head_count_kv", static_cast<uint32_t>(c.n_head_kv));
    set_u32("llama.context_length", static_cast<uint32_t>(c.n_ctx));
    set_u32("llama.vocab_size", static_cast<uint32_t>(c.n_vocab));
    set_f32("llama.attention.layer_norm_rms_epsilon", 1e-5f);
    set_f32("llama.rope.freq_base", 10000.0f);

    const int64_t head_dim = c.n_embd / c.n_head;
    const int64_t kv_dim = c.n_head_kv * head_dim;
    set_tensor("token_embd.weight", {c.n_embd, c.n_vocab});
    set_tensor("output_norm.weight", {c.n_embd});
    if (!c.tied) set_tensor("output.weight", {c.n_embd, c.n_vocab});
    if (c.rope_freqs) {
        set_tensor("rope_freqs.weight", {head_dim / 2}, std::vector<float>(static_cast<size_t>(head_dim / 2), 1.0f));
    }
    for (int64_t il = 0; il < c.n_layer; ++il) {
        const std::string p = "blk." + std::to_string(il) + ".";
        set_tensor(p + "attn_norm.weight", {c.n_embd});
        set_tensor(p + "attn_q.weight", {c.n_embd, c.n_embd});
        set_tensor(p + "attn_k.weight", {c.n_embd, kv_dim});
        set_tensor(p + "attn_v.weight", {c.n_embd, kv_dim});
        set_tensor(p + "attn_output.weight", {c.n_embd, c.n_embd});
        set_tensor(p + "ffn_norm.weight", {c.n_embd});
        set_tensor(p + "ffn_gate.weight", {c.n_embd, c.n_ff});
        set_tensor(p + "ffn_up.weight", {c.n_embd, c.n_ff});
        set_tensor(p + "ffn_down.weight", {c.n_ff, c.n_embd});
    }
}

void FakeModel::set_u32(const std::string& key, uint32_t value) { meta_[key] = Meta{CELLM_VALUE_U32, value, 0.0, {}}; }
void FakeModel::set_f32(const std::string& key, float value) { meta_[key] = Meta{CELLM_VALUE_F32, 0, value, {}}; }
void FakeModel::set_string(const std::string& key, const std::string& value) {
    meta_[key] = Meta{CELLM_VALUE_STRING, 0, 0.0, value};
}
void FakeModel::erase_key(const std::string& key) { meta_.erase(key); }

void FakeModel::set_tensor(const std::string& name, std::vector<int64_t> ne, std::vector<float> data) {
    int64_t n = 1;
    for (int64_t d : ne) n *= d;
    if (data.empty()) {
        // Norm weights near 1 keep activations in a sane range; everything else is small noise.
        const bool norm = name.find("norm") != std::string::npos;
        std::uniform_real_distribution<float> dist(norm ? 0.8f : -0.5f, norm ? 1.2f : 0.5f);
        data.resize(static_cast<size_t>(n));
        for (float& x : data) x = dist(rng_);
    }
    if (static_cast<int64_t>(data.size()) != n) throw std::invalid_argument("data size does not match " + name);
    tensors_[name] = Tensor{std::move(ne), std::move(data)};
}

void FakeModel::erase_tensor(const std::string& name) { tensors_.erase(name); }

int32_t FakeModel::tensor_index(const std::string& name) const {
    const auto it = tensors_.find(name);
    if (it == tensors_.end()) throw std::invalid_argument("no tensor " + name);
    return static_cast<int32_t>(std::distance(tensors_.begin(), it));
}

const cellm_model_view& FakeModel::view() {
    kv_.clear();
    for (const auto& [key, m] : meta_) {
        cellm_meta_kv kv{};
        kv.key = {key.data(), key.size()};
        kv.value.type = m.type;
        if (m.type == CELLM_VALUE_STRING) {
            kv.value.v.str = {m.s.data(), m.s.size()};
        } else if (m.type == CELLM_VALUE_F32) {
            kv.value.v.f64 = m.f;
        } else {
            kv.value.v.u64 = m.u;
        }
        kv_.push_back(kv);
    }
    infos_.clear();
    for (const auto& [name, t] : tensors_) {
        cellm_tensor_info info{};
        info.struct_size = sizeof(cellm_tensor_info);
        info.name = {name.data(), name.size()};
        info.type = CELLM_TYPE_F32;
        info.n_dims = static_cast<uint32_t>(t.ne.size());
        for (size_t d = 0; d < CELLM_MAX_DIMS; ++d) info.ne[d] = d < t.ne.size() ? t.ne[d] : 1;
        info.data = t.data.data();
        info.size = t.data.size() * sizeof(float);
        infos_.push_back(info);
    }
    view_ = cellm_model_view{};
    view_.struct_size = sizeof(cellm_model_view);
    view_.n_meta = kv_.size();
    view_.meta = kv_.data();
    view_.n_tensors = infos_.size();
    view_.tensors = infos_.data();
    view_.tensor_stride = sizeof(cellm_tensor_info);
    return view_;
}

}  // namespace cellm::testing
