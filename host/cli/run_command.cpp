// cellm-host run: one prompt, streamed answer, then timings (or one JSON object with --json).
#include "commands.h"
#include "manifest_overrides.h"

#include "generator.h"
#include "prompt.h"
#include "runtime.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>

namespace cellm::cli {

Command add_run(CLI::App& app) {
    struct Options {
        ManifestOverrides manifest;
        std::string prompt;
        bool chat = false, raw = false, json = false;
    };
    auto o = std::make_shared<Options>();
    o->manifest.add_to(app);
    app.add_option("--prompt", o->prompt, "The prompt")->required();
    auto* chat = app.add_flag("--chat", o->chat, "Wrap the prompt in the chat template (default when the model has one)");
    app.add_flag("--raw", o->raw, "Use the prompt text as is")->excludes(chat);
    app.add_flag("--json", o->json, "Print one JSON object instead of streaming");

    return [o]() {
        const Manifest manifest = o->manifest.load();
        Runtime runtime(manifest);
        const Tokenizer& tokenizer = runtime.model().tokenizer();
        PromptBuilder prompt(tokenizer, manifest.chat);
        const bool use_chat = !o->raw && (o->chat || !tokenizer.chat_template().empty());
        const ChatMessage message{"user", o->prompt};

        GenerationRequest request;
        request.prompt = use_chat ? prompt.chat_tokens({&message, 1}) : prompt.raw_tokens(o->prompt);
        request.sampling = manifest.generation.sampling;
        request.max_tokens = manifest.generation.max_tokens;
        request.stop = manifest.generation.stop;

        Generator generator(runtime.engine(), tokenizer);
        auto stream = [&](std::string_view text) {
            if (o->json) return;
            std::fwrite(text.data(), 1, text.size(), stdout);
            std::fflush(stdout);
        };
        const GenerationResult r = generator.generate(request, stream);

        if (o->json) {
            nlohmann::json out{{"text", r.text},
                               {"tokens", r.tokens},
                               {"prompt_tokens", r.prompt_tokens},
                               {"generated_tokens", r.tokens.size()},
                               {"ttft_ms", r.ttft_ms},
                               {"prefill_tok_s", r.prefill_tok_s()},
                               {"decode_tok_s", r.decode_tok_s()},
                               {"finish_reason", r.finish_reason},
                               {"backend", runtime.backend().name()},
                               {"model", manifest.model.path.string()}};
            // A reply cut by max_tokens can end inside a UTF-8 character: replace rather than fail.
            std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
        } else {
            std::fprintf(stderr,
                         "\n\nprompt: %d tokens, %.1f tok/s | first token: %.1f ms | generated: %zu tokens, %.1f tok/s "
                         "(%s) | backend: %s\n",
                         r.prompt_tokens, r.prefill_tok_s(), r.ttft_ms, r.tokens.size(), r.decode_tok_s(),
                         r.finish_reason.c_str(), runtime.backend().name());
        }
        return 0;
    };
}

}  // namespace cellm::cli
