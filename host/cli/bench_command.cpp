// cellm-host bench: prefill and decode speed, time to first token and peak memory of one model on one backend,
// over several repetitions (median and spread), as llama-bench measures them: a prompt of N tokens in one
// prefill, then N greedy decode steps that ignore end-of-generation tokens.
#include "commands.h"
#include "manifest_overrides.h"

#include "runtime.h"

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

// A prompt of exactly n tokens: a fixed English text, repeated.
std::vector<int32_t> make_prompt(const Tokenizer& tokenizer, int32_t n) {
    const std::vector<int32_t> text = tokenizer.encode(
        "The quick brown fox jumps over the lazy dog while the committee reviews its quarterly budget. ", false, false);
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

}  // namespace

Command add_bench(CLI::App& app) {
    struct Options {
        ManifestOverrides manifest;
        int32_t prompt_tokens = 128, gen_tokens = 64, repetitions = 3;
        bool json = false;
    };
    auto o = std::make_shared<Options>();
    o->manifest.add_to(app);
    app.add_option("--prompt-tokens", o->prompt_tokens, "Prompt length in tokens")->check(CLI::PositiveNumber);
    app.add_option("--gen-tokens", o->gen_tokens, "Decode steps")->check(CLI::PositiveNumber);
    app.add_option("--repetitions", o->repetitions, "Runs to take the median of")->check(CLI::PositiveNumber);
    app.add_flag("--json", o->json, "Print one JSON object (medians at the top level)");
    return [o]() {
        Manifest manifest = o->manifest.load();
        manifest.context.length = std::max(manifest.context.length, o->prompt_tokens + o->gen_tokens + 1);
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
