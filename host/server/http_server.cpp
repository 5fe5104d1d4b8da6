#include "http_server.h"

#include "api_error.h"
#include "openai_response.h"

#include <httplib.h>

#include <sys/socket.h>

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

// Each open connection holds a worker thread, a streaming one for its whole answer: httplib's default pool
// (about the core count) would queue the streams of more clients than cores instead of batching them.
constexpr size_t kWorkerThreads = 64;

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

void send_json(httplib::Response& response, int status, const Json& body) {
    response.status = status;
    response.set_content(dump(body), "application/json");
}

void send_error(httplib::Response& response, const ApiError& error) {
    if (error.status == 401) response.set_header("WWW-Authenticate", "Bearer");
    send_json(response, error.status, error_json(error));
}

// Runs a route's work and answers the ApiError it throws.
void respond(httplib::Response& response, const std::function<void()>& work) {
    try {
        work();
    } catch (const ApiError& error) {
        send_error(response, error);
    }
}

ApiError body_too_large(size_t max_body_bytes) {
    return ApiError(413, "the request body is larger than " + std::to_string(max_body_bytes) + " bytes",
                    "request_too_large");
}

// Read through httplib's content reader so that a chunked body, which httplib does not hold to
// set_payload_max_length (it checks only a declared Content-Length), is not kept beyond the limit either. The
// rest of an oversized body is read and dropped, as httplib does with a declared one, so the connection stays
// usable for the next request.
std::string read_body(const httplib::ContentReader& reader, httplib::Response& response, size_t max_body_bytes) {
    std::string body;
    bool too_large = false;
    const bool complete = reader([&](const char* data, size_t size) {
        too_large = too_large || body.size() + size > max_body_bytes;
        if (!too_large) body.append(data, size);
        return true;
    });
    if (too_large || response.status == 413) throw body_too_large(max_body_bytes);
    if (!complete) throw ApiError(400, "the request body could not be read", "bad_request");
    return body;
}

ApiError model_not_found(const std::string& model) {
    return ApiError(404, "The model '" + model + "' does not exist", "model_not_found", "model");
}

ApiError generation_failed(const cellm_session_stats& stats) {
    return ApiError(500, stats.error && *stats.error ? stats.error : "generation failed", "generation_failed", {},
                    "server_error");
}

// The answers httplib gives by itself (no route, body over the limit, unparsable request), as ApiErrors.
ApiError transport_error(const httplib::Request& request, httplib::Response& response, size_t max_body_bytes) {
    switch (response.status) {
        case 404: {
            const Route* route = find_route(request.path);
            if (!route) return ApiError(404, "no such endpoint: " + request.method + " " + request.path, "not_found");
            response.set_header("Allow", route->method);
            return ApiError(405, request.method + " is not allowed on " + request.path + "; use " + route->method,
                            "method_not_allowed");
        }
        case 413:
            return body_too_large(max_body_bytes);
        case 400:
            return ApiError(400, "malformed HTTP request", "bad_request");
        default:
            return ApiError(response.status, "HTTP error " + std::to_string(response.status), {}, {},
                            response.status >= 500 ? "server_error" : "invalid_request_error");
    }
}

// Compares every byte whatever the first difference, so the time taken does not tell how much of a guess
// was right.
bool same_secret(std::string_view given, std::string_view secret) {
    if (given.size() != secret.size()) return false;
    unsigned char difference = 0;
    for (size_t i = 0; i < secret.size(); ++i) difference |= static_cast<unsigned char>(given[i] ^ secret[i]);
    return difference == 0;
}

bool send_event(httplib::DataSink& sink, const std::string& data) {
    const std::string event = "data: " + data + "\n\n";
    return sink.write(event.data(), event.size());
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
bool stream_events(Generations& generations, const ResponseMeta& meta, httplib::DataSink& sink, cellm_engine* engine) {
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
        } else if (!sink.is_writable()) {
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
    if (!send_event(sink, "[DONE]")) return false;
    sink.done();
    return true;
}

// The whole stream runs in one call of httplib's content provider: between calls httplib ends a response for
// good once the server is stopping, which would cut streams off without their final chunk at shutdown.
bool stream(Generations& generations, const ResponseMeta& meta, httplib::DataSink& sink, cellm_engine* engine) {
    bool finished = false;
    try {
        finished = stream_events(generations, meta, sink, engine);
    } catch (...) {
        // An engine failure mid-stream: nothing more can be said to the client, the connection just ends.
        // Nothing may escape: this runs on httplib's worker thread, outside its exception handling.
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
                   .count()),
      http_(std::make_unique<httplib::Server>()) {
    cellm_engine_info info{};
    info.struct_size = sizeof info;
    if (cellm_engine_get_info(engine_, &info) != CELLM_SUCCESS) throw std::runtime_error(cellm_last_error());
    n_vocab_ = info.n_vocab;
    httplib::Server& http = *http_;
    http.new_task_queue = [] { return new httplib::ThreadPool(kWorkerThreads); };
    http.set_payload_max_length(config_.max_body_bytes);
    http.set_tcp_nodelay(true);  // each SSE chunk is a small write that must leave at once
    // httplib's default sets SO_REUSEPORT, which lets a second server share a busy port silently.
    http.set_socket_options([](int socket) {
        const int yes = 1;
        setsockopt(socket, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof yes);
    });

    const std::pair<const char*, Endpoint> completion_routes[] = {{"/v1/chat/completions", Endpoint::chat},
                                                                  {"/v1/completions", Endpoint::completion}};
    for (const auto& [path, endpoint] : completion_routes) {
        http.Post(path, [this, endpoint = endpoint](const httplib::Request& request, httplib::Response& response,
                                                    const httplib::ContentReader& reader) {
            respond(response, [&] {
                const std::string body = read_body(reader, response, config_.max_body_bytes);
                // After the body: answering before it was read would leave it in the way of the next request.
                authorize(request);
                completions(body, response, endpoint);
            });
        });
    }
    // llama-server's tokenizer routes.
    const std::pair<const char*, void (HttpServer::*)(const std::string&, httplib::Response&) const> token_routes[] = {
        {"/tokenize", &HttpServer::tokenize}, {"/detokenize", &HttpServer::detokenize}};
    for (const auto& [path, route] : token_routes) {
        http.Post(path, [this, route = route](const httplib::Request& request, httplib::Response& response,
                                              const httplib::ContentReader& reader) {
            respond(response, [&] {
                const std::string body = read_body(reader, response, config_.max_body_bytes);
                authorize(request);
                (this->*route)(body, response);
            });
        });
    }
    http.Get("/v1/models", [this](const httplib::Request& request, httplib::Response& response) {
        respond(response, [&] {
            authorize(request);
            models(response);
        });
    });
    http.Get("/v1/models/(.+)", [this](const httplib::Request& request, httplib::Response& response) {
        respond(response, [&] {
            authorize(request);
            model(request.matches[1], response);
        });
    });
    http.Get("/metrics", [this](const httplib::Request& request, httplib::Response& response) {
        respond(response, [&] {
            authorize(request);
            metrics(response);
        });
    });
    // Open without a key: load balancers and orchestrators probe it.
    http.Get("/health", [](const httplib::Request&, httplib::Response& response) {
        send_json(response, 200, {{"status", "ok"}});
    });

    // Called for every answer of status >= 400, ours included: those already carry their JSON body.
    http.set_error_handler(httplib::Server::HandlerWithResponse(
        [this](const httplib::Request& request, httplib::Response& response) {
            if (!response.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
            send_error(response, transport_error(request, response, config_.max_body_bytes));
            return httplib::Server::HandlerResponse::Handled;
        }));
    http.set_exception_handler([](const httplib::Request&, httplib::Response& response, std::exception_ptr error) {
        std::string message = "internal error";
        try {
            std::rethrow_exception(error);
        } catch (const std::exception& e) {
            message = e.what();
        } catch (...) {
            // not an exception class: nothing better to say than the generic message
        }
        send_error(response, ApiError(500, message, "internal_error", {}, "server_error"));
    });
    // After the answer is written, streams included, so each request is counted once with its final status.
    http.set_logger([this](const httplib::Request& request, const httplib::Response& response) {
        const Route* route = find_route(request.path);
        metrics_.count_request(route ? route->path : "other", response.status);
    });
}

HttpServer::~HttpServer() = default;

int HttpServer::bind() {
    errno = 0;
    const int port = config_.port == 0 ? http_->bind_to_any_port(config_.host)
                     : http_->bind_to_port(config_.host, config_.port) ? config_.port
                                                                       : -1;
    if (port < 0) {
        const int error = errno;
        throw std::runtime_error("cannot listen on " + config_.host + ":" + std::to_string(config_.port) +
                                 (error != 0 ? std::string(": ") + std::strerror(error) : std::string()));
    }
    return port;
}

void HttpServer::run() {
    http_->listen_after_bind();
    finished_ = true;
}

void HttpServer::shutdown() {
    // httplib's stop() does nothing before listen_after_bind() has started, and a signal may come that early.
    while (!http_->is_running() && !finished_) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    http_->stop();
    in_flight_.drain(config_.shutdown_grace);
}

void HttpServer::authorize(const httplib::Request& request) const {
    if (config_.api_key.empty()) return;
    constexpr std::string_view kBearer = "Bearer ";
    const std::string header = request.get_header_value("Authorization");
    if (header.empty()) {
        throw ApiError(401, "an API key is required: send it as Authorization: Bearer KEY", "invalid_api_key");
    }
    const std::string_view given = std::string_view(header).substr(std::min(header.size(), kBearer.size()));
    if (header.rfind(kBearer, 0) != 0 || !same_secret(given, config_.api_key)) {
        throw ApiError(401, "incorrect API key", "invalid_api_key");
    }
}

void HttpServer::completions(const std::string& body, httplib::Response& response, Endpoint endpoint) {
    const CompletionRequest parsed = parse_completion_request(endpoint, body, n_vocab_);
    if (parsed.model && *parsed.model != config_.model_id) throw model_not_found(*parsed.model);

    ResponseMeta meta = new_response_meta(endpoint, config_.model_id, parsed.stream && parsed.include_usage);
    meta.logprobs = parsed.logprobs;
    // Shared with the content provider, which httplib copies; the sessions go when the response does.
    auto generations = std::make_shared<Generations>();
    for (int32_t i = 0; i < parsed.n; ++i) {
        InFlight::Ticket ticket = in_flight_.enter();
        if (!ticket) throw ApiError(503, "the server is shutting down", "server_shutting_down", {}, "server_error");
        const std::string name = parsed.n == 1 ? meta.id : meta.id + "/" + std::to_string(i);
        generations->push_back(std::make_unique<Generation>(engine_, parsed, i, name, std::move(ticket), metrics_));
    }
    if (parsed.stream) {
        response.set_header("Cache-Control", "no-cache");
        response.set_chunked_content_provider("text/event-stream",
                                              [generations, meta, engine = engine_](size_t, httplib::DataSink& sink) {
                                                  return stream(*generations, meta, sink, engine);
                                              });
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
        choices.push_back({generation->text(), reason, std::move(logprobs)});
    }
    send_json(response, 200, completion_json(meta, choices, usage));
}

void HttpServer::tokenize(const std::string& body, httplib::Response& response) const {
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

void HttpServer::detokenize(const std::string& body, httplib::Response& response) const {
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

void HttpServer::models(httplib::Response& response) const {
    send_json(response, 200, model_list_json(config_.model_id, started_));
}

void HttpServer::model(const std::string& id, httplib::Response& response) const {
    if (id != config_.model_id) throw model_not_found(id);
    send_json(response, 200, model_json(config_.model_id, started_));
}

void HttpServer::metrics(httplib::Response& response) const {
    cellm_engine_stats stats{};
    stats.struct_size = sizeof stats;
    if (cellm_engine_get_stats(engine_, &stats) != CELLM_SUCCESS) {
        throw ApiError(500, cellm_last_error(), "internal_error", {}, "server_error");
    }
    response.set_content(metrics_.render(stats), "text/plain; version=0.0.4; charset=utf-8");
}

}  // namespace cellm::server
