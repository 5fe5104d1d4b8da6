#include "tokenize/prompt.h"

#include "error.h"

namespace cellm {

PromptBuilder::PromptBuilder(const Tokenizer& tokenizer, const ChatConfig& chat) : tokenizer_(tokenizer) {
    if (chat.template_name == "auto") {
        auto detected = detect_chat_template(tokenizer.chat_template());
        // Some Gemma GGUFs (gemma-3-270m) carry no tokenizer.chat_template; their turn tokens still tell.
        if (!detected && tokenizer.chat_template().empty() && tokenizer.find_token("<start_of_turn>") >= 0 &&
            tokenizer.find_token("<end_of_turn>") >= 0) {
            detected = ChatTemplateKind::Gemma;
        }
        kind_ = detected.value_or(ChatTemplateKind::Plain);
    } else {
        kind_ = chat_template_by_name(chat.template_name);
    }
    system_prompt_ = chat.system_prompt.value_or(default_system_prompt(tokenizer.chat_template()));
}

std::string PromptBuilder::render(std::span<const ChatMessage> conversation) const {
    return render_chat(kind_, conversation, true, system_prompt_);
}

bool PromptBuilder::wants_bos(const std::string& text) const {
    // A template that writes the BOS text itself (Llama 3, Gemma) must not get a second one.
    return tokenizer_.add_bos() && tokenizer_.bos() >= 0 && text.rfind(tokenizer_.token_text(tokenizer_.bos()), 0) != 0;
}

std::vector<int32_t> PromptBuilder::encode(const std::string& text) const {
    return tokenizer_.encode(text, wants_bos(text), true);
}

std::vector<int32_t> PromptBuilder::chat_tokens(std::span<const ChatMessage> conversation) const {
    return encode(render(conversation));
}

std::vector<int32_t> PromptBuilder::raw_tokens(const std::string& text) const { return encode(text); }

}  // namespace cellm
