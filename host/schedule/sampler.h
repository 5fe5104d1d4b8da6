// Token selection from a step's logits, and the stop-string matcher that decides what generated text may be
// printed. Stop strings and the token budget are the engine's to enforce; these are the pieces it uses.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace cellm {

// The knobs of one sampler; defaults match the manifest's. A filter whose value makes it a no-op is skipped.
struct SamplingParams {
    float temperature = 0.8f;     // 0 = greedy argmax (lowest id wins ties)
    int32_t top_k = 40;           // <= 0 disables
    float top_p = 0.95f;          // 1 disables
    float min_p = 0.05f;          // 0 disables
    float repeat_penalty = 1.0f;  // 1 disables
    int32_t repeat_last_n = 64;   // how many recent tokens the penalties look at; 0 disables
    float frequency_penalty = 0;  // subtracted once per occurrence in that window (OpenAI's); 0 disables
    float presence_penalty = 0;   // subtracted once if the token occurs in that window (OpenAI's); 0 disables
    uint64_t seed = 0;
    // (token, bias): added to the token's logit before the penalties, as llama.cpp and OpenAI do.
    std::vector<std::pair<int32_t, float>> logit_bias = {};
};

// Samples in llama.cpp's order: logit bias, repetition penalty, top-k, top-p, min-p, temperature, seeded draw.
// The draw is built from std::mt19937_64's bits alone, so one seed gives the same tokens on every platform.
// Not thread-safe: one sampler per sequence.
class Sampler {
public:
    explicit Sampler(const SamplingParams& params);

    // Picks the next token from one row of logits (one per vocabulary id). `recent_tokens` is the sequence
    // so far, oldest first; only its last repeat_last_n entries are penalized. `allowed`, when not empty, is a
    // bitset over the row (bit t % 64 of word t / 64, e.g. a grammar's token mask): the other tokens are out
    // before any filter runs, so they are never drawn, greedy included. Throws cellm::Error on an empty row, a
    // recent or biased token outside the vocabulary, a mask shorter than the row, or a mask allowing nothing.
    int32_t sample(std::span<const float> logits, std::span<const int32_t> recent_tokens,
                   std::span<const uint64_t> allowed = {});

private:
    struct Candidate {
        int32_t id;
        float logit;
    };
    // The filters' order: higher logit first, lower id first among equals.
    static bool better(const Candidate& a, const Candidate& b) {
        return a.logit != b.logit ? a.logit > b.logit : a.id < b.id;
    }

    bool penalizes() const;  // whether the parameters ask for any penalty
    void add_bias();
    void penalize(std::span<const int32_t> recent_tokens);
    void keep_allowed(std::span<const uint64_t> allowed);
    void keep_top_k();
    void select_top_k(size_t k);
    void keep_top_p();
    void keep_min_p();
    int32_t draw();

    SamplingParams params_;
    std::mt19937_64 engine_;
    std::vector<float> scores_;          // the row with NaN as -inf and penalties applied; reused between steps
    std::vector<Candidate> candidates_;  // the tokens still in the running, best first after keep_top_k
};

// Watches generated text for stop strings. Text that could still turn out to be the start of a stop string is
// held back until the next piece decides it; nothing of a stop string (or after it) is ever released.
class StopMatcher {
public:
    explicit StopMatcher(std::vector<std::string> stop_strings);

    struct Step {
        std::string printable;  // text now safe to show
        bool stopped = false;   // a stop string completed; generation should end
    };

    // Feeds the next decoded piece. After a stop, further pieces release nothing.
    Step feed(std::string_view piece);

    // Releases the held-back text when generation ends without a stop (e.g. the token budget ran out).
    std::string finish();

    bool stopped() const { return stopped_; }

private:
    std::vector<std::string> stop_strings_;
    std::string held_;
    bool stopped_ = false;
};

}  // namespace cellm
