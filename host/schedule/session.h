// One conversation served by the scheduler: its settings, the tokens it has (prompt and generated), and
// the per-token work of generation (sampling, stop rules, streaming text, timings). The scheduler decides
// when a session's tokens go through the engine; the session decides what each new token means.
#pragma once

#include "grammar/matcher.h"
#include "schedule/sampler.h"
#include "tokenize/tokenizer.h"

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cellm {

using SessionId = int32_t;

// Higher runs first when the scheduler must choose.
namespace priority {
constexpr int32_t background = 0;
constexpr int32_t interactive = 1;
}  // namespace priority

struct SessionOptions {
    std::string name;
    SamplingParams sampling;
    int32_t max_tokens = 256;
    std::vector<std::string> stop;
    int32_t priority = priority::interactive;
    bool ignore_end_of_generation = false;  // benchmarks: always generate max_tokens
    bool logprobs = false;      // record each generated token's log-probability (SessionResult::logprobs)
    int32_t top_logprobs = 0;   // and that many of the most likely tokens at each step
    // Constrained decoding: every token keeps the text a prefix of the grammar's language, and
    // end-of-generation comes only where the grammar may end. Null: free text.
    std::shared_ptr<const grammar::CompiledGrammar> grammar;
    // Receives printable text as it is produced (complete UTF-8, stop strings never shown). Called on the
    // thread that runs the scheduler's step; it may cancel sessions.
    std::function<void(std::string_view)> on_text;
};

// Embeddings that stand in for some prompt tokens: an image's (vision/vision_encoder.h), in place of its image
// tokens. Row i, n_embd floats at values[i * n_embd], goes in place of the prompt token at positions[i].
struct PromptEmbeddings {
    std::vector<int32_t> positions;  // ascending
    std::vector<float> values;
};

enum class SessionState {
    Idle,     // created, or its last turn ended: waiting for a prompt (its KV blocks may stay for the next turn)
    Waiting,  // has a prompt, not admitted yet or preempted
    Running,  // admitted: its tokens go into the next steps
};

// A token and its log-probability: the log-softmax of the model's logits for one step, before bias, penalties
// and the other filters.
struct TokenLogprob {
    int32_t token;
    float logprob;
};

// What one turn produced, and how long it took.
struct SessionResult {
    std::string text;
    std::vector<int32_t> tokens;  // generated ids, an ending end-of-generation token excluded
    int32_t prompt_tokens = 0;
    int32_t reused_tokens = 0;    // prompt tokens the KV cache already held when the turn started
    double ttft_ms = 0;           // from submit until the first generated token was known
    double decode_ms = 0;         // from the first generated token to the last
    std::vector<double> inter_token_ms;  // between consecutive generated tokens
    int32_t preemptions = 0;
    std::string finish_reason;    // "eog", "stop", "length", "context", "cancelled" or "error"
    std::string error;            // why, when finish_reason is "error"
    // With options.logprobs, one row per entry of `tokens`: the generated token, then the top_logprobs most
    // likely ones, best first (lower id first among equals). logprob_row_size is 1 + top_logprobs, else 0.
    std::vector<TokenLogprob> logprobs;
    size_t logprob_row_size = 0;

    double decode_tok_s() const;
    double prefill_tok_s() const;  // prompt tokens computed (not reused) per second until the first token
};

class Session {
public:
    Session(SessionId id, SessionOptions options, const Tokenizer& tokenizer);

    SessionId id() const { return id_; }
    const SessionOptions& options() const { return options_; }
    SessionState state() const { return state_; }
    int32_t priority() const { return options_.priority; }
    const SessionResult& result() const { return result_; }

    // Starts a turn on `prompt`: the whole conversation so far, as tokens.
    void start_turn(std::vector<int32_t> prompt);
    // The tokens the KV cache must hold before the next token can be sampled: prompt, then generated.
    const std::vector<int32_t>& context() const { return context_; }
    // Handles the logits after the whole context went through the engine: samples the next token, streams
    // its text and decides whether the turn goes on. Returns false when the turn ended.
    bool accept_logits(std::span<const float> logits, int32_t context_length);
    void finish(std::string reason, std::string error = {});

private:
    friend class Scheduler;
    void emit(const std::string& text);
    // With options.logprobs, the row of the token just sampled from `logits`, if the token joins the result.
    void record_logprobs(std::span<const float> logits, int32_t token);

    SessionId id_;
    SessionOptions options_;
    const Tokenizer* tokenizer_;
    std::vector<int32_t> context_;
    std::optional<Sampler> sampler_;
    std::optional<StreamDecoder> decoder_;
    std::optional<StopMatcher> stops_;
    std::optional<grammar::GrammarMatcher> matcher_;  // this turn's parse, with options.grammar
    std::vector<uint64_t> allowed_;                   // the matcher's mask for the step at hand
    SessionResult result_;
    SessionState state_ = SessionState::Idle;

    // The scheduler's bookkeeping.
    int32_t sequence_ = -1;        // engine sequence holding this session's KV blocks, -1 when none
    int32_t computed_ = 0;         // leading context tokens whose keys and values the sequence holds
    int64_t last_served_ = -1;     // step that last gave this session tokens
    int64_t arrival_ = 0;          // submit order, first come first served among equals
    bool cancel_requested_ = false;
    std::shared_ptr<const PromptEmbeddings> embeddings_;  // this turn's, or null
    std::chrono::steady_clock::time_point submitted_;
    std::optional<std::chrono::steady_clock::time_point> last_token_at_;
};

}  // namespace cellm
