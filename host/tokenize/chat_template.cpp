// The chat template families as code. Each render function mirrors the official Jinja text of its family
// (kept in scripts/make_tokenizer_reference.py, whose rendered output the tests compare against).
#include "tokenize/chat_template.h"

#include "error.h"
#include "tokenize/utf8.h"

#include <array>
#include <vector>

namespace cellm {

namespace {

// Python's str.isspace(), which Jinja's trim filter uses.
bool is_python_space(uint32_t cpt) {
    return (cpt >= 0x09 && cpt <= 0x0D) || (cpt >= 0x1C && cpt <= 0x20) || cpt == 0x85 || cpt == 0xA0 ||
           cpt == 0x1680 || (cpt >= 0x2000 && cpt <= 0x200A) || cpt == 0x2028 || cpt == 0x2029 || cpt == 0x202F ||
           cpt == 0x205F || cpt == 0x3000;
}

// Jinja's `| trim`.
std::string trim(std::string_view text) {
    size_t begin = text.size(), end = 0;
    for (size_t pos = 0; pos < text.size();) {
        const size_t start = pos;
        if (!is_python_space(utf8::next(text, pos))) {
            begin = std::min(begin, start);
            end = pos;
        }
    }
    return begin < end ? std::string(text.substr(begin, end - begin)) : std::string();
}

// SmolLM2 / Qwen style: <|im_start|>role\ncontent<|im_end|>\n, with the template's own system prompt when the
// conversation brings none.
std::string render_chatml(std::span<const ChatMessage> messages, bool add_generation_prompt,
                          std::string_view default_system) {
    std::string out;
    if (!messages.empty() && messages[0].role != "system" && !default_system.empty()) {
        out += "<|im_start|>system\n" + std::string(default_system) + "<|im_end|>\n";
    }
    for (const auto& message : messages) out += "<|im_start|>" + message.role + "\n" + message.content + "<|im_end|>\n";
    if (add_generation_prompt) out += "<|im_start|>assistant\n";
    return out;
}

// Meta-Llama-3-Instruct: BOS before the first message, contents trimmed.
std::string render_llama3(std::span<const ChatMessage> messages, bool add_generation_prompt) {
    std::string out;
    for (size_t i = 0; i < messages.size(); ++i) {
        if (i == 0) out += "<|begin_of_text|>";
        out += "<|start_header_id|>" + messages[i].role + "<|end_header_id|>\n\n" + trim(messages[i].content) +
               "<|eot_id|>";
    }
    if (add_generation_prompt) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
    return out;
}

// Gemma 3: <bos>, a leading system message becomes a prefix of the first user turn, assistant is "model".
std::string render_gemma(std::span<const ChatMessage> messages, bool add_generation_prompt) {
    std::string out = "<bos>";
    std::string first_user_prefix;
    if (!messages.empty() && messages[0].role == "system") {
        first_user_prefix = messages[0].content + "\n\n";
        messages = messages.subspan(1);
    }
    for (size_t i = 0; i < messages.size(); ++i) {
        if ((messages[i].role == "user") != (i % 2 == 0)) {
            throw Error("gemma chat template: conversation roles must alternate user/assistant/user/assistant/...");
        }
        const std::string role = messages[i].role == "assistant" ? "model" : messages[i].role;
        out += "<start_of_turn>" + role + "\n" + (i == 0 ? first_user_prefix : std::string()) +
               trim(messages[i].content) + "<end_of_turn>\n";
    }
    if (add_generation_prompt) out += "<start_of_turn>model\n";
    return out;
}

// Base models: the contents one after another, a newline between them.
std::string render_plain(std::span<const ChatMessage> messages) {
    std::string out;
    for (size_t i = 0; i < messages.size(); ++i) out += (i ? "\n" : "") + messages[i].content;
    return out;
}

struct NamedKind {
    const char* name;
    ChatTemplateKind kind;
};
constexpr std::array<NamedKind, 4> kinds = {{{"chatml", ChatTemplateKind::ChatML},
                                             {"llama3", ChatTemplateKind::Llama3},
                                             {"gemma", ChatTemplateKind::Gemma},
                                             {"plain", ChatTemplateKind::Plain}}};

}  // namespace

std::optional<ChatTemplateKind> detect_chat_template(std::string_view jinja_source) {
    const auto has = [&](std::string_view marker) { return jinja_source.find(marker) != std::string_view::npos; };
    if (has("<|im_start|>")) return ChatTemplateKind::ChatML;
    if (has("<|start_header_id|>") && has("<|end_header_id|>")) return ChatTemplateKind::Llama3;
    if (has("<start_of_turn>")) return ChatTemplateKind::Gemma;
    return std::nullopt;
}

ChatTemplateKind chat_template_by_name(std::string_view name) {
    std::string valid;
    for (const auto& named : kinds) {
        if (name == named.name) return named.kind;
        valid += (valid.empty() ? "" : ", ") + std::string(named.name);
    }
    throw Error("unknown chat template '" + std::string(name) + "' (valid: " + valid + ")");
}

const char* chat_template_name(ChatTemplateKind kind) {
    for (const auto& named : kinds) {
        if (named.kind == kind) return named.name;
    }
    return "?";
}

std::string render_chat(ChatTemplateKind kind, std::span<const ChatMessage> messages, bool add_generation_prompt,
                        std::string_view default_system_prompt) {
    switch (kind) {
    case ChatTemplateKind::ChatML: return render_chatml(messages, add_generation_prompt, default_system_prompt);
    case ChatTemplateKind::Llama3: return render_llama3(messages, add_generation_prompt);
    case ChatTemplateKind::Gemma: return render_gemma(messages, add_generation_prompt);
    case ChatTemplateKind::Plain: return render_plain(messages);
    }
    throw Error("render_chat: unknown template kind");
}

bool chat_template_writes_bos(ChatTemplateKind kind) {
    return kind == ChatTemplateKind::Llama3 || kind == ChatTemplateKind::Gemma;
}

std::string default_system_prompt(std::string_view jinja_source) {
    // The text of a string literal in the template that opens a system turn: '<|im_start|>system\n...<|im_end|>'.
    // The newline may be a real one or a Jinja "\n" escape; escapes inside the prompt are decoded.
    constexpr std::string_view opening = "<|im_start|>system";
    constexpr std::string_view closing = "<|im_end|>";
    for (size_t at = jinja_source.find(opening); at != std::string_view::npos;
         at = jinja_source.find(opening, at + 1)) {
        size_t pos = at + opening.size();
        if (jinja_source.substr(pos, 1) == "\n") {
            pos += 1;
        } else if (jinja_source.substr(pos, 2) == "\\n") {
            pos += 2;
        } else {
            continue;  // e.g. '<|im_start|>system' followed by a variable
        }
        // The literal's own quote character ends it; reaching it before <|im_end|> means the prompt is built
        // from expressions rather than written out.
        const size_t quote_at = jinja_source.find_last_of("'\"", at);
        const char quote = quote_at == std::string_view::npos ? '\0' : jinja_source[quote_at];
        std::string prompt;
        bool plain_literal = false;
        for (size_t i = pos; i < jinja_source.size(); ++i) {
            if (jinja_source.substr(i, closing.size()) == closing) {
                plain_literal = true;
                break;
            }
            if (jinja_source[i] == quote) break;
            if (jinja_source[i] == '\\' && i + 1 < jinja_source.size()) {
                const char escaped = jinja_source[++i];
                prompt += escaped == 'n' ? '\n' : escaped == 't' ? '\t' : escaped;
            } else {
                prompt += jinja_source[i];
            }
        }
        if (!plain_literal) continue;
        return prompt;
    }
    return {};
}

}  // namespace cellm
