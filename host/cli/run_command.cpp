// cellm-host run: one prompt (--prompt), or every [[session]] of the manifest served concurrently by the
// engine's scheduler, through libcellm. Output streams as it is produced, each line prefixed by its session's
// name when there are several; a summary follows (or one JSON object with --json).
#include "commands.h"
#include "manifest_overrides.h"
#include "sdk_engine.h"

#include "error.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <iostream>
#include <map>

namespace cellm::cli {

namespace {

// Several sessions' streamed text on one terminal, line by line: a line is printed, prefixed with its
// session's name, as soon as it is complete (the rest when the session ends), so lines never mix.
class PrefixedOutput {
public:
    void write(const std::string& name, std::string_view text) {
        std::string& line = pending_[name];
        for (char c : text) {
            if (c != '\n') {
                line += c;
                continue;
            }
            std::fprintf(stdout, "%s: %s\n", name.c_str(), line.c_str());
            line.clear();
        }
        std::fflush(stdout);
    }
    void finish(const std::string& name) {
        std::string& line = pending_[name];
        if (!line.empty()) std::fprintf(stdout, "%s: %s\n", name.c_str(), line.c_str());
        line.clear();
        std::fflush(stdout);
    }

private:
    std::map<std::string, std::string> pending_;
};

// What a session's events do on the terminal; events arrive on the engine's thread.
struct Listener {
    PrefixedOutput* output = nullptr;  // null: one session, printed as is
    std::string name;
};

void on_event(cellm_session*, const cellm_event* event, void* user_data) {
    const auto* listener = static_cast<const Listener*>(user_data);
    if (listener->output == nullptr) {
        std::fwrite(event->text, 1, event->text_len, stdout);
        std::fflush(stdout);
    } else if (event->kind == CELLM_EVENT_TEXT) {
        listener->output->write(listener->name, {event->text, event->text_len});
    } else {
        listener->output->finish(listener->name);
    }
}

// A whole file's bytes; throws cellm::Error naming it.
std::vector<char> read_file(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (!in.good() && !in.eof()) throw cellm::Error(path + ": cannot be read");
    if (bytes.empty()) throw cellm::Error(path + ": empty file");
    return bytes;
}

// One session's turn as the summary and the JSON report see it.
struct Outcome {
    std::string name, text, error;
    std::vector<int32_t> tokens;
    cellm_session_stats stats{};
    std::vector<cellm_logprob> logprobs;  // with --logprobs: row_size entries per token
    size_t row_size = 0;
};

Outcome outcome_of(cellm_session* session, const std::string& name) {
    Outcome o;
    o.name = name;
    o.stats.struct_size = sizeof(o.stats);
    check(cellm_session_get_stats(session, &o.stats));
    o.error = o.stats.error;
    const char* text = nullptr;
    size_t length = 0;
    check(cellm_session_get_text(session, &text, &length));
    o.text.assign(text, length);
    const int32_t* tokens = nullptr;
    size_t n = 0;
    check(cellm_session_get_tokens(session, &tokens, &n));
    o.tokens.assign(tokens, tokens + n);
    const cellm_logprob* entries = nullptr;
    check(cellm_session_get_logprobs(session, &entries, &n, &o.row_size));
    o.logprobs.assign(entries, entries + n * o.row_size);
    return o;
}

// One turn in --json, the same shape for a single prompt and for each [[session]], named as the SDK names
// them: `tokens` are the generated ids (cellm_session_get_tokens), the counts come from cellm_session_stats.
nlohmann::json outcome_json(const Outcome& o) {
    const cellm_session_stats& r = o.stats;
    nlohmann::json out = {{"name", o.name},
            {"text", o.text},
            {"tokens", o.tokens},
            {"prompt_tokens", r.prompt_tokens},
            {"cached_tokens", r.cached_tokens},
            {"generated_tokens", r.generated_tokens},
            {"preemptions", r.preemptions},
            {"ttft_ms", r.ttft_ms},
            {"prefill_tok_s", r.prefill_tok_s},
            {"decode_tok_s", r.decode_tok_s},
            {"finish_reason", cellm_finish_reason_name(r.finish_reason)},
            {"error", o.error}};
    // With --logprobs, a row per token (cellm_session_get_logprobs): the token, then the best ones.
    if (o.row_size > 0) {
        nlohmann::json rows = nlohmann::json::array();
        for (size_t at = 0; at + o.row_size <= o.logprobs.size(); at += o.row_size) {
            nlohmann::json row = nlohmann::json::array();
            for (size_t j = at; j < at + o.row_size; ++j) {
                row.push_back({{"token", o.logprobs[j].token}, {"logprob", o.logprobs[j].logprob}});
            }
            rows.push_back(std::move(row));
        }
        out["logprobs"] = std::move(rows);
    }
    return out;
}

// The summary line of one session, on stderr so stdout keeps only generated text.
void print_summary(const Outcome& o) {
    const cellm_session_stats& r = o.stats;
    std::fprintf(stderr, "%s%sprompt %d tokens (%d cached) | first token %.1f ms | %d tokens, %.1f tok/s | %s%s%s\n",
                 o.name.c_str(), o.name.empty() ? "" : ": ", r.prompt_tokens, r.cached_tokens, r.ttft_ms,
                 r.generated_tokens, r.decode_tok_s, cellm_finish_reason_name(r.finish_reason),
                 o.error.empty() ? "" : ": ", o.error.c_str());
}

}  // namespace

Command add_run(CLI::App& app) {
    struct Options {
        ManifestOverrides manifest;
        std::string prompt;
        std::vector<std::string> images;
        bool chat = false, raw = false, json = false;
        int32_t logprobs = -1;  // -1: none
    };
    auto o = std::make_shared<Options>();
    o->manifest.add_to(app);
    app.add_option("--prompt", o->prompt, "The prompt (without it, the manifest's [[session]] entries run)");
    app.add_option("--image", o->images,
                   "A PNG or JPEG file for the prompt's next <image> (repeatable; without markers the images go first)")
        ->check(CLI::ExistingFile);
    auto* chat = app.add_flag("--chat", o->chat, "Wrap the prompt in the chat template (default when the model has one)");
    app.add_flag("--raw", o->raw, "Use the prompt text as is")->excludes(chat);
    auto* json = app.add_flag("--json", o->json, "Print one JSON object instead of streaming");
    app.add_option("--logprobs", o->logprobs,
                   "With --json: each generated token's log-probability and the N most likely tokens (0..20)")
        ->check(CLI::Range(0, 20))
        ->needs(json);

    return [o]() {
        Manifest manifest = o->manifest.load();
        const bool single = !o->prompt.empty();
        if (!o->images.empty() && !single) throw cellm::Error("--image needs --prompt");
        std::vector<std::vector<char>> image_bytes;
        std::vector<cellm_image> images;
        for (const std::string& path : o->images) image_bytes.push_back(read_file(path));
        for (const std::vector<char>& bytes : image_bytes) images.push_back({bytes.data(), bytes.size()});
        if (!single && manifest.sessions.empty()) {
            throw cellm::Error(o->manifest.manifest.empty()
                                   ? "nothing to run: give --prompt"
                                   : "nothing to run: give --prompt, or [[session]] entries in the manifest");
        }
        if (single) {
            SessionConfig s;
            s.prompt = o->prompt;
            s.generation = manifest.generation;
            if (o->chat) s.chat = true;
            if (o->raw) s.chat = false;
            manifest.sessions = {s};
        }
        const auto n_sessions = static_cast<int32_t>(manifest.sessions.size());
        EnginePtr engine = open_engine(o->manifest, std::min(n_sessions, manifest.scheduler.max_running));
        cellm_engine_info info{};
        info.struct_size = sizeof(info);
        check(cellm_engine_get_info(engine.get(), &info));

        PrefixedOutput output;
        std::vector<Listener> listeners(manifest.sessions.size());
        std::vector<SessionPtr> sessions;
        for (size_t i = 0; i < manifest.sessions.size(); ++i) {
            const SessionConfig& s = manifest.sessions[i];
            auto settings = manifest.sampling_from_model ? engine_session_settings(engine.get(), o->manifest, s.priority)
                                                         : session_settings(s.generation, s.priority);
            settings->options.name = s.name.c_str();
            if (o->logprobs >= 0) {
                settings->options.logprobs = 1;
                settings->options.top_logprobs = o->logprobs;
            }
            if (!o->json) {
                listeners[i] = {single ? nullptr : &output, s.name};
                settings->options.on_event = on_event;
                settings->options.user_data = &listeners[i];
            }
            cellm_session* session = nullptr;
            check(cellm_session_create(engine.get(), &settings->options, &session));
            sessions.emplace_back(session);
            const bool chat_wrapped = s.chat.value_or(info.model_has_chat_template != 0);
            const cellm_message message{"user", s.prompt.c_str()};
            if (!images.empty()) {
                check(chat_wrapped ? cellm_session_submit_chat_images(session, &message, 1, images.data(), images.size())
                                   : cellm_session_submit_text_images(session, s.prompt.c_str(), images.data(), images.size()));
            } else if (chat_wrapped) {
                check(cellm_session_submit_chat(session, &message, 1));
            } else {
                check(cellm_session_submit_text(session, s.prompt.c_str()));
            }
        }
        for (const SessionPtr& s : sessions) check(cellm_session_wait(s.get(), -1));

        std::vector<Outcome> outcomes;
        bool failed = false;
        for (size_t i = 0; i < sessions.size(); ++i) {
            outcomes.push_back(outcome_of(sessions[i].get(), manifest.sessions[i].name));
            failed = failed || outcomes.back().stats.finish_reason == CELLM_FINISH_ERROR;
        }
        cellm_engine_stats stats{};
        stats.struct_size = sizeof(stats);
        check(cellm_engine_get_stats(engine.get(), &stats));

        const auto dump = [](const nlohmann::json& out) {
            // A reply cut by max_tokens can end inside a UTF-8 character: replace rather than fail.
            std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
        };
        if (single) {
            const Outcome& r = outcomes[0];
            if (o->json) {
                nlohmann::json out = outcome_json(r);
                out["backend"] = info.backend;
                out["model"] = info.model_path;
                dump(out);
            } else {
                std::fprintf(stderr, "\n\n");
                print_summary(r);
            }
            if (failed) throw cellm::Error(r.error);
            return 0;
        }

        if (o->json) {
            nlohmann::json list = nlohmann::json::array();
            for (const Outcome& r : outcomes) list.push_back(outcome_json(r));
            dump({{"sessions", list},
                  {"kv",
                   {{"blocks", stats.kv_blocks},
                    {"blocks_used", stats.kv_blocks_used},
                    {"blocks_free", stats.kv_blocks_free},
                    {"block_size", info.kv_block_size},
                    {"bytes_per_token", info.kv_bytes_per_token},
                    {"prefix_hit_tokens", stats.prefix_hit_tokens},
                    {"copied_blocks", stats.copied_blocks},
                    {"preemptions", stats.preemptions},
                    {"steps", stats.steps}}},
                  {"backend", info.backend},
                  {"model", info.model_path}});
        } else {
            std::fprintf(stderr, "\n");
            for (const Outcome& r : outcomes) print_summary(r);
            std::fprintf(stderr, "KV: %d of %d blocks used, %lld prompt tokens from the prefix cache, %lld preemptions\n",
                         stats.kv_blocks_used, stats.kv_blocks, static_cast<long long>(stats.prefix_hit_tokens),
                         static_cast<long long>(stats.preemptions));
        }
        if (failed) throw cellm::Error("a session failed (see its summary)");
        return 0;
    };
}

}  // namespace cellm::cli
