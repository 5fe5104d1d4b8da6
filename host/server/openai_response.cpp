#include "openai_response.h"

#include <chrono>
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
Json chunk(const ResponseMeta& meta, Json content, const Json& finish_reason) {
    Json choice = {{"index", 0}};
    choice[meta.endpoint == Endpoint::chat ? "delta" : "text"] = std::move(content);
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = finish_reason;
    Json j = envelope(meta, true, Json::array({std::move(choice)}));
    if (meta.include_usage) j["usage"] = nullptr;
    return j;
}

}  // namespace

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
        case CELLM_FINISH_NONE:
        case CELLM_FINISH_EOG:
        case CELLM_FINISH_STOP:
        case CELLM_FINISH_ERROR:  // answered with an error instead; listed for completeness of the switch
            break;
    }
    return "stop";
}

Json usage_json(const cellm_session_stats& stats) {
    return {{"prompt_tokens", stats.prompt_tokens},
            {"completion_tokens", stats.generated_tokens},
            {"total_tokens", stats.prompt_tokens + stats.generated_tokens},
            {"prompt_tokens_details", {{"cached_tokens", stats.cached_tokens}}}};
}

Json completion_json(const ResponseMeta& meta, std::string_view text, cellm_finish_reason reason,
                     const cellm_session_stats& stats) {
    Json choice = {{"index", 0}};
    if (meta.endpoint == Endpoint::chat) {
        choice["message"] = {{"role", "assistant"}, {"content", text}};
    } else {
        choice["text"] = text;
    }
    choice["logprobs"] = nullptr;
    choice["finish_reason"] = finish_reason_text(reason);
    Json j = envelope(meta, false, Json::array({std::move(choice)}));
    j["usage"] = usage_json(stats);
    return j;
}

Json role_chunk(const ResponseMeta& meta) {
    return chunk(meta, {{"role", "assistant"}, {"content", ""}}, nullptr);
}

Json text_chunk(const ResponseMeta& meta, std::string_view text) {
    return chunk(meta, meta.endpoint == Endpoint::chat ? Json{{"content", text}} : Json(text), nullptr);
}

Json finish_chunk(const ResponseMeta& meta, cellm_finish_reason reason) {
    return chunk(meta, meta.endpoint == Endpoint::chat ? Json::object() : Json(""), finish_reason_text(reason));
}

Json usage_chunk(const ResponseMeta& meta, const cellm_session_stats& stats) {
    Json j = envelope(meta, true, Json::array());
    j["usage"] = usage_json(stats);
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
