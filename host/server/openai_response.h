// The JSON the server answers with, in OpenAI's shapes: whole responses, streaming chunks, usage, errors and
// the model list. Pure functions of their arguments, so every route and the SSE stream share one definition.
#pragma once

#include "api_error.h"
#include "openai_request.h"

#include "cellm/cellm.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <string_view>

namespace cellm::server {

// Insertion order, so bodies read like OpenAI's (id, object, created, model, choices, usage).
using Json = nlohmann::ordered_json;

// What every response and chunk of one request shares.
struct ResponseMeta {
    Endpoint endpoint = Endpoint::chat;
    std::string id;  // "chatcmpl-..." or "cmpl-..."
    int64_t created = 0;
    std::string model;
    bool include_usage = false;  // chunks then carry "usage": null, and a last chunk the numbers
};

ResponseMeta new_response_meta(Endpoint endpoint, const std::string& model, bool include_usage);

// OpenAI's finish reasons: the model's end or a stop string is "stop"; running out of tokens or context, or
// being cut short by a shutdown, is "length" (the answer is incomplete; OpenAI has no other word for it).
const char* finish_reason_text(cellm_finish_reason reason);

Json usage_json(const cellm_session_stats& stats);

// stream false: the whole answer.
Json completion_json(const ResponseMeta& meta, std::string_view text, cellm_finish_reason reason,
                     const cellm_session_stats& stats);

// stream true, in order: role_chunk (chat only), text_chunk per piece, finish_chunk, usage_chunk (with
// include_usage), then the SSE terminator.
Json role_chunk(const ResponseMeta& meta);
Json text_chunk(const ResponseMeta& meta, std::string_view text);
Json finish_chunk(const ResponseMeta& meta, cellm_finish_reason reason);
Json usage_chunk(const ResponseMeta& meta, const cellm_session_stats& stats);

Json error_json(const ApiError& error);

Json model_json(const std::string& model, int64_t created);
Json model_list_json(const std::string& model, int64_t created);

// Serialized; invalid UTF-8 is replaced rather than thrown on, so a response can never fail to render.
std::string dump(const Json& json);

}  // namespace cellm::server
