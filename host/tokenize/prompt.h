// Turning what the user typed into prompt tokens: the chat template (named in the manifest or recognised
// from the model), the system prompt, and BOS as the model's metadata asks.
#pragma once

#include "tokenize/chat_template.h"
#include "manifest.h"
#include "tokenize/tokenizer.h"

#include <span>
#include <string>
#include <vector>

namespace cellm {

class PromptBuilder {
public:
    // Resolves the template: the manifest's name, or "auto" = the model's own template when it is one of
    // the known kinds (a model without one but with Gemma's turn tokens gets Gemma's), else plain.
    PromptBuilder(const Tokenizer& tokenizer, const ChatConfig& chat);

    ChatTemplateKind kind() const { return kind_; }
    // The conversation rendered with the generation prompt, and its tokens.
    std::string render(std::span<const ChatMessage> conversation) const;
    std::vector<int32_t> chat_tokens(std::span<const ChatMessage> conversation) const;
    // Text used as is (no template).
    std::vector<int32_t> raw_tokens(const std::string& text) const;
    // Whether `text`'s tokens get a BOS: as the model asks, unless the text (a template's) already writes it.
    bool wants_bos(const std::string& text) const;

private:
    std::vector<int32_t> encode(const std::string& text) const;

    const Tokenizer& tokenizer_;
    ChatTemplateKind kind_;
    std::string system_prompt_;
};

}  // namespace cellm
