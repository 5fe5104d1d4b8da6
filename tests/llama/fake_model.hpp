// A llama model built in memory: GGUF-named F32 tensors with random values and llama.* metadata, exposed as a
// cellm_model_view, so the arch plugin and the reference forward can be tested without a file.
#pragma once

#include <cellm/tensor.h>

#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

namespace cellm::testing {

struct LlamaConfig {
    int64_t n_vocab = 13;
    int64_t n_embd = 16;
    int64_t n_layer = 2;
    int64_t n_ff = 24;
    int64_t n_head = 4;
    int64_t n_head_kv = 2;
    int64_t n_ctx = 64;
    bool tied = true;        // no output.weight
    bool rope_freqs = false; // add rope_freqs.weight (all ones)
};

class FakeModel {
public:
    explicit FakeModel(const LlamaConfig& config, uint32_t seed = 1);

    void set_u32(const std::string& key, uint32_t value);
    void set_f32(const std::string& key, float value);
    void set_string(const std::string& key, const std::string& value);
    void erase_key(const std::string& key);

    // An F32 tensor of shape `ne`; random values unless `data` (of the right size) is given.
    void set_tensor(const std::string& name, std::vector<int64_t> ne, std::vector<float> data = {});
    void erase_tensor(const std::string& name);
    std::vector<float>& data(const std::string& name) { return tensors_.at(name).data; }
    bool has_tensor(const std::string& name) const { return tensors_.count(name) != 0; }

    // Index of a tensor in the view (the view lists tensors in name order).
    int32_t tensor_index(const std::string& name) const;

    // Valid until the next modification.
    const cellm_model_view& view();

private:
    struct Meta {
        cellm_value_type type;
        uint64_t u = 0;
        double f = 0.0;
        std::string s;
    };
    struct Tensor {
        std::vector<int64_t> ne;
        std::vector<float> data;
    };

    std::map<std::string, Meta> meta_;
    std::map<std::string, Tensor> tensors_;
    std::vector<cellm_meta_kv> kv_;
    std::vector<cellm_tensor_info> infos_;
    cellm_model_view view_{};
    std::mt19937 rng_;
};

}  // namespace cellm::testing
