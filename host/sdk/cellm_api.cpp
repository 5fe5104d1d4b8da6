// The C functions of include/cellm/cellm.h: argument checks, C <-> C++ conversions and the mapping of
// exceptions to results. No exception leaves this file; the work is EngineCore's.
#include <cellm/cellm.h>

#include "engine_core.h"
#include "tools/tool_format.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <new>
#include <random>

namespace fs = std::filesystem;
using cellm::Error;
using cellm::sdk::EngineCore;
using cellm::sdk::SessionChannel;

struct cellm_engine {
    std::shared_ptr<EngineCore> core;
    std::vector<const char*> stop_strings;  // the manifest's, for cellm_session_options_init
};

struct cellm_session {
    // Keeps the engine's memory alive after cellm_engine_close, so a late call gets CELLM_E_CLOSED.
    std::shared_ptr<EngineCore> core;
    std::shared_ptr<SessionChannel> channel;
    cellm::SessionId id = -1;
    cellm_event_fn callback = nullptr;
    void* user_data = nullptr;
    // What get_text, get_tokens, get_stats and poll hand out, valid until the next call on this session.
    std::string text, error, event_text, event_call_id, event_tool_name, tool_calls;
    std::vector<int32_t> tokens;
    std::vector<cellm_logprob> logprobs;
};

namespace {

thread_local std::string last_error;

// Failures found here, with their result codes (the others come from engine_core.h).
class ArgumentError : public Error {
public:
    using Error::Error;
};
class PromptError : public Error {
public:
    using Error::Error;
};
class LoadError : public Error {
public:
    using Error::Error;
};
class TooLongError : public Error {
public:
    using Error::Error;
};
class TimeoutError : public Error {
public:
    using Error::Error;
};

cellm_result fail(cellm_result result, const char* message) {
    last_error = message;
    return result;
}

// Runs `body`, turning every exception into a result and the thread's last error.
template <typename Body>
cellm_result guarded(Body&& body) noexcept {
    try {
        body();
        return CELLM_SUCCESS;
    } catch (const ArgumentError& e) {
        return fail(CELLM_E_INVALID_ARGUMENT, e.what());
    } catch (const cellm::sdk::ManifestError& e) {
        return fail(CELLM_E_MANIFEST, e.what());
    } catch (const LoadError& e) {
        return fail(CELLM_E_LOAD, e.what());
    } catch (const PromptError& e) {
        return fail(CELLM_E_PROMPT, e.what());
    } catch (const TooLongError& e) {
        return fail(CELLM_E_TOO_LONG, e.what());
    } catch (const cellm::sdk::BusyError& e) {
        return fail(CELLM_E_BUSY, e.what());
    } catch (const cellm::sdk::ClosedError& e) {
        return fail(CELLM_E_CLOSED, e.what());
    } catch (const TimeoutError& e) {
        return fail(CELLM_E_TIMEOUT, e.what());
    } catch (const cellm::grammar::GrammarError& e) {
        return fail(CELLM_E_GRAMMAR, e.what());
    } catch (const std::bad_alloc&) {
        return fail(CELLM_E_INTERNAL, "out of memory");
    } catch (const std::exception& e) {
        return fail(CELLM_E_INTERNAL, e.what());
    } catch (...) {
        return fail(CELLM_E_INTERNAL, "unknown failure");
    }
}

template <typename T>
T& require(T* p, const char* what) {
    if (p == nullptr) throw ArgumentError(std::string(what) + " is NULL");
    return *p;
}

// The size of a struct as version 1.0 of this header defined it: callers compiled against 1.0 must keep
// working when a struct grows.
template <typename T>
void require_size(const T& s, size_t v1_size, const char* what) {
    if (s.struct_size < v1_size) {
        throw ArgumentError(std::string(what) + ".struct_size is " + std::to_string(s.struct_size) +
                            "; set it with its _init function or sizeof");
    }
}
#define CELLM_V1_SIZE(type, last_field) (offsetof(type, last_field) + sizeof(type::last_field))
// Whether a caller's struct is new enough to hold `field` (a field added after 1.0).
#define CELLM_COVERS(s, type, field) ((s).struct_size >= offsetof(type, field) + sizeof(type::field))

std::string text_arg(const char* s, const char* what) { return &require(s, what); }

uint64_t random_seed() {
    std::random_device device;
    return (static_cast<uint64_t>(device()) << 32) | device();
}

// The fields added in 1.4 that are not the grammar's: logit bias and log-probabilities.
void take_bias_and_logprobs(const cellm_session_options& o, const EngineCore& core, cellm::SessionOptions& s) {
    if (CELLM_COVERS(o, cellm_session_options, n_logit_bias) && o.n_logit_bias > 0) {
        if (o.logit_bias == nullptr) throw ArgumentError("logit_bias is NULL but n_logit_bias is not 0");
        const int32_t n_vocab = core.tokenizer().n_vocab();
        for (size_t i = 0; i < o.n_logit_bias; ++i) {
            const cellm_logit_bias& b = o.logit_bias[i];
            const std::string which = "logit_bias[" + std::to_string(i) + "]";
            if (b.token < 0 || b.token >= n_vocab) {
                throw ArgumentError(which + ".token " + std::to_string(b.token) + " is outside the vocabulary (0.." +
                                    std::to_string(n_vocab - 1) + ")");
            }
            if (!std::isfinite(b.bias)) throw ArgumentError(which + ".bias must be a finite number");
            s.sampling.logit_bias.emplace_back(b.token, b.bias);
        }
    }
    if (CELLM_COVERS(o, cellm_session_options, top_logprobs)) {
        if (o.top_logprobs < 0 || o.top_logprobs > 20) throw ArgumentError("top_logprobs must be in [0, 20]");
        if (o.top_logprobs > 0 && o.logprobs == 0) throw ArgumentError("top_logprobs needs logprobs");
        s.logprobs = o.logprobs != 0;
        s.top_logprobs = o.top_logprobs;
    } else if (CELLM_COVERS(o, cellm_session_options, logprobs)) {
        s.logprobs = o.logprobs != 0;
    }
}

// The 1.4 grammar fields: compiled here, on the caller's thread (or found in the engine's cache).
void take_grammar(const cellm_session_options& o, const EngineCore& core, cellm::SessionOptions& s) {
    if (!CELLM_COVERS(o, cellm_session_options, json_schema)) return;
    if (o.grammar != nullptr && o.json_schema != nullptr) throw ArgumentError("set at most one of grammar and json_schema");
    using Kind = cellm::grammar::GrammarCache::Kind;
    if (o.grammar != nullptr) s.grammar = core.grammars().get(Kind::Gbnf, o.grammar);
    if (o.json_schema != nullptr) s.grammar = core.grammars().get(Kind::JsonSchema, o.json_schema);
}

// The 1.5 tool fields: the tools read and checked, and the grammar of their calls compiled, here on the caller's
// thread.
void take_tools(const cellm_session_options& o, const EngineCore& core, cellm::SessionOptions& s) {
    if (!CELLM_COVERS(o, cellm_session_options, parallel_tool_calls)) return;
    using Json = nlohmann::ordered_json;
    Json choice = nullptr;
    if (o.tool_choice != nullptr) {
        const std::string text = o.tool_choice;
        if (!text.empty() && text.front() == '{') {
            choice = Json::parse(text, nullptr, false);
            if (choice.is_discarded()) throw ArgumentError("tool_choice: not JSON");
        } else if (text == "none" || text == "auto" || text == "required") {
            choice = text;
        } else {
            choice = {{"type", "function"}, {"function", {{"name", text}}}};
        }
    }
    if (o.tools == nullptr) {
        if (!choice.is_null() && choice != "none") throw ArgumentError("tool_choice: the session has no tools");
        return;
    }
    if (s.grammar) throw ArgumentError("tools: not together with grammar or json_schema");
    const Json tools = Json::parse(o.tools, nullptr, false);
    if (tools.is_discarded()) throw ArgumentError("tools: not JSON");
    const std::optional<cellm::tools::ToolFormat> format = core.prompt().tool_format();
    if (!format) {
        throw ArgumentError("tools: this model's chat template has no tool-call format cellm knows (Qwen, Llama 3.x, "
                            "Gemma 3, FunctionGemma and SmolLM2 have; docs/server.md)");
    }
    auto use = std::make_shared<cellm::tools::ToolUse>();
    try {
        use->tools = cellm::tools::parse_tools(tools);
        use->choice = cellm::tools::parse_tool_choice(choice, use->tools);
    } catch (const cellm::tools::ToolError& e) {
        throw ArgumentError(e.what());
    }
    // A named function is called once, as OpenAI's tool_choice means it: small models otherwise tend to call it
    // again and again until max_tokens.
    use->parallel = o.parallel_tool_calls != 0 && use->choice.kind != cellm::tools::ToolChoice::Named;
    use->format = *format;
    if (use->choice.kind != cellm::tools::ToolChoice::None) {
        cellm::tools::CallGrammar calls;
        try {
            calls = cellm::tools::call_grammar(use->format, use->tools, use->choice, use->parallel);
        } catch (const cellm::tools::ToolError& e) {
            throw ArgumentError(e.what());
        }
        s.grammar = core.grammars().get(cellm::grammar::GrammarCache::Kind::Gbnf, calls.gbnf);
        s.grammar_trigger = calls.trigger;
    }
    s.tools = std::move(use);
}

cellm::SessionOptions to_session_options(const cellm_session_options& o, const EngineCore& core) {
    require_size(o, CELLM_V1_SIZE(cellm_session_options, user_data), "cellm_session_options");
    const auto check = [](bool ok, const char* message) {
        if (!ok) throw ArgumentError(message);
    };
    check(std::isfinite(o.temperature) && o.temperature >= 0, "temperature must be a finite number >= 0");
    check(o.top_p >= 0 && o.top_p <= 1, "top_p must be in [0, 1]");
    check(o.min_p >= 0 && o.min_p <= 1, "min_p must be in [0, 1]");
    check(std::isfinite(o.repeat_penalty) && o.repeat_penalty > 0, "repeat_penalty must be > 0");
    check(o.repeat_last_n >= 0, "repeat_last_n must be >= 0");
    check(std::isfinite(o.frequency_penalty) && std::fabs(o.frequency_penalty) <= 2,
          "frequency_penalty must be in [-2, 2]");
    check(std::isfinite(o.presence_penalty) && std::fabs(o.presence_penalty) <= 2, "presence_penalty must be in [-2, 2]");
    check(o.max_tokens >= 1, "max_tokens must be at least 1");
    check(o.n_stop == 0 || o.stop != nullptr, "stop is NULL but n_stop is not 0");

    cellm::SessionOptions s;
    s.name = o.name != nullptr ? o.name : "session";
    s.sampling = {.temperature = o.temperature, .top_k = o.top_k, .top_p = o.top_p, .min_p = o.min_p,
                  .repeat_penalty = o.repeat_penalty, .repeat_last_n = o.repeat_last_n,
                  .frequency_penalty = o.frequency_penalty, .presence_penalty = o.presence_penalty, .seed = o.seed};
    s.max_tokens = o.max_tokens;
    for (size_t i = 0; i < o.n_stop; ++i) {
        check(o.stop[i] != nullptr && o.stop[i][0] != '\0', "stop strings must not be NULL or empty");
        s.stop.emplace_back(o.stop[i]);
    }
    s.priority = o.priority;
    take_bias_and_logprobs(o, core, s);
    take_grammar(o, core, s);
    take_tools(o, core, s);
    if (CELLM_COVERS(o, cellm_session_options, chat_template_kwargs) && o.chat_template_kwargs != nullptr) {
        const nlohmann::ordered_json variables = nlohmann::ordered_json::parse(o.chat_template_kwargs, nullptr, false);
        if (variables.is_discarded() || !variables.is_object()) {
            throw ArgumentError("chat_template_kwargs: must be a JSON object");
        }
        for (const auto& item : variables.items()) {
            if (cellm::PromptBuilder::reserved_variable(item.key())) {
                throw ArgumentError("chat_template_kwargs: '" + item.key() + "' is set by the engine");
            }
        }
        s.chat_template_kwargs = o.chat_template_kwargs;
    }
    return s;
}

cellm::SessionOptions default_session_options(const cellm_engine& engine) {
    cellm_session_options o;
    if (cellm_session_options_init(&engine, &o) != CELLM_SUCCESS) throw Error(last_error);
    return to_session_options(o, *engine.core);
}

EngineCore& open_core(const cellm_session* session) {
    const cellm_session& s = require(session, "session");
    if (s.core->closed()) throw cellm::sdk::ClosedError("the session's engine was closed");
    return *s.core;
}

// A new handle whose channel reports to `callback` (or queues for polling).
cellm_session* new_handle(std::shared_ptr<EngineCore> core, cellm_event_fn callback, void* user_data) {
    auto handle = std::make_unique<cellm_session>();
    handle->core = std::move(core);
    handle->callback = callback;
    handle->user_data = user_data;
    handle->channel = std::make_shared<SessionChannel>(handle.get(), callback, user_data);
    return handle.release();
}

// Runs a submit; a prompt that cannot run becomes CELLM_E_TOO_LONG or CELLM_E_PROMPT, busy and closed stay as they are.
template <class Submit>
void as_prompt_errors(Submit submit) {
    try {
        submit();
    } catch (const cellm::sdk::BusyError&) {
        throw;
    } catch (const cellm::sdk::ClosedError&) {
        throw;
    } catch (const cellm::PromptTooLongError& e) {
        throw TooLongError(e.what());
    } catch (const Error& e) {
        throw PromptError(e.what());
    }
}

void submit(cellm_session* session, std::vector<int32_t> tokens) {
    EngineCore& core = open_core(session);
    if (tokens.empty()) throw PromptError("the prompt is empty");
    as_prompt_errors([&] { core.submit(session->id, std::move(tokens)); });
}

}  // namespace

extern "C" {

const char* cellm_last_error(void) { return last_error.c_str(); }

const char* cellm_result_name(cellm_result result) {
    switch (result) {
        case CELLM_SUCCESS: return "CELLM_SUCCESS";
        case CELLM_E_INVALID_ARGUMENT: return "CELLM_E_INVALID_ARGUMENT";
        case CELLM_E_MANIFEST: return "CELLM_E_MANIFEST";
        case CELLM_E_LOAD: return "CELLM_E_LOAD";
        case CELLM_E_PROMPT: return "CELLM_E_PROMPT";
        case CELLM_E_BUSY: return "CELLM_E_BUSY";
        case CELLM_E_CLOSED: return "CELLM_E_CLOSED";
        case CELLM_E_TIMEOUT: return "CELLM_E_TIMEOUT";
        case CELLM_E_INTERNAL: return "CELLM_E_INTERNAL";
        case CELLM_E_TOO_LONG: return "CELLM_E_TOO_LONG";
        case CELLM_E_GRAMMAR: return "CELLM_E_GRAMMAR";
    }
    return "CELLM_E_UNKNOWN";
}

void cellm_version(int32_t* major, int32_t* minor) {
    if (major != nullptr) *major = CELLM_SDK_VERSION_MAJOR;
    if (minor != nullptr) *minor = CELLM_SDK_VERSION_MINOR;
}

const char* cellm_finish_reason_name(cellm_finish_reason reason) {
    switch (reason) {
        case CELLM_FINISH_NONE: return "";
        case CELLM_FINISH_EOG: return "eog";
        case CELLM_FINISH_STOP: return "stop";
        case CELLM_FINISH_LENGTH: return "length";
        case CELLM_FINISH_CONTEXT: return "context";
        case CELLM_FINISH_CANCELLED: return "cancelled";
        case CELLM_FINISH_ERROR: return "error";
        case CELLM_FINISH_TOOL_CALLS: return "tool_calls";
    }
    return "";
}

// ---- Engine ------------------------------------------------------------------------------------------------

void cellm_engine_options_init_size(cellm_engine_options* options, size_t size) {
    if (options == nullptr || size < sizeof(options->struct_size)) return;
    std::memset(options, 0, size);  // the caller's struct, whichever header it was built with
    options->struct_size = size;
}

#undef cellm_engine_options_init
void cellm_engine_options_init(cellm_engine_options* options) {
    cellm_engine_options_init_size(options, offsetof(cellm_engine_options, precision));
}

namespace {

// spdlog's default logger writes everything from info up to stdout, which belongs to the embedding application:
// unless the application gave the default logger sinks of its own (cellm-host does), cellm's warnings and errors
// go to stderr and nothing else is printed.
void log_to_stderr_unless_configured() {
    static std::once_flag once;
    std::call_once(once, [] {
        const std::shared_ptr<spdlog::logger> logger = spdlog::default_logger();
        std::vector<spdlog::sink_ptr>& sinks = logger->sinks();
        if (sinks.size() == 1 && dynamic_cast<spdlog::sinks::stdout_color_sink_mt*>(sinks[0].get()) != nullptr) {
            sinks[0] = std::make_shared<spdlog::sinks::stderr_color_sink_mt>();
            logger->set_level(spdlog::level::warn);
        }
    });
}

}  // namespace

cellm_result cellm_engine_open(const cellm_engine_options* options, cellm_engine** engine) {
    if (engine != nullptr) *engine = nullptr;
    log_to_stderr_unless_configured();
    return guarded([&] {
        require(engine, "engine");
        const cellm_engine_options& o = require(options, "options");
        require_size(o, CELLM_V1_SIZE(cellm_engine_options, plugin_path), "cellm_engine_options");
        if (o.manifest_path != nullptr && o.manifest_text != nullptr) {
            throw ArgumentError("give one of manifest_path and manifest_text, not both");
        }
        if (o.manifest_path == nullptr && o.manifest_text == nullptr && o.model_path == nullptr) {
            throw ArgumentError("give a model_path, a manifest_path or manifest_text");
        }
        if (o.threads < 0 || o.context_length < 0 || o.max_sessions < 0) {
            throw ArgumentError("threads, context_length and max_sessions must be >= 0 (0 keeps the manifest's)");
        }
        cellm::Manifest m;
        if (o.manifest_path == nullptr && o.manifest_text == nullptr) {
            m = cellm::manifest_for_model(o.model_path);
        } else {
            try {
                m = o.manifest_path != nullptr
                        ? cellm::load_manifest(o.manifest_path)
                        : cellm::parse_manifest(o.manifest_text, fs::current_path() / "(manifest text)");
            } catch (const Error& e) {
                throw cellm::sdk::ManifestError(e.what());
            }
            if (o.model_path != nullptr) {
                m.model.path = o.model_path;
                m.model.format.clear();  // the manifest's format, arch and mmproj described its own model
                m.model.arch.clear();
                m.model.mmproj.clear();
            }
        }
        if (o.struct_size >= offsetof(cellm_engine_options, mmproj_path) + sizeof(o.mmproj_path) &&
            o.mmproj_path != nullptr) {
            m.model.mmproj = o.mmproj_path;
        }
        if (o.struct_size >= offsetof(cellm_engine_options, precision) + sizeof(o.precision) &&
            o.precision != nullptr) {
            m.backend.options["precision"] = o.precision;
        }
        if (o.struct_size >= offsetof(cellm_engine_options, memory_budget_mib) + sizeof(o.memory_budget_mib)) {
            if (o.kv_type != nullptr) {
                try {
                    m.context.kv_type = cellm::check_kv_type(o.kv_type);
                } catch (const Error& e) {
                    throw ArgumentError(e.what());
                }
            }
            if (o.memory_budget_mib < 0) throw ArgumentError("memory_budget_mib must be >= 0 (0 keeps the manifest's)");
            if (o.memory_budget_mib > 0) {
                m.context.memory_budget_mib = o.memory_budget_mib;
                m.context.kv_memory_mib = 0;  // the budget sizes the pool
            }
        }
        if (o.backend != nullptr) m.backend.name = o.backend;
        if (o.threads > 0) m.backend.threads = o.threads;
        if (o.context_length > 0) m.context.length = o.context_length;
        if (o.plugin_path != nullptr) m.plugin_paths.emplace_back(o.plugin_path);
        const int32_t max_sessions = o.max_sessions > 0 ? o.max_sessions : m.scheduler.max_running;

        auto handle = std::make_unique<cellm_engine>();
        try {
            handle->core = std::make_shared<EngineCore>(std::move(m), max_sessions);
        } catch (const Error& e) {
            throw LoadError(e.what());
        }
        for (const std::string& s : handle->core->manifest().generation.stop) handle->stop_strings.push_back(s.c_str());
        *engine = handle.release();
    });
}

void cellm_engine_close(cellm_engine* engine) {
    if (engine == nullptr) return;
    guarded([&] { engine->core->close(); });
    delete engine;
}

cellm_result cellm_engine_get_info(const cellm_engine* engine, cellm_engine_info* info) {
    return guarded([&] {
        const EngineCore& core = *require(engine, "engine").core;
        cellm_engine_info& out = require(info, "info");
        require_size(out, CELLM_V1_SIZE(cellm_engine_info, model_has_chat_template), "cellm_engine_info");
        if (core.closed()) throw cellm::sdk::ClosedError("the engine was closed");
        const cellm::Engine& e = core.runtime().engine();
        out.model_name = core.model_name();
        out.model_path = core.model_path();
        out.arch = core.runtime().model().architecture().c_str();
        out.backend = core.runtime().backend().name();
        out.chat_template = core.chat_template();
        out.n_vocab = core.tokenizer().n_vocab();
        out.context_length = e.context_length();
        out.max_sessions = core.max_sessions();
        out.kv_blocks = core.kv_blocks();
        out.kv_block_size = e.kv_cache().block_size();
        out.kv_bytes_per_token = static_cast<int64_t>(e.kv_cache().bytes_per_token());
        out.model_has_chat_template = core.tokenizer().chat_template().empty() ? 0 : 1;
        if (out.struct_size >= offsetof(cellm_engine_info, model_takes_images) + sizeof(out.model_takes_images)) {
            out.model_takes_images = core.runtime().model().vision() ? 1 : 0;
        }
        if (out.struct_size >= offsetof(cellm_engine_info, kv_pool_bytes) + sizeof(out.kv_pool_bytes)) {
            out.weights_bytes = static_cast<int64_t>(e.memory().weights);
            out.scratch_bytes = static_cast<int64_t>(e.memory().scratch);
            out.kv_pool_bytes = static_cast<int64_t>(e.memory().kv_pool);
        }
    });
}

cellm_result cellm_engine_get_stats(cellm_engine* engine, cellm_engine_stats* stats) {
    return guarded([&] {
        EngineCore& core = *require(engine, "engine").core;
        cellm_engine_stats& out = require(stats, "stats");
        require_size(out, CELLM_V1_SIZE(cellm_engine_stats, copied_blocks), "cellm_engine_stats");
        const cellm::SchedulerStats st = core.stats();
        out.sessions = st.sessions;
        out.running = st.running;
        out.waiting = st.waiting;
        out.kv_blocks = st.kv.blocks;
        out.kv_blocks_used = st.kv.used;
        out.kv_blocks_free = st.kv.free;
        out.prefix_hit_tokens = st.kv.prefix_hit_tokens;
        out.steps = st.steps;
        out.batched_tokens = st.batched_tokens;
        out.preemptions = st.preemptions;
        out.copied_blocks = st.kv.copied_blocks;
        if (out.struct_size >= offsetof(cellm_engine_stats, kv_bytes_committed) + sizeof(out.kv_bytes_committed)) {
            out.kv_bytes_committed = static_cast<int64_t>(st.kv.committed_bytes);
        }
    });
}

cellm_result cellm_engine_tokenize(const cellm_engine* engine, const char* text, int32_t add_special, int32_t* tokens,
                                   size_t capacity, size_t* n_tokens) {
    return guarded([&] {
        const EngineCore& core = *require(engine, "engine").core;
        const std::string input = text_arg(text, "text");
        size_t& count = require(n_tokens, "n_tokens");
        if (capacity > 0) require(tokens, "tokens");
        if (core.closed()) throw cellm::sdk::ClosedError("the engine was closed");
        const cellm::Tokenizer& t = core.tokenizer();
        const std::vector<int32_t> ids = t.encode(input, add_special != 0 && t.add_bos() && t.bos() >= 0, true);
        count = ids.size();
        std::copy_n(ids.begin(), std::min(capacity, ids.size()), tokens);
    });
}

cellm_result cellm_engine_detokenize(const cellm_engine* engine, const int32_t* tokens, size_t n_tokens, char* text,
                                     size_t capacity, size_t* length) {
    return guarded([&] {
        const EngineCore& core = *require(engine, "engine").core;
        size_t& size = require(length, "length");
        if (n_tokens > 0) require(tokens, "tokens");
        if (capacity > 0) require(text, "text");
        if (core.closed()) throw cellm::sdk::ClosedError("the engine was closed");
        const cellm::Tokenizer& t = core.tokenizer();
        for (size_t i = 0; i < n_tokens; ++i) {
            if (tokens[i] < 0 || tokens[i] >= t.n_vocab()) {
                throw PromptError("token " + std::to_string(i) + " (id " + std::to_string(tokens[i]) +
                                  ") is outside the vocabulary of " + std::to_string(t.n_vocab()));
            }
        }
        const std::string bytes = t.decode(std::span<const int32_t>(tokens, n_tokens));
        size = bytes.size();
        std::copy_n(bytes.begin(), std::min(capacity, bytes.size()), text);
    });
}

cellm_result cellm_list_backends(const char* plugin_path, cellm_backend_fn fn, void* user_data) {
    return guarded([&] {
        require(fn, "fn");
        cellm::PluginRegistry registry;
        std::vector<fs::path> extra;
        if (plugin_path != nullptr) extra.emplace_back(plugin_path);
        registry.discover(extra);
        for (const cellm::Plugin* p : registry.plugins(CELLM_PLUGIN_BACKEND)) {
            fn(p->name(), p->desc->description != nullptr ? p->desc->description : "", user_data);
        }
    });
}

cellm_result cellm_engine_evaluate(cellm_engine* engine, const int32_t* tokens, size_t n_tokens, int32_t first_position,
                                   cellm_logits_fn fn, void* user_data) {
    return guarded([&] {
        // Its own reference: the core outlives a close that comes while the steps run.
        const std::shared_ptr<EngineCore> core = require(engine, "engine").core;
        require(fn, "fn");
        if (n_tokens > 0) require(tokens, "tokens");
        if (core->closed()) throw cellm::sdk::ClosedError("the engine was closed");
        if (n_tokens == 0) throw PromptError("no tokens to evaluate");
        const int32_t n_vocab = core->tokenizer().n_vocab();
        for (size_t i = 0; i < n_tokens; ++i) {
            if (tokens[i] < 0 || tokens[i] >= n_vocab) {
                throw PromptError("token " + std::to_string(i) + " (id " + std::to_string(tokens[i]) +
                                  ") is outside the vocabulary of " + std::to_string(n_vocab));
            }
        }
        const int32_t context = core->runtime().engine().context_length();
        if (n_tokens > static_cast<size_t>(context)) {
            throw TooLongError(std::to_string(n_tokens) + " tokens are more than the context length " +
                               std::to_string(context));
        }
        if (first_position < 0 || static_cast<size_t>(first_position) >= n_tokens) {
            throw ArgumentError("first_position " + std::to_string(first_position) + " is outside [0, " +
                                std::to_string(n_tokens) + ")");
        }
        try {
            core->evaluate(std::span<const int32_t>(tokens, n_tokens), first_position,
                           [&](int32_t position, const float* logits) { fn(position, logits, n_vocab, user_data); });
        } catch (const cellm::PromptTooLongError& e) {
            throw TooLongError(e.what());
        }
    });
}

// ---- Sessions ----------------------------------------------------------------------------------------------

cellm_result cellm_session_options_init_size(const cellm_engine* engine, cellm_session_options* options, size_t size) {
    return guarded([&] {
        const cellm_engine& e = require(engine, "engine");
        require(options, "options");
        if (size < CELLM_V1_SIZE(cellm_session_options, user_data)) {
            throw ArgumentError("cellm_session_options of " + std::to_string(size) + " bytes is smaller than 1.0's");
        }
        if (e.core->closed()) throw cellm::sdk::ClosedError("the engine was closed");
        const cellm::GenerationConfig& g = e.core->manifest().generation;
        // The caller's struct, whichever header it was built with; the fields past 1.3's are zero: off.
        std::memset(options, 0, size);
        // Filled in a whole struct of this header, then the caller's part of it copied.
        cellm_session_options o{};
        o.struct_size = size;
        o.temperature = g.sampling.temperature;
        o.top_k = g.sampling.top_k;
        o.top_p = g.sampling.top_p;
        o.min_p = g.sampling.min_p;
        o.repeat_penalty = g.sampling.repeat_penalty;
        o.repeat_last_n = g.sampling.repeat_last_n;
        o.frequency_penalty = g.sampling.frequency_penalty;
        o.presence_penalty = g.sampling.presence_penalty;
        // Without a seed in the manifest every session draws its own, so two sessions do not sample alike.
        o.seed = g.seed_given ? g.sampling.seed : random_seed();
        o.max_tokens = g.max_tokens;
        o.stop = e.stop_strings.empty() ? nullptr : e.stop_strings.data();
        o.n_stop = e.stop_strings.size();
        o.priority = cellm::priority::interactive;
        o.parallel_tool_calls = 1;
        std::memcpy(options, &o, std::min(size, sizeof o));
    });
}

#undef cellm_session_options_init
cellm_result cellm_session_options_init(const cellm_engine* engine, cellm_session_options* options) {
    return cellm_session_options_init_size(engine, options, CELLM_V1_SIZE(cellm_session_options, user_data));
}

cellm_result cellm_session_create(cellm_engine* engine, const cellm_session_options* options, cellm_session** session) {
    if (session != nullptr) *session = nullptr;
    return guarded([&] {
        cellm_engine& e = require(engine, "engine");
        require(session, "session");
        cellm::SessionOptions o = options != nullptr ? to_session_options(*options, *e.core)
                                                          : default_session_options(e);
        std::unique_ptr<cellm_session> handle(new_handle(e.core, options != nullptr ? options->on_event : nullptr,
                                                         options != nullptr ? options->user_data : nullptr));
        handle->id = e.core->create(std::move(o), handle->channel);
        *session = handle.release();
    });
}

cellm_result cellm_session_configure(cellm_session* session, const cellm_session_options* options) {
    return guarded([&] {
        EngineCore& core = open_core(session);
        cellm::SessionOptions o = to_session_options(require(options, "options"), core);
        core.reconfigure(session->id, std::move(o));
        session->callback = options->on_event;
        session->user_data = options->user_data;
        session->channel->set_callback(options->on_event, options->user_data);
    });
}

cellm_result cellm_session_fork(cellm_session* session, cellm_session** fork) {
    if (fork != nullptr) *fork = nullptr;
    return guarded([&] {
        EngineCore& core = open_core(session);
        require(fork, "fork");
        cellm::SessionOptions o = core.with_session(session->id, [](const cellm::Session& s) { return s.options(); });
        std::unique_ptr<cellm_session> handle(new_handle(session->core, session->callback, session->user_data));
        handle->id = core.fork(session->id, std::move(o), handle->channel);
        *fork = handle.release();
    });
}

namespace {

std::vector<cellm::ChatMessage> conversation_arg(const cellm_message* messages, size_t n_messages) {
    if (n_messages == 0) throw PromptError("the conversation has no messages");
    require(messages, "messages");
    std::vector<cellm::ChatMessage> conversation;
    for (size_t i = 0; i < n_messages; ++i) {
        const cellm_message& m = messages[i];
        if (m.role == nullptr || m.content == nullptr) {
            throw ArgumentError("message " + std::to_string(i) + " has a NULL role or content");
        }
        const std::string role = m.role;
        if (role != "system" && role != "user" && role != "assistant") {
            throw PromptError("message " + std::to_string(i) + " has role '" + role + "' (expected system, user or assistant)");
        }
        conversation.push_back({role, m.content});
    }
    return conversation;
}

}  // namespace

cellm_result cellm_session_submit_text(cellm_session* session, const char* text) {
    return guarded([&] {
        EngineCore& core = open_core(session);
        const std::string input = text_arg(text, "text");
        if (input.empty()) throw PromptError("the prompt is empty");
        submit(session, core.prompt().raw_tokens(input));
    });
}

namespace {

// OpenAI's messages array, read and checked; errors name the field ("messages[2].tool_calls[0].function.name").
std::vector<cellm::ChatMessage> conversation_json(const char* text) {
    using Json = nlohmann::ordered_json;
    const Json messages = Json::parse(text_arg(text, "messages_json"), nullptr, false);
    if (messages.is_discarded() || !messages.is_array()) throw ArgumentError("messages: not a JSON array");
    if (messages.empty()) throw PromptError("the conversation has no messages");
    std::vector<cellm::ChatMessage> conversation;
    std::vector<std::string> call_ids;  // of the calls made so far, for the tool messages that answer them
    for (size_t i = 0; i < messages.size(); ++i) {
        const std::string at = "messages[" + std::to_string(i) + "]";
        const Json& m = messages[i];
        const auto string_field = [&](const Json& object, const char* key, const std::string& where, bool required) {
            const auto it = object.find(key);
            if (it == object.end() || it->is_null()) {
                if (required) throw ArgumentError(where + "." + key + ": missing");
                return std::string();
            }
            if (!it->is_string()) throw ArgumentError(where + "." + key + ": must be a string");
            return it->get<std::string>();
        };
        if (!m.is_object()) throw ArgumentError(at + ": must be an object");
        cellm::ChatMessage message;
        message.role = string_field(m, "role", at, true);
        if (message.role == "developer") message.role = "system";  // OpenAI's newer name for it
        if (message.role != "system" && message.role != "user" && message.role != "assistant" && message.role != "tool") {
            throw ArgumentError(at + ".role: '" + message.role + "' (expected system, user, assistant or tool)");
        }
        const auto calls = m.find("tool_calls");
        const bool has_calls = calls != m.end() && !calls->is_null();
        if (const auto parts = m.find("content"); parts != m.end() && parts->is_array()) {
            // Text parts, joined by newlines as the server joins them.
            for (size_t p = 0; p < parts->size(); ++p) {
                const std::string where = at + ".content[" + std::to_string(p) + "]";
                const Json& part = (*parts)[p];
                if (!part.is_object() || part.value("type", std::string()) != "text") {
                    throw ArgumentError(where + ": only {\"type\": \"text\", \"text\"} parts are taken here");
                }
                message.content += (p ? "\n" : "") + string_field(part, "text", where, true);
            }
        } else {
            message.content = string_field(m, "content", at, !(message.role == "assistant" && has_calls));
        }
        if (has_calls) {
            if (message.role != "assistant") throw ArgumentError(at + ".tool_calls: only assistant messages make calls");
            if (!calls->is_array()) throw ArgumentError(at + ".tool_calls: must be an array");
            for (size_t c = 0; c < calls->size(); ++c) {
                const std::string where = at + ".tool_calls[" + std::to_string(c) + "]";
                const Json& call = (*calls)[c];
                if (!call.is_object()) throw ArgumentError(where + ": must be an object");
                const auto function = call.find("function");
                if (function == call.end() || !function->is_object()) {
                    throw ArgumentError(where + ".function: must be an object");
                }
                cellm::ToolCall out;
                out.id = string_field(call, "id", where, true);
                out.name = string_field(*function, "name", where + ".function", true);
                const auto arguments = function->find("arguments");
                if (arguments == function->end() || arguments->is_null()) {
                    out.arguments = "{}";
                } else if (arguments->is_string()) {
                    out.arguments = arguments->get<std::string>();
                    if (!Json::accept(out.arguments)) throw ArgumentError(where + ".function.arguments: not JSON");
                } else if (arguments->is_object()) {
                    out.arguments = arguments->dump();
                } else {
                    throw ArgumentError(where + ".function.arguments: must be a JSON text or an object");
                }
                call_ids.push_back(out.id);
                message.tool_calls.push_back(std::move(out));
            }
        }
        if (message.role == "tool") {
            message.tool_call_id = string_field(m, "tool_call_id", at, true);
            if (std::find(call_ids.begin(), call_ids.end(), message.tool_call_id) == call_ids.end()) {
                throw ArgumentError(at + ".tool_call_id: no earlier assistant tool call has id '" +
                                    message.tool_call_id + "'");
            }
            message.name = string_field(m, "name", at, false);
            if (message.name.empty()) {
                // Templates that print the function's name (FunctionGemma's, Llama 3's) find it from the call.
                for (const cellm::ChatMessage& earlier : conversation) {
                    for (const cellm::ToolCall& call : earlier.tool_calls) {
                        if (call.id == message.tool_call_id) message.name = call.name;
                    }
                }
            }
        }
        conversation.push_back(std::move(message));
    }
    return conversation;
}

void submit_conversation(cellm_session* session, const std::vector<cellm::ChatMessage>& conversation) {
    EngineCore& core = open_core(session);
    const auto [tools, kwargs] = core.with_session(session->id, [](const cellm::Session& s) {
        return std::make_pair(s.options().tools, s.options().chat_template_kwargs);
    });
    const nlohmann::ordered_json variables = kwargs.empty() ? nlohmann::ordered_json(nullptr)
                                                            : nlohmann::ordered_json::parse(kwargs);
    std::vector<int32_t> tokens;
    try {
        tokens = core.prompt().chat_tokens(conversation, tools.get(), variables);
    } catch (const Error& e) {
        throw PromptError(e.what());
    }
    submit(session, std::move(tokens));
}

}  // namespace

cellm_result cellm_session_submit_chat(cellm_session* session, const cellm_message* messages, size_t n_messages) {
    return guarded([&] { submit_conversation(session, conversation_arg(messages, n_messages)); });
}

cellm_result cellm_session_submit_chat_json(cellm_session* session, const char* messages_json) {
    return guarded([&] {
        open_core(session);
        submit_conversation(session, conversation_json(messages_json));
    });
}

namespace {

std::vector<std::span<const uint8_t>> image_args(const cellm_image* images, size_t n_images) {
    if (n_images == 0) throw PromptError("no images given (use the text or chat submit for a prompt without any)");
    require(images, "images");
    std::vector<std::span<const uint8_t>> out;
    for (size_t i = 0; i < n_images; ++i) {
        if (images[i].data == nullptr || images[i].size == 0) {
            throw ArgumentError("image " + std::to_string(i) + " has no data");
        }
        out.emplace_back(static_cast<const uint8_t*>(images[i].data), images[i].size);
    }
    return out;
}

void submit_images(cellm_session* session, const std::string& text, const cellm_image* images, size_t n_images) {
    EngineCore& core = open_core(session);
    const std::vector<std::span<const uint8_t>> bytes = image_args(images, n_images);
    as_prompt_errors([&] { core.submit_images(session->id, text, bytes); });
}

}  // namespace

cellm_result cellm_session_submit_text_images(cellm_session* session, const char* text, const cellm_image* images,
                                              size_t n_images) {
    return guarded([&] { submit_images(session, text_arg(text, "text"), images, n_images); });
}

cellm_result cellm_session_submit_chat_images(cellm_session* session, const cellm_message* messages, size_t n_messages,
                                              const cellm_image* images, size_t n_images) {
    return guarded([&] {
        EngineCore& core = open_core(session);
        submit_images(session, core.prompt().render(conversation_arg(messages, n_messages)), images, n_images);
    });
}

cellm_result cellm_session_submit_tokens(cellm_session* session, const int32_t* tokens, size_t n_tokens) {
    return guarded([&] {
        open_core(session);
        if (n_tokens > 0) require(tokens, "tokens");
        submit(session, std::vector<int32_t>(tokens, tokens + n_tokens));
    });
}

cellm_result cellm_session_poll(cellm_session* session, int32_t timeout_ms, cellm_event* event) {
    return guarded([&] {
        cellm_session& s = require(session, "session");
        cellm_event& out = require(event, "event");
        require_size(out, CELLM_V1_SIZE(cellm_event, finish_reason), "cellm_event");
        if (s.callback != nullptr) throw ArgumentError("this session's events go to its callback, not to poll");
        // Events queued before the engine closed can still be read, and a turn the close is ending still gets
        // its DONE: the engine is marked closed before the scheduler thread has ended the turns.
        const bool ending = s.channel->busy();
        std::optional<SessionChannel::Event> e = s.channel->next(s.core->closed() && !ending ? 0 : timeout_ms);
        if (!e) {
            if (s.core->closed() && !s.channel->busy()) throw cellm::sdk::ClosedError("the session's engine was closed");
            throw TimeoutError("no event within " + std::to_string(timeout_ms) + " ms");
        }
        s.event_text = std::move(e->text);
        out.kind = e->kind;
        out.text = s.event_text.c_str();
        out.text_len = s.event_text.size();
        out.generated_tokens = e->generated_tokens;
        out.finish_reason = e->finish_reason;
        if (CELLM_COVERS(out, cellm_event, tool_name)) {
            const bool call = e->kind == CELLM_EVENT_TOOL_CALL;
            s.event_call_id = std::move(e->tool_call_id);
            s.event_tool_name = std::move(e->tool_name);
            out.tool_call_index = e->tool_call_index;
            out.tool_call_id = call ? s.event_call_id.c_str() : nullptr;
            out.tool_name = call ? s.event_tool_name.c_str() : nullptr;
        }
    });
}

cellm_result cellm_session_wait(cellm_session* session, int32_t timeout_ms) {
    return guarded([&] {
        cellm_session& s = require(session, "session");
        if (s.core->closed() && !s.channel->busy()) throw cellm::sdk::ClosedError("the session's engine was closed");
        if (!s.channel->wait_idle(timeout_ms)) {
            throw TimeoutError("the turn did not end within " + std::to_string(timeout_ms) + " ms");
        }
    });
}

cellm_result cellm_session_cancel(cellm_session* session) {
    return guarded([&] { open_core(session).cancel(session->id); });
}

cellm_result cellm_session_get_stats(cellm_session* session, cellm_session_stats* stats) {
    return guarded([&] {
        EngineCore& core = open_core(session);
        cellm_session_stats& out = require(stats, "stats");
        require_size(out, CELLM_V1_SIZE(cellm_session_stats, error), "cellm_session_stats");
        const bool busy = session->channel->busy();
        core.with_session(session->id, [&](const cellm::Session& s) {
            const cellm::SessionResult& r = s.result();
            out.busy = busy ? 1 : 0;
            out.prompt_tokens = r.prompt_tokens;
            out.cached_tokens = r.reused_tokens;
            out.generated_tokens = static_cast<int32_t>(r.tokens.size());
            out.preemptions = r.preemptions;
            out.ttft_ms = r.ttft_ms;
            out.prefill_tok_s = r.prefill_tok_s();
            out.decode_tok_s = r.decode_tok_s();
            session->error = r.error;
        });
        // The finish reason shows once the owner has been told (DONE delivered), not before.
        out.finish_reason = busy ? CELLM_FINISH_NONE : core.answer(session->id).finish_reason;
        out.error = session->error.c_str();
    });
}

cellm_result cellm_session_get_text(cellm_session* session, const char** text, size_t* length) {
    return guarded([&] {
        EngineCore& core = open_core(session);
        require(text, "text");
        session->text = core.answer(session->id).text;
        *text = session->text.c_str();
        if (length != nullptr) *length = session->text.size();
    });
}

cellm_result cellm_session_get_tool_calls(cellm_session* session, const char** json, size_t* length) {
    return guarded([&] {
        EngineCore& core = open_core(session);
        require(json, "json");
        nlohmann::ordered_json calls = nlohmann::ordered_json::array();
        for (const cellm::ToolCall& call : core.answer(session->id).tool_calls) {
            calls.push_back({{"id", call.id},
                             {"type", "function"},
                             {"function", {{"name", call.name}, {"arguments", call.arguments}}}});
        }
        session->tool_calls = calls.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
        *json = session->tool_calls.c_str();
        if (length != nullptr) *length = session->tool_calls.size();
    });
}

cellm_result cellm_session_get_tokens(cellm_session* session, const int32_t** tokens, size_t* n_tokens) {
    return guarded([&] {
        EngineCore& core = open_core(session);
        require(tokens, "tokens");
        size_t& n = require(n_tokens, "n_tokens");
        session->tokens = core.with_session(session->id, [](const cellm::Session& s) { return s.result().tokens; });
        *tokens = session->tokens.data();
        n = session->tokens.size();
    });
}

cellm_result cellm_session_get_logprobs(cellm_session* session, const cellm_logprob** entries, size_t* n_tokens,
                                        size_t* row_size) {
    return guarded([&] {
        EngineCore& core = open_core(session);
        require(entries, "entries");
        size_t& n = require(n_tokens, "n_tokens");
        size_t& width = require(row_size, "row_size");
        session->logprobs.clear();
        core.with_session(session->id, [&](const cellm::Session& s) {
            const cellm::SessionResult& r = s.result();
            width = r.logprob_row_size;
            for (const cellm::TokenLogprob& e : r.logprobs) session->logprobs.push_back({e.token, e.logprob});
        });
        n = width > 0 ? session->logprobs.size() / width : 0;
        *entries = session->logprobs.data();
    });
}

void cellm_session_destroy(cellm_session* session) {
    if (session == nullptr) return;
    // A refused destroy (inside the session's own callback) keeps the handle: a leak, not a use after free.
    if (guarded([&] { session->core->destroy(session->id); }) == CELLM_SUCCESS) delete session;
}

}  // extern "C"
