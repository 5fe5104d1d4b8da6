#include "openai_response.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <random>

namespace cellm::server {

namespace {

int64_t unix_seconds() {
    return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
        .count();
}

std::string random_suffix() {
    static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    thread_local std::mt19937_64 rng{std::random_device{}()};
    std::uniform_int_distribution<size_t> pick(0, sizeof kAlphabet - 2);
    std::string s(24, ' ');
    for (char& c : s) c = kAlphabet[pick(rng)];
    return s;
}

// The fields every body shares. Completions use one object name for whole answers and chunks alike.
Json envelope(const ResponseMeta& meta, bool streamed, Json choices) {
    const char* object = meta.endpoint == Endpoint::completion ? "text_completion"
                         : streamed                            ? "chat.completion.chunk"
                                                               : "chat.completion";
    return {{"id", meta.id},
            {"object", object},
            {"created", meta.created},
            {"model", meta.model},
            {"system_fingerprint", nullptr},
            {"choices", std::move(choices)}};
}

// One streamed choice: chat carries a delta object, completions the text itself.
Json chunk(const ResponseMeta& meta, int32_t index, Json content, Json logprobs, const Json& finish_reason) {
    Json choice = {{"index", index}};
    choice[meta.endpoint == Endpoint::chat ? "delta" : "text"] = std::move(content);
    choice["logprobs"] = std::move(logprobs);
    choice["finish_reason"] = finish_reason;
    Json j = envelope(meta, true, Json::array({std::move(choice)}));
    if (meta.include_usage) j["usage"] = nullptr;
    return j;
}

// JSON has no -inf: OpenAI writes an impossible token's log-probability as -9999.
double finite_logprob(float logprob) { return std::isfinite(logprob) ? static_cast<double>(logprob) : -9999.0; }

Json byte_values(const std::string& piece) {
    Json bytes = Json::array();
    for (const char c : piece) bytes.push_back(static_cast<unsigned char>(c));
    return bytes;
}

// The code points a piece adds to a text: its bytes that do not continue a UTF-8 sequence.
size_t code_points(const std::string& piece) {
    return static_cast<size_t>(
        std::count_if(piece.begin(), piece.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

}  // namespace

void Usage::add(const cellm_session_stats& choice) {
    // Every choice has the same prompt; the first one's cache reuse is the request's.
    if (choices++ == 0) {
        prompt_tokens = choice.prompt_tokens;
        cached_tokens = choice.cached_tokens;
    }
    completion_tokens += choice.generated_tokens;
}

Json chat_logprobs_json(const LogprobRows& rows) {
    Json content = Json::array();
    const auto entry = [&](const cellm_logprob& e) {
        const std::string piece = rows.piece(e.token);
        return Json{{"token", piece}, {"logprob", finite_logprob(e.logprob)}, {"bytes", byte_values(piece)}};
    };
    for (size_t at = 0; rows.row_size > 0 && at + rows.row_size <= rows.entries.size(); at += rows.row_size) {
        Json token = entry(rows.entries[at]);
        Json top = Json::array();
        for (size_t j = 1; j < rows.row_size; ++j) {
            if (rows.entries[at + j].token >= 0) top.push_back(entry(rows.entries[at + j]));
        }
        token["top_logprobs"] = std::move(top);
        content.push_back(std::move(token));
    }
    return {{"content", std::move(content)}, {"refusal", nullptr}};
}

Json completion_logprobs_json(const LogprobRows& rows, size_t& text_offset) {
    Json tokens = Json::array(), token_logprobs = Json::array(), top_logprobs = Json::array(),
         offsets = Json::array();
    for (size_t at = 0; rows.row_size > 0 && at + rows.row_size <= rows.entries.size(); at += rows.row_size) {
        const cellm_logprob& chosen = rows.entries[at];
        const std::string piece = rows.piece(chosen.token);
        tokens.push_back(piece);
        token_logprobs.push_back(finite_logprob(chosen.logprob));
        // The alternatives, and the chosen token when it is not among them (as OpenAI and vLLM answer).
        Json top = Json::object();
        for (size_t j = 1; j < rows.row_size; ++j) {
            const cellm_logprob& e = rows.entries[at + j];
            if (e.token >= 0) top[rows.piece(e.token)] = finite_logprob(e.logprob);
        }
        if (!top.contains(piece)) top[piece] = finite_logprob(chosen.logprob);
        top_logprobs.push_back(std::move(top));
        offsets.push_back(text_offset);
        text_offset += code_points(piece);
    }
    return {{"tokens", std::move(tokens)},
            {"token_logprobs", std::move(token_logprobs)},
            {"top_logprobs", std::move(top_logprobs)},
            {"text_offset", std::move(offsets)}};
}

ResponseMeta new_response_meta(Endpoint endpoint, const std::string& model, bool include_usage) {
    ResponseMeta meta;
    meta.endpoint = endpoint;
    meta.id = (endpoint == Endpoint::chat ? "chatcmpl-" : "cmpl-") + random_suffix();
    meta.created = unix_seconds();
    meta.model = model;
    meta.include_usage = include_usage;
    return meta;
}

const char* finish_reason_text(cellm_finish_reason reason) {
    switch (reason) {
        case CELLM_FINISH_LENGTH:
        case CELLM_FINISH_CONTEXT:
        case CELLM_FINISH_CANCELLED:
            return "length";
        case CELLM_FINISH_TOOL_CALLS:
            return "tool_calls";
        case CELLM_FINISH_NONE:
        case CELLM_FINISH_EOG:
        case CELLM_FINISH_STOP:
        case CELLM_FINISH_ERROR:  // answered with an error instead; listed for completeness of the switch
            break;
    }
    return "stop";
}

Json usage_json(const Usage& usage) {
    return {{"prompt_tokens", usage.prompt_tokens},
            {"completion_tokens", usage.completion_tokens},
            {"total_tokens", usage.prompt_tokens + usage.completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", usage.cached_tokens}}}};
}

Json completion_json(const ResponseMeta& meta, const std::vector<Choice>& choices, const Usage& usage) {
    Json list = Json::array();
    for (size_t i = 0; i < choices.size(); ++i) {
        Json choice = {{"index", i}};
        if (meta.endpoint == Endpoint::chat) {
            const bool calls = !choices[i].tool_calls.empty();
            // OpenAI's content is null for an answer that only calls.
            choice["message"] = {{"role", "assistant"},
                                 {"content", calls && choices[i].text.empty() ? Json(nullptr) : Json(choices[i].text)}};
            if (calls) choice["message"]["tool_calls"] = choices[i].tool_calls;
        } else {
            choice["text"] = choices[i].text;
        }
        choice["logprobs"] = choices[i].logprobs;
        choice["finish_reason"] = finish_reason_text(choices[i].reason);
        list.push_back(std::move(choice));
    }
    Json j = envelope(meta, false, std::move(list));
    j["usage"] = usage_json(usage);
    return j;
}

Json role_chunk(const ResponseMeta& meta, int32_t index) {
    return chunk(meta, index, {{"role", "assistant"}, {"content", ""}}, nullptr, nullptr);
}

Json text_chunk(const ResponseMeta& meta, int32_t index, std::string_view text, Json logprobs) {
    return chunk(meta, index, meta.endpoint == Endpoint::chat ? Json{{"content", text}} : Json(text),
                 std::move(logprobs), nullptr);
}

Json tool_call_chunk(const ResponseMeta& meta, int32_t index, const cellm_event& event) {
    Json call = {{"index", event.tool_call_index}};
    if (event.text_len == 0) {
        call["id"] = event.tool_call_id != nullptr ? event.tool_call_id : "";
        call["type"] = "function";
        call["function"] = {{"name", event.tool_name != nullptr ? event.tool_name : ""}, {"arguments", ""}};
    } else {
        call["function"] = {{"arguments", std::string_view(event.text, event.text_len)}};
    }
    return chunk(meta, index, {{"tool_calls", Json::array({std::move(call)})}}, nullptr, nullptr);
}

Json finish_chunk(const ResponseMeta& meta, int32_t index, cellm_finish_reason reason, Json logprobs) {
    return chunk(meta, index, meta.endpoint == Endpoint::chat ? Json::object() : Json(""), std::move(logprobs),
                 finish_reason_text(reason));
}

Json usage_chunk(const ResponseMeta& meta, const Usage& usage) {
    Json j = envelope(meta, true, Json::array());
    j["usage"] = usage_json(usage);
    return j;
}

Json error_json(const ApiError& error) {
    const auto or_null = [](const std::string& s) { return s.empty() ? Json(nullptr) : Json(s); };
    return {{"error",
             {{"message", error.what()},
              {"type", error.type},
              {"param", or_null(error.param)},
              {"code", or_null(error.code)}}}};
}

Json model_json(const std::string& model, int64_t created) {
    return {{"id", model}, {"object", "model"}, {"created", created}, {"owned_by", "cellm"}};
}

Json model_list_json(const std::string& model, int64_t created) {
    return {{"object", "list"}, {"data", Json::array({model_json(model, created)})}};
}

std::string dump(const Json& json) {
    return json.dump(-1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace cellm::server
