// cellm-host bench: prefill and decode speed, time to first token and peak memory of one model on one backend,
// over several repetitions (median and spread), as llama-bench measures them: a prompt of N tokens in one
// prefill, then N greedy decode steps that ignore end-of-generation tokens.
//
// With --sessions N it measures serving instead: N sessions on the scheduler, N-1 submitted together and the
// last one once they all decode (its time to first token under load), each with its own prompt. It reports
// the aggregate decode rate while all N decode, time to first token and inter-token latency percentiles,
// and the same prompt served alone for comparison. Each figure is the median over the repetitions of that run's
// figure (percentiles of all runs pooled are reported too): on a shared machine one disturbed run would
// otherwise set the pooled p95 alone.
#include "commands.h"
#include "manifest_overrides.h"

#include "runtime.h"
#include "schedule/scheduler.h"

#include <nlohmann/json.hpp>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>

namespace cellm::cli {

namespace {

using Clock = std::chrono::steady_clock;

struct Sample {
    double prefill_tok_s, decode_tok_s, ttft_ms;
};

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    const size_t n = v.size();
    return n % 2 == 1 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2.0;
}

double peak_rss_mb() {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return static_cast<double>(usage.ru_maxrss) / 1024.0;  // Linux reports KiB
}

// A prompt of exactly n tokens: a fixed English text, repeated. A nonzero `variant` starts it with its own
// number so that different sessions share no prefix.
std::vector<int32_t> make_prompt(const Tokenizer& tokenizer, int32_t n, int32_t variant = 0) {
    const std::string lead = variant == 0 ? "" : "Report " + std::to_string(variant) + ". ";
    const std::vector<int32_t> text = tokenizer.encode(
        lead + "The quick brown fox jumps over the lazy dog while the committee reviews its quarterly budget. ", false, false);
    std::vector<int32_t> prompt;
    while (static_cast<int32_t>(prompt.size()) < n) prompt.insert(prompt.end(), text.begin(), text.end());
    prompt.resize(static_cast<size_t>(n));
    return prompt;
}

int32_t argmax(const std::vector<float>& logits) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

Sample run_once(Engine& engine, const std::vector<int32_t>& prompt, int32_t gen_tokens) {
    const int32_t seq = engine.create_sequence();
    std::vector<float> logits;
    const auto start = Clock::now();
    const Engine::Work prefill{seq, prompt, LogitsWanted::Last};
    engine.step({&prefill, 1}, logits);
    int32_t token = argmax(logits);
    const auto first = Clock::now();
    for (int32_t i = 0; i < gen_tokens; ++i) {
        const Engine::Work decode{seq, {&token, 1}, LogitsWanted::Last};
        engine.step({&decode, 1}, logits);
        token = argmax(logits);
    }
    const auto end = Clock::now();
    engine.release_sequence(seq);
    const double prefill_s = std::chrono::duration<double>(first - start).count();
    const double decode_s = std::chrono::duration<double>(end - first).count();
    return {static_cast<double>(prompt.size()) / prefill_s, gen_tokens / decode_s, prefill_s * 1000.0};
}

double percentile(std::vector<double> v, double p) {
    if (v.empty()) return 0.0;
    std::sort(v.begin(), v.end());
    const double at = p * static_cast<double>(v.size() - 1);
    const auto lo = static_cast<size_t>(at);
    const size_t hi = std::min(lo + 1, v.size() - 1);
    return v[lo] + (v[hi] - v[lo]) * (at - static_cast<double>(lo));
}

struct ServingSample {
    double decode_tok_s;       // all sessions together, while every one of them decodes
    double late_ttft_ms;       // the session that joined while the others decoded
    double alone_ttft_ms, alone_decode_tok_s;
    std::vector<double> ttft_ms, inter_token_ms;
};

ServingSample serve_once(Engine& engine, const Tokenizer& tokenizer, const SchedulerOptions& options,
                         int32_t sessions, int32_t prompt_tokens, int32_t gen_tokens, int32_t repetition) {
    Scheduler scheduler(engine, tokenizer, options);
    SessionOptions greedy;
    greedy.sampling.temperature = 0;
    greedy.max_tokens = gen_tokens;
    greedy.ignore_end_of_generation = true;
    auto prompt = [&](int32_t i) { return make_prompt(tokenizer, prompt_tokens, 1 + repetition * (sessions + 1) + i); };
    ServingSample out{};

    // The last session's prompt alone first: the reference for its time to first token and decode rate.
    {
        const SessionId alone = scheduler.create(greedy);
        scheduler.submit(alone, prompt(sessions));
        scheduler.run();
        out.alone_ttft_ms = scheduler.session(alone).result().ttft_ms;
        out.alone_decode_tok_s = scheduler.session(alone).result().decode_tok_s();
        scheduler.destroy(alone);
    }

    std::vector<SessionId> ids;
    for (int32_t i = 0; i + 1 < sessions; ++i) {
        ids.push_back(scheduler.create(greedy));
        scheduler.submit(ids.back(), prompt(i));
    }
    const auto all_started = [&] {
        return std::all_of(ids.begin(), ids.end(), [&](SessionId id) { return !scheduler.session(id).result().tokens.empty(); });
    };
    while (!all_started() && scheduler.step()) {
    }
    ids.push_back(scheduler.create(greedy));
    const SessionId late = ids.back();
    scheduler.submit(late, prompt(sessions - 1));
    // The aggregate rate counts the steps after the late session's first token, while every session decodes.
    int64_t decoded = 0;
    Clock::time_point window_start{};
    bool counting = false;
    while (scheduler.step()) {
        const bool late_started = !scheduler.session(late).result().tokens.empty();
        if (!late_started) continue;
        if (!counting) {
            counting = true;
            window_start = Clock::now();
            continue;
        }
        decoded += sessions;  // every session was decoding when this step started
        const bool all_decoding = std::all_of(ids.begin(), ids.end(), [&](SessionId id) {
            return scheduler.session(id).state() != SessionState::Idle;
        });
        if (!all_decoding) break;
    }
    const double window_s = std::chrono::duration<double>(Clock::now() - window_start).count();
    scheduler.run();
    out.decode_tok_s = window_s > 0 ? static_cast<double>(decoded) / window_s : 0.0;
    out.late_ttft_ms = scheduler.session(late).result().ttft_ms;
    for (SessionId id : ids) {
        const SessionResult& r = scheduler.session(id).result();
        out.ttft_ms.push_back(r.ttft_ms);
        out.inter_token_ms.insert(out.inter_token_ms.end(), r.inter_token_ms.begin(), r.inter_token_ms.end());
    }
    return out;
}

int run_serving(const Manifest& manifest, int32_t sessions, int32_t prompt_tokens, int32_t gen_tokens,
                int32_t repetitions, bool json) {
    Runtime runtime(manifest, sessions + 1);
    const Tokenizer& tokenizer = runtime.model().tokenizer();
    SchedulerOptions options;
    options.token_budget = manifest.scheduler.token_budget;
    options.max_running = std::max(sessions, manifest.scheduler.max_running);
    options.policy = {manifest.policy.max_batch, manifest.policy.max_tokens_per_second};
    serve_once(runtime.engine(), tokenizer, options, sessions, prompt_tokens, 2, 0);  // warm-up: graphs, weights

    std::vector<double> decode, late_ttft, alone_ttft, alone_decode, ttft, itl;
    std::vector<double> ttft_p50, ttft_p95, itl_p50, itl_p95;  // each run's
    nlohmann::json runs = nlohmann::json::array();
    for (int32_t r = 0; r < repetitions; ++r) {
        const ServingSample s = serve_once(runtime.engine(), tokenizer, options, sessions, prompt_tokens, gen_tokens, r + 1);
        decode.push_back(s.decode_tok_s);
        late_ttft.push_back(s.late_ttft_ms);
        alone_ttft.push_back(s.alone_ttft_ms);
        alone_decode.push_back(s.alone_decode_tok_s);
        ttft.insert(ttft.end(), s.ttft_ms.begin(), s.ttft_ms.end());
        itl.insert(itl.end(), s.inter_token_ms.begin(), s.inter_token_ms.end());
        ttft_p50.push_back(percentile(s.ttft_ms, 0.5));
        ttft_p95.push_back(percentile(s.ttft_ms, 0.95));
        itl_p50.push_back(percentile(s.inter_token_ms, 0.5));
        itl_p95.push_back(percentile(s.inter_token_ms, 0.95));
        runs.push_back({{"decode_tok_s", s.decode_tok_s}, {"late_ttft_ms", s.late_ttft_ms},
                        {"alone_ttft_ms", s.alone_ttft_ms}, {"alone_decode_tok_s", s.alone_decode_tok_s},
                        {"ttft_ms", {{"p50", ttft_p50.back()}, {"p95", ttft_p95.back()}}},
                        {"inter_token_ms", {{"p50", itl_p50.back()}, {"p95", itl_p95.back()}}}});
    }
    const Engine& engine = runtime.engine();
    const uint64_t bytes_per_token = engine.kv_cache().bytes_per_token();
    const double decode_m = median(decode), alone_decode_m = median(alone_decode);
    const double late_m = median(late_ttft), alone_ttft_m = median(alone_ttft);
    if (json) {
        nlohmann::json out{{"model", manifest.model.path.string()},
                           {"backend", runtime.backend().name()},
                           {"threads", runtime.backend().info().threads},
                           {"sessions", sessions},
                           {"prompt_tokens", prompt_tokens},
                           {"gen_tokens", gen_tokens},
                           {"repetitions", repetitions},
                           {"token_budget", options.token_budget},
                           {"decode_tok_s", decode_m},
                           {"alone_decode_tok_s", alone_decode_m},
                           {"decode_speedup", alone_decode_m > 0 ? decode_m / alone_decode_m : 0.0},
                           {"ttft_ms", {{"p50", median(ttft_p50)}, {"p95", median(ttft_p95)}}},
                           {"inter_token_ms", {{"p50", median(itl_p50)}, {"p95", median(itl_p95)}}},
                           {"pooled", {{"ttft_ms", {{"p50", percentile(ttft, 0.5)}, {"p95", percentile(ttft, 0.95)}}},
                                       {"inter_token_ms", {{"p50", percentile(itl, 0.5)}, {"p95", percentile(itl, 0.95)}}}}},
                           {"late_ttft_ms", late_m},
                           {"alone_ttft_ms", alone_ttft_m},
                           {"late_ttft_ratio", alone_ttft_m > 0 ? late_m / alone_ttft_m : 0.0},
                           {"kv", {{"type", manifest.context.kv_type}, {"bytes_per_token", bytes_per_token},
                                   {"blocks", engine.kv_stats().blocks}, {"block_size", engine.kv_cache().block_size()}}},
                           {"peak_rss_mb", peak_rss_mb()},
                           {"runs", runs}};
        std::cout << out.dump() << "\n";
        return 0;
    }
    std::printf("model %s, backend %s (%d threads), %d sessions, prompt %d tokens, %d decode steps, %d repetitions\n",
                manifest.model.path.filename().c_str(), runtime.backend().name(), runtime.backend().info().threads,
                sessions, prompt_tokens, gen_tokens, repetitions);
    std::printf("aggregate decode   %10.2f tok/s (one session alone: %.2f tok/s, %.2fx)\n", decode_m, alone_decode_m,
                alone_decode_m > 0 ? decode_m / alone_decode_m : 0.0);
    std::printf("time to first token p50 %.1f ms, p95 %.1f ms (all runs pooled: %.1f, %.1f)\n", median(ttft_p50),
                median(ttft_p95), percentile(ttft, 0.5), percentile(ttft, 0.95));
    std::printf("inter-token latency p50 %.1f ms, p95 %.1f ms (all runs pooled: %.1f, %.1f)\n", median(itl_p50),
                median(itl_p95), percentile(itl, 0.5), percentile(itl, 0.95));
    std::printf("joining while %d decode: first token %.1f ms (alone %.1f ms, %.2fx)\n", sessions - 1, late_m,
                alone_ttft_m, alone_ttft_m > 0 ? late_m / alone_ttft_m : 0.0);
    std::printf("KV %s: %llu bytes/token\n", manifest.context.kv_type.c_str(), static_cast<unsigned long long>(bytes_per_token));
    std::printf("peak RSS %.1f MiB\n", peak_rss_mb());
    return 0;
}

}  // namespace

Command add_bench(CLI::App& app) {
    struct Options {
        ManifestOverrides manifest;
        int32_t prompt_tokens = 128, gen_tokens = 64, repetitions = 3, sessions = 1;
        bool json = false;
    };
    auto o = std::make_shared<Options>();
    o->manifest.add_to(app);
    app.add_option("--prompt-tokens", o->prompt_tokens, "Prompt length in tokens")->check(CLI::PositiveNumber);
    app.add_option("--gen-tokens", o->gen_tokens, "Decode steps")->check(CLI::PositiveNumber);
    app.add_option("--repetitions", o->repetitions, "Runs to take the median of")->check(CLI::PositiveNumber);
    app.add_option("--sessions", o->sessions, "Concurrent sessions on the scheduler (serving benchmark when above 1)")
        ->check(CLI::Range(1, 256));
    app.add_flag("--json", o->json, "Print one JSON object (medians at the top level)");
    return [o]() {
        Manifest manifest = o->manifest.load();
        manifest.context.length = std::max(manifest.context.length, o->prompt_tokens + o->gen_tokens + 1);
        if (o->sessions > 1) {
            return run_serving(manifest, o->sessions, o->prompt_tokens, o->gen_tokens, o->repetitions, o->json);
        }
        Runtime runtime(manifest);
        const std::vector<int32_t> prompt = make_prompt(runtime.model().tokenizer(), o->prompt_tokens);
        run_once(runtime.engine(), prompt, 1);  // warm-up: prepares the step graphs, touches the weights

        std::vector<double> prefill, decode, ttft;
        nlohmann::json runs = nlohmann::json::array();
        for (int32_t r = 0; r < o->repetitions; ++r) {
            const Sample s = run_once(runtime.engine(), prompt, o->gen_tokens);
            prefill.push_back(s.prefill_tok_s);
            decode.push_back(s.decode_tok_s);
            ttft.push_back(s.ttft_ms);
            runs.push_back({{"prefill_tok_s", s.prefill_tok_s}, {"decode_tok_s", s.decode_tok_s}, {"ttft_ms", s.ttft_ms}});
        }
        const auto spread = [](const std::vector<double>& v) {
            return nlohmann::json{{"min", *std::min_element(v.begin(), v.end())}, {"max", *std::max_element(v.begin(), v.end())}};
        };
        if (o->json) {
            nlohmann::json out{{"model", manifest.model.path.string()},
                               {"backend", runtime.backend().name()},
                               {"threads", runtime.backend().info().threads},
                               {"prompt_tokens", o->prompt_tokens},
                               {"gen_tokens", o->gen_tokens},
                               {"repetitions", o->repetitions},
                               {"prefill_tok_s", median(prefill)},
                               {"decode_tok_s", median(decode)},
                               {"ttft_ms", median(ttft)},
                               {"peak_rss_mb", peak_rss_mb()},
                               {"spread", {{"prefill_tok_s", spread(prefill)}, {"decode_tok_s", spread(decode)}, {"ttft_ms", spread(ttft)}}},
                               {"runs", runs}};
            std::cout << out.dump() << "\n";
            return 0;
        }
        std::printf("model %s, backend %s (%d threads), prompt %d tokens, %d decode steps, %d repetitions\n",
                    manifest.model.path.filename().c_str(), runtime.backend().name(), runtime.backend().info().threads,
                    o->prompt_tokens, o->gen_tokens, o->repetitions);
        std::printf("%-14s %10s %10s %10s\n", "", "median", "min", "max");
        const auto row = [](const char* name, const std::vector<double>& v) {
            std::printf("%-14s %10.2f %10.2f %10.2f\n", name, median(v), *std::min_element(v.begin(), v.end()),
                        *std::max_element(v.begin(), v.end()));
        };
        row("prefill tok/s", prefill);
        row("decode tok/s", decode);
        row("ttft ms", ttft);
        std::printf("peak RSS %.1f MiB\n", peak_rss_mb());
        return 0;
    };
}

}  // namespace cellm::cli
