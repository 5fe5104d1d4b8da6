#include "schedule/session.h"

#include "error.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace cellm {

namespace {
using Clock = std::chrono::steady_clock;
double ms_between(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double, std::milli>(b - a).count(); }
}  // namespace

double SessionResult::decode_tok_s() const {
    // The first token comes out of the prefill; decode speed counts the ones after it.
    return decode_ms > 0 && tokens.size() > 1 ? static_cast<double>(inter_token_ms.size()) * 1000.0 / decode_ms : 0.0;
}

double SessionResult::prefill_tok_s() const {
    return ttft_ms > 0 ? (prompt_tokens - reused_tokens) * 1000.0 / ttft_ms : 0.0;
}

Session::Session(SessionId id, SessionOptions options, const Tokenizer& tokenizer)
    : id_(id), options_(std::move(options)), tokenizer_(&tokenizer) {}

void Session::start_turn(std::vector<int32_t> prompt) {
    if (prompt.empty()) throw Error("session '" + options_.name + "': the prompt is empty");
    for (int32_t t : prompt) {
        if (t < 0 || t >= tokenizer_->n_vocab()) {
            throw Error("session '" + options_.name + "': token id " + std::to_string(t) + " is outside the vocabulary");
        }
    }
    result_ = SessionResult{};
    result_.prompt_tokens = static_cast<int32_t>(prompt.size());
    if (options_.logprobs) result_.logprob_row_size = 1 + static_cast<size_t>(std::max(options_.top_logprobs, 0));
    context_ = std::move(prompt);
    sampler_.emplace(options_.sampling);
    decoder_.emplace(*tokenizer_);
    stops_.emplace(options_.stop);
    matcher_.reset();
    allowed_.clear();
    trigger_tail_.clear();
    trigger_failed_ = false;
    if (options_.grammar && options_.grammar_trigger.empty()) matcher_.emplace(options_.grammar);
    submitted_ = Clock::now();
    last_token_at_.reset();
    cancel_requested_ = false;
}

void Session::emit(const std::string& text) {
    if (text.empty()) return;
    result_.text += text;
    if (options_.on_text) options_.on_text(text);
}

bool Session::accept_logits(std::span<const float> logits, int32_t context_length) {
    // Rows past the tokenizer's vocabulary (padded embeddings) are not tokens: never sample them.
    if (matcher_) {
        allowed_.resize(matcher_->mask_words());
        matcher_->fill_mask(allowed_);
    }
    int32_t token = -1;
    try {
        token = sampler_->sample(logits.first(static_cast<size_t>(tokenizer_->n_vocab())), context_, allowed_);
    } catch (const Error& e) {
        // A grammar that no token of this vocabulary can continue ends this turn, not the others' steps.
        if (!matcher_) throw;
        finish("error", std::string("grammar: ") + e.what());
        return false;
    }
    if (matcher_ && !matcher_->accept_token(token)) throw Error("the grammar refused the token it allowed");
    record_logprobs(logits, token);
    const auto now = Clock::now();
    if (last_token_at_) {
        result_.inter_token_ms.push_back(ms_between(*last_token_at_, now));
        result_.decode_ms += result_.inter_token_ms.back();
    } else {
        result_.ttft_ms = ms_between(submitted_, now);
    }
    last_token_at_ = now;

    if (tokenizer_->is_end_of_generation(token) && !options_.ignore_end_of_generation) {
        finish("eog");
        return false;
    }
    result_.tokens.push_back(token);
    context_.push_back(token);
    if (options_.grammar && !matcher_) watch_trigger(token);
    const StopMatcher::Step printed = stops_->feed(decoder_->push(token));
    emit(printed.printable);
    if (printed.stopped) {
        finish("stop");
        return false;
    }
    if (static_cast<int32_t>(result_.tokens.size()) >= options_.max_tokens) {
        finish("length");
        return false;
    }
    // The new token itself must still fit before the next one can be sampled.
    if (static_cast<int32_t>(context_.size()) > context_length) {
        finish("context");
        return false;
    }
    return true;
}

void Session::watch_trigger(int32_t token) {
    const std::string& trigger = options_.grammar_trigger;
    if (trigger_failed_ || trigger.empty()) return;
    trigger_tail_ += options_.grammar->vocabulary().bytes(token);
    const size_t at = trigger_tail_.find(trigger);
    if (at == std::string::npos) {
        // Only a suffix shorter than the trigger can still be the start of one.
        if (trigger_tail_.size() >= trigger.size()) trigger_tail_.erase(0, trigger_tail_.size() - trigger.size() + 1);
        return;
    }
    matcher_.emplace(options_.grammar);
    if (!matcher_->accept_text(std::string_view(trigger_tail_).substr(at))) {
        // What the model wrote after the trigger already breaks the grammar: the answer stays free text.
        matcher_.reset();
        trigger_failed_ = true;
    }
    trigger_tail_.clear();
}

void Session::record_logprobs(std::span<const float> logits, int32_t token) {
    if (!options_.logprobs) return;
    if (tokenizer_->is_end_of_generation(token) && !options_.ignore_end_of_generation) return;  // not in tokens
    const std::span<const float> row = logits.first(static_cast<size_t>(tokenizer_->n_vocab()));
    // log p(t) = logit(t) - (max + log sum exp(logit - max)), in double; a NaN logit counts as -inf.
    const auto logit = [&](size_t t) {
        return std::isnan(row[t]) ? -std::numeric_limits<double>::infinity() : static_cast<double>(row[t]);
    };
    double max = -std::numeric_limits<double>::infinity();
    for (size_t t = 0; t < row.size(); ++t) max = std::max(max, logit(t));
    double sum = 0;
    if (std::isfinite(max)) {
        for (size_t t = 0; t < row.size(); ++t) sum += std::exp(logit(t) - max);
    }
    const double log_total = std::isfinite(max) ? max + std::log(sum) : max;
    const auto logprob = [&](size_t t) { return static_cast<float>(logit(t) - log_total); };
    result_.logprobs.push_back({token, logprob(static_cast<size_t>(token))});

    // The best top_logprobs ids, kept sorted in a short list (at most 20): most ids fail the first comparison.
    const size_t n = result_.logprob_row_size - 1;
    std::vector<size_t> best;
    best.reserve(n + 1);
    for (size_t t = 0; t < row.size() && n > 0; ++t) {
        if (best.size() == n && !(logit(t) > logit(best.back()))) continue;
        auto at = best.end();
        while (at != best.begin() && logit(t) > logit(*(at - 1))) --at;
        best.insert(at, t);
        if (best.size() > n) best.pop_back();
    }
    for (size_t t : best) result_.logprobs.push_back({static_cast<int32_t>(t), logprob(t)});
    // A vocabulary smaller than top_logprobs: pad so every row has the same size.
    for (size_t i = best.size(); i < n; ++i) result_.logprobs.push_back({-1, -std::numeric_limits<float>::infinity()});
}

void Session::finish(std::string reason, std::string error) {
    if (reason != "stop" && stops_ && decoder_) emit(stops_->feed(decoder_->flush()).printable + stops_->finish());
    result_.finish_reason = std::move(reason);
    result_.error = std::move(error);
    state_ = SessionState::Idle;
}

}  // namespace cellm
