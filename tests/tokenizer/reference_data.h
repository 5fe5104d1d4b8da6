// The reference data written by scripts/make_tokenizer_reference.py.
#pragma once

#include <nlohmann/json.hpp>

#include <fstream>
#include <stdexcept>
#include <string>

namespace cellm::test {

inline nlohmann::json read_reference(const std::string& name) {
    const std::string path = std::string(CELLM_TOKENIZER_DATA) + "/" + name;
    std::ifstream in(path);
    if (!in) throw std::runtime_error("cannot open " + path + " (scripts/make_tokenizer_reference.py writes it)");
    return nlohmann::json::parse(in);
}

// SmolLM2 (byte-level BPE), plus the chat renderings of every template family.
inline const nlohmann::json& tokenizer_reference() {
    static const nlohmann::json data = read_reference("smollm2.json");
    return data;
}

// Gemma 3 (SentencePiece).
inline const nlohmann::json& gemma3_reference() {
    static const nlohmann::json data = read_reference("gemma3.json");
    return data;
}

}  // namespace cellm::test
