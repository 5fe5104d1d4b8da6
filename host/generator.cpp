#include "generator.h"

#include "error.h"

#include <algorithm>
#include <chrono>

namespace cellm {

namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t) { return std::chrono::duration<double, std::milli>(Clock::now() - t).count(); }
}  // namespace

double GenerationResult::prefill_tok_s() const {
    const int32_t computed = prompt_tokens - reused_tokens;
    return prefill_ms > 0 ? computed * 1000.0 / prefill_ms : 0.0;
}
double GenerationResult::decode_tok_s() const { return decode_ms > 0 ? decode_steps * 1000.0 / decode_ms : 0.0; }

Generator::Generator(Engine& engine, const Tokenizer& tokenizer)
    : engine_(engine), tokenizer_(tokenizer), sequence_(engine.create_sequence()) {}

Generator::~Generator() { engine_.release_sequence(sequence_); }

GenerationResult Generator::generate(const GenerationRequest& request,
                                     const std::function<void(std::string_view)>& on_text) {
    const auto start = Clock::now();
    GenerationResult result;
    result.prompt_tokens = static_cast<int32_t>(request.prompt.size());
    if (request.prompt.empty()) throw Error("the prompt is empty");
    if (result.prompt_tokens >= engine_.context_length()) {
        throw Error("the prompt has " + std::to_string(result.prompt_tokens) + " tokens; the context length is " +
                    std::to_string(engine_.context_length()));
    }

    // Keep the longest cached prefix of the prompt; at least the last prompt token is computed again so
    // its logits are available.
    size_t keep = 0;
    while (keep < cached_.size() && keep + 1 < request.prompt.size() && cached_[keep] == request.prompt[keep]) ++keep;
    engine_.truncate(sequence_, static_cast<int32_t>(keep));
    cached_.resize(keep);
    result.reused_tokens = static_cast<int32_t>(keep);

    const size_t chunk = static_cast<size_t>(std::max(1, request.prefill_chunk));
    const auto prefill_start = Clock::now();
    for (size_t pos = keep; pos < request.prompt.size(); pos += chunk) {
        const size_t n = std::min(chunk, request.prompt.size() - pos);
        const bool last = pos + n == request.prompt.size();
        const std::span<const int32_t> tokens(request.prompt.data() + pos, n);
        const Engine::Work work{sequence_, tokens, last ? LogitsWanted::Last : LogitsWanted::None};
        engine_.step({&work, 1}, logits_);
        cached_.insert(cached_.end(), tokens.begin(), tokens.end());
    }
    result.prefill_ms = ms_since(prefill_start);

    Sampler sampler(request.sampling);
    StreamDecoder decoder(tokenizer_);
    StopMatcher stops(request.stop);
    std::vector<int32_t> history = cached_;
    auto emit = [&](const std::string& text) {
        if (text.empty()) return;
        result.text += text;
        if (on_text) on_text(text);
    };

    while (true) {
        // Rows past the tokenizer's vocabulary (padded embeddings) are not tokens: never sample them.
        const int32_t token =
            sampler.sample(std::span<const float>(logits_).first(static_cast<size_t>(tokenizer_.n_vocab())), history);
        if (result.tokens.empty()) result.ttft_ms = ms_since(start);
        if (tokenizer_.is_end_of_generation(token)) {
            result.finish_reason = "eog";
            break;
        }
        result.tokens.push_back(token);
        history.push_back(token);
        const StopMatcher::Step printed = stops.feed(decoder.push(token));
        emit(printed.printable);
        if (printed.stopped) {
            result.finish_reason = "stop";
            break;
        }
        if (static_cast<int32_t>(result.tokens.size()) >= request.max_tokens) {
            result.finish_reason = "length";
            break;
        }
        if (engine_.sequence_length(sequence_) + 1 > engine_.context_length()) {
            result.finish_reason = "context";
            break;
        }
        const auto step_start = Clock::now();
        const Engine::Work work{sequence_, {&token, 1}, LogitsWanted::Last};
        engine_.step({&work, 1}, logits_);
        cached_.push_back(token);
        result.decode_ms += ms_since(step_start);
        ++result.decode_steps;
    }
    if (result.finish_reason != "stop") emit(stops.feed(decoder.flush()).printable + stops.finish());
    return result;
}

}  // namespace cellm
