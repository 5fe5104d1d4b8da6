#include "hf_tokenizer.h"

#include "formats/limits.h"
#include "plugin_host.hpp"

#include <fstream>
#include <optional>

namespace cellm::safetensors_plugin {
namespace {

using nlohmann::json;

// GGUF token types.
constexpr int32_t token_normal = 1, token_control = 3, token_user_defined = 4, token_unused = 5;

// The Split regexes of Llama 3's and Qwen2's tokenizer.json, as Hugging Face spells them.
constexpr std::string_view llama3_regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
constexpr std::string_view qwen2_regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// Qwen 3.5 keeps combining marks inside words.
constexpr std::string_view qwen35_regex =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|"
    "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

const json* member(const json& obj, const char* key) {
    if (!obj.is_object()) return nullptr;
    const auto it = obj.find(key);
    return it == obj.end() || it->is_null() ? nullptr : &*it;
}

// The pre-tokenizer steps, flattened out of any Sequence.
void flatten(const json& node, std::vector<const json*>& steps) {
    const json* type = member(node, "type");
    const json* inner = member(node, "pretokenizers");
    if (type != nullptr && *type == "Sequence" && inner != nullptr && inner->is_array()) {
        for (const json& step : *inner) flatten(step, steps);
    } else {
        steps.push_back(&node);
    }
}

// llama.cpp names a pre-tokenizer by hashing what it makes of a test text; a folder carries its definition
// instead, so the known definitions are recognised by their steps.
std::string pre_name(const json& tokenizer, const std::string& file) {
    std::vector<const json*> steps;
    if (const json* pre = member(tokenizer, "pre_tokenizer")) flatten(*pre, steps);
    bool byte_level = false, byte_level_regex = false, single_digits = false;
    std::optional<std::string> split;
    for (const json* step : steps) {
        const json* type = member(*step, "type");
        if (type == nullptr || !type->is_string()) continue;
        if (*type == "ByteLevel") {
            byte_level = true;
            const json* use_regex = member(*step, "use_regex");
            byte_level_regex = use_regex == nullptr || (use_regex->is_boolean() && use_regex->get<bool>());
        } else if (*type == "Digits") {
            const json* individual = member(*step, "individual_digits");
            single_digits = individual != nullptr && individual->is_boolean() && individual->get<bool>();
        } else if (*type == "Split") {
            const json* pattern = member(*step, "pattern");
            const json* regex = pattern != nullptr ? member(*pattern, "Regex") : nullptr;
            split = regex != nullptr && regex->is_string() ? regex->get<std::string>() : "";
        }
    }
    if (byte_level && !byte_level_regex && split == llama3_regex) return "llama3";
    if (byte_level && !byte_level_regex && split == qwen2_regex) return "qwen2";
    if (byte_level && !byte_level_regex && split == qwen35_regex) return "qwen35";
    if (byte_level && byte_level_regex && !split) return single_digits ? "smollm" : "gpt-2";
    throw plugin::Failure(CELLM_ERR_UNSUPPORTED,
                          file + ": pre_tokenizer is not one cellm recognises (GPT-2 byte level, with single digits as "
                                 "SmolLM, Llama 3, Qwen2 or Qwen 3.5 split)");
}

// "<s>" or {"content": "<s>", ...}, as tokenizer_config.json writes special tokens.
std::optional<std::string> token_text(const json* v) {
    if (v == nullptr) return std::nullopt;
    if (v->is_string()) return v->get<std::string>();
    if (const json* content = member(*v, "content"); content != nullptr && content->is_string()) {
        return content->get<std::string>();
    }
    return std::nullopt;
}

// A single template, or the list of named ones (the "default" wins) newer configs carry.
std::optional<std::string> chat_template(const json* v) {
    if (v == nullptr) return std::nullopt;
    if (v->is_string()) return v->get<std::string>();
    if (v->is_array()) {
        for (const json& named : *v) {
            const json* name = member(named, "name");
            const json* text = member(named, "template");
            if (name != nullptr && *name == "default" && text != nullptr && text->is_string()) {
                return text->get<std::string>();
            }
        }
    }
    return std::nullopt;
}

}  // namespace

void read_tokenizer(const std::filesystem::path& folder, const HfConfig& config, MetaTable& meta) {
    const std::filesystem::path path = folder / "tokenizer.json";
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) return;
    const std::string file = path.string();
    const json tokenizer = read_json_file(path);
    const auto fail = [&](const std::string& message) { throw plugin::Failure(CELLM_ERR_CORRUPT, file + ": " + message); };

    const json* model = member(tokenizer, "model");
    const json* type = model != nullptr ? member(*model, "type") : nullptr;
    if (type == nullptr || *type != "BPE") {
        throw plugin::Failure(CELLM_ERR_UNSUPPORTED,
                              file + ": model.type " + (type != nullptr ? type->dump() : "(missing)") +
                                  " is not supported (byte-level BPE only)");
    }
    const std::string pre = pre_name(tokenizer, file);

    // Ids come from model.vocab and added_tokens; a gap becomes an unused [PADn] token as llama.cpp fills it.
    std::vector<std::optional<std::string>> texts;
    std::vector<int32_t> types;
    const auto place = [&](const std::string& text, const json& id, int32_t token_type) {
        if (text.size() > file_limits::max_string_bytes) {
            fail(file_limits::exceeds("token length", text.size(), file_limits::max_string_bytes, " bytes") +
                 " (token id " + id.dump() + ")");
        }
        if (!id.is_number_unsigned()) fail("token '" + text + "' has a bad id " + id.dump());
        // The vocabulary runs up to the largest id, so the id alone bounds the tables below.
        if (id.get<uint64_t>() >= file_limits::max_vocab) {
            fail(file_limits::exceeds("vocabulary size", id.get<uint64_t>() + 1, file_limits::max_vocab) + " (token '" +
                 text + "' has id " + id.dump() + ")");
        }
        const auto i = id.get<size_t>();
        if (i >= texts.size()) {
            texts.resize(i + 1);
            types.resize(i + 1, token_unused);
        }
        texts[i] = text;
        types[i] = token_type;
    };
    const json* vocab = member(*model, "vocab");
    if (vocab == nullptr || !vocab->is_object()) fail("model.vocab is missing or not an object");
    if (vocab->size() > file_limits::max_vocab) {
        fail("model.vocab " + file_limits::exceeds("vocabulary size", vocab->size(), file_limits::max_vocab));
    }
    for (const auto& [text, id] : vocab->items()) place(text, id, token_normal);
    if (const json* added = member(tokenizer, "added_tokens"); added != nullptr && added->is_array()) {
        for (const json& t : *added) {
            const json* content = member(t, "content");
            const json* id = member(t, "id");
            if (content == nullptr || !content->is_string() || id == nullptr) fail("added_tokens entry " + t.dump() + " lacks content or id");
            const json* special = member(t, "special");
            place(content->get<std::string>(), *id,
                  special != nullptr && special->is_boolean() && special->get<bool>() ? token_control : token_user_defined);
        }
    }
    if (texts.empty()) fail("model.vocab is empty");
    std::vector<std::string> tokens;
    tokens.reserve(texts.size());
    for (size_t i = 0; i < texts.size(); ++i) tokens.push_back(texts[i].value_or("[PAD" + std::to_string(i) + "]"));

    // Merges are "a b" strings, or [a, b] pairs since tokenizers 0.20.
    std::vector<std::string> merges;
    if (const json* list = member(*model, "merges"); list != nullptr && list->is_array()) {
        if (list->size() > file_limits::max_array_elements) {
            fail("model.merges " + file_limits::exceeds("array length", list->size(), file_limits::max_array_elements));
        }
        merges.reserve(list->size());
        for (const json& m : *list) {
            if (m.is_string()) {
                merges.push_back(m.get<std::string>());
            } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
                merges.push_back(m[0].get<std::string>() + " " + m[1].get<std::string>());
            } else {
                fail("model.merges entry " + m.dump() + " is neither \"a b\" nor [\"a\", \"b\"]");
            }
            if (merges.back().size() > file_limits::max_string_bytes) {
                fail("model.merges entry " + std::to_string(merges.size() - 1) + " " +
                     file_limits::exceeds("length", merges.back().size(), file_limits::max_string_bytes, " bytes"));
            }
        }
    }

    const auto id_of = [&](const std::string& text) -> std::optional<int64_t> {
        for (size_t i = 0; i < tokens.size(); ++i) {
            if (tokens[i] == text) return static_cast<int64_t>(i);
        }
        return std::nullopt;
    };

    // tokenizer_config.json names the special tokens by text; config.json's ids are the fallback.
    json tokenizer_config = json::object();
    if (std::filesystem::exists(folder / "tokenizer_config.json", ec)) {
        tokenizer_config = read_json_file(folder / "tokenizer_config.json");
    }
    std::optional<int64_t> bos = config.bos_token_id, eos = config.eos_token_id;
    if (const auto text = token_text(member(tokenizer_config, "bos_token"))) bos = id_of(*text).value_or(bos.value_or(-1));
    if (const auto text = token_text(member(tokenizer_config, "eos_token"))) eos = id_of(*text).value_or(eos.value_or(-1));
    meta.add_string("tokenizer.ggml.model", "gpt2");
    meta.add_string("tokenizer.ggml.pre", pre);
    meta.add_strings("tokenizer.ggml.tokens", std::move(tokens));
    meta.add_i32s("tokenizer.ggml.token_type", std::move(types));
    meta.add_strings("tokenizer.ggml.merges", std::move(merges));

    if (bos && *bos >= 0) meta.add_u32("tokenizer.ggml.bos_token_id", static_cast<uint32_t>(*bos));
    if (eos && *eos >= 0) meta.add_u32("tokenizer.ggml.eos_token_id", static_cast<uint32_t>(*eos));
    if (const json* add_bos = member(tokenizer_config, "add_bos_token"); add_bos != nullptr && add_bos->is_boolean()) {
        meta.add_bool("tokenizer.ggml.add_bos_token", add_bos->get<bool>());
    }

    // Newer folders keep the template in chat_template.jinja; it wins over tokenizer_config.json's.
    std::optional<std::string> chat = chat_template(member(tokenizer_config, "chat_template"));
    if (chat && chat->size() > file_limits::max_string_bytes) {
        throw plugin::Failure(CELLM_ERR_CORRUPT, (folder / "tokenizer_config.json").string() + ": chat_template " +
                                                     file_limits::exceeds("length", chat->size(),
                                                                          file_limits::max_string_bytes, " bytes"));
    }
    const std::filesystem::path jinja_path = folder / "chat_template.jinja";
    if (std::ifstream jinja(jinja_path, std::ios::binary); jinja) {
        // At most one byte past the limit is read, so a huge file (or /dev/zero) is never loaded.
        std::string text(file_limits::max_string_bytes + 1, '\0');
        jinja.read(text.data(), static_cast<std::streamsize>(text.size()));
        text.resize(static_cast<size_t>(jinja.gcount()));
        if (text.size() > file_limits::max_string_bytes) {
            throw plugin::Failure(CELLM_ERR_CORRUPT,
                                  jinja_path.string() + ": chat template length exceeds the limit of " +
                                      std::to_string(file_limits::max_string_bytes) + " bytes");
        }
        chat = std::move(text);
    }
    if (chat) meta.add_string("tokenizer.chat_template", *chat);
}

}  // namespace cellm::safetensors_plugin
