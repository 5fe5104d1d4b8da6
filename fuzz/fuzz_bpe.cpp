// libFuzzer target: the byte-level BPE tokenizer ("gpt2") built from the synthetic models' metadata
// (tools/make_model: the same vocabulary, merges, token types and ChatML specials cellm-make-model writes),
// under the pre-tokenizers of the synthetic llama ("smollm") and qwen ("qwen2") presets and four more, and as
// Gemma 4's tokenizer model.
// Input layout: tokenizer_fuzz.h.
#include "synthetic_tokenizer.h"
#include "tokenizer_fuzz.h"
#include "vocab_view.h"

namespace {

std::vector<std::unique_ptr<cellm::Tokenizer>> tokenizers;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    const cellm::synthetic::Vocabulary vocab = cellm::synthetic::build_vocabulary(512);
    // Gemma 4's model (its own pre-tokenizer, SentencePiece-style spelling) reads the same tables as UTF-8 text.
    for (const char* pre : {"smollm", "qwen2", "llama3", "default", "qwen35", "gemma4"}) {
        cellm::fuzz::VocabView v;
        v.string("tokenizer.ggml.model", std::string(pre) == "gemma4" ? "gemma4" : "gpt2");
        v.string("tokenizer.ggml.pre", pre);
        v.strings("tokenizer.ggml.tokens", vocab.tokens);
        v.i32s("tokenizer.ggml.token_type", vocab.types);
        v.strings("tokenizer.ggml.merges", vocab.merges);
        v.u32("tokenizer.ggml.bos_token_id", vocab.bos_id);
        v.u32("tokenizer.ggml.eos_token_id", vocab.eos_id);
        v.boolean("tokenizer.ggml.add_bos_token", false);
        v.string("tokenizer.chat_template", cellm::synthetic::chatml_template);
        tokenizers.push_back(cellm::Tokenizer::from_model(v.view()));
    }
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    cellm::fuzz::run_input(tokenizers, data, size);
    return 0;
}
