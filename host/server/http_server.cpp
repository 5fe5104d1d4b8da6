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
                             {"/metrics", "GET"}};

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

// The SSE answer: role chunk (chat), text chunks, final chunk, usage chunk (include_usage), [DONE]. False
// when the client is gone.
bool stream_events(Generation& generation, const ResponseMeta& meta, httplib::DataSink& sink) {
    if (meta.endpoint == Endpoint::chat && !send_event(sink, dump(role_chunk(meta)))) return false;
    while (true) {
        const std::optional<cellm_event> event = generation.next();
        if (!event) {
            // Nothing to send for now (a long prompt, a busy engine): make sure the client still listens.
            if (!sink.is_writable()) return false;
            continue;
        }
        if (event->kind == CELLM_EVENT_TEXT) {
            if (!send_event(sink, dump(text_chunk(meta, {event->text, event->text_len})))) return false;
            continue;
        }
        const cellm_session_stats stats = generation.stats();
        // Too late for an error status once streaming: the error goes out as an event, as OpenAI's servers do.
        const bool sent = event->finish_reason == CELLM_FINISH_ERROR
                              ? send_event(sink, dump(error_json(generation_failed(stats))))
                              : send_event(sink, dump(finish_chunk(meta, event->finish_reason))) &&
                                    (!meta.include_usage || send_event(sink, dump(usage_chunk(meta, stats))));
        if (!sent || !send_event(sink, "[DONE]")) return false;
        sink.done();
        return true;
    }
}

// The whole stream runs in one call of httplib's content provider: between calls httplib ends a response for
// good once the server is stopping, which would cut streams off without their final chunk at shutdown.
bool stream(Generation& generation, const ResponseMeta& meta, httplib::DataSink& sink) {
    bool finished = false;
    try {
        finished = stream_events(generation, meta, sink);
    } catch (...) {
        // An engine failure mid-stream: nothing more can be said to the client, the connection just ends.
        // Nothing may escape: this runs on httplib's worker thread, outside its exception handling.
    }
    if (!finished) generation.abandon();
    return finished;
}

}  // namespace

HttpServer::HttpServer(cellm_engine* engine, ServerConfig config)
    : engine_(engine), config_(std::move(config)),
      started_(std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch())
                   .count()),
      http_(std::make_unique<httplib::Server>()) {
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
    const CompletionRequest parsed = parse_completion_request(endpoint, body);
    if (parsed.model && *parsed.model != config_.model_id) throw model_not_found(*parsed.model);
    InFlight::Ticket ticket = in_flight_.enter();
    if (!ticket) throw ApiError(503, "the server is shutting down", "server_shutting_down", {}, "server_error");

    const ResponseMeta meta = new_response_meta(endpoint, config_.model_id, parsed.stream && parsed.include_usage);
    // Shared with the content provider, which httplib copies; the session goes when the response does.
    auto generation = std::make_shared<Generation>(engine_, parsed, meta.id, std::move(ticket), metrics_);
    if (parsed.stream) {
        response.set_header("Cache-Control", "no-cache");
        response.set_chunked_content_provider("text/event-stream",
                                              [generation, meta](size_t, httplib::DataSink& sink) {
                                                  return stream(*generation, meta, sink);
                                              });
        return;
    }
    const cellm_finish_reason reason = generation->wait();
    const cellm_session_stats stats = generation->stats();
    if (reason == CELLM_FINISH_ERROR) throw generation_failed(stats);
    send_json(response, 200, completion_json(meta, generation->text(), reason, stats));
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
