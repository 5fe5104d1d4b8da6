/* cellm.h: the embedding API of cellm (libcellm.so). Plain C99; an application includes this header and links
 * -lcellm, nothing else. It is separate from the plugin ABI in abi/cellm/: plugins never see it.
 *
 * The model: an engine is opened from a model file, or from a manifest (the same TOML that cellm-host runs). It owns the plugins, the
 * model, the backend, the paged KV cache and one scheduler thread that runs continuous-batching steps. Sessions
 * are conversations on that engine: submit a prompt (text, chat messages or tokens), receive the generated text
 * as events (through a callback or by polling), cancel, read statistics. Every session with work goes into the
 * same steps, so many sessions on one engine are batched together.
 *
 * Conventions:
 *  - Functions that can fail return cellm_result. On failure, cellm_last_error() gives one line saying why.
 *  - Structs the caller fills start with struct_size; set it with the matching *_init function (or sizeof) so
 *    that a newer library can read an older caller's struct. Structs only grow at the end within a major.
 *  - Strings and arrays passed in are copied before the call returns; the caller keeps ownership.
 *  - Strings and arrays handed out are owned by the object that handed them out and stay valid for the time
 *    written at the function.
 *  - Threading: the engine functions may be called from any thread at once. A session handle is used by one
 *    thread at a time, except cellm_session_cancel, which any thread may call at any time (callbacks included).
 *    Event callbacks run on the engine's scheduler thread.
 *  - Handles: a NULL handle gets CELLM_E_INVALID_ARGUMENT, never a crash. A closed engine's sessions stay valid
 *    handles until they are destroyed: their calls return CELLM_E_CLOSED, except that cellm_session_poll still
 *    hands out the events queued before the close (the DONE of a turn the close ended among them).
 */
#ifndef CELLM_CELLM_H
#define CELLM_CELLM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CELLM_SDK_VERSION_MAJOR 1
#define CELLM_SDK_VERSION_MINOR 6

#if defined(_WIN32)
#define CELLM_API __declspec(dllexport)
#else
#define CELLM_API __attribute__((visibility("default")))
#endif

/* ---- Results and errors ------------------------------------------------------------------------------ */

typedef enum cellm_result {
    CELLM_SUCCESS = 0,
    CELLM_E_INVALID_ARGUMENT = 1, /* NULL handle or pointer, struct_size too small, a value out of range */
    CELLM_E_MANIFEST = 2,         /* the manifest file or text does not parse or validate */
    CELLM_E_LOAD = 3,             /* plugins, model or backend could not be set up */
    CELLM_E_PROMPT = 4,           /* the prompt is unusable: empty, a token outside the vocabulary, messages the
                                     chat template cannot render */
    CELLM_E_BUSY = 5,             /* the session is still generating its previous turn */
    CELLM_E_CLOSED = 6,           /* the engine was closed */
    CELLM_E_TIMEOUT = 7,          /* a wait or poll ran out of time (nothing is wrong with the session) */
    CELLM_E_INTERNAL = 8,         /* anything else; the message says what */
    CELLM_E_TOO_LONG = 9,         /* the prompt can never run: longer than the context, or than the whole KV pool */
    CELLM_E_GRAMMAR = 10          /* since 1.4: a grammar or JSON schema that does not parse, uses a keyword the
                                     engine cannot honour (the message names it), or matches nothing */
} cellm_result;

/* The message of the last call on this thread that failed (CELLM_E_TIMEOUT included), one line; "" when none
 * has. Owned by the library; valid until the next call on this thread that fails. */
CELLM_API const char* cellm_last_error(void);

/* A stable name for a result ("CELLM_E_PROMPT"); never NULL. Static storage. */
CELLM_API const char* cellm_result_name(cellm_result result);

/* This library's SDK version; a caller compiled against a newer minor can check what it may use. */
CELLM_API void cellm_version(int32_t* major, int32_t* minor);

/* ---- Engine ------------------------------------------------------------------------------------------ */

typedef struct cellm_engine cellm_engine;

typedef struct cellm_engine_options {
    size_t struct_size;
    /* At most one of these two. A path is read like `cellm-host run --manifest`; text is parsed as if it were
     * a file in the current folder (relative model paths resolve from there). Borrowed for the call.
     * Since 1.3 both may be NULL when model_path is set: the model file alone, as `cellm-host run --model FILE`
     * opens it (format and arch from the file, the fastest CPU backend found, fast precision, every physical
     * core, the model's own chat template and general.sampling.* defaults; docs/sdk.md). */
    const char* manifest_path;
    const char* manifest_text;
    /* Overrides of the manifest, as cellm-host's flags; NULL or 0 keeps the manifest's value. */
    const char* model_path;  /* [model].path, or the model to open without a manifest */
    const char* backend;     /* [backend].name: any backend plugin, e.g. "scalar", "openblas", "vulkan" */
    int32_t threads;         /* [backend].threads */
    int32_t context_length;  /* [context].length: tokens per session */
    int32_t max_sessions;    /* [scheduler].max_running: sessions in the steps at once; without
                                [context].kv_memory_mib the KV pool holds this many full contexts */
    const char* plugin_path; /* one more folder to search for plugins */
    /* Since 1.1 (read only when struct_size covers it). */
    const char* mmproj_path; /* [model].mmproj: llama.cpp's mmproj file beside a text GGUF (its vision tower);
                                a model_path override drops the manifest's, as it drops its format and arch */
    /* Since 1.2. */
    const char* precision;   /* [backend].precision: "exact" (the scalar reference's results, bit for bit) or
                                "fast" (other summation orders, within the bounds the backend's docs write);
                                the backend checks the value */
    /* Since 1.6. */
    const char* kv_type;       /* [context].kv_type: "f32", "f16", "q8", "r4" or "r3" */
    int32_t memory_budget_mib; /* [context].memory_budget_mib: memory for weights, scratch and KV cache together;
                                  the KV pool (and, when it holds less, the context) is sized from what the
                                  weights and scratch leave (docs/memory.md) */
} cellm_engine_options;

/* Zeroes the `size` bytes of *options and sets struct_size to `size`. Call it through the macro below, which passes
 * the size of the struct the caller was compiled with: a library newer than the caller's header then never writes
 * past the caller's struct. (Since 1.2.) */
CELLM_API void cellm_engine_options_init_size(cellm_engine_options* options, size_t size);
/* Zeroes *options and sets struct_size. Since 1.2 a macro (sizeof does not evaluate its operand); the function of
 * the name stays for programs built against 1.1 headers and initialises their struct, which ends at mmproj_path. */
CELLM_API void cellm_engine_options_init(cellm_engine_options* options);
#define cellm_engine_options_init(options) cellm_engine_options_init_size((options), sizeof *(options))

/* Loads everything the manifest names and starts the scheduler thread. On success *engine is a new handle the
 * caller owns (release it with cellm_engine_close); on failure *engine is NULL. Loading a model takes time:
 * call it off any thread that must stay responsive. */
CELLM_API cellm_result cellm_engine_open(const cellm_engine_options* options, cellm_engine** engine);

/* Ends every running turn (each session gets its CELLM_EVENT_DONE, finish reason CANCELLED), stops the
 * scheduler thread and frees the model. Sessions still alive become closed handles, to be destroyed by their
 * owner. NULL is ignored. Must not be called from an event callback. */
CELLM_API void cellm_engine_close(cellm_engine* engine);

typedef struct cellm_engine_info {
    size_t struct_size;
    /* Owned by the engine, valid until cellm_engine_close. */
    const char* model_name;    /* general.name, or the file name without its extension */
    const char* model_path;
    const char* arch;          /* arch plugin, e.g. "llama" */
    const char* backend;       /* backend plugin, e.g. "openblas" */
    const char* chat_template; /* "chatml", "llama3", "gemma" or "plain" */
    int32_t n_vocab;
    int32_t context_length;    /* tokens per session */
    int32_t max_sessions;
    int32_t kv_blocks;         /* KV pool size in blocks */
    int32_t kv_block_size;     /* tokens per block */
    int64_t kv_bytes_per_token;
    int32_t model_has_chat_template; /* the model file carries its own chat template (tokenizer.chat_template) */
    /* Since 1.1 (read it only when struct_size covers it). */
    int32_t model_takes_images;      /* cellm_session_submit_*_images work: the model has a vision encoder */
    /* Since 1.6. Where the memory goes, measured at load (docs/memory.md). */
    int64_t weights_bytes;  /* what the backend reads the weights from, mapped from the file or uploaded */
    int64_t scratch_bytes;  /* what the backend needs beside that for the largest step; 0 when it does not say */
    int64_t kv_pool_bytes;  /* the KV pool when every block is in use; the CPU backends commit it as blocks come
                               into use and give free chunks back (cellm_engine_stats.kv_bytes_committed) */
} cellm_engine_info;

CELLM_API cellm_result cellm_engine_get_info(const cellm_engine* engine, cellm_engine_info* info);

typedef struct cellm_engine_stats {
    size_t struct_size;
    int32_t sessions;          /* alive */
    int32_t running;           /* admitted into the steps */
    int32_t waiting;           /* with a prompt, not admitted yet (or preempted) */
    int32_t kv_blocks, kv_blocks_used, kv_blocks_free;
    int64_t prefix_hit_tokens; /* prompt tokens taken from the prefix cache instead of computed, ever */
    int64_t steps;             /* scheduler steps run */
    int64_t batched_tokens;    /* tokens computed over all steps */
    int64_t preemptions;
    int64_t copied_blocks;     /* copy-on-write copies of shared KV blocks */
    /* Since 1.6. */
    int64_t kv_bytes_committed; /* KV pool bytes with memory behind them now */
} cellm_engine_stats;

/* A snapshot between two steps. */
CELLM_API cellm_result cellm_engine_get_stats(cellm_engine* engine, cellm_engine_stats* stats);

/* Token ids of `text` with the engine's tokenizer: BOS as the model asks when add_special is non-zero, and
 * special-token text read as those tokens. Writes at most `capacity` ids; *n_tokens gets the full count, so a
 * call with capacity 0 asks for the size. */
CELLM_API cellm_result cellm_engine_tokenize(const cellm_engine* engine, const char* text, int32_t add_special,
                                             int32_t* tokens, size_t capacity, size_t* n_tokens);

/* Since 1.4. The bytes `tokens` stand for, concatenated (special tokens as their text), as a streaming printer
 * would show them but not checked as UTF-8. Writes at most `capacity` bytes and no NUL; *length gets the full
 * size, so a call with capacity 0 asks for it. CELLM_E_PROMPT for an id outside the vocabulary. Any thread. */
CELLM_API cellm_result cellm_engine_detokenize(const cellm_engine* engine, const int32_t* tokens, size_t n_tokens,
                                               char* text, size_t capacity, size_t* length);

/* Calls `fn` once per backend plugin found in the default folders (next to the library, CELLM_PLUGIN_PATH) and
 * in `plugin_path` (may be NULL). The strings are valid during the call only. */
typedef void (*cellm_backend_fn)(const char* name, const char* description, void* user_data);
CELLM_API cellm_result cellm_list_backends(const char* plugin_path, cellm_backend_fn fn, void* user_data);

/* ---- Sessions ---------------------------------------------------------------------------------------- */

typedef struct cellm_session cellm_session;

typedef enum cellm_finish_reason {
    CELLM_FINISH_NONE = 0,      /* no turn has ended yet, or one is running */
    CELLM_FINISH_EOG = 1,       /* the model ended its answer (an end-of-generation token) */
    CELLM_FINISH_STOP = 2,      /* a stop string appeared (it is not part of the text) */
    CELLM_FINISH_LENGTH = 3,    /* max_tokens were generated */
    CELLM_FINISH_CONTEXT = 4,   /* the context is full */
    CELLM_FINISH_CANCELLED = 5, /* cellm_session_cancel, or the engine closed */
    CELLM_FINISH_ERROR = 6,     /* the turn failed; cellm_session_stats.error says why */
    CELLM_FINISH_TOOL_CALLS = 7 /* since 1.5: the answer ended with function calls (cellm_session_get_tool_calls) */
} cellm_finish_reason;

/* "eog", "stop", "length", "context", "cancelled", "error", "tool_calls", or "" for NONE. Static storage. */
CELLM_API const char* cellm_finish_reason_name(cellm_finish_reason reason);

typedef enum cellm_event_kind {
    CELLM_EVENT_TEXT = 1, /* more generated text */
    CELLM_EVENT_DONE = 2, /* the turn ended; finish_reason says how. The last event of every turn. */
    CELLM_EVENT_TOOL_CALL = 3 /* since 1.5, with tools: a piece of a function call (tool_call_* fields) */
} cellm_event_kind;

typedef struct cellm_event {
    size_t struct_size;
    cellm_event_kind kind;
    /* TEXT: complete UTF-8 characters, NUL-terminated, never part of a stop string. DONE: "". Owned by the
     * library: valid during the callback, or until the next cellm_session_poll on this session. */
    const char* text;
    size_t text_len;
    int32_t generated_tokens;          /* this turn so far */
    cellm_finish_reason finish_reason; /* DONE only */
    /* Since 1.5 (filled when struct_size covers them). TOOL_CALL: the answer's index-th call; its first event
     * has text "" and announces the call, the next ones carry pieces of its arguments' JSON text in `text`, in
     * order (their concatenation is the call's arguments; each piece complete UTF-8 characters). Id and name
     * are set on every event of the call; owned like `text`. Other kinds: -1 and NULL. */
    int32_t tool_call_index;
    const char* tool_call_id;
    const char* tool_name;
} cellm_event;

/* Receives a session's events on the engine's scheduler thread, in order. It must return quickly (the step of
 * every session waits for it) and may call cellm_session_cancel and the get_* functions of any session. */
typedef void (*cellm_event_fn)(cellm_session* session, const cellm_event* event, void* user_data);

/* Since 1.4: added to a token's logit before any sampling step (-100 in effect bans it, +100 forces it). */
typedef struct cellm_logit_bias {
    int32_t token;
    float bias;
} cellm_logit_bias;

typedef struct cellm_session_options {
    size_t struct_size;
    const char* name;         /* shown in logs and errors; copied */
    /* Sampling, in llama.cpp's order: penalties, top-k, top-p, min-p, temperature, seeded draw. */
    float temperature;        /* 0: greedy */
    int32_t top_k;            /* <= 0: off */
    float top_p;              /* 1: off; 0 keeps only the most likely token */
    float min_p;              /* 0: off */
    float repeat_penalty;     /* 1: off; over the last repeat_last_n tokens of the context */
    int32_t repeat_last_n;
    float frequency_penalty;  /* 0: off; subtracted once per earlier occurrence (same window) */
    float presence_penalty;   /* 0: off; subtracted once if the token occurred (same window) */
    uint64_t seed;            /* same seed and settings, same tokens */
    int32_t max_tokens;       /* >= 1 */
    const char* const* stop;  /* n_stop stop strings, copied */
    size_t n_stop;
    int32_t priority;         /* higher is served first when the scheduler must choose; 1 interactive, 0 background */
    /* NULL: events queue up for cellm_session_poll. Otherwise every event goes to on_event and none queue. */
    cellm_event_fn on_event;
    void* user_data;          /* passed to on_event; the caller owns it and keeps it alive while the session is */
    /* Since 1.4 (read only when struct_size covers it). */
    /* Constrained decoding: at most one of grammar and json_schema, NULL for none (docs/grammar.md). Every
     * generated token then keeps the text a prefix of a sentence of the grammar, and end-of-generation comes only
     * where the grammar may end. Compiled on the calling thread by cellm_session_create / configure (never on the
     * scheduler's), and cached by text in the engine. CELLM_E_GRAMMAR when it does not compile; cellm_last_error
     * names the rule, the keyword or the position. Copied. */
    const char* grammar;      /* llama.cpp's GBNF; generation starts at the rule `root` */
    const char* json_schema;  /* a JSON Schema; the text is JSON with llama.cpp's whitespace between tokens, an
                                 object's declared properties in the schema's order (docs/grammar.md) */
    const cellm_logit_bias* logit_bias;        /* n_logit_bias entries, copied; an id outside the vocabulary is
                                                  CELLM_E_INVALID_ARGUMENT */
    size_t n_logit_bias;
    int32_t logprobs;         /* non-zero: record each generated token's log-probability (cellm_session_get_logprobs) */
    int32_t top_logprobs;     /* 0..20: also the most likely tokens at each step (needs logprobs) */
    /* Since 1.5. Function tools (docs/sdk.md, Tools): OpenAI's `tools` array as JSON text, NULL for none; copied.
     * The prompt then offers them to the model, through its own chat template where it renders tools and
     * through its family's documented prompt where it does not (docs/server.md, Tool calling); the answer's
     * calls are taken out of the text and arrive as CELLM_EVENT_TOOL_CALL events, the text events carrying only
     * the rest, and the turn ends with CELLM_FINISH_TOOL_CALLS. Calls asked for with "required" or a name are
     * grammar-constrained, so they always parse and their arguments fit the function's schema; with "auto" a
     * call is constrained from its opening marker on. CELLM_E_INVALID_ARGUMENT naming the field ("tools[1].
     * function.parameters: ...") for a malformed tool and when the model's family has no call format cellm knows.
     * Not together with grammar or json_schema. The chat submits render the tools; with submit_text or
     * submit_tokens the prompt is the caller's, and calls are still constrained and parsed as the choice says. */
    const char* tools;
    const char* tool_choice;      /* NULL or "auto" (with tools), "none", "required", or OpenAI's JSON object
                                     {"type": "function", "function": {"name": ...}}; copied */
    int32_t parallel_tool_calls;  /* non-zero (init's default): an answer may make several calls */
    /* Since 1.5. More variables for the model's own Jinja chat template, as a JSON object text (transformers'
     * apply_chat_template keywords, llama-server's chat_template_kwargs), e.g. {"enable_thinking": false} for
     * Qwen 3; NULL for none; copied. The variables the engine sets (messages, tools, documents,
     * add_generation_prompt, bos_token, eos_token) cannot be given. Hand-written templates ignore them. */
    const char* chat_template_kwargs;
} cellm_session_options;

/* Fills the `size` bytes of *options with the manifest's [sampling] defaults (the 1.4 fields off) and sets
 * struct_size to `size`; without a seed in the manifest, each call draws a new one, so sessions do not sample
 * alike. Call it through the macro below, which passes the size of the struct the caller was compiled with.
 * (Since 1.4.) */
CELLM_API cellm_result cellm_session_options_init_size(const cellm_engine* engine, cellm_session_options* options,
                                                       size_t size);
/* Since 1.4 a macro, as cellm_engine_options_init is; the function of the name stays for programs built against
 * 1.3 headers (and bindings that declare the 1.3 struct) and fills their struct, which ends at user_data. */
CELLM_API cellm_result cellm_session_options_init(const cellm_engine* engine, cellm_session_options* options);
#define cellm_session_options_init(engine, options) \
    cellm_session_options_init_size((engine), (options), sizeof(cellm_session_options))

/* A new idle session; the caller owns *session and releases it with cellm_session_destroy (before or after
 * the engine is closed). `options` may be NULL for the manifest's defaults. */
CELLM_API cellm_result cellm_session_create(cellm_engine* engine, const cellm_session_options* options,
                                            cellm_session** session);

/* New settings for the next turn of an idle session (CELLM_E_BUSY while a turn runs). */
CELLM_API cellm_result cellm_session_configure(cellm_session* session, const cellm_session_options* options);

/* A new idle session with this one's settings (on_event and user_data included) and its cached context: the
 * KV blocks are shared
 * (copy-on-write), so a turn on the fork that starts with the same conversation computes only what is new.
 * The source must be idle. The caller owns *fork. */
CELLM_API cellm_result cellm_session_fork(cellm_session* session, cellm_session** fork);

/* Starts a turn. Each call gives the whole conversation so far; what an earlier turn (or another session's
 * identical prefix) left in the KV cache is reused, not computed again. Returns at once; text arrives as events.
 * CELLM_E_BUSY while a turn runs, CELLM_E_PROMPT or CELLM_E_TOO_LONG when the prompt can never run. */
CELLM_API cellm_result cellm_session_submit_text(cellm_session* session, const char* text); /* as is, BOS as the model asks */

typedef struct cellm_message {
    const char* role;    /* "system", "user" or "assistant" */
    const char* content;
} cellm_message;
/* Rendered with the model's chat template (the manifest's [chat] settings) with the generation prompt. */
CELLM_API cellm_result cellm_session_submit_chat(cellm_session* session, const cellm_message* messages, size_t n_messages);
CELLM_API cellm_result cellm_session_submit_tokens(cellm_session* session, const int32_t* tokens, size_t n_tokens);

/* Since 1.5. A conversation as OpenAI's `messages` JSON array (text, copied): roles system (or developer), user,
 * assistant and tool; content a string, an array of {"type": "text", "text"} parts (joined by newlines), or null
 * for an assistant message with tool_calls; assistant `tool_calls` as OpenAI
 * writes them ({"id", "type": "function", "function": {"name", "arguments": JSON text}}); a tool message's
 * `tool_call_id` must name an earlier call. Rendered as cellm_session_submit_chat renders, with the session's
 * tools. CELLM_E_INVALID_ARGUMENT naming the field ("messages[3].tool_call_id: ...") for a malformed message. */
CELLM_API cellm_result cellm_session_submit_chat_json(cellm_session* session, const char* messages_json);

/* Prompts with images, for a model that takes them (cellm_engine_info.model_takes_images; SmolVLM). An image is
 * a PNG or JPEG file's bytes, borrowed for the call. Each "<image>" in the text (or in the messages' content)
 * stands for the next image; a text without any gets the images at its start. Each image is encoded when the
 * call is made, once per distinct content: a later turn with the same image bytes reuses the encoding. Errors as
 * for text, and CELLM_E_PROMPT naming the image when it cannot be decoded or the markers and images disagree. */
typedef struct cellm_image {
    const void* data;
    size_t size;
} cellm_image;
CELLM_API cellm_result cellm_session_submit_text_images(cellm_session* session, const char* text,
                                                        const cellm_image* images, size_t n_images);
CELLM_API cellm_result cellm_session_submit_chat_images(cellm_session* session, const cellm_message* messages,
                                                        size_t n_messages, const cellm_image* images, size_t n_images);

/* The next event of a session without on_event: CELLM_SUCCESS with *event filled, or CELLM_E_TIMEOUT when none
 * came within timeout_ms (0: do not wait; negative: wait as long as it takes). A session with on_event gets
 * CELLM_E_INVALID_ARGUMENT. Events of a turn left unread are dropped when the next turn is submitted. */
CELLM_API cellm_result cellm_session_poll(cellm_session* session, int32_t timeout_ms, cellm_event* event);

/* Waits until the current turn has ended (at once when idle); CELLM_E_TIMEOUT after timeout_ms (negative:
 * no limit). Queued events stay queued. */
CELLM_API cellm_result cellm_session_wait(cellm_session* session, int32_t timeout_ms);

/* Ends the running turn now (finish reason CANCELLED) and returns its KV blocks to the pool; nothing when idle.
 * Any thread, any time, from a callback too. */
CELLM_API cellm_result cellm_session_cancel(cellm_session* session);

typedef struct cellm_session_stats {
    size_t struct_size;
    int32_t busy;                      /* a turn is running */
    int32_t prompt_tokens;             /* of the current or last turn */
    int32_t cached_tokens;             /* of those, taken from the KV cache (earlier turns, shared prefixes) */
    int32_t generated_tokens;
    int32_t preemptions;
    double ttft_ms;                    /* submit to first generated token */
    double prefill_tok_s;              /* computed prompt tokens per second until the first token */
    double decode_tok_s;               /* generated tokens per second after the first */
    cellm_finish_reason finish_reason;
    const char* error;                 /* "" unless finish_reason is ERROR; valid until the next call on this session */
} cellm_session_stats;

CELLM_API cellm_result cellm_session_get_stats(cellm_session* session, cellm_session_stats* stats);

/* The text generated in the current or last turn so far (stop strings excluded), NUL-terminated, and its
 * token ids (an ending end-of-generation token excluded). Owned by the session; valid until the next call on
 * this session. */
CELLM_API cellm_result cellm_session_get_text(cellm_session* session, const char** text, size_t* length);
CELLM_API cellm_result cellm_session_get_tokens(cellm_session* session, const int32_t** tokens, size_t* n_tokens);

/* Since 1.5. The function calls of the current or last turn (with tools), as OpenAI's message.tool_calls JSON
 * array: [{"id", "type": "function", "function": {"name", "arguments"}}], "[]" when none; NUL-terminated. With
 * tools, cellm_session_get_text gives the rest of the answer (the calls' markup taken out). Owned by the
 * session; valid until the next call on this session. */
CELLM_API cellm_result cellm_session_get_tool_calls(cellm_session* session, const char** json, size_t* length);

/* Since 1.4. With options.logprobs: for each token of cellm_session_get_tokens, a row of `*row_size` entries
 * (1 + top_logprobs): the generated token, then the top_logprobs most likely tokens, best first (ties: lower id).
 * Log-probabilities are the log-softmax of the model's logits for that step, before bias, penalties, grammar and
 * the other filters. *n_tokens is 0 without options.logprobs. Owned by the session; valid until the next call
 * on this session. */
typedef struct cellm_logprob {
    int32_t token;
    float logprob;
} cellm_logprob;
CELLM_API cellm_result cellm_session_get_logprobs(cellm_session* session, const cellm_logprob** entries,
                                                  size_t* n_tokens, size_t* row_size);

/* Cancels the running turn, frees the session's KV blocks and the handle. NULL is ignored. Not from inside this
 * session's own callback. */
CELLM_API void cellm_session_destroy(cellm_session* session);

/* ---- Logits of a token sequence ---------------------------------------------------------------------- */

/* Since 1.6. Receives one position's logits from cellm_engine_evaluate: `logits` holds n_vocab floats, the model's
 * raw scores (before bias, penalties, grammar and sampling) for the token that follows tokens[position]. Owned by
 * the library and valid during the call only: copy what you keep. */
typedef void (*cellm_logits_fn)(int32_t position, const float* logits, int32_t n_vocab, void* user_data);

/* Since 1.6. Runs `tokens` through the model as a fresh sequence of its own, as a prompt is computed but without
 * sampling, and calls `fn` with the logits of every position from first_position on, in order (positions before
 * it are computed as context only). The sequence takes KV blocks from the pool for the duration of the call and
 * gives them back before returning; it reuses no cached prefix and touches no session's blocks. It runs in steps
 * of at most [scheduler].token_budget tokens, each taken between two scheduler steps, so running sessions go on
 * between them and wait at most one such step. `tokens` are borrowed for the call; `user_data` goes to fn.
 * Threads: any thread, several at once, but not the scheduler's (an event callback). fn runs on the calling
 * thread with no lock of the engine held, so it may call any cellm function, this engine's included, except
 * cellm_engine_close: the engine must stay open until the call returns.
 * Errors: CELLM_E_PROMPT for no tokens or an id outside the vocabulary; CELLM_E_TOO_LONG for more tokens than the
 * context length or KV blocks than the whole pool; CELLM_E_INVALID_ARGUMENT for a NULL fn or a first_position
 * outside [0, n_tokens); CELLM_E_BUSY when sessions hold the KV blocks (or, for a model with recurrent layers, the
 * state slot) it needs, at its start or between two of its steps. The calls of fn made before a failure stand. */
CELLM_API cellm_result cellm_engine_evaluate(cellm_engine* engine, const int32_t* tokens, size_t n_tokens,
                                             int32_t first_position, cellm_logits_fn fn, void* user_data);

#ifdef __cplusplus
}
#endif

#endif /* CELLM_CELLM_H */
