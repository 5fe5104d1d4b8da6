#include "tokenize/prompt.h"

#include "error.h"

#include <spdlog/spdlog.h>

namespace cellm {

namespace {

std::optional<ChatTemplateKind> resembled_family(const Tokenizer& tokenizer) {
    auto detected = detect_chat_template(tokenizer.chat_template());
    // Some Gemma GGUFs (gemma-3-270m) carry no tokenizer.chat_template; their turn tokens still tell.
    if (!detected && tokenizer.chat_template().empty() && tokenizer.find_token("<start_of_turn>") >= 0 &&
        tokenizer.find_token("<end_of_turn>") >= 0) {
        detected = ChatTemplateKind::Gemma;
    }
    return detected;
}

// A message as OpenAI's messages (and so transformers' templates) spell it. Call arguments are handed over
// parsed, as templates write them with `| tojson` or iterate over them.
nlohmann::ordered_json message_json(const ChatMessage& m) {
    nlohmann::ordered_json out = {{"role", m.role}, {"content", m.content}};
    if (!m.tool_calls.empty()) {
        nlohmann::ordered_json calls = nlohmann::ordered_json::array();
        for (const ToolCall& call : m.tool_calls) {
            nlohmann::ordered_json arguments = nlohmann::ordered_json::parse(call.arguments, nullptr, false);
            if (arguments.is_discarded()) arguments = call.arguments;
            calls.push_back({{"id", call.id},
                             {"type", "function"},
                             {"function", {{"name", call.name}, {"arguments", std::move(arguments)}}}});
        }
        out["tool_calls"] = std::move(calls);
    }
    if (!m.tool_call_id.empty()) out["tool_call_id"] = m.tool_call_id;
    if (!m.name.empty()) out["name"] = m.name;
    return out;
}

}  // namespace

PromptBuilder::PromptBuilder(const Tokenizer& tokenizer, const ChatConfig& chat) : tokenizer_(tokenizer) {
    const std::string& source = tokenizer.chat_template();
    kind_ = resembled_family(tokenizer).value_or(ChatTemplateKind::Plain);
    if (chat.template_name == "jinja" || (chat.template_name == "auto" && !source.empty())) {
        if (source.empty()) throw Error("[chat] template = \"jinja\": the model carries no chat template");
        try {
            jinja_ = jinja::Template::parse(source);
        } catch (const jinja::TemplateError& e) {
            if (chat.template_name == "jinja") throw;
            spdlog::warn("the model's chat template does not parse ({}); rendering prompts as {}", e.what(),
                         chat_template_name(kind_));
        }
    } else if (chat.template_name != "auto") {
        kind_ = chat_template_by_name(chat.template_name);
    }
    system_prompt_ = chat.system_prompt;
    default_system_ = default_system_prompt(source);
    const std::string_view family_source = jinja_ ? std::string_view(source) : std::string_view();
    tool_format_ = tools::detect_tool_format(family_source, kind_,
                                             [&](std::string_view text) { return tokenizer.find_token(text) >= 0; });
}

bool PromptBuilder::reserved_variable(std::string_view name) {
    for (const char* reserved : {"messages", "tools", "documents", "add_generation_prompt", "bos_token", "eos_token"}) {
        if (name == reserved) return true;
    }
    return false;
}

std::string PromptBuilder::render(std::span<const ChatMessage> conversation, const tools::ToolUse* tools,
                                  const nlohmann::ordered_json& variables) const {
    std::vector<ChatMessage> messages(conversation.begin(), conversation.end());
    if (system_prompt_ && (messages.empty() || messages.front().role != "system")) {
        messages.insert(messages.begin(), ChatMessage{"system", *system_prompt_});
    }
    if (tools != nullptr) {
        const std::string_view source = jinja_ ? std::string_view(tokenizer_.chat_template()) : std::string_view();
        const bool renders = jinja_ && tools::template_renders_tools(tools->format, source);
        // tool_choice none: the tools are not offered, but earlier calls still read as the family writes them.
        static const std::vector<tools::Tool> none;
        const auto& offered = tools->choice.kind == tools::ToolChoice::None ? none : tools->tools;
        if (!renders) messages = tools::prepare_messages(tools->format, false, offered, messages);
        if (!renders || offered.empty()) tools = nullptr;
    }
    if (jinja_) return render_jinja(messages, tools, variables);
    return render_chat(kind_, messages, true, system_prompt_ ? std::string_view() : std::string_view(default_system_));
}

std::string PromptBuilder::render_jinja(std::span<const ChatMessage> conversation, const tools::ToolUse* tools,
                                        const nlohmann::ordered_json& variables) const {
    nlohmann::ordered_json context = variables.is_object() ? variables : nlohmann::ordered_json::object();
    nlohmann::ordered_json& messages = context["messages"] = nlohmann::ordered_json::array();
    for (const ChatMessage& m : conversation) messages.push_back(message_json(m));
    // As transformers' apply_chat_template passes them: None where there are none.
    context["tools"] = tools != nullptr ? tools::tools_json(tools->tools) : nlohmann::ordered_json(nullptr);
    context["documents"] = nullptr;
    context["add_generation_prompt"] = true;
    const auto token_text = [&](int32_t id) { return id >= 0 ? tokenizer_.token_text(id) : std::string(); };
    context["bos_token"] = token_text(tokenizer_.bos());
    context["eos_token"] = token_text(tokenizer_.eos());
    return jinja_->render(context);
}

bool PromptBuilder::wants_bos(const std::string& text) const {
    // A template that writes the BOS text itself (Llama 3, Gemma) must not get a second one.
    return tokenizer_.add_bos() && tokenizer_.bos() >= 0 && text.rfind(tokenizer_.token_text(tokenizer_.bos()), 0) != 0;
}

std::vector<int32_t> PromptBuilder::encode(const std::string& text) const {
    return tokenizer_.encode(text, wants_bos(text), true);
}

std::vector<int32_t> PromptBuilder::chat_tokens(std::span<const ChatMessage> conversation,
                                                const tools::ToolUse* tools,
                                                const nlohmann::ordered_json& variables) const {
    return encode(render(conversation, tools, variables));
}

std::vector<int32_t> PromptBuilder::raw_tokens(const std::string& text) const { return encode(text); }

}  // namespace cellm
