// The JSON the server answers with, in OpenAI's shapes: whole responses, streaming chunks, usage, errors and
// the model list. Pure functions of their arguments, so every route and the SSE stream share one definition.
#pragma once

#include "api_error.h"
#include "openai_request.h"

#include "cellm/cellm.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

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
    bool logprobs = false;       // choices carry their tokens' log-probabilities
};

ResponseMeta new_response_meta(Endpoint endpoint, const std::string& model, bool include_usage);

// OpenAI's finish reasons: the model's end or a stop string is "stop"; running out of tokens or context, or
// being cut short by a shutdown, is "length" (the answer is incomplete; OpenAI has no other word for it).
const char* finish_reason_text(cellm_finish_reason reason);

// A request's token counts: the prompt once, the completion tokens of every choice summed (as OpenAI counts n).
struct Usage {
    int32_t prompt_tokens = 0;
    int32_t completion_tokens = 0;
    int32_t cached_tokens = 0;
    int32_t choices = 0;  // added so far
    void add(const cellm_session_stats& choice);
};
Json usage_json(const Usage& usage);

// Log-probability rows of some generated tokens (cellm_session_get_logprobs): row_size entries each, the token
// first, then its alternatives best first. `piece` gives a token's bytes.
struct LogprobRows {
    std::span<const cellm_logprob> entries;
    size_t row_size = 0;
    std::function<std::string(int32_t)> piece;
};
// chat: {"content": [{token, logprob, bytes, top_logprobs: [{token, logprob, bytes}]}], "refusal": null}.
Json chat_logprobs_json(const LogprobRows& rows);
// completions: {tokens, token_logprobs, top_logprobs: [{piece: logprob}], text_offset}. `text_offset` is where the
// first token starts in the choice's text (in code points, as Python indexes strings), and is moved past the rows.
Json completion_logprobs_json(const LogprobRows& rows, size_t& text_offset);

// One choice of a whole answer. `logprobs` is null unless the request asked for them.
struct Choice {
    std::string text;
    cellm_finish_reason reason = CELLM_FINISH_NONE;
    Json logprobs;
    Json tool_calls = Json::array();  // chat: message.tool_calls (left out when empty)
};

// stream false: the whole answer.
Json completion_json(const ResponseMeta& meta, const std::vector<Choice>& choices, const Usage& usage);

// stream true, per choice (`index`) in order: role_chunk (chat only), text_chunk per piece, finish_chunk; then
// once usage_chunk (with include_usage) and the SSE terminator. `logprobs` is null or the piece's tokens' rows.
Json role_chunk(const ResponseMeta& meta, int32_t index);
Json text_chunk(const ResponseMeta& meta, int32_t index, std::string_view text, Json logprobs = nullptr);
// A piece of a function call (CELLM_EVENT_TOOL_CALL) as delta.tool_calls: the first of a call carries its id,
// type and name with empty arguments, the next ones only arguments text.
Json tool_call_chunk(const ResponseMeta& meta, int32_t index, const cellm_event& event);
Json finish_chunk(const ResponseMeta& meta, int32_t index, cellm_finish_reason reason, Json logprobs = nullptr);
Json usage_chunk(const ResponseMeta& meta, const Usage& usage);

Json error_json(const ApiError& error);

Json model_json(const std::string& model, int64_t created);
Json model_list_json(const std::string& model, int64_t created);

// Serialized; invalid UTF-8 is replaced rather than thrown on, so a response can never fail to render.
std::string dump(const Json& json);

}  // namespace cellm::server
