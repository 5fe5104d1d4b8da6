// The body of an OpenAI /v1/chat/completions or /v1/completions request, parsed and checked. Whatever the
// server cannot honour is refused (ApiError, 400, naming the field) rather than silently ignored; fields that
// change nothing here (user, metadata, ...) are ignored. A field left out, or null, keeps the manifest's value.
#pragma once

#include "cellm/cellm.h"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cellm::server {

enum class Endpoint { chat, completion };

struct ChatMessage {
    std::string role;  // "system", "user" or "assistant"
    std::string content;
};

struct CompletionRequest {
    Endpoint endpoint = Endpoint::chat;
    std::vector<ChatMessage> messages;  // chat
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
};

// Throws ApiError (400) for malformed JSON, wrong types, values out of range, empty messages or prompt, and
// the fields this server does not support.
CompletionRequest parse_completion_request(Endpoint endpoint, std::string_view body);

// Overwrites in `options` (filled by cellm_session_options_init) the settings the request gives.
// options.stop then points into `stop_storage` and into the request: both must outlive the options' use.
void apply_sampling(const CompletionRequest& request, cellm_session_options& options,
                    std::vector<const char*>& stop_storage);

}  // namespace cellm::server
