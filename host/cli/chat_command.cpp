// cellm-host chat: a multi-turn conversation on one libcellm session. Each turn submits the whole
// conversation; the session keeps the KV blocks of what it has already seen, so earlier turns are not
// computed again.
#include "commands.h"
#include "manifest_overrides.h"
#include "sdk_engine.h"

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

namespace cellm::cli {

namespace {

void print_text(cellm_session*, const cellm_event* event, void*) {
    std::fwrite(event->text, 1, event->text_len, stdout);
    std::fflush(stdout);
}

}  // namespace

Command add_chat(CLI::App& app) {
    auto o = std::make_shared<ManifestOverrides>();
    o->add_to(app);
    return [o]() {
        const Manifest manifest = o->load();
        EnginePtr engine = open_engine(*o, 1);
        cellm_engine_info info{};
        info.struct_size = sizeof(info);
        check(cellm_engine_get_info(engine.get(), &info));
        auto settings = session_settings(manifest.generation, 1);
        settings->options.name = "chat";
        settings->options.on_event = print_text;
        cellm_session* raw = nullptr;
        check(cellm_session_create(engine.get(), &settings->options, &raw));
        const SessionPtr session(raw);

        std::vector<std::string> turns;  // user, assistant, user, ...
        std::fprintf(stderr, "cellm chat (%s on %s). Empty line or /exit to quit.\n",
                     manifest.model.path.filename().c_str(), info.backend);
        std::string line;
        while (true) {
            std::fputs("> ", stdout);
            std::fflush(stdout);
            if (!std::getline(std::cin, line) || line.empty() || line == "/exit") break;
            turns.push_back(line);
            std::vector<cellm_message> conversation;
            for (size_t i = 0; i < turns.size(); ++i) conversation.push_back({i % 2 == 0 ? "user" : "assistant", turns[i].c_str()});
            check(cellm_session_submit_chat(session.get(), conversation.data(), conversation.size()));
            check(cellm_session_wait(session.get(), -1));
            const char* text = nullptr;
            size_t length = 0;
            check(cellm_session_get_text(session.get(), &text, &length));
            turns.emplace_back(text, length);
            cellm_session_stats st{};
            st.struct_size = sizeof(st);
            check(cellm_session_get_stats(session.get(), &st));
            std::fprintf(stderr, "\n[%d prompt tokens, %d reused from the cache; %d generated at %.1f tok/s]\n",
                         st.prompt_tokens, st.cached_tokens, st.generated_tokens, st.decode_tok_s);
        }
        return 0;
    };
}

}  // namespace cellm::cli
