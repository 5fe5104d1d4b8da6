#include "schedule/session.h"

#include "error.h"

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
    context_ = std::move(prompt);
    sampler_.emplace(options_.sampling);
    decoder_.emplace(*tokenizer_);
    stops_.emplace(options_.stop);
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
    const int32_t token = sampler_->sample(logits.first(static_cast<size_t>(tokenizer_->n_vocab())), context_);
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

void Session::finish(std::string reason, std::string error) {
    if (reason != "stop" && stops_ && decoder_) emit(stops_->feed(decoder_->flush()).printable + stops_->finish());
    result_.finish_reason = std::move(reason);
    result_.error = std::move(error);
    state_ = SessionState::Idle;
}

}  // namespace cellm
