// libFuzzer target: the chat-template code (detect_chat_template, default_system_prompt, render_chat).
// Byte 0 picks the template and add_generation_prompt; the rest is messages "role\x01content" separated by
// "\x02", the last part after "\x03" (if any) the default system prompt. The whole input is also read as a
// model's Jinja template source.
#include "error.h"
#include "tokenize/chat_template.h"

#include <cstdint>
#include <string_view>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    const std::string_view all(reinterpret_cast<const char*>(data), size);
    (void)cellm::detect_chat_template(all);
    (void)cellm::default_system_prompt(all);
    if (size == 0) return 0;
    static constexpr cellm::ChatTemplateKind kinds[] = {cellm::ChatTemplateKind::ChatML, cellm::ChatTemplateKind::Llama3,
                                                        cellm::ChatTemplateKind::Gemma, cellm::ChatTemplateKind::Plain};
    const cellm::ChatTemplateKind kind = kinds[data[0] & 3];
    const bool add_generation_prompt = (data[0] & 4) != 0;
    std::string_view rest = all.substr(1);
    std::string_view system;
    if (const size_t at = rest.find('\x03'); at != std::string_view::npos) {
        system = rest.substr(at + 1);
        rest = rest.substr(0, at);
    }
    std::vector<cellm::ChatMessage> messages;
    while (!rest.empty()) {
        const size_t end = rest.find('\x02');
        const std::string_view message = rest.substr(0, end);
        const size_t colon = message.find('\x01');
        if (colon == std::string_view::npos) {
            messages.push_back({"user", std::string(message)});
        } else {
            messages.push_back({std::string(message.substr(0, colon)), std::string(message.substr(colon + 1))});
        }
        if (end == std::string_view::npos) break;
        rest.remove_prefix(end + 1);
    }
    try {
        (void)cellm::render_chat(kind, messages, add_generation_prompt, system);
    } catch (const cellm::Error&) {
    }
    (void)cellm::chat_template_writes_bos(kind);
    try {
        (void)cellm::chat_template_by_name(std::string_view(all).substr(1, 8));
    } catch (const cellm::Error&) {
    }
    return 0;
}
