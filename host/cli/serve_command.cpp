// cellm-host serve: the OpenAI-compatible HTTP server (host/server) on one engine opened through libcellm,
// like any embedding application. Prints "cellm-host: serving MODEL on http://HOST:PORT" on stderr once it
// listens; SIGINT or SIGTERM shut it down gracefully (exit 0), a second signal at once.
#include "commands.h"
#include "error.h"
#include "sdk_handles.h"

#include "http_server.h"
#include "signal_watcher.h"

#include "cellm/cellm.h"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>

namespace cellm::cli {

namespace {

struct ServeOptions {
    std::string manifest;
    std::optional<std::string> model, mmproj, backend, precision;
    int32_t threads = 0, context = 0, max_sessions = 0;  // 0: the manifest's
    server::ServerConfig server;
    std::string model_alias;
    // Seconds, as flags take them (http::TransportLimits keeps milliseconds).
    double header_timeout = 0, body_timeout = 0, idle_timeout = 0, write_timeout = 0;
};

std::chrono::milliseconds milliseconds(double seconds) {
    return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000.0 + 0.5));
}

EnginePtr open_engine(const ServeOptions& o) {
    cellm_engine_options options;
    cellm_engine_options_init(&options);
    if (!o.manifest.empty()) options.manifest_path = o.manifest.c_str();
    if (o.model) options.model_path = o.model->c_str();
    if (o.mmproj) options.mmproj_path = o.mmproj->c_str();
    if (o.backend) options.backend = o.backend->c_str();
    if (o.precision) options.precision = o.precision->c_str();
    options.threads = o.threads;
    options.context_length = o.context;
    options.max_sessions = o.max_sessions;
    cellm_engine* engine = nullptr;
    check(cellm_engine_open(&options, &engine));
    return EnginePtr(engine);
}

// The model's file name without a model-file extension (SmolLM2-135M-Instruct.Q4_1), or its folder's name for a
// Hugging Face folder, as llama-server names a model by its file: general.name is often missing or has spaces.
std::string model_id(cellm_engine* engine) {
    cellm_engine_info info{};
    info.struct_size = sizeof info;
    check(cellm_engine_get_info(engine, &info));
    std::filesystem::path path(info.model_path);
    if (!path.has_filename()) path = path.parent_path();  // a folder given as DIR/
    const std::string ext = path.extension().string();
    return ext == ".gguf" || ext == ".cellm" ? path.stem().string() : path.filename().string();
}

// An IPv6 address needs brackets in a URL.
std::string url(const std::string& host, int port) {
    const bool ipv6 = host.find(':') != std::string::npos;
    return "http://" + (ipv6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

}  // namespace

Command add_serve(CLI::App& app) {
    auto o = std::make_shared<ServeOptions>();
    app.add_option("--manifest", o->manifest,
                   "TOML manifest that wires model, backend and sampling (without it, --model alone serves with the "
                   "file's own settings and the fastest CPU backend)");
    app.add_option("--model", o->model, "Model file or folder (overrides [model].path)");
    app.add_option("--mmproj", o->mmproj, "llama.cpp mmproj file of the model's vision tower (overrides [model].mmproj)");
    app.add_option("--backend", o->backend, "Backend plugin name (overrides [backend].name)");
    app.add_option("--threads", o->threads, "Backend threads (overrides [backend].threads)")
        ->check(CLI::PositiveNumber);
    app.add_option("--precision", o->precision, "Backend precision, exact or fast (overrides [backend].precision)")
        ->check(CLI::IsMember({"exact", "fast"}));
    app.add_option("--context", o->context, "Tokens per session (overrides [context].length)")
        ->check(CLI::PositiveNumber);
    app.add_option("--max-sessions", o->max_sessions,
                   "Sessions in the engine's steps at once (overrides [scheduler].max_running)")
        ->check(CLI::PositiveNumber);
    app.add_option("--host", o->server.host, "Address to listen on")->capture_default_str();
    app.add_option("--port", o->server.port, "Port to listen on; 0 picks a free one")
        ->capture_default_str()
        ->check(CLI::Range(0, 65535));
    app.add_option("--api-key", o->server.api_key, "Require this key as 'Authorization: Bearer KEY' (not on /health)")
        ->envname("CELLM_API_KEY");
    app.add_option("--max-body-bytes", o->server.max_body_bytes, "Largest request body; larger ones get 413")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    app.add_option("--model-alias", o->model_alias, "Model id to serve as (default: the model file's name without extension)");

    // Limits against slow, idle and flooding clients (docs/server.md, "Limits"); defaults from TransportLimits.
    server::http::TransportLimits& limits = o->server.transport;
    o->header_timeout = static_cast<double>(limits.header_timeout.count()) / 1000.0;
    o->body_timeout = static_cast<double>(limits.body_timeout.count()) / 1000.0;
    o->idle_timeout = static_cast<double>(limits.idle_timeout.count()) / 1000.0;
    o->write_timeout = static_cast<double>(limits.write_timeout.count()) / 1000.0;
    const auto positive_seconds = CLI::Range(0.001, 86400.0);
    app.add_option("--header-timeout", o->header_timeout,
                   "Seconds a client has to send a request's line and headers, however it trickles them; then 408")
        ->capture_default_str()
        ->check(positive_seconds);
    app.add_option("--body-timeout", o->body_timeout,
                   "Seconds a client has to send a body, plus its length at --min-body-rate; then 408")
        ->capture_default_str()
        ->check(positive_seconds);
    app.add_option("--min-body-rate", limits.min_body_rate, "Bytes per second a body must average past --body-timeout")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    app.add_option("--idle-timeout", o->idle_timeout, "Seconds a kept-alive connection may idle between requests")
        ->capture_default_str()
        ->check(positive_seconds);
    app.add_option("--write-timeout", o->write_timeout,
                   "Seconds a client may leave its answer unread (a stream's too) before it is dropped")
        ->capture_default_str()
        ->check(positive_seconds);
    app.add_option("--max-connections", limits.max_connections,
                   "Open connections in all; beyond, 503 at once (also capped by the open-file limit)")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);
    app.add_option("--max-connections-per-client", limits.max_connections_per_client,
                   "Open connections per client address; beyond, 503 at once; 0: no cap")
        ->capture_default_str();
    app.add_option("--workers", limits.workers, "Requests answered at once (each stream holds one worker)")
        ->capture_default_str()
        ->check(CLI::Range(1, 4096));
    app.add_option("--max-waiting", limits.max_waiting,
                   "Requests read and waiting for a worker; beyond, 429 with Retry-After at once")
        ->capture_default_str()
        ->check(CLI::PositiveNumber);

    return [o]() {
        if (o->manifest.empty() && !o->model) {
            throw cellm::Error("give --model FILE (a model file or folder), or --manifest FILE");
        }
        const EnginePtr engine = open_engine(*o);
        server::ServerConfig config = o->server;
        config.transport.header_timeout = milliseconds(o->header_timeout);
        config.transport.body_timeout = milliseconds(o->body_timeout);
        config.transport.idle_timeout = milliseconds(o->idle_timeout);
        config.transport.write_timeout = milliseconds(o->write_timeout);
        config.model_id = o->model_alias.empty() ? model_id(engine.get()) : o->model_alias;
        server::HttpServer http(engine.get(), config);
        const int port = http.bind();
        {
            const server::SignalWatcher signals([&http] { http.shutdown(); });
            std::fprintf(stderr, "cellm-host: serving %s on %s\n", config.model_id.c_str(),
                         url(config.host, port).c_str());
            std::fflush(stderr);
            http.run();
        }
        std::fprintf(stderr, "cellm-host: stopped\n");
        return 0;
    };
}

}  // namespace cellm::cli
