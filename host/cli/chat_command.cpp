// cellm-host chat: a multi-turn conversation on one libcellm session. Each turn submits the whole
// conversation; the session keeps the KV blocks of what it has already seen, so earlier turns are not
// computed again. With a model that takes images, "/image FILE" attaches an image to the next message (as
// llama.cpp's mtmd-cli does); later turns send it again, and the engine's image cache spares its encoding.
#include "commands.h"
#include "manifest_overrides.h"
#include "sdk_engine.h"

#include <cstdio>
#include <fstream>
#include <iostream>
#include <iterator>
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
        auto settings = manifest.sampling_from_model ? engine_session_settings(engine.get(), *o, 1)
                                                     : session_settings(manifest.generation, 1);
        settings->options.name = "chat";
        settings->options.on_event = print_text;
        cellm_session* raw = nullptr;
        check(cellm_session_create(engine.get(), &settings->options, &raw));
        const SessionPtr session(raw);

        std::vector<std::string> turns;  // user, assistant, user, ...
        std::vector<std::vector<char>> images;  // every image of the conversation, in order of their markers
        size_t pending = 0;                     // images attached to the next message
        const bool takes_images = info.model_takes_images != 0;
        std::fprintf(stderr, "cellm chat (%s on %s). Empty line or /exit to quit%s.\n",
                     manifest.model.path.filename().c_str(), info.backend,
                     takes_images ? "; /image FILE attaches an image to the next message" : "");
        std::string line;
        while (true) {
            std::fputs("> ", stdout);
            std::fflush(stdout);
            if (!std::getline(std::cin, line) || line.empty() || line == "/exit") break;
            if (line.starts_with("/image ")) {
                const std::string path = line.substr(7);
                std::ifstream in(path, std::ios::binary);
                std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
                if (!takes_images) {
                    std::fprintf(stderr, "error: the model takes no images\n");
                } else if (bytes.empty()) {
                    std::fprintf(stderr, "error: %s: cannot be read or is empty\n", path.c_str());
                } else {
                    images.push_back(std::move(bytes));
                    ++pending;
                }
                continue;
            }
            std::string message;
            for (; pending > 0; --pending) message += "<image>";
            turns.push_back(message + line);
            std::vector<cellm_message> conversation;
            for (size_t i = 0; i < turns.size(); ++i) conversation.push_back({i % 2 == 0 ? "user" : "assistant", turns[i].c_str()});
            if (images.empty()) {
                check(cellm_session_submit_chat(session.get(), conversation.data(), conversation.size()));
            } else {
                std::vector<cellm_image> attached;
                for (const std::vector<char>& bytes : images) attached.push_back({bytes.data(), bytes.size()});
                const cellm_result r = cellm_session_submit_chat_images(session.get(), conversation.data(),
                                                                        conversation.size(), attached.data(), attached.size());
                if (r != CELLM_SUCCESS) {
                    // A bad image: say why, forget this message and its images, and go on with the conversation.
                    std::fprintf(stderr, "error: %s\n", cellm_last_error());
                    const std::string& last = turns.back();
                    size_t markers = 0;
                    for (size_t at = last.find("<image>"); at != std::string::npos; at = last.find("<image>", at + 1)) ++markers;
                    images.resize(images.size() - std::min(markers, images.size()));
                    turns.pop_back();
                    continue;
                }
            }
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
