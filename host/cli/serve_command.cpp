// cellm-host serve: the OpenAI-compatible HTTP server (host/server) on one engine opened through libcellm,
// like any embedding application. Prints "cellm-host: serving MODEL on http://HOST:PORT" on stderr once it
// listens; SIGINT or SIGTERM shut it down gracefully (exit 0), a second signal at once.
#include "commands.h"
#include "error.h"
#include "sdk_handles.h"

#include "http_server.h"
#include "manifest.h"
#include "signal_watcher.h"

#include "cellm/cellm.h"

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <sstream>
#include <string>

namespace cellm::cli {

namespace {

struct ServeOptions {
    std::string manifest;
    std::optional<std::string> model, mmproj, backend, precision;
    int32_t threads = 0, context = 0, max_sessions = 0, memory_budget = 0;  // 0: the manifest's
    std::string api_key;
    std::string model_alias;
    // The server's settings given as flags, in the manifest's [server] shape: each wins over its key.
    ServeConfig flags;
};

// The server's settings: its defaults, then the manifest's [server] keys, then the flags given.
server::ServerConfig server_config(const ServeOptions& o) {
    ServeConfig settings;
    if (!o.manifest.empty()) settings = load_manifest(o.manifest).serve;
    const auto take = [&](auto member) {
        if (o.flags.*member) settings.*member = o.flags.*member;
    };
    take(&ServeConfig::host);
    take(&ServeConfig::port);
    take(&ServeConfig::max_body_bytes);
    take(&ServeConfig::header_timeout);
    take(&ServeConfig::body_timeout);
    take(&ServeConfig::idle_timeout);
    take(&ServeConfig::write_timeout);
    take(&ServeConfig::max_request_seconds);
    take(&ServeConfig::min_body_rate);
    take(&ServeConfig::max_connections);
    take(&ServeConfig::max_connections_per_client);
    take(&ServeConfig::workers);
    take(&ServeConfig::max_waiting);

    server::ServerConfig config;
    server::http::TransportLimits& limits = config.transport;
    config.host = settings.host.value_or(config.host);
    config.port = settings.port.value_or(config.port);
    config.api_key = o.api_key;
    const auto count = [](size_t& into, const std::optional<int64_t>& value) {
        if (value) into = static_cast<size_t>(*value);
    };
    const auto seconds = [](std::chrono::milliseconds& into, const std::optional<float>& value) {
        if (value) into = std::chrono::milliseconds(static_cast<int64_t>(static_cast<double>(*value) * 1000.0 + 0.5));
    };
    count(config.max_body_bytes, settings.max_body_bytes);
    seconds(limits.header_timeout, settings.header_timeout);
    seconds(limits.body_timeout, settings.body_timeout);
    seconds(limits.idle_timeout, settings.idle_timeout);
    seconds(limits.write_timeout, settings.write_timeout);
    seconds(config.max_request_duration, settings.max_request_seconds);
    count(limits.min_body_rate, settings.min_body_rate);
    count(limits.max_connections, settings.max_connections);
    count(limits.max_connections_per_client, settings.max_connections_per_client);
    count(limits.workers, settings.workers);
    count(limits.max_waiting, settings.max_waiting);
    return config;
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
    options.memory_budget_mib = o.memory_budget;
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

// Where the memory goes, so that a budget can be chosen from it.
void print_memory(cellm_engine* engine) {
    cellm_engine_info info{};
    info.struct_size = sizeof info;
    check(cellm_engine_get_info(engine, &info));
    const auto mib = [](int64_t bytes) { return static_cast<long long>((bytes + (1 << 19)) >> 20); };
    std::fprintf(stderr,
                 "cellm-host: memory: weights %lld MiB, step scratch %lld MiB, KV pool %lld MiB (%lld tokens of %d "
                 "per session, committed as they come into use on CPU backends)\n",
                 mib(info.weights_bytes), mib(info.scratch_bytes), mib(info.kv_pool_bytes),
                 static_cast<long long>(info.kv_blocks) * info.kv_block_size, info.context_length);
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
    app.add_option("--memory-budget", o->memory_budget,
                   "MiB for weights, scratch and KV cache together; the KV pool gets the rest (overrides "
                   "[context].memory_budget_mib)")
        ->check(CLI::Range(1, 1 << 20));
    app.add_option("--api-key", o->api_key, "Require this key as 'Authorization: Bearer KEY' (not on /health)")
        ->envname("CELLM_API_KEY");
    app.add_option("--model-alias", o->model_alias, "Model id to serve as (default: the model file's name without extension)");

    // The server's address and its limits against slow, idle and flooding clients (docs/server.md); each
    // overrides the manifest's [server] key. The defaults are ServerConfig's and TransportLimits'.
    const server::ServerConfig defaults;
    const server::http::TransportLimits& limits = defaults.transport;
    const auto with_default = [](const std::string& what, const auto& value) {
        std::ostringstream text;
        text << what << " ([server] key; default " << value << ")";
        return text.str();
    };
    const auto in_seconds = [](std::chrono::milliseconds ms) { return static_cast<double>(ms.count()) / 1000.0; };
    const auto positive_seconds = CLI::Range(0.001, 86400.0);
    app.add_option("--host", o->flags.host, with_default("Address to listen on", defaults.host));
    app.add_option("--port", o->flags.port, with_default("Port to listen on; 0 picks a free one", defaults.port))
        ->check(CLI::Range(0, 65535));
    app.add_option("--max-body-bytes", o->flags.max_body_bytes,
                   with_default("Largest request body; larger ones get 413", defaults.max_body_bytes))
        ->check(CLI::PositiveNumber);
    app.add_option("--header-timeout", o->flags.header_timeout,
                   with_default("Seconds a client has to send a request's line and headers, however it trickles "
                                "them; then 408", in_seconds(limits.header_timeout)))
        ->check(positive_seconds);
    app.add_option("--body-timeout", o->flags.body_timeout,
                   with_default("Seconds a client has to send a body, plus its length at --min-body-rate; then 408",
                                in_seconds(limits.body_timeout)))
        ->check(positive_seconds);
    app.add_option("--min-body-rate", o->flags.min_body_rate,
                   with_default("Bytes per second a body must average past --body-timeout", limits.min_body_rate))
        ->check(CLI::PositiveNumber);
    app.add_option("--idle-timeout", o->flags.idle_timeout,
                   with_default("Seconds a kept-alive connection may idle between requests",
                                in_seconds(limits.idle_timeout)))
        ->check(positive_seconds);
    app.add_option("--write-timeout", o->flags.write_timeout,
                   with_default("Seconds a client may leave its answer unread (a stream's too) before it is dropped",
                                in_seconds(limits.write_timeout)))
        ->check(positive_seconds);
    app.add_option("--max-request-seconds", o->flags.max_request_seconds,
                   with_default("Seconds a generation may run after its request was read; then it ends as at "
                                "max_tokens; 0: no limit", 0))
        ->check(CLI::Range(0.0, 604800.0));
    app.add_option("--max-connections", o->flags.max_connections,
                   with_default("Open connections in all; beyond, 503 at once (also capped by the open-file limit)",
                                limits.max_connections))
        ->check(CLI::PositiveNumber);
    app.add_option("--max-connections-per-client", o->flags.max_connections_per_client,
                   with_default("Open connections per client address; beyond, 503 at once; 0: no cap",
                                limits.max_connections_per_client))
        ->check(CLI::NonNegativeNumber);
    app.add_option("--workers", o->flags.workers,
                   with_default("Requests answered at once (each stream holds one worker)", limits.workers))
        ->check(CLI::Range(1, 4096));
    app.add_option("--max-waiting", o->flags.max_waiting,
                   with_default("Requests read and waiting for a worker; beyond, 429 with Retry-After at once",
                                limits.max_waiting))
        ->check(CLI::PositiveNumber);

    return [o]() {
        if (o->manifest.empty() && !o->model) {
            throw cellm::Error("give --model FILE (a model file or folder), or --manifest FILE");
        }
        server::ServerConfig config = server_config(*o);
        const EnginePtr engine = open_engine(*o);
        config.model_id = o->model_alias.empty() ? model_id(engine.get()) : o->model_alias;
        server::HttpServer http(engine.get(), config);
        const int port = http.bind();
        {
            const server::SignalWatcher signals([&http] { http.shutdown(); });
            print_memory(engine.get());
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
