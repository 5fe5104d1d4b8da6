// The body of an OpenAI /v1/chat/completions or /v1/completions request, parsed and checked. Whatever the
// server cannot honour is refused (ApiError, 400, naming the field) rather than silently ignored; fields that
// change nothing here (user, metadata, ...) are ignored. A field left out, or null, keeps the manifest's value.
#pragma once

#include "cellm/cellm.h"

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cellm::server {

enum class Endpoint { chat, completion };

struct ChatMessage {
    std::string role;  // "system", "user", "assistant" or "tool"
    std::string content;  // with kImageMarker where each image part was
};

// What an image part becomes in a message's text: the marker that cellm_session_submit_chat_images replaces with
// the next image.
inline constexpr std::string_view kImageMarker = "<image>";
// The largest image a request may carry, decoded. OpenAI's limit.
inline constexpr size_t kMaxImageBytes = size_t{20} << 20;
// The most choices one request may ask for (n): each is a session of its own.
inline constexpr int32_t kMaxChoices = 8;
// The longest grammar or JSON schema text a request may carry: the engine's own limit.
inline constexpr size_t kMaxGrammarBytes = size_t{256} << 10;

struct CompletionRequest {
    Endpoint endpoint = Endpoint::chat;
    std::vector<ChatMessage> messages;  // chat
    // chat: the PNG or JPEG files of the image parts, in the order of their markers in `messages`, and where the
    // first one was ("messages[0].content[1]"), for errors about them all.
    std::vector<std::vector<uint8_t>> images;
    std::string images_param;
    std::string prompt;                 // completion
    std::optional<std::string> model;
    bool stream = false;
    bool include_usage = false;  // stream_options.include_usage

    std::optional<int32_t> max_tokens;
    std::optional<float> temperature, top_p, min_p;
    std::optional<int32_t> top_k;
    std::optional<float> frequency_penalty, presence_penalty, repeat_penalty;
    std::optional<uint64_t> seed;
    std::optional<std::vector<std::string>> stop;
    std::vector<cellm_logit_bias> logit_bias;

    int32_t n = 1;  // choices, each its own session (seed, seed + 1, ...)
    // Log-probabilities: chat's logprobs + top_logprobs, or the completions API's integer logprobs (as top).
    bool logprobs = false;
    int32_t top_logprobs = 0;
    // Constrained decoding: at most one of the two, from response_format, grammar or json_schema; `constraint_param`
    // names the field it came from, for errors about it.
    std::optional<std::string> grammar, json_schema;
    std::string constraint_param;
    // Function tools (chat): the JSON text of `tools` and of `tool_choice` as given, checked by the engine, which
    // names the field of what it refuses. `messages_json` is the conversation in OpenAI's shape, assistant
    // tool_calls and tool messages included, for cellm_session_submit_chat_json; used whenever tools are given
    // or a message is a tool's or makes calls.
    std::optional<std::string> tools, tool_choice;
    bool parallel_tool_calls = true;
    std::string messages_json;
    bool messages_have_tools = false;
    // chat_template_kwargs (llama-server's): more variables for the model's Jinja template, as JSON text.
    std::optional<std::string> chat_template_kwargs;
};

// Throws ApiError (400) for malformed JSON, wrong types, values out of range, empty messages or prompt, image
// parts that are not inline PNG or JPEG data (remote URLs are never fetched), and the fields this server does not
// support. Token ids (logit_bias) must be below n_vocab.
CompletionRequest parse_completion_request(Endpoint endpoint, std::string_view body, int32_t n_vocab);

// llama-server's POST /tokenize body: {"content", "add_special" (false), "parse_special" (true), "with_pieces"
// (false)}. cellm always parses special-token text here, so parse_special false is refused.
struct TokenizeRequest {
    std::string content;
    bool add_special = false;
    bool with_pieces = false;
};
TokenizeRequest parse_tokenize_request(std::string_view body);
// llama-server's POST /detokenize body: {"tokens": [ids]}, each id below n_vocab.
std::vector<int32_t> parse_detokenize_request(std::string_view body, int32_t n_vocab);

// Overwrites in `options` (filled by cellm_session_options_init) the settings the request gives, for choice
// `choice` (its seed is the request's plus the choice's index). The options then point into `stop_storage` and
// into the request: both must outlive the options' use.
void apply_sampling(const CompletionRequest& request, int32_t choice, cellm_session_options& options,
                    std::vector<const char*>& stop_storage);

}  // namespace cellm::server
