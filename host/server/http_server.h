// The OpenAI-compatible HTTP server of `cellm-host serve`, a client of libcellm (include/cellm/cellm.h) only.
// Every completion request becomes one session on the one engine, so concurrent requests are batched by the
// engine's scheduler. Routes: POST /v1/chat/completions, POST /v1/completions (JSON or Server-Sent Events),
// GET /v1/models[/ID], GET /health, GET /metrics (Prometheus), and llama-server's POST /tokenize and
// POST /detokenize. Every error is OpenAI's JSON error shape.
#pragma once

#include "generation.h"
#include "http/transport.h"
#include "metrics.h"

#include "cellm/cellm.h"

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace cellm::server {

struct ServerConfig {
    std::string host = "127.0.0.1";
    int port = 8080;       // 0: a free port the system picks
    std::string api_key;   // empty: no authentication
    size_t max_body_bytes = size_t{1} << 20;
    // Deadlines, connection caps, workers and the waiting queue (http/transport.h); its parser's body limit is
    // max_body_bytes above.
    http::TransportLimits transport;
    std::string model_id;  // what /v1/models lists; a request naming another model gets 404
    // A generation still running this long after its request was read is cancelled (ends as if at max_tokens);
    // 0: no limit.
    std::chrono::milliseconds max_request_duration{0};
    // On shutdown, how long running requests may go on before they are cut short.
    std::chrono::milliseconds shutdown_grace{10000};
};

class HttpServer {
public:
    // `engine` must outlive the server.
    HttpServer(cellm_engine* engine, ServerConfig config);
    ~HttpServer();
    HttpServer(const HttpServer&) = delete;
    HttpServer& operator=(const HttpServer&) = delete;

    // Opens the listening socket and returns its port (the one picked when config.port is 0). Throws
    // std::runtime_error when the address cannot be used.
    int bind();
    // Serves until shutdown() has run and every request has ended.
    void run();
    // From another thread: stops accepting, lets running requests go on for the grace period, then cancels
    // the rest, which still end properly (a final chunk and [DONE], or a whole response).
    void shutdown();

private:
    // Every request the transport has read whole, on a worker (health on the event loop, metrics on the probe
    // worker).
    void route(const http::Request& request, http::Response& response);
    void authorize(const http::Request& request) const;
    void completions(const std::string& body, http::Response& response, Endpoint endpoint);
    void tokenize(const std::string& body, http::Response& response) const;
    void detokenize(const std::string& body, http::Response& response) const;
    void models(http::Response& response) const;
    void model(const std::string& id, http::Response& response) const;
    void metrics(http::Response& response) const;

    cellm_engine* engine_;
    ServerConfig config_;
    int64_t started_;  // unix seconds: the model's "created"
    int32_t n_vocab_ = 0;  // what logit_bias and /detokenize ids must stay below
    Metrics metrics_;
    InFlight in_flight_;
    std::unique_ptr<http::Transport> http_;
};

}  // namespace cellm::server
