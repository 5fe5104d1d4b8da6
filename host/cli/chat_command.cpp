// cellm-host chat: a multi-turn conversation. Each turn renders the whole conversation, and the generator
// reuses the KV cache for the part it has already seen, so earlier turns are not computed again.
#include "commands.h"
#include "manifest_overrides.h"

#include "generator.h"
#include "prompt.h"
#include "runtime.h"

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

namespace cellm::cli {

Command add_chat(CLI::App& app) {
    auto o = std::make_shared<ManifestOverrides>();
    o->add_to(app);
    return [o]() {
        const Manifest manifest = o->load();
        Runtime runtime(manifest);
        const Tokenizer& tokenizer = runtime.model().tokenizer();
        PromptBuilder prompt(tokenizer, manifest.chat);
        Generator generator(runtime.engine(), tokenizer);
        std::vector<ChatMessage> conversation;

        std::fprintf(stderr, "cellm chat (%s on %s). Empty line or /exit to quit.\n",
                     manifest.model.path.filename().c_str(), runtime.backend().name());
        std::string line;
        while (true) {
            std::fputs("> ", stdout);
            std::fflush(stdout);
            if (!std::getline(std::cin, line) || line.empty() || line == "/exit") break;
            conversation.push_back({"user", line});
            GenerationRequest request;
            request.prompt = prompt.chat_tokens(conversation);
            request.sampling = manifest.generation.sampling;
            request.max_tokens = manifest.generation.max_tokens;
            request.stop = manifest.generation.stop;
            const GenerationResult r = generator.generate(request, [](std::string_view text) {
                std::fwrite(text.data(), 1, text.size(), stdout);
                std::fflush(stdout);
            });
            conversation.push_back({"assistant", r.text});
            std::fprintf(stderr, "\n[%d prompt tokens, %d reused from the cache; %zu generated at %.1f tok/s]\n",
                         r.prompt_tokens, r.reused_tokens, r.tokens.size(), r.decode_tok_s());
        }
        return 0;
    };
}

}  // namespace cellm::cli
