// The generation loop of one conversation: prefill the prompt (reusing what the KV cache already holds of
// it), then sample, stream and feed back one token per step until an end-of-generation token, a stop
// string, max_tokens or the context length ends it.
#pragma once

#include "engine.h"
#include "sampler.h"
#include "tokenizer.h"

#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace cellm {

struct GenerationRequest {
    std::vector<int32_t> prompt;  // the whole conversation so far, as tokens
    SamplingParams sampling;
    int32_t max_tokens = 256;
    std::vector<std::string> stop;
    int32_t prefill_chunk = 256;  // prompt tokens per step
};

struct GenerationResult {
    std::string text;
    std::vector<int32_t> tokens;  // generated ids, the end-of-generation token excluded
    int32_t prompt_tokens = 0;    // tokens of the prompt
    int32_t reused_tokens = 0;    // of which the KV cache already held this many
    double prefill_ms = 0;        // time spent computing the prompt
    double ttft_ms = 0;           // from the call until the first generated token was known
    double decode_ms = 0;         // time spent in decode steps
    int32_t decode_steps = 0;
    std::string finish_reason;    // "eog", "stop", "length" (max tokens) or "context"

    double prefill_tok_s() const;
    double decode_tok_s() const;
};

class Generator {
public:
    Generator(Engine& engine, const Tokenizer& tokenizer);
    ~Generator();
    Generator(const Generator&) = delete;
    Generator& operator=(const Generator&) = delete;

    // Runs one request; `on_text` receives printable text as it is produced (complete UTF-8 only, stop
    // strings never shown).
    GenerationResult generate(const GenerationRequest& request, const std::function<void(std::string_view)>& on_text);

    // Tokens whose keys and values are in the cache, in order.
    const std::vector<int32_t>& cached() const { return cached_; }

private:
    Engine& engine_;
    const Tokenizer& tokenizer_;
    int32_t sequence_;
    std::vector<int32_t> cached_;
    std::vector<float> logits_;
};

}  // namespace cellm
