// The reference data written by scripts/make_tokenizer_reference.py.
#pragma once

#include <nlohmann/json.hpp>

#include <fstream>
#include <stdexcept>
#include <string>

namespace cellm::test {

inline const nlohmann::json& tokenizer_reference() {
    static const nlohmann::json data = [] {
        const std::string path = std::string(CELLM_TOKENIZER_DATA) + "/smollm2.json";
        std::ifstream in(path);
        if (!in) throw std::runtime_error("cannot open " + path + " (scripts/make_tokenizer_reference.py writes it)");
        return nlohmann::json::parse(in);
    }();
    return data;
}

}  // namespace cellm::test
