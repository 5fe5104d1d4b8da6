// Chat rendering against jinja2's rendering of the official templates.
#include "reference_data.h"

#include "tokenize/chat_template.h"
#include "error.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace cellm {
namespace {

std::vector<ChatMessage> messages_of(const nlohmann::json& entry) {
    std::vector<ChatMessage> messages;
    for (const auto& m : entry.at("messages")) messages.push_back({m.at("role"), m.at("content")});
    return messages;
}

TEST(ChatTemplate, RendersLikeJinja) {
    const auto& chats = test::tokenizer_reference().at("chat");
    ASSERT_FALSE(chats.empty());
    for (const auto& entry : chats) {
        const auto kind = chat_template_by_name(entry.at("template").get<std::string>());
        const auto system = entry.value("default_system_prompt", std::string());
        EXPECT_EQ(render_chat(kind, messages_of(entry), true, system), entry.at("rendered").get<std::string>())
            << entry.at("template");
    }
}

TEST(ChatTemplate, ReadsSmolLM2Template) {
    const auto source = test::tokenizer_reference().at("tokenizer").at("chat_template").get<std::string>();
    EXPECT_EQ(detect_chat_template(source), ChatTemplateKind::ChatML);
    EXPECT_EQ(default_system_prompt(source), "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
}

TEST(ChatTemplate, DetectsFamilies) {
    EXPECT_EQ(detect_chat_template("{{ '<|start_header_id|>' + role + '<|end_header_id|>' }}"),
              ChatTemplateKind::Llama3);
    EXPECT_EQ(detect_chat_template("{{ '<start_of_turn>' + role }}"), ChatTemplateKind::Gemma);
    EXPECT_EQ(detect_chat_template("[INST] {{ content }} [/INST]"), std::nullopt);
    // A plain ChatML template has no default system prompt; an escaped newline form does.
    EXPECT_EQ(default_system_prompt("{{'<|im_start|>' + message['role'] + '\\n'}}"), "");
    EXPECT_EQ(default_system_prompt("{{ '<|im_start|>system\\nYou are Qwen.<|im_end|>\\n' }}"), "You are Qwen.");
}

TEST(ChatTemplate, NamesAndErrors) {
    EXPECT_EQ(chat_template_by_name("llama3"), ChatTemplateKind::Llama3);
    EXPECT_STREQ(chat_template_name(ChatTemplateKind::Gemma), "gemma");
    try {
        chat_template_by_name("vicuna");
        ADD_FAILURE() << "expected an error";
    } catch (const Error& e) {
        EXPECT_NE(std::string(e.what()).find("chatml, llama3, gemma, plain"), std::string::npos) << e.what();
    }
    const std::vector<ChatMessage> two_users = {{"user", "a"}, {"user", "b"}};
    EXPECT_THROW(render_chat(ChatTemplateKind::Gemma, two_users, true), Error);
    EXPECT_TRUE(chat_template_writes_bos(ChatTemplateKind::Llama3));
    EXPECT_FALSE(chat_template_writes_bos(ChatTemplateKind::ChatML));
}

TEST(ChatTemplate, PlainJoinsContents) {
    const std::vector<ChatMessage> messages = {{"system", "Be brief."}, {"user", "Once upon a time"}};
    EXPECT_EQ(render_chat(ChatTemplateKind::Plain, messages, true), "Be brief.\nOnce upon a time");
}

}  // namespace
}  // namespace cellm
