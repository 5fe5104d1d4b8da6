// Typed reads of config.json values. Every wrong or missing value fails with one line naming the file and the key;
// the model types whose configs need more than the common keys (qwen35.cpp, gemma4.cpp) use it too.
#pragma once

#include "plugin_host.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>

namespace cellm::safetensors_plugin {

class ConfigReader {
public:
    using json = nlohmann::json;

    // Both are borrowed and must outlive the reader.
    ConfigReader(const json& config, const std::string& file) : config_(config), file_(file) {}

    [[noreturn]] void fail(cellm_status_code code, const std::string& message) const {
        throw plugin::Failure(code, file_ + ": " + message);
    }

    // The member `key` of `in`, or null when it is absent or JSON null (transformers writes null for "unset").
    static const json* find(const json& in, const char* key) {
        if (!in.is_object()) return nullptr;
        const auto it = in.find(key);
        return it == in.end() || it->is_null() ? nullptr : &*it;
    }
    const json* find(const char* key) const { return find(config_, key); }

    // A positive integer of plausible size (a dimension); `key` names it in the message.
    uint32_t dimension_of(const json& v, const std::string& key) const {
        if (!v.is_number_unsigned() || v.get<uint64_t>() == 0 || v.get<uint64_t>() > (1u << 30)) {
            fail(CELLM_ERR_CORRUPT, "'" + key + "' is not a positive integer of plausible size");
        }
        return v.get<uint32_t>();
    }
    uint32_t dimension(const char* key) const {
        const json* v = find(key);
        if (v == nullptr) fail(CELLM_ERR_NOT_FOUND, std::string("missing '") + key + "'");
        return dimension_of(*v, key);
    }
    // `fallback` (transformers' default) when the key is absent.
    uint32_t dimension(const char* key, uint32_t fallback) const {
        const json* v = find(key);
        return v == nullptr ? fallback : dimension_of(*v, key);
    }
    std::optional<uint32_t> optional_dimension(const char* key) const {
        const json* v = find(key);
        return v == nullptr ? std::nullopt : std::optional(dimension_of(*v, key));
    }
    // A count that may be 0, or `fallback` when absent.
    uint32_t count(const char* key, uint32_t fallback) const {
        const json* v = find(key);
        if (v == nullptr) return fallback;
        if (!v->is_number_unsigned() || v->get<uint64_t>() > (1u << 30)) {
            fail(CELLM_ERR_CORRUPT, std::string("'") + key + "' is not a count");
        }
        return v->get<uint32_t>();
    }

    std::optional<float> optional_number(const char* key) const {
        const json* v = find(key);
        if (v == nullptr) return std::nullopt;
        if (!v->is_number()) fail(CELLM_ERR_CORRUPT, std::string("'") + key + "' is not a number");
        return v->get<float>();
    }
    // Member `key` of `in` (a nested object such as rope_parameters, named `where` in messages), or `fallback`.
    float number(const json& in, const char* key, const std::string& where, float fallback) const {
        const json* v = find(in, key);
        if (v == nullptr) return fallback;
        if (!v->is_number()) fail(CELLM_ERR_CORRUPT, "'" + where + key + "' is not a number");
        return v->get<float>();
    }
    std::string text(const json& in, const char* key, const std::string& where, const std::string& fallback) const {
        const json* v = find(in, key);
        if (v == nullptr) return fallback;
        if (!v->is_string()) fail(CELLM_ERR_CORRUPT, "'" + where + key + "' is not a string");
        return v->get<std::string>();
    }
    // False when absent.
    bool flag(const char* key) const {
        const json* v = find(key);
        if (v == nullptr) return false;
        if (!v->is_boolean()) fail(CELLM_ERR_CORRUPT, std::string("'") + key + "' is not a boolean");
        return v->get<bool>();
    }

    // bos_token_id / eos_token_id: an integer, or a list whose first entry counts (Llama 3 lists several EOS).
    std::optional<int64_t> token_id(const char* key) const {
        const json* v = find(key);
        if (v != nullptr && v->is_array() && !v->empty()) v = &(*v)[0];
        if (v == nullptr || !v->is_number_integer()) return std::nullopt;
        return v->get<int64_t>();
    }

private:
    const json& config_;
    const std::string& file_;
};

}  // namespace cellm::safetensors_plugin
