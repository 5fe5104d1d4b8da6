// Turning what the user typed into prompt tokens: the chat template (the model's own Jinja template, or a
// hand-written family named in the manifest or recognised from the model), the system prompt, the tools a
// session offers, and BOS as the model's metadata asks.
#pragma once

#include "jinja/template.h"
#include "manifest.h"
#include "tokenize/chat_template.h"
#include "tokenize/tokenizer.h"
#include "tools/tool_use.h"

#include <optional>
#include <span>
#include <string>
#include <vector>

namespace cellm {

class PromptBuilder {
public:
    // Resolves the template. "auto": the model's own Jinja template when it has one that parses (one that does
    // not is logged and the family it resembles is used instead), else the hand-written family it resembles (a
    // model without a template but with Gemma's turn tokens gets Gemma's), else plain. "jinja": the model's own
    // template, which must parse (cellm::Error naming its line otherwise). A family name: that family.
    PromptBuilder(const Tokenizer& tokenizer, const ChatConfig& chat);

    // The hand-written family: the one in use, or the one the model's Jinja template resembles.
    ChatTemplateKind kind() const { return kind_; }
    // Whether prompts are rendered with the model's own Jinja template.
    bool uses_model_template() const { return jinja_.has_value(); }
    // The tool-call format of this model (tools/tool_format.h); nullopt when its family has none cellm knows.
    std::optional<tools::ToolFormat> tool_format() const { return tool_format_; }

    // The conversation rendered with the generation prompt, and its tokens. With `tools` (not null), the model
    // is offered them as its format says. Throws cellm::Error when the template cannot render the conversation
    // (a Jinja template's error names its line).
    // `variables` (a JSON object, or null) are more variables for a Jinja template (chat_template_kwargs).
    std::string render(std::span<const ChatMessage> conversation, const tools::ToolUse* tools = nullptr,
                       const nlohmann::ordered_json& variables = nullptr) const;
    std::vector<int32_t> chat_tokens(std::span<const ChatMessage> conversation, const tools::ToolUse* tools = nullptr,
                                     const nlohmann::ordered_json& variables = nullptr) const;
    // The variables the engine itself sets for a Jinja template, which chat_template_kwargs may not replace.
    static bool reserved_variable(std::string_view name);
    // Text used as is (no template).
    std::vector<int32_t> raw_tokens(const std::string& text) const;
    // Whether `text`'s tokens get a BOS: as the model asks, unless the text (a template's) already writes it.
    bool wants_bos(const std::string& text) const;

private:
    std::vector<int32_t> encode(const std::string& text) const;
    std::string render_jinja(std::span<const ChatMessage> conversation, const tools::ToolUse* tools,
                             const nlohmann::ordered_json& variables) const;

    const Tokenizer& tokenizer_;
    ChatTemplateKind kind_;
    std::optional<jinja::Template> jinja_;
    std::optional<std::string> system_prompt_;  // the manifest's, for a conversation that starts without one
    std::string default_system_;                // a hand-written ChatML template's default
    std::optional<tools::ToolFormat> tool_format_;
};

}  // namespace cellm
