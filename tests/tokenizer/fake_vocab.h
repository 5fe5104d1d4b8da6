// A hand-built tokenizer vocabulary exposed as a cellm_model_view, for tests that need no model file.
#pragma once

#include <cellm/tensor.h>

#include <cstdint>
#include <deque>
#include <string>
#include <vector>

namespace cellm::test {

// GPT-2's byte-level spelling of raw bytes (what a byte-level BPE vocabulary stores).
std::string byte_level(const std::string& bytes);

class FakeVocab {
public:
    // Token spellings are byte-level (space is "Ġ") for "gpt2", with "▁" for spaces for "llama"; types are
    // GGUF's (1 normal, 2 unknown, 3 control, 4 user-defined, 6 byte). Scores (0 unless given) matter to "llama".
    FakeVocab& model(std::string name) { return set_string("tokenizer.ggml.model", std::move(name)); }
    FakeVocab& pre(std::string name) { return set_string("tokenizer.ggml.pre", std::move(name)); }
    FakeVocab& token(std::string text, int32_t type = 1, float score = 0.0f);
    FakeVocab& merge(std::string pair);
    FakeVocab& id(std::string key, uint32_t value);
    FakeVocab& flag(std::string key, bool value);
    FakeVocab& set_string(std::string key, std::string value);
    FakeVocab& without(std::string key);  // drops a key the view would otherwise carry
    FakeVocab& token_types_as_strings();  // a malformed token_type array
    FakeVocab& scores_as_strings();       // a malformed scores array
    FakeVocab& drop_last_score();         // one score fewer than tokens
    FakeVocab& set_score(const std::string& text, float score);

    int32_t id_of(const std::string& text) const;
    // Rebuilt on each call; valid until this FakeVocab changes.
    const cellm_model_view& view();

private:
    std::vector<std::string> tokens_;
    std::vector<int32_t> types_;
    std::vector<float> scores_;
    std::vector<std::string> merges_;
    std::vector<std::pair<std::string, cellm_meta_value>> scalars_;
    std::deque<std::string> strings_;  // stable storage for string values and keys
    std::vector<std::string> dropped_;
    bool types_as_strings_ = false;
    bool scores_as_strings_ = false;
    bool drop_last_score_ = false;
    std::vector<cellm_string_ref> token_refs_, merge_refs_;
    std::vector<cellm_meta_kv> meta_;
    cellm_model_view view_{};
};

}  // namespace cellm::test
