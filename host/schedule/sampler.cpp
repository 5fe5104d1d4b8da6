#include "schedule/sampler.h"

#include "error.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <utility>

namespace cellm {

namespace {

// The first index of the largest logit, a NaN never chosen: what max_element gives over the row with NaN read as
// -inf, without copying the row. Sixteen running maxima a vector apart, then the first index holding the best.
// Greedy decoding took 155 us a 49152-token row through the copy and max_element, 14 us this way.
int32_t first_largest(std::span<const float> logits) {
    constexpr size_t lanes = 16;
    constexpr float lowest = -std::numeric_limits<float>::infinity();
    float most[lanes];
    std::fill(most, most + lanes, lowest);
    const size_t n = logits.size();
    size_t i = 0;
    for (; i + lanes <= n; i += lanes)
        for (size_t k = 0; k < lanes; ++k) most[k] = logits[i + k] > most[k] ? logits[i + k] : most[k];
    float best = lowest;
    for (size_t k = 0; k < lanes; ++k) best = most[k] > best ? most[k] : best;
    for (; i < n; ++i) best = logits[i] > best ? logits[i] : best;
    for (size_t j = 0; j < n && best > lowest; ++j)
        if (logits[j] == best) return static_cast<int32_t>(j);
    return 0;  // every logit -inf or NaN: max_element's first
}

}  // namespace

// ---- Sampler ----

Sampler::Sampler(const SamplingParams& params) : params_(params), engine_(params.seed) {}

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> recent_tokens,
                        std::span<const uint64_t> allowed) {
    if (logits.empty()) throw Error("sampler: empty logits row");
    if (logits.size() > static_cast<size_t>(std::numeric_limits<int32_t>::max()))
        throw Error("sampler: logits row larger than the token id range");
    if (!allowed.empty() && allowed.size() < (logits.size() + 63) / 64)
        throw Error("sampler: the token mask has " + std::to_string(allowed.size() * 64) + " bits for a row of " +
                    std::to_string(logits.size()) + " tokens");

    // Greedy reads the row itself, unless bias or penalties must change a copy of it first.
    const bool greedy = params_.temperature <= 0.0f;
    if (greedy && !penalizes() && params_.logit_bias.empty() && allowed.empty()) return first_largest(logits);
    // NaN would break the ordering every filter relies on; such a token is simply never chosen.
    scores_.resize(logits.size());
    for (size_t i = 0; i < logits.size(); ++i)
        scores_[i] = std::isnan(logits[i]) ? -std::numeric_limits<float>::infinity() : logits[i];
    add_bias();
    penalize(recent_tokens);

    if (!allowed.empty()) {
        keep_allowed(allowed);
        if (greedy) return candidates_.front().id;
    } else {
        if (greedy) return first_largest(scores_);
        keep_top_k();
    }
    keep_top_p();
    keep_min_p();
    for (Candidate& c : candidates_) c.logit /= params_.temperature;
    return draw();
}

void Sampler::add_bias() {
    for (const auto& [id, bias] : params_.logit_bias) {
        if (id < 0 || static_cast<size_t>(id) >= scores_.size())
            throw Error("sampler: logit_bias token id " + std::to_string(id) + " outside the vocabulary of " +
                        std::to_string(scores_.size()));
        scores_[static_cast<size_t>(id)] += bias;
    }
}

// llama.cpp's penalties, in its order: a token seen recently becomes less likely whatever its sign (the
// repetition penalty, once however often it was seen), then OpenAI's additive frequency and presence terms.
bool Sampler::penalizes() const {
    const bool additive = params_.frequency_penalty != 0.0f || params_.presence_penalty != 0.0f;
    return (params_.repeat_penalty != 1.0f || additive) && params_.repeat_last_n > 0;
}

void Sampler::penalize(std::span<const int32_t> recent_tokens) {
    if (!penalizes()) return;
    const size_t window = std::min(recent_tokens.size(), static_cast<size_t>(params_.repeat_last_n));
    std::vector<int32_t> seen(recent_tokens.end() - static_cast<std::ptrdiff_t>(window), recent_tokens.end());
    std::sort(seen.begin(), seen.end());
    for (auto run = seen.begin(); run != seen.end();) {
        const int32_t id = *run;
        const auto next = std::find_if(run, seen.end(), [id](int32_t t) { return t != id; });
        const auto count = static_cast<float>(next - run);
        run = next;
        if (id < 0 || static_cast<size_t>(id) >= scores_.size())
            throw Error("sampler: recent token id " + std::to_string(id) + " outside the vocabulary of " +
                        std::to_string(scores_.size()));
        float& logit = scores_[static_cast<size_t>(id)];
        if (params_.repeat_penalty != 1.0f) logit = logit > 0.0f ? logit / params_.repeat_penalty : logit * params_.repeat_penalty;
        logit -= count * params_.frequency_penalty + params_.presence_penalty;
    }
}

// The allowed tokens alone become the candidates, so a disallowed one can never be drawn, not even when every
// allowed logit is -inf. Then top-k as keep_top_k does it (`better` being a total order, a selection then a sort
// gives the same k tokens in the same order), leaving the candidates sorted best first.
void Sampler::keep_allowed(std::span<const uint64_t> allowed) {
    candidates_.clear();
    for (size_t word = 0; word * 64 < scores_.size(); ++word) {
        for (uint64_t bits = allowed[word]; bits != 0; bits &= bits - 1) {
            const size_t id = word * 64 + static_cast<size_t>(std::countr_zero(bits));
            if (id < scores_.size()) candidates_.push_back({static_cast<int32_t>(id), scores_[id]});
        }
    }
    if (candidates_.empty()) throw Error("no token is allowed here");
    const size_t k = static_cast<size_t>(std::max(params_.top_k, 0));
    if (params_.temperature <= 0.0f) {
        // Greedy needs only the best one.
        std::iter_swap(candidates_.begin(), std::min_element(candidates_.begin(), candidates_.end(), better));
    } else if (k > 0 && k < candidates_.size()) {
        const auto kth = candidates_.begin() + static_cast<std::ptrdiff_t>(k);
        std::nth_element(candidates_.begin(), kth, candidates_.end(), better);
        candidates_.resize(k);
        std::sort(candidates_.begin(), candidates_.end(), better);
    } else {
        std::sort(candidates_.begin(), candidates_.end(), better);
    }
}

// Leaves the candidates sorted by logit, highest first (lowest id first among equals), for the later filters.
void Sampler::keep_top_k() {
    const size_t k = static_cast<size_t>(std::max(params_.top_k, 0));
    if (k > 0 && k < scores_.size()) {
        select_top_k(k);
        return;
    }
    candidates_.resize(scores_.size());
    for (size_t i = 0; i < scores_.size(); ++i) candidates_[i] = {static_cast<int32_t>(i), scores_[i]};
    std::sort(candidates_.begin(), candidates_.end(), better);
}

// The k best in one pass over the scores, without a vocabulary-sized candidate list: a heap of the best so far
// (the worst of them on top), met by each block of scores only where the block's largest beats that worst one.
// Ids arrive in ascending order, so a score equal to the worst kept one never displaces it: the same k tokens, in
// the same order, as a partial sort of every candidate.
void Sampler::select_top_k(size_t k) {
    candidates_.clear();
    size_t i = 0;
    for (; i < k; ++i) candidates_.push_back({static_cast<int32_t>(i), scores_[i]});
    std::make_heap(candidates_.begin(), candidates_.end(), better);
    auto offer = [&](size_t id) {
        if (scores_[id] <= candidates_.front().logit) return;
        std::pop_heap(candidates_.begin(), candidates_.end(), better);
        candidates_.back() = {static_cast<int32_t>(id), scores_[id]};
        std::push_heap(candidates_.begin(), candidates_.end(), better);
    };
    constexpr size_t block = 64;
    for (; i % block != 0 && i < scores_.size(); ++i) offer(i);
    for (; i + block <= scores_.size(); i += block) {
        // Eight running maxima, which the compiler keeps in one vector register.
        float lanes[8];
        std::copy_n(scores_.data() + i, 8, lanes);
        for (size_t j = i + 8; j < i + block; j += 8)
            for (size_t l = 0; l < 8; ++l) lanes[l] = scores_[j + l] > lanes[l] ? scores_[j + l] : lanes[l];
        if (*std::max_element(lanes, lanes + 8) <= candidates_.front().logit) continue;
        for (size_t j = i; j < i + block; ++j) offer(j);
    }
    for (; i < scores_.size(); ++i) offer(i);
    std::sort_heap(candidates_.begin(), candidates_.end(), better);
}

// Keeps the smallest head of the candidates whose probability mass reaches top_p.
void Sampler::keep_top_p() {
    if (params_.top_p >= 1.0f) return;
    const double max_logit = candidates_.front().logit;
    double total = 0.0;
    for (const Candidate& c : candidates_) total += std::exp(static_cast<double>(c.logit) - max_logit);
    double mass = 0.0;
    for (size_t i = 0; i < candidates_.size(); ++i) {
        mass += std::exp(static_cast<double>(candidates_[i].logit) - max_logit) / total;
        if (mass >= static_cast<double>(params_.top_p)) {
            candidates_.resize(i + 1);
            return;
        }
    }
}

// Keeps tokens at least min_p times as likely as the best one: p >= min_p * p_max, i.e. in logits,
// logit >= max_logit + log(min_p).
void Sampler::keep_min_p() {
    if (params_.min_p <= 0.0f) return;
    const double threshold = static_cast<double>(candidates_.front().logit) + std::log(static_cast<double>(params_.min_p));
    const auto first_below = std::find_if(candidates_.begin() + 1, candidates_.end(), [&](const Candidate& c) {
        return static_cast<double>(c.logit) < threshold;
    });
    candidates_.erase(first_below, candidates_.end());
}

// Inverse-CDF draw over the softmax of the (sorted) candidates. The uniform number is the engine's top 53 bits
// scaled to [0, 1): std::uniform_real_distribution's output is implementation-defined.
int32_t Sampler::draw() {
    const double max_logit = candidates_.front().logit;
    if (std::isinf(max_logit)) return candidates_.front().id;  // nothing finite left: every token equally impossible
    double total = 0.0;
    for (const Candidate& c : candidates_) total += std::exp(static_cast<double>(c.logit) - max_logit);
    const double uniform = static_cast<double>(engine_() >> 11) * 0x1.0p-53;
    const double target = uniform * total;
    double cumulative = 0.0;
    for (const Candidate& c : candidates_) {
        cumulative += std::exp(static_cast<double>(c.logit) - max_logit);
        if (target < cumulative) return c.id;
    }
    return candidates_.back().id;  // rounding left target at the very top of the range
}

// ---- StopMatcher ----

StopMatcher::StopMatcher(std::vector<std::string> stop_strings) : stop_strings_(std::move(stop_strings)) {
    // An empty stop string would end every generation before its first token.
    std::erase_if(stop_strings_, [](const std::string& s) { return s.empty(); });
}

StopMatcher::Step StopMatcher::feed(std::string_view piece) {
    if (stopped_) return {"", true};
    held_.append(piece);

    // Only the held text can contain a stop string: anything released earlier was not the start of one.
    size_t stop_at = std::string::npos;
    for (const std::string& stop : stop_strings_) stop_at = std::min(stop_at, held_.find(stop));
    if (stop_at != std::string::npos) {
        stopped_ = true;
        Step step{held_.substr(0, stop_at), true};
        held_.clear();
        return step;
    }

    // Hold back the longest tail that is still the beginning of some stop string.
    size_t hold = 0;
    for (const std::string& stop : stop_strings_) {
        for (size_t length = std::min(stop.size() - 1, held_.size()); length > hold; --length) {
            if (std::string_view(held_).ends_with(std::string_view(stop).substr(0, length))) {
                hold = length;
                break;
            }
        }
    }
    Step step{held_.substr(0, held_.size() - hold), false};
    held_.erase(0, held_.size() - hold);
    return step;
}

std::string StopMatcher::finish() {
    if (stopped_) return {};
    return std::exchange(held_, {});
}

}  // namespace cellm
