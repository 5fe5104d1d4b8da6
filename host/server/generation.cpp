#include "generation.h"

#include "api_error.h"

#include <vector>

namespace cellm::server {

namespace {

// An SDK failure as the client sees it. Reads cellm_last_error(), so call it right after the failing call.
// The field an engine message names at its start ("tools[1].function.parameters: ..."), for the error's param.
std::string named_field(const std::string& message) {
    for (const char* field : {"tools", "tool_choice", "messages", "chat_template_kwargs"}) {
        const size_t n = std::char_traits<char>::length(field);
        if (message.compare(0, n, field) != 0 || message.size() <= n) continue;
        if (const size_t colon = message.find(": "); colon != std::string::npos &&
                                                     message.find(' ') == colon + 1) {
            return message.substr(0, colon);
        }
    }
    return {};
}

ApiError sdk_error(cellm_result result) {
    std::string message = cellm_last_error();
    if (message.empty()) message = cellm_result_name(result);
    switch (result) {
        case CELLM_E_INVALID_ARGUMENT:
            return ApiError(400, message, "invalid_value", named_field(message));
        case CELLM_E_CLOSED:
            return ApiError(503, message, "server_shutting_down", {}, "server_error");
        default:
            return ApiError(500, message, "internal_error", {}, "server_error");
    }
}

void expect(cellm_result result) {
    if (result != CELLM_SUCCESS) throw sdk_error(result);
}

double seconds(std::chrono::steady_clock::duration d) {
    return std::chrono::duration<double>(d).count();
}

// Images for a model without a vision encoder: the request's fault (400), found before a session is made.
void check_takes_images(cellm_engine* engine, const CompletionRequest& request) {
    if (request.images.empty()) return;
    cellm_engine_info info{};
    info.struct_size = sizeof info;
    expect(cellm_engine_get_info(engine, &info));
    if (!info.model_takes_images) {
        const std::string model = info.model_name ? info.model_name : "it";
        throw ApiError(400, "the model takes no images: " + model + " has no vision encoder", "unsupported_value",
                       request.images_param);
    }
}

}  // namespace

std::string token_piece(cellm_engine* engine, int32_t token) {
    size_t length = 0;
    expect(cellm_engine_detokenize(engine, &token, 1, nullptr, 0, &length));
    std::string piece(length, '\0');
    expect(cellm_engine_detokenize(engine, &token, 1, piece.data(), piece.size(), &length));
    return piece;
}

InFlight::Ticket InFlight::enter() {
    const std::lock_guard lock(mutex_);
    if (draining_) return nullptr;
    ++active_;
    return Ticket(this);
}

void InFlight::leave() {
    const std::lock_guard lock(mutex_);
    if (--active_ == 0) idle_.notify_all();
}

void InFlight::drain(std::chrono::milliseconds grace) {
    std::unique_lock lock(mutex_);
    draining_ = true;
    if (!idle_.wait_for(lock, grace, [this] { return active_ == 0; })) cancelling_ = true;
}

Generation::Generation(cellm_engine* engine, const CompletionRequest& request, int32_t choice, const std::string& name,
                       InFlight::Ticket ticket, Metrics& metrics,
                       std::optional<std::chrono::steady_clock::time_point> deadline)
    : ticket_(std::move(ticket)), metrics_(metrics), deadline_(deadline) {
    check_takes_images(engine, request);
    cellm_session_options options{};
    options.struct_size = sizeof options;
    expect(cellm_session_options_init(engine, &options));
    std::vector<const char*> stop;
    apply_sampling(request, choice, options, stop);
    options.name = name.c_str();
    cellm_session* session = nullptr;
    const cellm_result created = cellm_session_create(engine, &options, &session);
    if (created == CELLM_E_GRAMMAR) {
        throw ApiError(400, cellm_last_error(), "invalid_value", request.tools ? "tools" : request.constraint_param);
    }
    expect(created);
    session_.reset(session);

    submitted_ = std::chrono::steady_clock::now();
    cellm_result submitted = CELLM_SUCCESS;
    if (request.endpoint == Endpoint::chat && (request.tools || request.messages_have_tools)) {
        submitted = cellm_session_submit_chat_json(session, request.messages_json.c_str());
    } else if (request.endpoint == Endpoint::chat) {
        std::vector<cellm_message> messages;
        for (const ChatMessage& m : request.messages) messages.push_back({m.role.c_str(), m.content.c_str()});
        if (request.images.empty()) {
            submitted = cellm_session_submit_chat(session, messages.data(), messages.size());
        } else {
            std::vector<cellm_image> images;
            for (const std::vector<uint8_t>& bytes : request.images) images.push_back({bytes.data(), bytes.size()});
            // An image that does not decode is CELLM_E_PROMPT, its message naming the image: 400 below.
            submitted = cellm_session_submit_chat_images(session, messages.data(), messages.size(), images.data(),
                                                         images.size());
        }
    } else {
        submitted = cellm_session_submit_text(session, request.prompt.c_str());
    }
    const char* param = request.endpoint == Endpoint::chat ? "messages" : "prompt";
    if (submitted == CELLM_E_TOO_LONG) throw ApiError(400, cellm_last_error(), "context_length_exceeded", param);
    if (submitted == CELLM_E_PROMPT) throw ApiError(400, cellm_last_error(), "invalid_prompt", param);
    expect(submitted);
}

Generation::~Generation() {
    if (session_) count_tokens();
}

std::optional<cellm_event> Generation::next(int32_t timeout_ms) {
    const bool overdue = deadline_ && std::chrono::steady_clock::now() >= *deadline_;
    if (!cancel_sent_ && (ticket_->cancelling() || overdue)) {
        if (overdue) metrics_.count_overdue();
        cellm_session_cancel(session_.get());
        cancel_sent_ = true;
    }
    cellm_event event{};
    event.struct_size = sizeof event;
    const cellm_result result = cellm_session_poll(session_.get(), timeout_ms, &event);
    if (result == CELLM_E_TIMEOUT) return std::nullopt;
    expect(result);

    const auto now = std::chrono::steady_clock::now();
    if (event.kind == CELLM_EVENT_TEXT) {
        if (text_seen_) {
            metrics_.observe_inter_token(seconds(now - last_text_), event.generated_tokens - tokens_seen_);
        } else {
            metrics_.observe_time_to_first_token(seconds(now - submitted_));
        }
        text_seen_ = true;
        last_text_ = now;
        tokens_seen_ = event.generated_tokens;
    } else {
        // Before the caller answers, so /metrics agrees with the usage the client receives.
        count_tokens();
    }
    return event;
}

cellm_finish_reason Generation::wait() {
    while (true) {
        const std::optional<cellm_event> event = next();
        if (event && event->kind == CELLM_EVENT_DONE) return event->finish_reason;
    }
}

void Generation::abandon() {
    count_tokens();
    session_.reset();  // cancels the turn and returns its KV blocks to the pool
}

cellm_session_stats Generation::stats() {
    cellm_session_stats stats{};
    stats.struct_size = sizeof stats;
    expect(cellm_session_get_stats(session_.get(), &stats));
    return stats;
}

std::string Generation::text() {
    const char* text = nullptr;
    size_t length = 0;
    expect(cellm_session_get_text(session_.get(), &text, &length));
    return {text, length};
}

std::string Generation::tool_calls() {
    const char* json = nullptr;
    size_t length = 0;
    expect(cellm_session_get_tool_calls(session_.get(), &json, &length));
    return {json, length};
}

std::vector<cellm_logprob> Generation::logprobs(size_t* row_size) {
    const cellm_logprob* entries = nullptr;
    size_t n_tokens = 0;
    expect(cellm_session_get_logprobs(session_.get(), &entries, &n_tokens, row_size));
    return {entries, entries + n_tokens * *row_size};
}

// Once per request, whichever way it ends. Also runs from the destructor, so it never throws: a session
// whose stats cannot be read is simply not counted.
void Generation::count_tokens() {
    if (tokens_counted_) return;
    tokens_counted_ = true;
    cellm_session_stats s{};
    s.struct_size = sizeof s;
    if (cellm_session_get_stats(session_.get(), &s) == CELLM_SUCCESS) {
        metrics_.count_tokens(s.prompt_tokens, s.generated_tokens);
    }
}

}  // namespace cellm::server
