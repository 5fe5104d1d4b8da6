#include "metrics.h"

#include <algorithm>
#include <cstdio>

namespace cellm::server {

namespace {

std::string number(double x) {
    char text[32];
    std::snprintf(text, sizeof text, "%.9g", x);
    return text;
}

void header(std::string& out, const char* name, const char* type, const char* help) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void single(std::string& out, const char* name, const char* type, const char* help, int64_t value) {
    header(out, name, type, help);
    out += std::string(name) + " " + std::to_string(value) + "\n";
}

}  // namespace

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value, uint64_t times) {
    const auto bucket = std::lower_bound(bounds_.begin(), bounds_.end(), value) - bounds_.begin();
    counts_[static_cast<size_t>(bucket)] += times;
    sum_ += value * static_cast<double>(times);
    count_ += times;
}

void Histogram::render(std::string& out, const char* name, const char* help) const {
    header(out, name, "histogram", help);
    uint64_t cumulative = 0;
    for (size_t i = 0; i <= bounds_.size(); ++i) {
        cumulative += counts_[i];
        const std::string le = i < bounds_.size() ? number(bounds_[i]) : "+Inf";
        out += std::string(name) + "_bucket{le=\"" + le + "\"} " + std::to_string(cumulative) + "\n";
    }
    out += std::string(name) + "_sum " + number(sum_) + "\n";
    out += std::string(name) + "_count " + std::to_string(count_) + "\n";
}

// Time to first token spans a short prompt on a fast machine up to a long prompt queued behind others on a
// small one; inter-token latency spans batched decode on a GPU to a loaded CPU.
Metrics::Metrics()
    : time_to_first_token_({0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 20, 40, 80}),
      inter_token_({0.001, 0.0025, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.25, 0.5, 1, 2.5}) {}

void Metrics::count_request(const std::string& endpoint, int code) {
    const std::lock_guard lock(mutex_);
    ++requests_[{endpoint, code}];
}

void Metrics::count_tokens(int64_t prompt_tokens, int64_t generated_tokens) {
    const std::lock_guard lock(mutex_);
    prompt_tokens_ += prompt_tokens;
    generation_tokens_ += generated_tokens;
}

void Metrics::observe_time_to_first_token(double seconds) {
    const std::lock_guard lock(mutex_);
    time_to_first_token_.observe(seconds);
}

void Metrics::observe_inter_token(double seconds, int32_t tokens) {
    if (tokens <= 0) return;
    const std::lock_guard lock(mutex_);
    inter_token_.observe(seconds / tokens, static_cast<uint64_t>(tokens));
}

void Metrics::count_overdue() {
    const std::lock_guard lock(mutex_);
    ++overdue_;
}

std::string Metrics::render(const cellm_engine_stats& engine, const http::TransportCounters& transport) const {
    std::string out;
    const std::lock_guard lock(mutex_);
    header(out, "cellm_requests_total", "counter", "HTTP requests answered, by endpoint and status code.");
    for (const auto& [key, n] : requests_) {
        out += "cellm_requests_total{endpoint=\"" + key.first + "\",code=\"" + std::to_string(key.second) + "\"} " +
               std::to_string(n) + "\n";
    }
    single(out, "cellm_prompt_tokens_total", "counter", "Prompt tokens of finished requests.", prompt_tokens_);
    single(out, "cellm_generation_tokens_total", "counter", "Tokens generated for finished requests.",
           generation_tokens_);
    single(out, "cellm_prefix_cache_hit_tokens_total", "counter",
           "Prompt tokens taken from the prefix cache instead of computed.", engine.prefix_hit_tokens);
    single(out, "cellm_sessions_running", "gauge", "Sessions admitted into the engine's steps.", engine.running);
    single(out, "cellm_sessions_waiting", "gauge", "Sessions with a prompt waiting to be admitted.", engine.waiting);
    single(out, "cellm_kv_blocks_used", "gauge", "KV-cache blocks in use.", engine.kv_blocks_used);
    single(out, "cellm_kv_blocks_free", "gauge", "KV-cache blocks free.", engine.kv_blocks_free);
    time_to_first_token_.render(out, "cellm_time_to_first_token_seconds",
                                "Seconds from a request's submission to its first generated text.");
    inter_token_.render(out, "cellm_inter_token_latency_seconds", "Seconds between generated tokens of a request.");

    single(out, "cellm_requests_cut_total", "counter",
           "Turns cancelled at the maximum request duration (--max-request-seconds).", overdue_);
    single(out, "cellm_http_connections_open", "gauge", "Client connections open.", transport.connections_open.load());
    header(out, "cellm_http_connections_rejected_total", "counter",
           "Connections refused at once with 503 (or dropped without descriptors), by reason.");
    const std::pair<const char*, int64_t> rejected[] = {
        {"limit", transport.rejected_connections.load()},
        {"client_limit", transport.rejected_client_connections.load()},
        {"descriptors", transport.rejected_no_descriptor.load()}};
    for (const auto& [reason, n] : rejected) {
        out += std::string("cellm_http_connections_rejected_total{reason=\"") + reason + "\"} " + std::to_string(n) + "\n";
    }
    single(out, "cellm_http_requests_rejected_total", "counter",
           "Requests refused with 429 because the waiting queue was full.", transport.rejected_busy.load());
    header(out, "cellm_http_requests_timed_out_total", "counter",
           "Requests answered 408 because their headers or body did not arrive in time, by part.");
    out += "cellm_http_requests_timed_out_total{part=\"headers\"} " + std::to_string(transport.timed_out_header.load()) + "\n";
    out += "cellm_http_requests_timed_out_total{part=\"body\"} " + std::to_string(transport.timed_out_body.load()) + "\n";
    single(out, "cellm_http_connections_closed_idle_total", "counter",
           "Kept-alive connections closed after idling past the limit.", transport.closed_idle.load());
    single(out, "cellm_http_requests_waiting", "gauge", "Requests read whole, waiting for a worker.",
           transport.waiting.load());
    single(out, "cellm_http_workers_busy", "gauge", "Workers running a request (a stream holds one).",
           transport.busy.load());
    return out;
}

}  // namespace cellm::server
