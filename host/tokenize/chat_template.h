// Chat prompt rendering for the template families cellm knows, written out in C++ so the rendered text is
// exactly what the model's Jinja template produces with add_generation_prompt=True.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace cellm {

enum class ChatTemplateKind { ChatML, Llama3, Gemma, Plain };

// A function call the assistant made, as OpenAI's tool_calls carry it.
struct ToolCall {
    std::string id;
    std::string name;
    std::string arguments;  // JSON text (an object)
};

struct ChatMessage {
    std::string role;  // "system", "user", "assistant", "tool"
    std::string content;
    std::vector<ToolCall> tool_calls{};  // assistant: the calls it made
    std::string tool_call_id{};          // tool: the call this message answers
    std::string name{};                  // tool: the function that answered (optional)
};

// Recognises the family of a model's tokenizer.chat_template by its markers; nullopt when unknown.
std::optional<ChatTemplateKind> detect_chat_template(std::string_view jinja_source);

// "chatml", "llama3", "gemma", "plain"; throws cellm::Error listing the valid names.
ChatTemplateKind chat_template_by_name(std::string_view name);
const char* chat_template_name(ChatTemplateKind kind);

// The prompt text. Templates that write BOS themselves (Llama 3's <|begin_of_text|>, Gemma's <bos>) include it
// here, so the caller must not add another; ChatML and Plain do not. default_system_prompt is used by ChatML
// when the conversation does not start with a system message (SmolLM2 does this). Gemma folds a leading
// system message into the first user turn and throws cellm::Error when user/assistant turns do not alternate.
std::string render_chat(ChatTemplateKind kind, std::span<const ChatMessage> messages, bool add_generation_prompt,
                        std::string_view default_system_prompt = {});

// True when render_chat(kind, ...) already starts with the BOS text.
bool chat_template_writes_bos(ChatTemplateKind kind);

// The system prompt a ChatML template injects when none is given (SmolLM2: "You are a helpful AI assistant
// named SmolLM, trained by Hugging Face"), read from the template text; empty when it has none.
std::string default_system_prompt(std::string_view jinja_source);

}  // namespace cellm
