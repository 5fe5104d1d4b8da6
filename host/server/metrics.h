// The server's Prometheus metrics (text exposition format 0.0.4): request and token counters and latency
// histograms kept here, and the engine's gauges read at scrape time. Thread-safe: every request thread
// records, the /metrics route renders.
#pragma once

#include "cellm/cellm.h"
#include "http/transport.h"

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace cellm::server {

// Cumulative buckets as Prometheus expects; not locked itself (Metrics holds the lock).
class Histogram {
public:
    explicit Histogram(std::vector<double> upper_bounds);
    void observe(double value, uint64_t times = 1);
    void render(std::string& out, const char* name, const char* help) const;

private:
    std::vector<double> bounds_;
    std::vector<uint64_t> counts_;  // per bucket, not cumulative; the last one is +Inf
    double sum_ = 0;
    uint64_t count_ = 0;
};

class Metrics {
public:
    Metrics();

    void count_request(const std::string& endpoint, int code);
    void count_tokens(int64_t prompt_tokens, int64_t generated_tokens);
    void observe_time_to_first_token(double seconds);
    // `tokens` tokens arrived `seconds` after the previous ones: each is one inter-token interval.
    void observe_inter_token(double seconds, int32_t tokens);
    // A turn cut at the server's maximum request duration.
    void count_overdue();

    std::string render(const cellm_engine_stats& engine, const http::TransportCounters& transport) const;

private:
    mutable std::mutex mutex_;
    std::map<std::pair<std::string, int>, uint64_t> requests_;
    int64_t prompt_tokens_ = 0;
    int64_t generation_tokens_ = 0;
    int64_t overdue_ = 0;
    Histogram time_to_first_token_;
    Histogram inter_token_;
};

}  // namespace cellm::server
