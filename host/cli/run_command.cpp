// cellm-host run: one prompt (--prompt), or every [[session]] of the manifest served concurrently by the
// scheduler. Output streams as it is produced, each line prefixed by its session's name when there are
// several; a summary follows (or one JSON object with --json).
#include "commands.h"
#include "manifest_overrides.h"

#include "error.h"
#include "prompt.h"
#include "runtime.h"
#include "scheduler.h"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <map>
#include <iostream>

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

SessionOptions session_options(const std::string& name, const GenerationConfig& generation, int32_t priority) {
    SessionOptions o;
    o.name = name;
    o.sampling = generation.sampling;
    o.max_tokens = generation.max_tokens;
    o.stop = generation.stop;
    o.priority = priority;
    return o;
}

nlohmann::json kv_json(const SchedulerStats& st, const Engine& engine) {
    return {{"blocks", st.kv.blocks},
            {"blocks_used", st.kv.used},
            {"blocks_free", st.kv.free},
            {"block_size", engine.kv_cache().block_size()},
            {"bytes_per_token", engine.kv_cache().bytes_per_token()},
            {"prefix_hit_tokens", st.kv.prefix_hit_tokens},
            {"copied_blocks", st.kv.copied_blocks},
            {"preemptions", st.preemptions},
            {"steps", st.steps}};
}

// The summary line of one session, on stderr so stdout keeps only generated text.
void print_summary(const std::string& name, const SessionResult& r) {
    std::fprintf(stderr, "%s%sprompt %d tokens (%d cached) | first token %.1f ms | %zu tokens, %.1f tok/s | %s%s%s\n",
                 name.c_str(), name.empty() ? "" : ": ", r.prompt_tokens, r.reused_tokens, r.ttft_ms, r.tokens.size(),
                 r.decode_tok_s(), r.finish_reason.c_str(), r.error.empty() ? "" : ": ", r.error.c_str());
}

}  // namespace

Command add_run(CLI::App& app) {
    struct Options {
        ManifestOverrides manifest;
        std::string prompt;
        bool chat = false, raw = false, json = false;
    };
    auto o = std::make_shared<Options>();
    o->manifest.add_to(app);
    app.add_option("--prompt", o->prompt, "The prompt (without it, the manifest's [[session]] entries run)");
    auto* chat = app.add_flag("--chat", o->chat, "Wrap the prompt in the chat template (default when the model has one)");
    app.add_flag("--raw", o->raw, "Use the prompt text as is")->excludes(chat);
    app.add_flag("--json", o->json, "Print one JSON object instead of streaming");

    return [o]() {
        Manifest manifest = o->manifest.load();
        const bool single = !o->prompt.empty();
        if (!single && manifest.sessions.empty()) {
            throw cellm::Error("nothing to run: give --prompt, or [[session]] entries in the manifest");
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
        Runtime runtime(manifest, std::min(n_sessions, manifest.scheduler.max_running));
        const Tokenizer& tokenizer = runtime.model().tokenizer();
        PromptBuilder prompt(tokenizer, manifest.chat);

        SchedulerOptions options;
        options.token_budget = manifest.scheduler.token_budget;
        options.max_running = manifest.scheduler.max_running;
        options.policy = {manifest.policy.max_batch, manifest.policy.max_tokens_per_second};
        Scheduler scheduler(runtime.engine(), tokenizer, options);

        PrefixedOutput output;
        std::vector<SessionId> ids;
        for (const SessionConfig& s : manifest.sessions) {
            SessionOptions so = session_options(s.name, s.generation, s.priority);
            if (!o->json) {
                if (single) {
                    so.on_text = [](std::string_view text) {
                        std::fwrite(text.data(), 1, text.size(), stdout);
                        std::fflush(stdout);
                    };
                } else {
                    so.on_text = [&output, name = s.name](std::string_view text) { output.write(name, text); };
                }
            }
            const SessionId id = scheduler.create(std::move(so));
            const bool use_chat = s.chat.value_or(!tokenizer.chat_template().empty());
            const ChatMessage message{"user", s.prompt};
            scheduler.submit(id, use_chat ? prompt.chat_tokens({&message, 1}) : prompt.raw_tokens(s.prompt));
            ids.push_back(id);
        }
        // Step by hand so a session's last line shows as soon as it ends, not after the slowest one.
        std::vector<bool> shown(ids.size(), false);
        while (scheduler.step()) {
            for (size_t i = 0; i < ids.size(); ++i) {
                if (!shown[i] && scheduler.session(ids[i]).state() == SessionState::Idle) {
                    if (!single && !o->json) output.finish(manifest.sessions[i].name);
                    shown[i] = true;
                }
            }
        }
        for (size_t i = 0; i < ids.size(); ++i) {
            if (!shown[i] && !single && !o->json) output.finish(manifest.sessions[i].name);
        }
        const SchedulerStats stats = scheduler.stats();

        bool failed = false;
        for (SessionId id : ids) failed = failed || scheduler.session(id).result().finish_reason == "error";
        const auto dump = [](const nlohmann::json& out) {
            // A reply cut by max_tokens can end inside a UTF-8 character: replace rather than fail.
            std::cout << out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
        };
        if (single) {
            const SessionResult& r = scheduler.session(ids[0]).result();
            if (o->json) {
                dump({{"text", r.text},
                      {"tokens", r.tokens},
                      {"prompt_tokens", r.prompt_tokens},
                      {"generated_tokens", r.tokens.size()},
                      {"ttft_ms", r.ttft_ms},
                      {"prefill_tok_s", r.prefill_tok_s()},
                      {"decode_tok_s", r.decode_tok_s()},
                      {"finish_reason", r.finish_reason},
                      {"backend", runtime.backend().name()},
                      {"model", manifest.model.path.string()}});
            } else {
                std::fprintf(stderr, "\n\n");
                print_summary("", r);
            }
            if (failed) throw cellm::Error(r.error);
            return 0;
        }

        if (o->json) {
            nlohmann::json sessions = nlohmann::json::array();
            for (SessionId id : ids) {
                const Session& s = scheduler.session(id);
                const SessionResult& r = s.result();
                sessions.push_back({{"name", s.options().name},
                                    {"text", r.text},
                                    {"tokens", r.tokens.size()},
                                    {"token_ids", r.tokens},
                                    {"prompt_tokens", r.prompt_tokens},
                                    {"cached_tokens", r.reused_tokens},
                                    {"ttft_ms", r.ttft_ms},
                                    {"decode_tok_s", r.decode_tok_s()},
                                    {"preemptions", r.preemptions},
                                    {"finish_reason", r.finish_reason},
                                    {"error", r.error}});
            }
            dump({{"sessions", sessions},
                  {"kv", kv_json(stats, runtime.engine())},
                  {"backend", runtime.backend().name()},
                  {"model", manifest.model.path.string()}});
        } else {
            std::fprintf(stderr, "\n");
            for (SessionId id : ids) print_summary(scheduler.session(id).options().name, scheduler.session(id).result());
            std::fprintf(stderr, "KV: %d of %d blocks used, %lld prompt tokens from the prefix cache, %lld preemptions\n",
                         stats.kv.used, stats.kv.blocks, static_cast<long long>(stats.kv.prefix_hit_tokens),
                         static_cast<long long>(stats.preemptions));
        }
        if (failed) throw cellm::Error("a session failed (see its summary)");
        return 0;
    };
}

}  // namespace cellm::cli
