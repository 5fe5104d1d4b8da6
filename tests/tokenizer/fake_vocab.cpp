#include "fake_vocab.h"

#include <algorithm>

namespace cellm::test {

namespace {
cellm_string_ref string_ref(const std::string& s) { return {s.data(), s.size()}; }
}  // namespace

std::string byte_level(const std::string& bytes) {
    std::string out;
    for (const char c : bytes) {
        const auto b = static_cast<unsigned char>(c);
        uint32_t cpt = b;
        if (!((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE)) {
            uint32_t n = 0;  // unprintable bytes take 256, 257, ... in byte order
            for (uint32_t x = 0; x < b; ++x) n += !((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE);
            cpt = 256 + n;
        }
        if (cpt < 0x80) {
            out += static_cast<char>(cpt);
        } else {
            out += static_cast<char>(0xC0 | (cpt >> 6));
            out += static_cast<char>(0x80 | (cpt & 0x3F));
        }
    }
    return out;
}

FakeVocab& FakeVocab::token(std::string text, int32_t type, float score) {
    tokens_.push_back(std::move(text));
    types_.push_back(type);
    scores_.push_back(score);
    return *this;
}

FakeVocab& FakeVocab::merge(std::string pair) {
    merges_.push_back(std::move(pair));
    return *this;
}

FakeVocab& FakeVocab::id(std::string key, uint32_t value) {
    cellm_meta_value v{};
    v.type = CELLM_VALUE_U32;
    v.v.u64 = value;
    scalars_.emplace_back(std::move(key), v);
    return *this;
}

FakeVocab& FakeVocab::flag(std::string key, bool value) {
    cellm_meta_value v{};
    v.type = CELLM_VALUE_BOOL;
    v.v.u64 = value ? 1 : 0;
    scalars_.emplace_back(std::move(key), v);
    return *this;
}

FakeVocab& FakeVocab::set_string(std::string key, std::string value) {
    std::erase_if(scalars_, [&](const auto& kv) { return kv.first == key; });
    const auto& stored = strings_.emplace_back(std::move(value));
    cellm_meta_value v{};
    v.type = CELLM_VALUE_STRING;
    v.v.str = string_ref(stored);
    scalars_.emplace_back(std::move(key), v);
    return *this;
}

FakeVocab& FakeVocab::without(std::string key) {
    dropped_.push_back(std::move(key));
    return *this;
}

FakeVocab& FakeVocab::token_types_as_strings() {
    types_as_strings_ = true;
    return *this;
}

FakeVocab& FakeVocab::scores_as_strings() {
    scores_as_strings_ = true;
    return *this;
}

FakeVocab& FakeVocab::drop_last_score() {
    drop_last_score_ = true;
    return *this;
}

FakeVocab& FakeVocab::set_score(const std::string& text, float score) {
    scores_.at(static_cast<size_t>(id_of(text))) = score;
    return *this;
}

int32_t FakeVocab::id_of(const std::string& text) const {
    const auto it = std::find(tokens_.begin(), tokens_.end(), text);
    return it == tokens_.end() ? -1 : static_cast<int32_t>(it - tokens_.begin());
}

const cellm_model_view& FakeVocab::view() {
    token_refs_.clear();
    merge_refs_.clear();
    meta_.clear();
    for (const auto& t : tokens_) token_refs_.push_back(string_ref(t));
    for (const auto& m : merges_) merge_refs_.push_back(string_ref(m));
    const auto keep = [&](const std::string& key) {
        return std::find(dropped_.begin(), dropped_.end(), key) == dropped_.end();
    };
    const auto add = [&](const std::string& key, cellm_meta_value value) {
        if (keep(key)) meta_.push_back({string_ref(strings_.emplace_back(key)), value});
    };
    const auto array = [](cellm_value_type elem, const void* data, size_t count) {
        cellm_meta_value v{};
        v.type = CELLM_VALUE_ARRAY;
        v.v.arr.elem_type = elem;
        v.v.arr.count = count;
        v.v.arr.data = data;
        return v;
    };
    for (const auto& [key, value] : scalars_) add(key, value);
    add("tokenizer.ggml.tokens", array(CELLM_VALUE_STRING, token_refs_.data(), token_refs_.size()));
    add("tokenizer.ggml.token_type", types_as_strings_
                                         ? array(CELLM_VALUE_STRING, token_refs_.data(), token_refs_.size())
                                         : array(CELLM_VALUE_I32, types_.data(), types_.size()));
    add("tokenizer.ggml.merges", array(CELLM_VALUE_STRING, merge_refs_.data(), merge_refs_.size()));
    const size_t n_scores = scores_.size() - (drop_last_score_ ? 1 : 0);
    add("tokenizer.ggml.scores", scores_as_strings_ ? array(CELLM_VALUE_STRING, token_refs_.data(), token_refs_.size())
                                                    : array(CELLM_VALUE_F32, scores_.data(), n_scores));
    view_ = {};
    view_.struct_size = sizeof(view_);
    view_.n_meta = meta_.size();
    view_.meta = meta_.data();
    return view_;
}

}  // namespace cellm::test
