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
    std::string role;  // "system", "user" or "assistant"
    std::string content;  // with kImageMarker where each image part was
};

// What an image part becomes in a message's text: the marker that cellm_session_submit_chat_images replaces with
// the next image.
inline constexpr std::string_view kImageMarker = "<image>";
// The largest image a request may carry, decoded. OpenAI's limit.
inline constexpr size_t kMaxImageBytes = size_t{20} << 20;

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
};

// Throws ApiError (400) for malformed JSON, wrong types, values out of range, empty messages or prompt, image
// parts that are not inline PNG or JPEG data (remote URLs are never fetched), and the fields this server does not
// support.
CompletionRequest parse_completion_request(Endpoint endpoint, std::string_view body);

// Overwrites in `options` (filled by cellm_session_options_init) the settings the request gives.
// options.stop then points into `stop_storage` and into the request: both must outlive the options' use.
void apply_sampling(const CompletionRequest& request, cellm_session_options& options,
                    std::vector<const char*>& stop_storage);

}  // namespace cellm::server
