#include "http_server.h"

#include "api_error.h"
#include "openai_response.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string_view>
#include <thread>
#include <utility>

namespace cellm::server {

namespace {

struct Route {
    const char* path;
    const char* method;
};
// For 405 answers and for the endpoint label of cellm_requests_total (a fixed set, whatever paths clients try).
constexpr Route kRoutes[] = {{"/v1/chat/completions", "POST"},
                             {"/v1/completions", "POST"},
                             {"/v1/models", "GET"},
                             {"/health", "GET"},
                             {"/metrics", "GET"},
                             {"/tokenize", "POST"},
                             {"/detokenize", "POST"}};

const Route* find_route(const std::string& path) {
    for (const Route& route : kRoutes) {
        if (path == route.path) return &route;
    }
    if (path.rfind("/v1/models/", 0) == 0) return &kRoutes[2];  // one model, by id
    return nullptr;
}

void send_json(http::Response& response, int status, const Json& body) {
    response.status = status;
    response.set_content(dump(body), "application/json");
}

void send_error(http::Response& response, const ApiError& error) {
    if (error.status == 401) response.set_header("WWW-Authenticate", "Bearer");
    send_json(response, error.status, error_json(error));
}

// Runs a route's work and answers the ApiError it throws.
void respond(http::Response& response, const std::function<void()>& work) {
    try {
        work();
    } catch (const ApiError& error) {
        send_error(response, error);
    }
}

ApiError model_not_found(const std::string& model) {
    return ApiError(404, "The model '" + model + "' does not exist", "model_not_found", "model");
}

ApiError generation_failed(const cellm_session_stats& stats) {
    return ApiError(500, stats.error && *stats.error ? stats.error : "generation failed", "generation_failed", {},
                    "server_error");
}

// A path no route has: 404, or 405 with the method the path takes.
ApiError no_route(const http::Request& request, http::Response& response) {
    const Route* route = find_route(request.path);
    if (!route) return ApiError(404, "no such endpoint: " + request.method + " " + request.path, "not_found");
    response.set_header("Allow", route->method);
    return ApiError(405, request.method + " is not allowed on " + request.path + "; use " + route->method,
                    "method_not_allowed");
}

// Compares every byte whatever the first difference, so the time taken does not tell how much of a guess
// was right.
bool same_secret(std::string_view given, std::string_view secret) {
    if (given.size() != secret.size()) return false;
    unsigned char difference = 0;
    for (size_t i = 0; i < secret.size(); ++i) difference |= static_cast<unsigned char>(given[i] ^ secret[i]);
    return difference == 0;
}

bool send_event(http::BodySink& sink, const std::string& data) {
    const std::string event = "data: " + data + "\n\n";
    return sink.write(event);
}

// A request's choices, one session each.
using Generations = std::vector<std::unique_ptr<Generation>>;

// With n > 1, each pass asks every choice without waiting; only a pass with no news waits, this long, on one of
// them, so no choice's events wait on another's poll.
constexpr int32_t kIdlePollMs = 5;

// Where one streamed choice stands.
struct StreamedChoice {
    Generation* generation;
    size_t rows_sent = 0;     // log-probability rows already sent
    size_t text_offset = 0;   // completions' logprobs.text_offset of the next token
    bool done = false;
};

// The log-probabilities of the tokens of `choice` from the last ones sent up to `up_to` (all: SIZE_MAX), in the
// endpoint's shape; null when the request did not ask for them or there are none.
Json next_logprobs(const ResponseMeta& meta, StreamedChoice& choice, size_t up_to, cellm_engine* engine) {
    if (!meta.logprobs) return nullptr;
    size_t row_size = 0;
    const std::vector<cellm_logprob> entries = choice.generation->logprobs(&row_size);
    const size_t rows = std::min(up_to, row_size > 0 ? entries.size() / row_size : 0);
    const size_t first = std::min(choice.rows_sent, rows);
    if (first == rows) return nullptr;
    const LogprobRows span{std::span(entries).subspan(first * row_size, (rows - first) * row_size), row_size,
                           [engine](int32_t token) { return token_piece(engine, token); }};
    choice.rows_sent = rows;
    return meta.endpoint == Endpoint::chat ? chat_logprobs_json(span) : completion_logprobs_json(span, choice.text_offset);
}

// The SSE answer: per choice a role chunk (chat), text chunks and a final chunk, interleaved as they come; then a
// usage chunk (include_usage) and [DONE]. False when the client is gone.
bool stream_events(Generations& generations, const ResponseMeta& meta, http::BodySink& sink, cellm_engine* engine) {
    std::vector<StreamedChoice> choices;
    for (const auto& g : generations) choices.push_back({g.get()});
    for (size_t i = 0; i < choices.size() && meta.endpoint == Endpoint::chat; ++i) {
        if (!send_event(sink, dump(role_chunk(meta, static_cast<int32_t>(i))))) return false;
    }
    Usage usage;
    size_t running = choices.size();
    bool failed = false;
    // Sends what one event means; false when the client is gone. A failed turn sets `failed`.
    const auto handle = [&](size_t i, const cellm_event& event) {
        StreamedChoice& choice = choices[i];
        const auto index = static_cast<int32_t>(i);
        if (event.kind == CELLM_EVENT_TEXT) {
            Json logprobs = next_logprobs(meta, choice, static_cast<size_t>(event.generated_tokens), engine);
            return send_event(sink, dump(text_chunk(meta, index, {event.text, event.text_len}, std::move(logprobs))));
        }
        if (event.kind == CELLM_EVENT_TOOL_CALL) return send_event(sink, dump(tool_call_chunk(meta, index, event)));
        const cellm_session_stats stats = choice.generation->stats();
        choice.done = true;
        --running;
        // Too late for an error status once streaming: the error goes out as an event, as OpenAI's servers do.
        if (event.finish_reason == CELLM_FINISH_ERROR) {
            failed = true;
            return send_event(sink, dump(error_json(generation_failed(stats))));
        }
        usage.add(stats);
        // Tokens whose text never showed (a stop string's) still have their rows.
        Json logprobs = next_logprobs(meta, choice, SIZE_MAX, engine);
        return send_event(sink, dump(finish_chunk(meta, index, event.finish_reason, std::move(logprobs))));
    };
    while (running > 0 && !failed) {
        bool any = false;
        for (size_t i = 0; i < choices.size() && choices.size() > 1; ++i) {
            if (choices[i].done) continue;
            const std::optional<cellm_event> event = choices[i].generation->next(0);
            if (!event) continue;
            any = true;
            if (!handle(i, *event)) return false;
        }
        if (any) continue;
        // Nothing came: wait on the first choice still running.
        const size_t i = static_cast<size_t>(std::find_if(choices.begin(), choices.end(), [](const StreamedChoice& c) {
                                                 return !c.done;
                                             }) - choices.begin());
        const std::optional<cellm_event> event =
            choices[i].generation->next(choices.size() > 1 ? kIdlePollMs : Generation::kPollMs);
        if (event) {
            if (!handle(i, *event)) return false;
        } else if (!sink.connected()) {
            // Nothing to send for now (a long prompt, a busy engine): make sure the client still listens.
            return false;
        }
    }
    if (failed) {
        // The answer is lost as a whole: the other choices stop now.
        for (const StreamedChoice& c : choices) {
            if (!c.done) c.generation->abandon();
        }
    } else if (meta.include_usage && !send_event(sink, dump(usage_chunk(meta, usage)))) {
        return false;
    }
    return send_event(sink, "[DONE]");
}

// The whole stream, on the worker that answers the request.
bool stream(Generations& generations, const ResponseMeta& meta, http::BodySink& sink, cellm_engine* engine) {
    bool finished = false;
    try {
        finished = stream_events(generations, meta, sink, engine);
    } catch (...) {
        // An engine failure mid-stream: nothing more can be said to the client, the connection just ends.
        // Nothing may escape: the status line went out already.
    }
    if (!finished) {
        for (const auto& g : generations) g->abandon();
    }
    return finished;
}

// Whether `text` is valid UTF-8 (llama-server shows a piece that is not as its byte values).
bool valid_utf8(std::string_view text) {
    for (size_t i = 0; i < text.size();) {
        const auto c = static_cast<unsigned char>(text[i]);
        const size_t length = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
        if (length == 0 || i + length > text.size()) return false;
        for (size_t k = 1; k < length; ++k) {
            if ((static_cast<unsigned char>(text[i + k]) & 0xC0) != 0x80) return false;
        }
        i += length;
    }
    return true;
}

}  // namespace

HttpServer::HttpServer(cellm_engine* engine, ServerConfig config)
    : engine_(engine), config_(std::move(config)),
      started_(std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
                   .count()) {
    cellm_engine_info info{};
    info.struct_size = sizeof info;
    if (cellm_engine_get_info(engine_, &info) != CELLM_SUCCESS) throw std::runtime_error(cellm_last_error());
    n_vocab_ = info.n_vocab;
    http::TransportLimits limits = config_.transport;
    limits.parser.max_body_bytes = config_.max_body_bytes;
    http::Transport::Hooks hooks;
    hooks.handle = [this](const http::Request& request, http::Response& response) { route(request, response); };
    // Probes never wait behind generations: health needs nothing but the loop, metrics the engine's lock.
    hooks.lane = [](const http::Request& request) {
        if (request.method == "GET" && request.path == "/health") return http::Lane::loop;
        if (request.method == "GET" && request.path == "/metrics") return http::Lane::probe;
        return http::Lane::worker;
    };
    hooks.refuse = [](http::Response& response, int status, const std::string& message, const std::string& code) {
        const char* type = status == 429 ? "requests" : status >= 500 ? "server_error" : "invalid_request_error";
        send_error(response, ApiError(status, message, code, {}, type));
    };
    // After the answer is written, streams included, so each request is counted once with its final status.
    hooks.answered = [this](const http::Request& request, int status) {
        const Route* known = find_route(request.path);
        metrics_.count_request(known ? known->path : "other", status);
    };
    http_ = std::make_unique<http::Transport>(limits, std::move(hooks));
}

HttpServer::~HttpServer() = default;

int HttpServer::bind() { return http_->bind(config_.host, config_.port); }

void HttpServer::run() { http_->run(); }

void HttpServer::shutdown() {
    http_->stop();
    in_flight_.drain(config_.shutdown_grace);
}

void HttpServer::route(const http::Request& request, http::Response& response) {
    respond(response, [&] {
        const std::string& path = request.path;
        const Route* known = find_route(path);
        if (!known || request.method != known->method) throw no_route(request, response);
        if (path == "/health") return send_json(response, 200, {{"status", "ok"}});  // open without a key
        authorize(request);
        if (path == "/v1/chat/completions") return completions(request.body, response, Endpoint::chat);
        if (path == "/v1/completions") return completions(request.body, response, Endpoint::completion);
        if (path == "/tokenize") return tokenize(request.body, response);
        if (path == "/detokenize") return detokenize(request.body, response);
        if (path == "/metrics") return metrics(response);
        if (path == "/v1/models") return models(response);
        model(path.substr(std::string_view("/v1/models/").size()), response);
    });
}

void HttpServer::authorize(const http::Request& request) const {
    if (config_.api_key.empty()) return;
    constexpr std::string_view kBearer = "Bearer ";
    const std::string header = request.header("authorization");
    if (header.empty()) {
        throw ApiError(401, "an API key is required: send it as Authorization: Bearer KEY", "invalid_api_key");
    }
    const std::string_view given = std::string_view(header).substr(std::min(header.size(), kBearer.size()));
    if (header.rfind(kBearer, 0) != 0 || !same_secret(given, config_.api_key)) {
        throw ApiError(401, "incorrect API key", "invalid_api_key");
    }
}

void HttpServer::completions(const std::string& body, http::Response& response, Endpoint endpoint) {
    const CompletionRequest parsed = parse_completion_request(endpoint, body, n_vocab_);
    if (parsed.model && *parsed.model != config_.model_id) throw model_not_found(*parsed.model);

    ResponseMeta meta = new_response_meta(endpoint, config_.model_id, parsed.stream && parsed.include_usage);
    meta.logprobs = parsed.logprobs;
    // Shared with the stream, which the response holds; the sessions go when the response does.
    auto generations = std::make_shared<Generations>();
    std::optional<std::chrono::steady_clock::time_point> deadline;
    if (config_.max_request_duration.count() > 0) deadline = std::chrono::steady_clock::now() + config_.max_request_duration;
    for (int32_t i = 0; i < parsed.n; ++i) {
        InFlight::Ticket ticket = in_flight_.enter();
        if (!ticket) throw ApiError(503, "the server is shutting down", "server_shutting_down", {}, "server_error");
        const std::string name = parsed.n == 1 ? meta.id : meta.id + "/" + std::to_string(i);
        generations->push_back(
            std::make_unique<Generation>(engine_, parsed, i, name, std::move(ticket), metrics_, deadline));
    }
    if (parsed.stream) {
        response.set_header("Cache-Control", "no-cache");
        response.content_type = "text/event-stream";
        response.stream = [generations, meta, engine = engine_](http::BodySink& sink) {
            return stream(*generations, meta, sink, engine);
        };
        return;
    }
    std::vector<Choice> choices;
    Usage usage;
    for (const auto& generation : *generations) {
        const cellm_finish_reason reason = generation->wait();
        const cellm_session_stats stats = generation->stats();
        if (reason == CELLM_FINISH_ERROR) throw generation_failed(stats);
        usage.add(stats);
        Json logprobs = nullptr;
        if (parsed.logprobs) {
            size_t row_size = 0;
            const std::vector<cellm_logprob> entries = generation->logprobs(&row_size);
            const LogprobRows rows{entries, row_size, [this](int32_t token) { return token_piece(engine_, token); }};
            size_t text_offset = 0;
            logprobs = endpoint == Endpoint::chat ? chat_logprobs_json(rows) : completion_logprobs_json(rows, text_offset);
        }
        Json calls = Json::parse(generation->tool_calls(), nullptr, false);
        if (!calls.is_array()) calls = Json::array();
        choices.push_back({generation->text(), reason, std::move(logprobs), std::move(calls)});
    }
    send_json(response, 200, completion_json(meta, choices, usage));
}

void HttpServer::tokenize(const std::string& body, http::Response& response) const {
    const TokenizeRequest parsed = parse_tokenize_request(body);
    size_t n = 0;
    if (cellm_engine_tokenize(engine_, parsed.content.c_str(), parsed.add_special, nullptr, 0, &n) != CELLM_SUCCESS) {
        throw ApiError(500, cellm_last_error(), "internal_error", {}, "server_error");
    }
    std::vector<int32_t> ids(n);
    if (cellm_engine_tokenize(engine_, parsed.content.c_str(), parsed.add_special, ids.data(), ids.size(), &n) !=
        CELLM_SUCCESS) {
        throw ApiError(500, cellm_last_error(), "internal_error", {}, "server_error");
    }
    Json tokens = Json::array();
    for (const int32_t id : ids) {
        if (!parsed.with_pieces) {
            tokens.push_back(id);
            continue;
        }
        // As llama-server: the piece as text when it is valid UTF-8, else its byte values.
        const std::string piece = token_piece(engine_, id);
        Json shown = piece;
        if (!valid_utf8(piece)) {
            shown = Json::array();
            for (const char c : piece) shown.push_back(static_cast<unsigned char>(c));
        }
        tokens.push_back({{"id", id}, {"piece", std::move(shown)}});
    }
    send_json(response, 200, {{"tokens", std::move(tokens)}});
}

void HttpServer::detokenize(const std::string& body, http::Response& response) const {
    const std::vector<int32_t> ids = parse_detokenize_request(body, n_vocab_);
    size_t length = 0;
    if (cellm_engine_detokenize(engine_, ids.data(), ids.size(), nullptr, 0, &length) != CELLM_SUCCESS) {
        throw ApiError(500, cellm_last_error(), "internal_error", {}, "server_error");
    }
    std::string text(length, '\0');
    if (cellm_engine_detokenize(engine_, ids.data(), ids.size(), text.data(), text.size(), &length) != CELLM_SUCCESS) {
        throw ApiError(500, cellm_last_error(), "internal_error", {}, "server_error");
    }
    send_json(response, 200, {{"content", text}});
}

void HttpServer::models(http::Response& response) const {
    send_json(response, 200, model_list_json(config_.model_id, started_));
}

void HttpServer::model(const std::string& id, http::Response& response) const {
    if (id != config_.model_id) throw model_not_found(id);
    send_json(response, 200, model_json(config_.model_id, started_));
}

void HttpServer::metrics(http::Response& response) const {
    cellm_engine_stats stats{};
    stats.struct_size = sizeof stats;
    if (cellm_engine_get_stats(engine_, &stats) != CELLM_SUCCESS) {
        throw ApiError(500, cellm_last_error(), "internal_error", {}, "server_error");
    }
    response.set_content(metrics_.render(stats, http_->counters()), "text/plain; version=0.0.4; charset=utf-8");
}

}  // namespace cellm::server
