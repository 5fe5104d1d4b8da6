/* sdk_test: libcellm as a C application uses it, through include/cellm/cellm.h alone.
 *
 *   sdk_test CASE --host CELLM_HOST --manifest MANIFEST [--model MODEL]
 *
 * Each CASE is one ctest entry. Greedy tokens are never written down here: they are compared with what
 * `cellm-host run --json` generates for the same manifest, prompt and settings. MODEL is the synthetic model
 * the manifest names, for the cases that write manifests of their own. Exit status: 0 pass, 1 fail, 77 skip.
 */
#define _POSIX_C_SOURCE 200809L

#include <cellm/cellm.h>

#include <math.h>
#include <pthread.h>
#include <spawn.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char** environ;

enum { MAX_IDS = 512, EXIT_SKIP = 77 };

typedef struct {
    int32_t ids[MAX_IDS];
    size_t n;
} token_list;

static struct {
    const char* host;
    const char* manifest;
    const char* model;
    const char* image;  /* the images case's PNG */
} cfg;

/* ---- Checks ---------------------------------------------------------------------------------------------- */

static pthread_mutex_t report_mutex = PTHREAD_MUTEX_INITIALIZER;
static int failures;

static int check_at(int ok, const char* file, int line, const char* fmt, ...) {
    if (ok) return 1;
    va_list args;
    va_start(args, fmt);
    pthread_mutex_lock(&report_mutex);
    ++failures;
    fprintf(stderr, "FAIL %s:%d: ", file, line);
    vfprintf(stderr, fmt, args);
    fputc('\n', stderr);
    pthread_mutex_unlock(&report_mutex);
    va_end(args);
    return 0;
}

/* A failed requirement ends the case at once. _Exit: the objects left open would only add leak reports. */
static _Noreturn void abort_case(void) {
    fprintf(stderr, "FAIL (case stopped)\n");
    fflush(stdout);
    fflush(stderr);
    _Exit(1);
}

#define CHECK(cond, ...) check_at((cond) != 0, __FILE__, __LINE__, __VA_ARGS__)
#define REQUIRE(cond, ...)                           \
    do {                                             \
        if (!CHECK(cond, __VA_ARGS__)) abort_case(); \
    } while (0)

/* `got` must be `want`; a failure must leave a message in cellm_last_error(), containing `needle` if given. */
static int expect_result_at(cellm_result got, cellm_result want, const char* needle, const char* call, const char* file,
                            int line) {
    char why[1024];
    snprintf(why, sizeof why, "%s", cellm_last_error()); /* copied: the next cellm_* call may end its life */
    if (got != want) {
        return check_at(0, file, line, "%s returned %s, expected %s (last error: \"%s\")", call, cellm_result_name(got),
                        cellm_result_name(want), why);
    }
    if (want == CELLM_SUCCESS) return 1;
    if (!check_at(why[0] != '\0', file, line, "%s returned %s but cellm_last_error() is empty", call,
                  cellm_result_name(got))) {
        return 0;
    }
    return needle == NULL || check_at(strstr(why, needle) != NULL, file, line,
                                      "%s: expected \"%s\" in the error \"%s\"", call, needle, why);
}

#define EXPECT_RESULT(call, want) expect_result_at((call), (want), NULL, #call, __FILE__, __LINE__)
#define EXPECT_ERROR(call, want, needle) expect_result_at((call), (want), (needle), #call, __FILE__, __LINE__)
#define OK(call)                                                                                     \
    do {                                                                                             \
        if (!expect_result_at((call), CELLM_SUCCESS, NULL, #call, __FILE__, __LINE__)) abort_case(); \
    } while (0)

static void format_ids(const token_list* t, char* out, size_t capacity) {
    size_t used = 0;
    out[0] = '\0';
    for (size_t i = 0; i < t->n && used + 16 < capacity; ++i) {
        used += (size_t)snprintf(out + used, capacity - used, "%s%d", i == 0 ? "" : " ", (int)t->ids[i]);
    }
}

static int same_tokens_at(const token_list* got, const token_list* want, const char* what, const char* file, int line) {
    if (got->n == want->n && memcmp(got->ids, want->ids, got->n * sizeof got->ids[0]) == 0) return 1;
    char a[4096], b[4096];
    format_ids(got, a, sizeof a);
    format_ids(want, b, sizeof b);
    return check_at(0, file, line, "%s: tokens differ\n  got      (%zu): %s\n  expected (%zu): %s", what, got->n, a,
                    want->n, b);
}
#define SAME_TOKENS(got, want, what) same_tokens_at((got), (want), (what), __FILE__, __LINE__)

static void deadline_in(struct timespec* t, int seconds) {
    clock_gettime(CLOCK_REALTIME, t);
    t->tv_sec += seconds;
}

/* ---- cellm-host as the reference ----------------------------------------------------------------------- */

/* Runs argv (argv[0] a path) and returns its standard output, malloc'd and NUL-terminated; ends the case if it
 * does not exit with status 0. Its standard error goes to ours, so a failure shows why. */
static char* run_capture(char* const argv[]) {
    int fds[2];
    REQUIRE(pipe(fds) == 0, "pipe failed");
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, fds[1], STDOUT_FILENO);
    posix_spawn_file_actions_addclose(&actions, fds[0]);
    posix_spawn_file_actions_addclose(&actions, fds[1]);
    pid_t pid;
    const int spawned = posix_spawn(&pid, argv[0], &actions, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&actions);
    close(fds[1]);
    REQUIRE(spawned == 0, "cannot start %s", argv[0]);

    size_t size = 0, capacity = 4096;
    char* out = malloc(capacity);
    REQUIRE(out != NULL, "out of memory");
    for (;;) {
        if (capacity - size < 2048) {
            capacity *= 2;
            out = realloc(out, capacity);
            REQUIRE(out != NULL, "out of memory");
        }
        const ssize_t got = read(fds[0], out + size, capacity - size - 1);
        if (got <= 0) break;
        size += (size_t)got;
    }
    out[size] = '\0';
    close(fds[0]);
    int status = 0;
    REQUIRE(waitpid(pid, &status, 0) == pid, "waitpid failed");
    REQUIRE(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s %s failed (status %d); output: %s", argv[0], argv[1],
            status, out);
    return out;
}

/* The value of "key" in cellm-host's one-line JSON: an array of integers. Keys are unique and string values
 * escape their quotes, so the first match is the key. */
static const char* json_value(const char* json, const char* key) {
    char pattern[64];
    snprintf(pattern, sizeof pattern, "\"%s\":", key);
    const char* p = strstr(json, pattern);
    if (p == NULL) return NULL;
    p += strlen(pattern);
    while (*p == ' ') ++p;
    return p;
}

static int json_ids(const char* json, const char* key, token_list* out) {
    const char* p = json_value(json, key);
    if (p == NULL || *p++ != '[') return 0;
    out->n = 0;
    for (;;) {
        while (*p == ' ' || *p == ',') ++p;
        if (*p == ']') return 1;
        char* end;
        const long id = strtol(p, &end, 10);
        if (end == p || out->n == MAX_IDS) return 0;
        out->ids[out->n++] = (int32_t)id;
        p = end;
    }
}

static int json_string(const char* json, const char* key, char* out, size_t capacity) {
    const char* p = json_value(json, key);
    if (p == NULL || *p++ != '"') return 0;
    const char* end = strchr(p, '"');
    if (end == NULL || (size_t)(end - p) >= capacity) return 0;
    memcpy(out, p, (size_t)(end - p));
    out[end - p] = '\0';
    return 1;
}

typedef struct {
    token_list tokens;
    char finish_reason[32];
} host_reply;

/* cellm-host run --json, greedy: the reference for one prompt, as a chat message or as raw text. */
static void host_run(const char* manifest, const char* model, const char* prompt, int chat, int32_t max_tokens,
                     host_reply* reply, const char* image) {
    char max[16];
    snprintf(max, sizeof max, "%d", (int)max_tokens);
    char* argv[20];
    int n = 0;
    argv[n++] = (char*)cfg.host;
    argv[n++] = "run";
    if (manifest != NULL) { /* without one, the model file alone (run --model FILE) */
        argv[n++] = "--manifest";
        argv[n++] = (char*)manifest;
    }
    if (model != NULL) {
        argv[n++] = "--model";
        argv[n++] = (char*)model;
    }
    argv[n++] = "--prompt";
    argv[n++] = (char*)prompt;
    argv[n++] = chat ? "--chat" : "--raw";
    argv[n++] = "--temperature";
    argv[n++] = "0";
    argv[n++] = "--max-tokens";
    argv[n++] = max;
    argv[n++] = "--json";
    if (image != NULL) {
        argv[n++] = "--image";
        argv[n++] = (char*)image;
    }
    argv[n] = NULL;
    char* json = run_capture(argv);
    REQUIRE(json_ids(json, "tokens", &reply->tokens), "no \"tokens\" array in cellm-host's output: %s", json);
    REQUIRE(json_string(json, "finish_reason", reply->finish_reason, sizeof reply->finish_reason),
            "no \"finish_reason\" in cellm-host's output: %s", json);
    free(json);
}

/* ---- SDK helpers ----------------------------------------------------------------------------------------- */

static cellm_engine* open_engine(const char* manifest_path, const char* manifest_text) {
    cellm_engine_options options;
    cellm_engine_options_init(&options);
    options.manifest_path = manifest_path;
    options.manifest_text = manifest_text;
    cellm_engine* engine = NULL;
    OK(cellm_engine_open(&options, &engine));
    REQUIRE(engine != NULL, "cellm_engine_open succeeded without an engine");
    return engine;
}

/* A manifest for the synthetic model; `extra` continues its [context] table and may add tables. */
static const char* tiny_manifest_text(const char* extra) {
    static char text[4096];
    snprintf(text, sizeof text,
             "[model]\npath = \"%s\"\n[backend]\nname = \"scalar\"\nthreads = 1\n[context]\nlength = 128\n%s",
             cfg.model, extra);
    return text;
}

static cellm_session_options greedy_options(const cellm_engine* engine, int32_t max_tokens) {
    cellm_session_options options;
    OK(cellm_session_options_init(engine, &options));
    options.temperature = 0.0f;
    options.max_tokens = max_tokens;
    return options;
}

static cellm_session* new_session(cellm_engine* engine, const cellm_session_options* options) {
    cellm_session* session = NULL;
    OK(cellm_session_create(engine, options, &session));
    REQUIRE(session != NULL, "cellm_session_create succeeded without a session");
    return session;
}

static cellm_session_stats session_stats(cellm_session* session) {
    cellm_session_stats stats;
    stats.struct_size = sizeof stats;
    OK(cellm_session_get_stats(session, &stats));
    return stats;
}

static cellm_engine_stats engine_stats(cellm_engine* engine) {
    cellm_engine_stats stats;
    stats.struct_size = sizeof stats;
    OK(cellm_engine_get_stats(engine, &stats));
    return stats;
}

static cellm_engine_info engine_info(const cellm_engine* engine) {
    cellm_engine_info info;
    info.struct_size = sizeof info;
    OK(cellm_engine_get_info(engine, &info));
    return info;
}

static void session_tokens(cellm_session* session, token_list* out) {
    const int32_t* ids = NULL;
    size_t n = 0;
    OK(cellm_session_get_tokens(session, &ids, &n));
    REQUIRE(n <= MAX_IDS, "%zu tokens", n);
    REQUIRE(n == 0 || ids != NULL, "cellm_session_get_tokens gave %zu tokens at NULL", n);
    if (n > 0) memcpy(out->ids, ids, n * sizeof ids[0]);
    out->n = n;
}

/* The text of the session's last turn, malloc'd. */
static char* session_text(cellm_session* session, size_t* length) {
    const char* text = NULL;
    OK(cellm_session_get_text(session, &text, length));
    REQUIRE(text != NULL && strlen(text) == *length, "cellm_session_get_text: length %zu does not match the text",
            *length);
    char* copy = malloc(*length + 1);
    REQUIRE(copy != NULL, "out of memory");
    memcpy(copy, text, *length + 1);
    return copy;
}

static void tokenize(const cellm_engine* engine, const char* text, int32_t add_special, token_list* out) {
    size_t n = 0;
    OK(cellm_engine_tokenize(engine, text, add_special, out->ids, MAX_IDS, &n));
    REQUIRE(n <= MAX_IDS, "'%s' has %zu tokens", text, n);
    out->n = n;
}

/* Polls a session without a callback until the DONE event of its turn; returns the finish reason. */
static cellm_finish_reason poll_until_done(cellm_session* session) {
    for (;;) {
        cellm_event event;
        event.struct_size = sizeof event;
        OK(cellm_session_poll(session, 60000, &event));
        if (event.kind == CELLM_EVENT_DONE) return event.finish_reason;
    }
}

typedef enum { FORM_TEXT, FORM_CHAT, FORM_TOKENS } prompt_form;

static void submit(cellm_engine* engine, cellm_session* session, const char* prompt, prompt_form form) {
    if (form == FORM_TEXT) {
        OK(cellm_session_submit_text(session, prompt));
    } else if (form == FORM_CHAT) {
        const cellm_message message = {"user", prompt};
        OK(cellm_session_submit_chat(session, &message, 1));
    } else {
        token_list ids;
        tokenize(engine, prompt, 1, &ids);
        OK(cellm_session_submit_tokens(session, ids.ids, ids.n));
    }
}

/* One greedy turn on a new session: its tokens and finish reason. */
static void sdk_run(cellm_engine* engine, const char* prompt, prompt_form form, int32_t max_tokens, token_list* tokens,
                    cellm_finish_reason* reason) {
    const cellm_session_options options = greedy_options(engine, max_tokens);
    cellm_session* session = new_session(engine, &options);
    submit(engine, session, prompt, form);
    *reason = poll_until_done(session);
    session_tokens(session, tokens);
    cellm_session_destroy(session);
}

/* The SDK's greedy tokens and finish reason for `prompt` equal cellm-host's. */
static void compare_with_host(cellm_engine* engine, const char* manifest, const char* model, const char* prompt,
                              prompt_form form, int32_t max_tokens) {
    static const char* const form_names[] = {"submit_text", "submit_chat", "submit_tokens"};
    host_reply want;
    host_run(manifest, model, prompt, form == FORM_CHAT, max_tokens, &want, NULL);
    token_list got;
    cellm_finish_reason reason;
    sdk_run(engine, prompt, form, max_tokens, &got, &reason);
    char what[256];
    snprintf(what, sizeof what, "%s(\"%s\") against cellm-host run %s", form_names[form], prompt,
             form == FORM_CHAT ? "--chat" : "--raw");
    SAME_TOKENS(&got, &want.tokens, what);
    CHECK(strcmp(cellm_finish_reason_name(reason), want.finish_reason) == 0, "%s: finish reason %s, cellm-host %s",
          what, cellm_finish_reason_name(reason), want.finish_reason);
    printf("  %s: %zu tokens, %s\n", what, got.n, want.finish_reason);
}

/* ---- Event collection through a callback ------------------------------------------------------------- */

/* What a callback session received. The callback may also cancel its own session at a given TEXT event. */
typedef struct {
    pthread_mutex_t mutex;
    pthread_cond_t changed;
    pthread_t caller;
    char text[16384];
    size_t length;
    int text_events, done, after_done, bad_events, on_caller_thread;
    int started; /* the first TEXT event came */
    int32_t last_generated, done_generated;
    cellm_finish_reason done_reason;
    /* What cellm_session_get_stats said inside the DONE callback: the turn has ended by then. */
    cellm_result done_stats_result;
    int32_t done_stats_busy;
    cellm_finish_reason done_stats_reason;
    int cancel_at;                /* TEXT event number; 0: never */
    cellm_session* cancel_target; /* for a thread that cancels from outside */
    cellm_result cancel_result;
} collector;

static void collector_init(collector* c) {
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->mutex, NULL);
    pthread_cond_init(&c->changed, NULL);
    c->caller = pthread_self();
}

static void collector_free(collector* c) {
    pthread_mutex_destroy(&c->mutex);
    pthread_cond_destroy(&c->changed);
}

static void collect(cellm_session* session, const cellm_event* event, void* user_data) {
    collector* c = user_data;
    pthread_mutex_lock(&c->mutex);
    if (pthread_equal(pthread_self(), c->caller)) c->on_caller_thread = 1;
    if (c->done > 0) ++c->after_done;
    if (event->kind == CELLM_EVENT_TEXT) {
        if (event->text == NULL || event->text_len != strlen(event->text) ||
            event->generated_tokens < c->last_generated) {
            ++c->bad_events;
        } else if (c->length + event->text_len < sizeof c->text) {
            memcpy(c->text + c->length, event->text, event->text_len + 1);
            c->length += event->text_len;
        }
        c->last_generated = event->generated_tokens;
        ++c->text_events;
        c->started = 1;
        pthread_cond_broadcast(&c->changed);
        if (c->text_events == c->cancel_at) c->cancel_result = cellm_session_cancel(session);
    } else if (event->kind == CELLM_EVENT_DONE) {
        if (event->text == NULL || event->text_len != 0) ++c->bad_events;
        cellm_session_stats stats;
        memset(&stats, 0, sizeof stats);
        stats.struct_size = sizeof stats;
        c->done_stats_result = cellm_session_get_stats(session, &stats);
        c->done_stats_busy = stats.busy;
        c->done_stats_reason = stats.finish_reason;
        ++c->done;
        c->done_reason = event->finish_reason;
        c->done_generated = event->generated_tokens;
        pthread_cond_broadcast(&c->changed);
    } else {
        ++c->bad_events;
    }
    pthread_mutex_unlock(&c->mutex);
}

static cellm_session_options collecting_options(const cellm_engine* engine, int32_t max_tokens, collector* c) {
    cellm_session_options options = greedy_options(engine, max_tokens);
    options.on_event = collect;
    options.user_data = c;
    return options;
}

/* Waits (at most 60 s) until the callback has seen `field` become non-zero. */
static int wait_for(collector* c, const int* field) {
    struct timespec deadline;
    deadline_in(&deadline, 60);
    pthread_mutex_lock(&c->mutex);
    while (!*field && pthread_cond_timedwait(&c->changed, &c->mutex, &deadline) == 0) {
    }
    const int seen = *field;
    pthread_mutex_unlock(&c->mutex);
    return seen;
}

/* ---- Cases --------------------------------------------------------------------------------------------- */

static const char* const raw_prompts[] = {"the cat", "a dog ran", "the cat sat on the mat", "one two three four five"};
static const char* const chat_prompts[] = {"the cat", "hello there", "what is two plus two"};
/* The synthetic model answers this prompt with LONG_TURN tokens (no end-of-generation token before), about a
 * quarter of a second, so a turn of it is still going when another thread acts on it after its first token. */
static const char* const long_prompt = "it was the best of times";
enum { LONG_TURN = 240 };

/* The manifest's engine with room for a long turn: the synthetic model's whole context. */
static cellm_engine* open_long_engine(void) {
    cellm_engine_options options;
    cellm_engine_options_init(&options);
    options.manifest_path = cfg.manifest;
    options.context_length = 256;
    cellm_engine* engine = NULL;
    OK(cellm_engine_open(&options, &engine));
    return engine;
}

static void found_backend(const char* name, const char* description, void* user_data) {
    int* found = user_data;
    if (description == NULL) found[2] = 1;
    if (strcmp(name, "scalar") == 0) found[0] = 1;
    if (strcmp(name, "openblas") == 0) found[1] = 1;
}

static void case_basics(void) {
    int32_t major = -1, minor = -1;
    cellm_version(&major, &minor);
    CHECK(major == CELLM_SDK_VERSION_MAJOR && minor == CELLM_SDK_VERSION_MINOR, "cellm_version gave %d.%d", (int)major,
          (int)minor);

    static const char* const result_names[] = {"CELLM_SUCCESS",  "CELLM_E_INVALID_ARGUMENT", "CELLM_E_MANIFEST",
                                               "CELLM_E_LOAD",   "CELLM_E_PROMPT",           "CELLM_E_BUSY",
                                               "CELLM_E_CLOSED", "CELLM_E_TIMEOUT",          "CELLM_E_INTERNAL",
                                               "CELLM_E_TOO_LONG"};
    for (int r = 0; r <= CELLM_E_TOO_LONG; ++r) {
        CHECK(strcmp(cellm_result_name((cellm_result)r), result_names[r]) == 0, "cellm_result_name(%d) is %s", r,
              cellm_result_name((cellm_result)r));
    }
    CHECK(cellm_result_name((cellm_result)99) != NULL, "cellm_result_name(99) is NULL");
    static const char* const reason_names[] = {"", "eog", "stop", "length", "context", "cancelled", "error"};
    for (int r = 0; r <= CELLM_FINISH_ERROR; ++r) {
        CHECK(strcmp(cellm_finish_reason_name((cellm_finish_reason)r), reason_names[r]) == 0,
              "cellm_finish_reason_name(%d) is '%s'", r, cellm_finish_reason_name((cellm_finish_reason)r));
    }
    CHECK(cellm_finish_reason_name((cellm_finish_reason)99) != NULL, "cellm_finish_reason_name(99) is NULL");

    int found[3] = {0, 0, 0};
    OK(cellm_list_backends(NULL, found_backend, found));
    CHECK(found[0] && found[1] && !found[2], "cellm_list_backends: scalar %d, openblas %d, NULL description %d",
          found[0], found[1], found[2]);

    /* The options override the manifest (scalar, 128 tokens per session). */
    cellm_engine_options options;
    cellm_engine_options_init(&options);
    CHECK(options.struct_size == sizeof options && options.manifest_path == NULL && options.threads == 0,
          "cellm_engine_options_init does not zero and size the struct");
    {
        /* A program built against the 1.1 header: its struct ends at mmproj_path, and the library writes nothing
         * past it, through the sized init or through the function its binary calls. */
        const size_t v1_1 = offsetof(cellm_engine_options, precision);
        cellm_engine_options storage[2]; /* aligned room past the struct for the guard bytes */
        unsigned char* bytes = (unsigned char*)storage;
        cellm_engine_options* old = &storage[0];
        for (int pass = 0; pass < 2; ++pass) {
            memset(bytes, 0xA5, sizeof storage);
            if (pass == 0) cellm_engine_options_init_size(old, v1_1);
            else (cellm_engine_options_init)(old); /* the function, not the macro */
            size_t untouched = 0;
            for (size_t i = v1_1; i < sizeof storage; ++i) untouched += bytes[i] == 0xA5;
            CHECK(old->struct_size == v1_1 && old->threads == 0 && untouched == sizeof storage - v1_1,
                  "a 1.1-sized init (pass %d): struct_size %zu, %zu of %zu bytes past it untouched", pass,
                  old->struct_size, untouched, sizeof storage - v1_1);
        }
        /* Its open reads nothing past its struct: the byte pattern where precision would be is never followed. */
        old->manifest_path = cfg.manifest;
        cellm_engine* e = NULL;
        OK(cellm_engine_open(old, &e));
        cellm_engine_close(e);
    }
    options.manifest_path = cfg.manifest;
    options.backend = "openblas";
    options.threads = 1;
    options.context_length = 64;
    options.max_sessions = 3;
    options.precision = "fast";
    cellm_engine* engine = NULL;
    OK(cellm_engine_open(&options, &engine));
    const cellm_engine_info info = engine_info(engine);
    CHECK(strcmp(info.backend, "openblas") == 0, "backend %s", info.backend);
    CHECK(strcmp(info.arch, "llama") == 0, "arch %s", info.arch);
    CHECK(strcmp(info.chat_template, "chatml") == 0, "chat template %s", info.chat_template);
    CHECK(strstr(info.model_path, "tiny-q8_0.gguf") != NULL && info.model_name[0] != '\0', "model %s at %s",
          info.model_name, info.model_path);
    CHECK(info.context_length == 64 && info.max_sessions == 3, "context %d, sessions %d", (int)info.context_length,
          (int)info.max_sessions);
    CHECK(info.n_vocab > 0 && info.kv_block_size == 16 && info.kv_bytes_per_token > 0,
          "vocab %d, block size %d, %lld bytes per token", (int)info.n_vocab, (int)info.kv_block_size,
          (long long)info.kv_bytes_per_token);
    /* Without kv_memory_mib the pool holds max_sessions full contexts. */
    CHECK(info.kv_blocks * info.kv_block_size >= 3 * 64, "%d KV blocks of %d tokens for 3 contexts of 64",
          (int)info.kv_blocks, (int)info.kv_block_size);

    const cellm_engine_stats stats = engine_stats(engine);
    CHECK(stats.sessions == 0 && stats.running == 0 && stats.waiting == 0 && stats.steps == 0,
          "a new engine has %d sessions, %d running, %d waiting, %lld steps", (int)stats.sessions, (int)stats.running,
          (int)stats.waiting, (long long)stats.steps);
    CHECK(stats.kv_blocks == info.kv_blocks && stats.kv_blocks_used == 0 && stats.kv_blocks_free == info.kv_blocks,
          "a new engine's KV: %d blocks, %d used, %d free", (int)stats.kv_blocks, (int)stats.kv_blocks_used,
          (int)stats.kv_blocks_free);

    /* Session defaults are the manifest's [sampling] table. */
    cellm_session_options defaults;
    OK(cellm_session_options_init(engine, &defaults));
    CHECK(defaults.struct_size == sizeof defaults && defaults.temperature == 0.8f && defaults.max_tokens == 24 &&
              defaults.n_stop == 0 && defaults.on_event == NULL,
          "session defaults: temperature %g, max_tokens %d, %zu stop strings", (double)defaults.temperature,
          (int)defaults.max_tokens, defaults.n_stop);

    /* Tokenize's sizing protocol: capacity 0 asks for the count; a short buffer gets a prefix and the count. */
    const char* text = "the cat sat on the mat";
    size_t n = 99;
    OK(cellm_engine_tokenize(engine, text, 1, NULL, 0, &n));
    REQUIRE(n >= 2 && n <= MAX_IDS, "'%s' has %zu tokens", text, n);
    token_list all;
    tokenize(engine, text, 1, &all);
    CHECK(all.n == n, "%zu tokens with room, %zu when asked for the size", all.n, n);
    int32_t two[3] = {-7, -7, -7};
    size_t n_two = 0;
    OK(cellm_engine_tokenize(engine, text, 1, two, 2, &n_two));
    CHECK(n_two == n && two[0] == all.ids[0] && two[1] == all.ids[1] && two[2] == -7,
          "capacity 2: count %zu (expected %zu), wrote past the capacity: %s", n_two, n, two[2] == -7 ? "no" : "yes");
    token_list special;
    tokenize(engine, "<|im_end|>", 0, &special);
    CHECK(special.n == 1, "'<|im_end|>' is %zu tokens, expected the special token", special.n);

    cellm_engine_close(engine);
}

/* Runs on a thread of its own: a thread that never failed a call has an empty cellm_last_error(). */
static void* last_error_of_new_thread(void* out) {
    snprintf(out, 256, "%s", cellm_last_error());
    return NULL;
}

static void case_errors(void) {
    /* Opening. */
    cellm_engine_options options;
    cellm_engine_options_init(&options);
    options.manifest_path = cfg.manifest;
    cellm_engine* engine = (cellm_engine*)&options; /* must come back NULL on failure */
    EXPECT_RESULT(cellm_engine_open(NULL, &engine), CELLM_E_INVALID_ARGUMENT);
    CHECK(engine == NULL, "a failed cellm_engine_open left *engine non-NULL");
    EXPECT_RESULT(cellm_engine_open(&options, NULL), CELLM_E_INVALID_ARGUMENT);
    options.struct_size = 0;
    EXPECT_RESULT(cellm_engine_open(&options, &engine), CELLM_E_INVALID_ARGUMENT);
    cellm_engine_options_init(&options);
    EXPECT_RESULT(cellm_engine_open(&options, &engine), CELLM_E_INVALID_ARGUMENT); /* no manifest */
    options.manifest_path = cfg.manifest;
    options.manifest_text = tiny_manifest_text("");
    EXPECT_RESULT(cellm_engine_open(&options, &engine), CELLM_E_INVALID_ARGUMENT); /* both */

    static const struct {
        const char* text;
        cellm_result want;
        const char* needle;
    } bad_manifests[] = {
        {"[model\npath = \"x.gguf\"\n", CELLM_E_MANIFEST, NULL},
        {"[sampling]\ntemprature = 0\n", CELLM_E_MANIFEST, "temprature"},
        {"[sampling]\ntop_k = \"many\"\n", CELLM_E_MANIFEST, "top_k"},
        {"[model]\npath = \"/nonexistent/cellm-sdk-test/nope.gguf\"\n", CELLM_E_LOAD, "nope.gguf"},
    };
    for (size_t i = 0; i < sizeof bad_manifests / sizeof bad_manifests[0]; ++i) {
        cellm_engine_options_init(&options);
        /* The first three complete the synthetic model's manifest; the last stands alone. */
        options.manifest_text = i < 3 ? tiny_manifest_text(bad_manifests[i].text) : bad_manifests[i].text;
        engine = (cellm_engine*)&options;
        EXPECT_ERROR(cellm_engine_open(&options, &engine), bad_manifests[i].want, bad_manifests[i].needle);
        CHECK(engine == NULL, "a failed cellm_engine_open left *engine non-NULL");
    }
    cellm_engine_options_init(&options);
    options.manifest_path = "/nonexistent/cellm-sdk-test/absent.toml";
    EXPECT_ERROR(cellm_engine_open(&options, &engine), CELLM_E_MANIFEST, "absent.toml");
    options.manifest_path = cfg.manifest;
    options.backend = "warp";
    EXPECT_ERROR(cellm_engine_open(&options, &engine), CELLM_E_LOAD, "warp");
    options.backend = "openblas";
    options.precision = "fastest"; /* the backend checks it */
    EXPECT_ERROR(cellm_engine_open(&options, &engine), CELLM_E_LOAD, "precision");
    cellm_engine_close(NULL);

    /* Engine calls. */
    engine = open_long_engine();
    const cellm_engine_info info = engine_info(engine);
    cellm_engine_info bad_info;
    bad_info.struct_size = 0;
    EXPECT_RESULT(cellm_engine_get_info(engine, &bad_info), CELLM_E_INVALID_ARGUMENT);
    EXPECT_RESULT(cellm_engine_get_info(NULL, &bad_info), CELLM_E_INVALID_ARGUMENT);
    EXPECT_RESULT(cellm_engine_get_info(engine, NULL), CELLM_E_INVALID_ARGUMENT);
    cellm_engine_stats bad_stats;
    bad_stats.struct_size = 0;
    EXPECT_RESULT(cellm_engine_get_stats(engine, &bad_stats), CELLM_E_INVALID_ARGUMENT);
    EXPECT_RESULT(cellm_engine_get_stats(NULL, &bad_stats), CELLM_E_INVALID_ARGUMENT);
    EXPECT_RESULT(cellm_engine_get_stats(engine, NULL), CELLM_E_INVALID_ARGUMENT);
    size_t n = 0;
    int32_t ids[4] = {1, 2, 3, 4};
    EXPECT_RESULT(cellm_engine_tokenize(NULL, "x", 1, ids, 4, &n), CELLM_E_INVALID_ARGUMENT);
    EXPECT_RESULT(cellm_engine_tokenize(engine, NULL, 1, ids, 4, &n), CELLM_E_INVALID_ARGUMENT);
    EXPECT_RESULT(cellm_engine_tokenize(engine, "x", 1, NULL, 4, &n), CELLM_E_INVALID_ARGUMENT);
    EXPECT_RESULT(cellm_engine_tokenize(engine, "x", 1, ids, 4, NULL), CELLM_E_INVALID_ARGUMENT);
    EXPECT_RESULT(cellm_list_backends(NULL, NULL, NULL), CELLM_E_INVALID_ARGUMENT);

    /* Sessions. */
    cellm_session_options session_options;
    EXPECT_RESULT(cellm_session_options_init(NULL, &session_options), CELLM_E_INVALID_ARGUMENT);
    EXPECT_RESULT(cellm_session_options_init(engine, NULL), CELLM_E_INVALID_ARGUMENT);
    cellm_session* session = (cellm_session*)&options;
    EXPECT_RESULT(cellm_session_create(NULL, NULL, &session), CELLM_E_INVALID_ARGUMENT);
    CHECK(session == NULL, "a failed cellm_session_create left *session non-NULL");
    EXPECT_RESULT(cellm_session_create(engine, NULL, NULL), CELLM_E_INVALID_ARGUMENT);
    session_options = greedy_options(engine, 8);
    session_options.struct_size = 0;
    EXPECT_RESULT(cellm_session_create(engine, &session_options, &session), CELLM_E_INVALID_ARGUMENT);
    session_options = greedy_options(engine, 0);
    EXPECT_ERROR(cellm_session_create(engine, &session_options, &session), CELLM_E_INVALID_ARGUMENT, "max_tokens");
    session_options = greedy_options(engine, 8);
    session_options.temperature = -1.0f;
    EXPECT_ERROR(cellm_session_create(engine, &session_options, &session), CELLM_E_INVALID_ARGUMENT, "temperature");
    session_options = greedy_options(engine, 8);
    session_options.n_stop = 1;
    EXPECT_RESULT(cellm_session_create(engine, &session_options, &session), CELLM_E_INVALID_ARGUMENT);

    collector c;
    collector_init(&c);
    session_options = collecting_options(engine, LONG_TURN, &c);
    session = new_session(engine, &session_options);
    const cellm_message hello = {"user", "hello"};
    const cellm_message no_content = {"user", NULL};
    const cellm_message wizard = {"wizard", "hello"};
    EXPECT_RESULT(cellm_session_submit_text(NULL, "x"), CELLM_E_INVALID_ARGUMENT);
    EXPECT_RESULT(cellm_session_submit_text(session, NULL), CELLM_E_INVALID_ARGUMENT);
    EXPECT_RESULT(cellm_session_submit_chat(NULL, &hello, 1), CELLM_E_INVALID_ARGUMENT);
    EXPECT_RESULT(cellm_session_submit_chat(session, NULL, 1), CELLM_E_INVALID_ARGUMENT);
    EXPECT_RESULT(cellm_session_submit_chat(session, &no_content, 1), CELLM_E_INVALID_ARGUMENT);
    EXPECT_RESULT(cellm_session_submit_tokens(NULL, ids, 1), CELLM_E_INVALID_ARGUMENT);
    EXPECT_RESULT(cellm_session_submit_tokens(session, NULL, 3), CELLM_E_INVALID_ARGUMENT);

    /* Prompts that can never run. */
    EXPECT_RESULT(cellm_session_submit_text(session, ""), CELLM_E_PROMPT);
    EXPECT_RESULT(cellm_session_submit_tokens(session, ids, 0), CELLM_E_PROMPT);
    EXPECT_ERROR(cellm_session_submit_chat(session, &wizard, 1), CELLM_E_PROMPT, "wizard"); /* no template role */
    char long_text[2048] = "";
    for (int i = 0; i < 200; ++i) strcat(long_text, "the cat ");
    size_t n_long = 0;
    OK(cellm_engine_tokenize(engine, long_text, 1, NULL, 0, &n_long));
    REQUIRE(n_long > (size_t)info.context_length, "the long prompt has only %zu tokens", n_long);
    EXPECT_RESULT(cellm_session_submit_text(session, long_text), CELLM_E_TOO_LONG);
    const int32_t outside[2] = {info.n_vocab, -1};
    for (int i = 0; i < 2; ++i) EXPECT_RESULT(cellm_session_submit_tokens(session, &outside[i], 1), CELLM_E_PROMPT);
    CHECK(session_stats(session).busy == 0, "a rejected prompt left the session busy");

    /* Other session calls with NULL pointers. */
    cellm_event event;
    event.struct_size = sizeof event;
    cellm_session_stats stats;
    stats.struct_size = 0;
    const char* text = NULL;
    const int32_t* tokens = NULL;
    cellm_session* fork = NULL;
    EXPECT_RESULT(cellm_session_poll(NULL, 0, &event), CELLM_E_INVALID_ARGUMENT);
    EXPECT_RESULT(cellm_session_poll(session, 0, NULL), CELLM_E_INVALID_ARGUMENT);
    EXPECT_RESULT(cellm_session_wait(NULL, 0), CELLM_E_INVALID_ARGUMENT);
    EXPECT_RESULT(cellm_session_cancel(NULL), CELLM_E_INVALID_ARGUMENT);
    EXPECT_RESULT(cellm_session_get_stats(NULL, &stats), CELLM_E_INVALID_ARGUMENT);
    EXPECT_RESULT(cellm_session_get_stats(session, NULL), CELLM_E_INVALID_ARGUMENT);
    EXPECT_RESULT(cellm_session_get_stats(session, &stats), CELLM_E_INVALID_ARGUMENT); /* struct_size 0 */
    EXPECT_RESULT(cellm_session_get_text(NULL, &text, &n), CELLM_E_INVALID_ARGUMENT);
    EXPECT_RESULT(cellm_session_get_text(session, NULL, &n), CELLM_E_INVALID_ARGUMENT);
    EXPECT_RESULT(cellm_session_get_tokens(session, NULL, &n), CELLM_E_INVALID_ARGUMENT);
    EXPECT_RESULT(cellm_session_get_tokens(session, &tokens, NULL), CELLM_E_INVALID_ARGUMENT);
    EXPECT_RESULT(cellm_session_fork(NULL, &fork), CELLM_E_INVALID_ARGUMENT);
    EXPECT_RESULT(cellm_session_fork(session, NULL), CELLM_E_INVALID_ARGUMENT);
    EXPECT_RESULT(cellm_session_configure(NULL, &session_options), CELLM_E_INVALID_ARGUMENT);
    cellm_session_destroy(NULL);

    /* Busy: a long turn that has begun. */
    OK(cellm_session_submit_text(session, long_prompt));
    REQUIRE(wait_for(&c, &c.started), "no text within 60 s");
    EXPECT_RESULT(cellm_session_submit_text(session, "x"), CELLM_E_BUSY);
    EXPECT_RESULT(cellm_session_submit_chat(session, &hello, 1), CELLM_E_BUSY);
    EXPECT_RESULT(cellm_session_submit_tokens(session, ids, 2), CELLM_E_BUSY);
    EXPECT_RESULT(cellm_session_configure(session, &session_options), CELLM_E_BUSY);
    EXPECT_RESULT(cellm_session_fork(session, &fork), CELLM_E_BUSY);
    CHECK(fork == NULL, "a failed cellm_session_fork left *fork non-NULL");
    /* A timeout is no error, so no message is asked of it. */
    const cellm_result waited = cellm_session_wait(session, 0);
    CHECK(waited == CELLM_E_TIMEOUT, "cellm_session_wait(busy, 0) returned %s", cellm_result_name(waited));
    OK(cellm_session_cancel(session));
    REQUIRE(wait_for(&c, &c.done), "no DONE within 60 s of cancelling");
    cellm_session_destroy(session);
    collector_free(&c);
    cellm_engine_close(engine);

    /* The last error is per thread. */
    char other[256];
    pthread_t thread;
    REQUIRE(pthread_create(&thread, NULL, last_error_of_new_thread, other) == 0, "pthread_create failed");
    pthread_join(thread, NULL);
    CHECK(other[0] == '\0', "a new thread's cellm_last_error() is \"%s\"", other);
}

static void case_greedy_text(void) {
    cellm_engine* engine = open_engine(cfg.manifest, NULL);
    for (size_t i = 0; i < sizeof raw_prompts / sizeof raw_prompts[0]; ++i) {
        compare_with_host(engine, cfg.manifest, NULL, raw_prompts[i], FORM_TEXT, 24);
        compare_with_host(engine, cfg.manifest, NULL, raw_prompts[i], FORM_TOKENS, 24);
    }
    cellm_engine_close(engine);
}

static void case_greedy_chat(void) {
    cellm_engine* engine = open_engine(cfg.manifest, NULL);
    REQUIRE(engine_info(engine).model_has_chat_template, "the synthetic model has no chat template");
    for (size_t i = 0; i < sizeof chat_prompts / sizeof chat_prompts[0]; ++i) {
        compare_with_host(engine, cfg.manifest, NULL, chat_prompts[i], FORM_CHAT, 24);
    }
    cellm_engine_close(engine);
}

/* A model file without a manifest opens with the fastest CPU backend found, and generates what
 * `cellm-host run --model FILE` generates. */
static void case_model_only(void) {
    cellm_engine_options options;
    cellm_engine_options_init(&options);
    options.model_path = cfg.model;
    cellm_engine* engine = NULL;
    OK(cellm_engine_open(&options, &engine));
    const cellm_engine_info info = engine_info(engine);
    CHECK(strcmp(info.backend, "openblas") == 0, "a model alone opened with backend %s", info.backend);
    CHECK(strstr(info.model_path, "tiny-q8_0.gguf") != NULL, "model %s", info.model_path);
    compare_with_host(engine, NULL, cfg.model, "the cat sat", FORM_TEXT, 12);
    compare_with_host(engine, NULL, cfg.model, "hello there", FORM_CHAT, 12);
    cellm_engine_close(engine);

    cellm_engine_options_init(&options);
    options.model_path = "/nonexistent/cellm-sdk-test/alone.gguf";
    engine = (cellm_engine*)&options;
    EXPECT_ERROR(cellm_engine_open(&options, &engine), CELLM_E_LOAD, "alone.gguf");
    CHECK(engine == NULL, "a failed cellm_engine_open left *engine non-NULL");
}

/* SmolLM2-135M from scripts/fetch_models.sh's folder; the case is skipped without it. */
static const char* real_model_path(void) {
    static char model[4096];
    const char* models = getenv("CELLM_MODELS");
    const char* home = getenv("HOME");
    if (models != NULL) {
        snprintf(model, sizeof model, "%s/SmolLM2-135M-Instruct.Q4_1.gguf", models);
    } else {
        snprintf(model, sizeof model, "%s/.cache/cellm/models/SmolLM2-135M-Instruct.Q4_1.gguf", home ? home : "/root");
    }
    if (access(model, R_OK) != 0) {
        printf("SKIP: %s is missing (scripts/fetch_models.sh fetches it)\n", model);
        exit(EXIT_SKIP);
    }
    return model;
}

static cellm_engine* open_real_engine(void) {
    cellm_engine_options options;
    cellm_engine_options_init(&options);
    options.manifest_path = cfg.manifest;
    options.model_path = real_model_path();
    cellm_engine* engine = NULL;
    OK(cellm_engine_open(&options, &engine));
    CHECK(strcmp(engine_info(engine).backend, "openblas") == 0, "backend %s", engine_info(engine).backend);
    return engine;
}

static void case_real_model(void) {
    cellm_engine* engine = open_real_engine();
    const char* model = real_model_path();
    compare_with_host(engine, cfg.manifest, model, "What is the capital of France?", FORM_CHAT, 24);
    compare_with_host(engine, cfg.manifest, model, "The capital of France is", FORM_TEXT, 16);
    compare_with_host(engine, cfg.manifest, model, "The capital of France is", FORM_TOKENS, 16);
    cellm_engine_close(engine);
}

static void case_streaming(void) {
    cellm_engine* engine = open_engine(cfg.manifest, NULL);
    const cellm_message message = {"user", "hello there"};

    collector c;
    collector_init(&c);
    cellm_session_options options = collecting_options(engine, 48, &c);
    cellm_session* by_callback = new_session(engine, &options);
    options = greedy_options(engine, 48);
    cellm_session* by_polling = new_session(engine, &options);
    OK(cellm_session_submit_chat(by_callback, &message, 1));
    OK(cellm_session_submit_chat(by_polling, &message, 1));

    char polled[16384];
    size_t polled_length = 0;
    int text_events = 0, bad_events = 0;
    int32_t last_generated = 0;
    cellm_event event;
    for (;;) {
        event.struct_size = sizeof event;
        OK(cellm_session_poll(by_polling, 60000, &event));
        if (event.kind == CELLM_EVENT_DONE) break;
        if (event.kind != CELLM_EVENT_TEXT || event.text == NULL || event.text_len != strlen(event.text) ||
            event.generated_tokens < last_generated) {
            ++bad_events;
            continue;
        }
        REQUIRE(polled_length + event.text_len < sizeof polled, "more text than expected");
        memcpy(polled + polled_length, event.text, event.text_len + 1);
        polled_length += event.text_len;
        last_generated = event.generated_tokens;
        ++text_events;
    }
    CHECK(bad_events == 0, "%d polled events were malformed (unknown kind, NULL text, wrong text_len or fewer tokens)",
          bad_events);
    CHECK(event.text != NULL && event.text_len == 0, "the polled DONE event carries text");
    const cellm_finish_reason polled_reason = event.finish_reason;
    const int32_t polled_generated = event.generated_tokens;
    event.struct_size = sizeof event;
    const cellm_result after_done = cellm_session_poll(by_polling, 0, &event);
    CHECK(after_done == CELLM_E_TIMEOUT, "a poll after DONE returned %s, not CELLM_E_TIMEOUT",
          cellm_result_name(after_done));
    REQUIRE(wait_for(&c, &c.done), "the callback got no DONE within 60 s");

    size_t length = 0;
    char* text = session_text(by_polling, &length);
    CHECK(length == polled_length && memcmp(text, polled, length) == 0, "polled text differs from get_text:\n%s\n%s",
          polled, text);
    free(text);
    text = session_text(by_callback, &length);
    CHECK(length == c.length && memcmp(text, c.text, length) == 0, "callback text differs from get_text:\n%s\n%s",
          c.text, text);
    CHECK(c.length == polled_length && memcmp(c.text, polled, polled_length) == 0,
          "the callback and the polling session streamed different text");
    free(text);

    token_list polled_tokens, callback_tokens;
    session_tokens(by_polling, &polled_tokens);
    session_tokens(by_callback, &callback_tokens);
    SAME_TOKENS(&callback_tokens, &polled_tokens, "callback session against polling session");
    const cellm_session_stats polled_stats = session_stats(by_polling);
    const cellm_session_stats callback_stats = session_stats(by_callback);
    CHECK(polled_generated == polled_stats.generated_tokens && (size_t)polled_generated == polled_tokens.n,
          "polling: DONE says %d tokens, stats %d, get_tokens %zu", (int)polled_generated,
          (int)polled_stats.generated_tokens, polled_tokens.n);
    CHECK(c.done_generated == callback_stats.generated_tokens && (size_t)c.done_generated == callback_tokens.n,
          "callback: DONE says %d tokens, stats %d, get_tokens %zu", (int)c.done_generated,
          (int)callback_stats.generated_tokens, callback_tokens.n);
    CHECK(polled_reason == polled_stats.finish_reason && c.done_reason == callback_stats.finish_reason &&
              polled_reason == c.done_reason && polled_reason != CELLM_FINISH_NONE,
          "finish reasons: polled DONE %s, stats %s; callback DONE %s, stats %s",
          cellm_finish_reason_name(polled_reason), cellm_finish_reason_name(polled_stats.finish_reason),
          cellm_finish_reason_name(c.done_reason), cellm_finish_reason_name(callback_stats.finish_reason));
    CHECK(polled_stats.busy == 0 && polled_stats.prompt_tokens > 0 && polled_stats.ttft_ms > 0.0,
          "polling stats: busy %d, %d prompt tokens, ttft %.3f ms", (int)polled_stats.busy,
          (int)polled_stats.prompt_tokens, polled_stats.ttft_ms);
    CHECK(text_events > 0 && c.text_events > 0, "TEXT events: %d polled, %d by callback", text_events, c.text_events);
    OK(cellm_session_wait(by_callback, 0)); /* idle: returns at once */

    cellm_session_destroy(by_callback);
    cellm_session_destroy(by_polling);
    /* Destroyed: no callback can come any more, so what it saw is final. */
    CHECK(c.done == 1 && c.after_done == 0, "callback: %d DONE events, %d events after DONE", c.done, c.after_done);
    CHECK(c.bad_events == 0, "callback: %d malformed events", c.bad_events);
    CHECK(!c.on_caller_thread, "a callback ran on the thread that submitted, not the scheduler thread");
    /* Whoever the callback tells that the turn ended must be able to start the next one. */
    CHECK(c.done_stats_result == CELLM_SUCCESS && c.done_stats_busy == 0 && c.done_stats_reason == c.done_reason,
          "get_stats inside the DONE callback: %s, busy %d, finish reason '%s' (the event says '%s')",
          cellm_result_name(c.done_stats_result), (int)c.done_stats_busy, cellm_finish_reason_name(c.done_stats_reason),
          cellm_finish_reason_name(c.done_reason));
    collector_free(&c);
    cellm_engine_close(engine);
}

typedef struct {
    cellm_engine* engine;
    const char* prompt;
    pthread_barrier_t* start;
    cellm_session* session;
    token_list tokens;
} worker;

static void* run_worker(void* arg) {
    worker* w = arg;
    const cellm_session_options options = greedy_options(w->engine, 32);
    w->session = new_session(w->engine, &options);
    pthread_barrier_wait(w->start);
    OK(cellm_session_submit_text(w->session, w->prompt));
    poll_until_done(w->session);
    session_tokens(w->session, &w->tokens);
    return NULL;
}

static void case_concurrent(void) {
    enum { N = sizeof raw_prompts / sizeof raw_prompts[0] };
    host_reply alone[N];
    for (int i = 0; i < N; ++i) host_run(cfg.manifest, NULL, raw_prompts[i], 0, 32, &alone[i], NULL);

    cellm_engine* engine = open_engine(cfg.manifest, NULL);
    pthread_barrier_t start;
    pthread_barrier_init(&start, NULL, N);
    worker workers[N];
    pthread_t threads[N];
    for (int i = 0; i < N; ++i) {
        workers[i] = (worker){.engine = engine, .prompt = raw_prompts[i], .start = &start};
        REQUIRE(pthread_create(&threads[i], NULL, run_worker, &workers[i]) == 0, "pthread_create failed");
    }
    for (int i = 0; i < N; ++i) pthread_join(threads[i], NULL);
    pthread_barrier_destroy(&start);
    for (int i = 0; i < N; ++i) {
        char what[128];
        snprintf(what, sizeof what, "'%s' among %d sessions against cellm-host alone", raw_prompts[i], N);
        SAME_TOKENS(&workers[i].tokens, &alone[i].tokens, what);
    }

    /* Idle sessions keep their context for the next turn; destroying them returns every block. */
    cellm_engine_stats stats = engine_stats(engine);
    CHECK(stats.sessions == N && stats.kv_blocks_used > 0, "%d idle sessions hold %d KV blocks", (int)stats.sessions,
          (int)stats.kv_blocks_used);
    printf("  %d sessions: %lld steps, %lld batched tokens, %d KV blocks held while idle\n", N, (long long)stats.steps,
           (long long)stats.batched_tokens, (int)stats.kv_blocks_used);
    for (int i = 0; i < N; ++i) cellm_session_destroy(workers[i].session);
    stats = engine_stats(engine);
    CHECK(stats.sessions == 0 && stats.running == 0 && stats.waiting == 0,
          "after destroy: %d sessions, %d running, %d waiting", (int)stats.sessions, (int)stats.running,
          (int)stats.waiting);
    CHECK(stats.kv_blocks_used == 0 && stats.kv_blocks_free == stats.kv_blocks,
          "after destroy: %d of %d KV blocks used, %d free", (int)stats.kv_blocks_used, (int)stats.kv_blocks,
          (int)stats.kv_blocks_free);
    cellm_engine_close(engine);
}

static void* cancel_when_started(void* arg) {
    collector* c = arg;
    if (wait_for(c, &c->started)) {
        const cellm_result r = cellm_session_cancel(c->cancel_target);
        pthread_mutex_lock(&c->mutex);
        c->cancel_result = r;
        pthread_mutex_unlock(&c->mutex);
    }
    return NULL;
}

static void expect_cancelled(cellm_engine* engine, cellm_session* session, collector* c, const char* how) {
    REQUIRE(wait_for(c, &c->done), "%s: no DONE within 60 s", how);
    EXPECT_RESULT(c->cancel_result, CELLM_SUCCESS);
    CHECK(c->done_reason == CELLM_FINISH_CANCELLED && c->done_generated < LONG_TURN, "%s: DONE with %s after %d tokens",
          how, cellm_finish_reason_name(c->done_reason), (int)c->done_generated);
    const cellm_session_stats stats = session_stats(session);
    CHECK(stats.busy == 0 && stats.finish_reason == CELLM_FINISH_CANCELLED, "%s: stats say busy %d, %s", how,
          (int)stats.busy, cellm_finish_reason_name(stats.finish_reason));
    const cellm_engine_stats kv = engine_stats(engine);
    CHECK(kv.kv_blocks_used == 0, "%s: the cancelled turn left %d KV blocks in use", how, (int)kv.kv_blocks_used);
}

static void case_cancel(void) {
    host_reply reference;
    host_run(cfg.manifest, NULL, long_prompt, 0, 24, &reference, NULL);
    cellm_engine* engine = open_long_engine();

    /* From the session's own callback, at the second piece of text. */
    collector c;
    collector_init(&c);
    c.cancel_at = 2;
    cellm_session_options options = collecting_options(engine, LONG_TURN, &c);
    cellm_session* session = new_session(engine, &options);
    OK(cellm_session_submit_text(session, long_prompt));
    expect_cancelled(engine, session, &c, "cancel from the callback");

    /* The session still works, as if new: a whole turn gives the tokens it gives alone. */
    collector_free(&c);
    collector_init(&c);
    options = collecting_options(engine, 24, &c);
    OK(cellm_session_configure(session, &options));
    OK(cellm_session_submit_text(session, long_prompt));
    REQUIRE(wait_for(&c, &c.done), "no DONE within 60 s");
    token_list tokens;
    session_tokens(session, &tokens);
    SAME_TOKENS(&tokens, &reference.tokens, "the turn after a cancelled one");
    OK(cellm_session_cancel(session)); /* idle: nothing happens */
    CHECK(session_stats(session).finish_reason == c.done_reason,
          "cancelling an idle session changed its finish reason");
    cellm_session_destroy(session);
    collector_free(&c);

    /* From another thread, once the turn has begun. */
    collector_init(&c);
    options = collecting_options(engine, LONG_TURN, &c);
    session = new_session(engine, &options);
    c.cancel_target = session;
    OK(cellm_session_submit_text(session, long_prompt));
    pthread_t canceller;
    REQUIRE(pthread_create(&canceller, NULL, cancel_when_started, &c) == 0, "pthread_create failed");
    pthread_join(canceller, NULL);
    expect_cancelled(engine, session, &c, "cancel from another thread");
    cellm_session_destroy(session);
    collector_free(&c);
    cellm_engine_close(engine);
}

static void append_tokens(token_list* to, const token_list* from) {
    REQUIRE(to->n + from->n <= MAX_IDS, "%zu + %zu tokens", to->n, from->n);
    memcpy(to->ids + to->n, from->ids, from->n * sizeof from->ids[0]);
    to->n += from->n;
}

/* A turn of `prompt` on `session`: its generated tokens and statistics. */
static cellm_session_stats token_turn(cellm_session* session, const token_list* prompt, token_list* generated) {
    OK(cellm_session_submit_tokens(session, prompt->ids, prompt->n));
    poll_until_done(session);
    session_tokens(session, generated);
    return session_stats(session);
}

static void case_fork(void) {
    /* Without the prefix cache, cached tokens can only come from a session's own blocks (shared by a fork). */
    cellm_engine* engine = open_engine(NULL, tiny_manifest_text("prefix_cache = false\n"));
    const cellm_session_options options = greedy_options(engine, 24);

    /* A conversation: the fork of the first turn goes on with the reply and a new message. */
    cellm_session* first = new_session(engine, &options);
    cellm_message conversation[3] = {{"user", "the cat"}, {"assistant", NULL}, {"user", "and the dog?"}};
    OK(cellm_session_submit_chat(first, conversation, 1));
    poll_until_done(first);
    const cellm_session_stats first_stats = session_stats(first);
    size_t length = 0;
    char* reply = session_text(first, &length);
    conversation[1].content = reply;
    cellm_session* fork = NULL;
    OK(cellm_session_fork(first, &fork));
    REQUIRE(fork != NULL, "cellm_session_fork succeeded without a session");
    CHECK(session_stats(fork).busy == 0, "a new fork is busy");
    OK(cellm_session_submit_chat(fork, conversation, 3));
    poll_until_done(fork);
    const cellm_session_stats fork_stats = session_stats(fork);
    token_list fork_tokens, fresh_tokens;
    session_tokens(fork, &fork_tokens);
    cellm_session* fresh = new_session(engine, &options);
    OK(cellm_session_submit_chat(fresh, conversation, 3));
    poll_until_done(fresh);
    const cellm_session_stats fresh_stats = session_stats(fresh);
    session_tokens(fresh, &fresh_tokens);
    /* The reply is text again here and need not tokenize as generated, but the first turn's prompt is shared. */
    CHECK(fork_stats.cached_tokens >= first_stats.prompt_tokens,
          "the fork reused %d of %d prompt tokens; the first turn's prompt had %d", (int)fork_stats.cached_tokens,
          (int)fork_stats.prompt_tokens, (int)first_stats.prompt_tokens);
    CHECK(fresh_stats.cached_tokens == 0, "a fresh session without the prefix cache reused %d tokens",
          (int)fresh_stats.cached_tokens);
    CHECK(fork_stats.prompt_tokens == fresh_stats.prompt_tokens, "prompt tokens: fork %d, fresh %d",
          (int)fork_stats.prompt_tokens, (int)fresh_stats.prompt_tokens);
    SAME_TOKENS(&fork_tokens, &fresh_tokens, "chat on a fork against a fresh session");
    printf("  chat: the fork reused %d of %d prompt tokens\n", (int)fork_stats.cached_tokens,
           (int)fork_stats.prompt_tokens);
    cellm_session_destroy(fork);
    cellm_session_destroy(fresh);
    cellm_session_destroy(first);
    free(reply);

    /* In tokens the reuse is exact. The fork's turn goes another way and writes into the KV block it shares
     * with its source (the prompt fills only part of one); the source's next turn must find its own context
     * intact (copy-on-write) and compute only the new tokens and its last generated one, never fed back. */
    token_list prompt, more, generated, diverging, continuing, got, want;
    tokenize(engine, "the cat sat", 1, &prompt);
    tokenize(engine, " and then the dog ran", 0, &more);
    first = new_session(engine, &options);
    token_turn(first, &prompt, &generated);
    OK(cellm_session_fork(first, &fork));
    diverging = prompt;
    append_tokens(&diverging, &more);
    const cellm_session_stats diverged = token_turn(fork, &diverging, &got);
    fresh = new_session(engine, &options);
    token_turn(fresh, &diverging, &want);
    cellm_session_destroy(fresh);
    CHECK(diverged.cached_tokens >= (int32_t)prompt.n, "the fork reused %d tokens of a %zu-token prompt",
          (int)diverged.cached_tokens, prompt.n);
    SAME_TOKENS(&got, &want, "a fork's own turn against a fresh session");

    continuing = prompt;
    append_tokens(&continuing, &generated);
    append_tokens(&continuing, &more);
    const cellm_session_stats continued = token_turn(first, &continuing, &got);
    fresh = new_session(engine, &options);
    token_turn(fresh, &continuing, &want);
    cellm_session_destroy(fresh);
    CHECK(continued.cached_tokens >= (int32_t)(prompt.n + generated.n) - 1,
          "the source reused %d tokens of %zu prompt and %zu generated ones", (int)continued.cached_tokens, prompt.n,
          generated.n);
    SAME_TOKENS(&got, &want, "the source after its fork's turn against a fresh session");
    printf("  tokens: the source reused %d of %zu tokens after its fork's turn\n", (int)continued.cached_tokens,
           continuing.n);
    cellm_session_destroy(fork);
    cellm_session_destroy(first);

    CHECK(engine_stats(engine).kv_blocks_used == 0, "%d KV blocks in use after every session was destroyed",
          (int)engine_stats(engine).kv_blocks_used);
    cellm_engine_close(engine);
}

static void case_closed(void) {
    cellm_engine* engine = open_long_engine();
    cellm_session_options options = greedy_options(engine, 8);
    cellm_session* idle = new_session(engine, &options);
    OK(cellm_session_submit_text(idle, "the cat"));
    poll_until_done(idle);

    /* Two long turns, one by callback and one by polling, are running when the engine closes. */
    options = greedy_options(engine, LONG_TURN);
    cellm_session* polled = new_session(engine, &options);
    collector c;
    collector_init(&c);
    options = collecting_options(engine, LONG_TURN, &c);
    cellm_session* running = new_session(engine, &options);
    OK(cellm_session_submit_text(polled, long_prompt));
    OK(cellm_session_submit_text(running, long_prompt));
    REQUIRE(wait_for(&c, &c.started), "no text within 60 s");
    cellm_engine_close(engine);
    /* Close ended the running turns and delivered their DONE before returning; what the polling session had
     * queued by then can still be read, up to its DONE. */
    CHECK(c.done == 1 && c.done_reason == CELLM_FINISH_CANCELLED,
          "after close: %d DONE events, finish reason %s after %d tokens", c.done,
          cellm_finish_reason_name(c.done_reason), (int)c.done_generated);
    cellm_event event;
    do {
        event.struct_size = sizeof event;
        OK(cellm_session_poll(polled, 0, &event));
    } while (event.kind != CELLM_EVENT_DONE);
    CHECK(event.finish_reason == CELLM_FINISH_CANCELLED, "the polled DONE after close: %s after %d tokens",
          cellm_finish_reason_name(event.finish_reason), (int)event.generated_tokens);
    EXPECT_RESULT(cellm_session_poll(polled, 0, &event), CELLM_E_CLOSED);

    const cellm_message hello = {"user", "hello"};
    const int32_t ids[1] = {0};
    cellm_session_stats stats;
    stats.struct_size = sizeof stats;
    const char* text = NULL;
    const int32_t* tokens = NULL;
    size_t n = 0;
    cellm_session* fork = NULL;
    EXPECT_RESULT(cellm_session_submit_text(idle, "x"), CELLM_E_CLOSED);
    EXPECT_RESULT(cellm_session_submit_chat(idle, &hello, 1), CELLM_E_CLOSED);
    EXPECT_RESULT(cellm_session_submit_tokens(idle, ids, 1), CELLM_E_CLOSED);
    EXPECT_RESULT(cellm_session_configure(idle, &options), CELLM_E_CLOSED);
    EXPECT_RESULT(cellm_session_fork(idle, &fork), CELLM_E_CLOSED);
    CHECK(fork == NULL, "a failed cellm_session_fork left *fork non-NULL");
    EXPECT_RESULT(cellm_session_poll(idle, 0, &event), CELLM_E_CLOSED);
    EXPECT_RESULT(cellm_session_wait(idle, 0), CELLM_E_CLOSED);
    EXPECT_RESULT(cellm_session_get_stats(idle, &stats), CELLM_E_CLOSED);
    EXPECT_RESULT(cellm_session_get_text(idle, &text, &n), CELLM_E_CLOSED);
    EXPECT_RESULT(cellm_session_get_tokens(idle, &tokens, &n), CELLM_E_CLOSED);
    EXPECT_RESULT(cellm_session_submit_text(running, "x"), CELLM_E_CLOSED);
    EXPECT_RESULT(cellm_session_get_stats(running, &stats), CELLM_E_CLOSED);
    cellm_session_destroy(idle);
    cellm_session_destroy(polled);
    cellm_session_destroy(running);
    CHECK(c.done == 1 && c.after_done == 0, "after destroy: %d DONE events, %d events after DONE", c.done,
          c.after_done);
    collector_free(&c);
}

/* A whole file, malloc'd. */
static unsigned char* read_file(const char* path, size_t* size) {
    FILE* f = fopen(path, "rb");
    REQUIRE(f != NULL, "cannot open %s", path);
    unsigned char* data = malloc(1 << 20);
    REQUIRE(data != NULL, "out of memory");
    *size = fread(data, 1, 1 << 20, f);
    fclose(f);
    REQUIRE(*size > 0 && *size < (1 << 20), "%s: %zu bytes", path, *size);
    return data;
}

/* A prompt with an image (SmolVLM's tiny test folder as --model, a PNG as --image): the SDK's greedy tokens equal
 * cellm-host run --image's, a second turn with the same image answers the same, and bad images and markers are
 * refused with CELLM_E_PROMPT. */
static void case_images(void) {
    cellm_engine_options options;
    cellm_engine_options_init(&options);
    options.manifest_path = cfg.manifest;
    options.model_path = cfg.model;
    cellm_engine* engine = NULL;
    OK(cellm_engine_open(&options, &engine));
    REQUIRE(engine_info(engine).model_takes_images == 1, "the SmolVLM folder takes no images");

    size_t size = 0;
    unsigned char* png = read_file(cfg.image, &size);
    const cellm_image image = {png, size};
    const char* prompt = "<image>What is in this picture?";
    host_reply want;
    host_run(cfg.manifest, cfg.model, prompt, 0, 8, &want, cfg.image);
    const cellm_session_options greedy = greedy_options(engine, 8);
    for (int turn = 0; turn < 2; ++turn) {
        cellm_session* session = new_session(engine, &greedy);
        OK(cellm_session_submit_text_images(session, prompt, &image, 1));
        poll_until_done(session);
        token_list got;
        session_tokens(session, &got);
        SAME_TOKENS(&got, &want.tokens, "submit_text_images against cellm-host run --image");
        cellm_session_destroy(session);
    }

    cellm_session* session = new_session(engine, &greedy);
    const cellm_image garbage = {"not an image", 12};
    EXPECT_ERROR(cellm_session_submit_text_images(session, prompt, &garbage, 1), CELLM_E_PROMPT, "image 1");
    EXPECT_ERROR(cellm_session_submit_text_images(session, "<image><image>two?", &image, 1), CELLM_E_PROMPT,
                  "2 <image> markers for 1 images");
    EXPECT_ERROR(cellm_session_submit_text_images(session, prompt, NULL, 0), CELLM_E_PROMPT, "no images");
    const cellm_image empty = {NULL, 0};
    EXPECT_ERROR(cellm_session_submit_text_images(session, prompt, &empty, 1), CELLM_E_INVALID_ARGUMENT, "no data");
    /* The session still serves a good prompt after the refusals. */
    OK(cellm_session_submit_text_images(session, prompt, &image, 1));
    poll_until_done(session);
    cellm_session_destroy(session);
    free(png);
    cellm_engine_close(engine);
}

/* ---- 1.4: logit bias, log-probabilities, detokenize ---------------------------------------------------- */

typedef struct {
    token_list tokens;
    cellm_logprob rows[MAX_IDS * 21];
    size_t n_rows, row_size;
    cellm_finish_reason reason;
} scored_turn;

/* One greedy turn of `prompt` (raw text) with `options`; its tokens and log-probability rows. */
static void scored_run(cellm_engine* engine, const cellm_session_options* options, const char* prompt,
                       scored_turn* out) {
    cellm_session* session = new_session(engine, options);
    OK(cellm_session_submit_text(session, prompt));
    out->reason = poll_until_done(session);
    session_tokens(session, &out->tokens);
    const cellm_logprob* entries = NULL;
    OK(cellm_session_get_logprobs(session, &entries, &out->n_rows, &out->row_size));
    REQUIRE(out->n_rows * out->row_size <= sizeof out->rows / sizeof out->rows[0], "%zu rows of %zu", out->n_rows,
            out->row_size);
    if (out->n_rows > 0) memcpy(out->rows, entries, out->n_rows * out->row_size * sizeof entries[0]);
    cellm_session_destroy(session);
}

static void case_bias_logprobs(void) {
    cellm_engine* engine = open_engine(cfg.manifest, NULL);
    const int32_t n_vocab = engine_info(engine).n_vocab;
    CHECK(strcmp(cellm_result_name(CELLM_E_GRAMMAR), "CELLM_E_GRAMMAR") == 0, "CELLM_E_GRAMMAR is named %s",
          cellm_result_name(CELLM_E_GRAMMAR));

    {
        /* A program built against the 1.3 header: its struct ends at user_data, and neither the sized init nor the
         * function its binary calls writes past it. */
        const size_t v1_3 = offsetof(cellm_session_options, grammar);
        cellm_session_options storage[2];
        unsigned char* bytes = (unsigned char*)storage;
        for (int pass = 0; pass < 2; ++pass) {
            memset(bytes, 0xA5, sizeof storage);
            if (pass == 0) OK(cellm_session_options_init_size(engine, &storage[0], v1_3));
            else OK((cellm_session_options_init)(engine, &storage[0])); /* the function, not the macro */
            size_t untouched = 0;
            for (size_t i = v1_3; i < sizeof storage; ++i) untouched += bytes[i] == 0xA5;
            CHECK(storage[0].struct_size == v1_3 && storage[0].max_tokens == 24 && untouched == sizeof storage - v1_3,
                  "a 1.3-sized init (pass %d): struct_size %zu, %zu of %zu bytes past it untouched", pass,
                  storage[0].struct_size, untouched, sizeof storage - v1_3);
        }
        /* Its create reads nothing past its struct: the byte pattern in the 1.4 fields is never followed. */
        cellm_session* old = new_session(engine, &storage[0]);
        cellm_session_destroy(old);
    }

    cellm_session_options options = greedy_options(engine, 6);
    CHECK(options.grammar == NULL && options.json_schema == NULL && options.logit_bias == NULL &&
              options.n_logit_bias == 0 && options.logprobs == 0 && options.top_logprobs == 0,
          "cellm_session_options_init leaves a 1.4 field on");
    const char* prompt = "the cat sat on";

    /* Without logprobs there are no rows. */
    scored_turn* plain = calloc(1, sizeof *plain);
    scored_turn* turn = calloc(1, sizeof *turn);
    REQUIRE(plain != NULL && turn != NULL, "out of memory");
    scored_run(engine, &options, prompt, plain);
    CHECK(plain->n_rows == 0, "%zu rows without logprobs", plain->n_rows);
    REQUIRE(plain->tokens.n > 0, "the greedy turn generated nothing");

    /* With them: one row per generated token, the token first, then the 20 best, best first. Greedy's token is
     * the best one, so it is also the row's first alternative, with the same log-probability. */
    options.logprobs = 1;
    options.top_logprobs = 20;
    scored_run(engine, &options, prompt, turn);
    SAME_TOKENS(&turn->tokens, &plain->tokens, "logprobs on against off");
    REQUIRE(turn->n_rows == turn->tokens.n && turn->row_size == 21, "%zu rows of %zu for %zu tokens", turn->n_rows,
            turn->row_size, turn->tokens.n);
    for (size_t i = 0; i < turn->n_rows; ++i) {
        const cellm_logprob* row = &turn->rows[i * turn->row_size];
        CHECK(row[0].token == turn->tokens.ids[i], "row %zu is of token %d, generated %d", i, (int)row[0].token,
              (int)turn->tokens.ids[i]);
        CHECK(row[1].token == row[0].token && row[1].logprob == row[0].logprob,
              "row %zu: greedy's token %d (%g) is not the best alternative %d (%g)", i, (int)row[0].token,
              (double)row[0].logprob, (int)row[1].token, (double)row[1].logprob);
        double mass = 0;
        for (size_t j = 1; j < turn->row_size; ++j) {
            mass += exp((double)row[j].logprob);
            CHECK(row[j].logprob <= 0 && row[j].token >= 0 && row[j].token < n_vocab, "row %zu entry %zu: %d %g", i,
                  j, (int)row[j].token, (double)row[j].logprob);
            if (j > 1) {
                CHECK(row[j].logprob < row[j - 1].logprob ||
                          (row[j].logprob == row[j - 1].logprob && row[j].token > row[j - 1].token),
                      "row %zu is not best first at entry %zu", i, j);
            }
        }
        CHECK(mass <= 1.0 + 1e-5 && mass > 0, "row %zu: the 20 best hold %g of the mass", i, mass);
    }

    /* Bias: -100 bans greedy's first token, and the second best comes instead; +100 forces the third best at
     * every step. The log-probabilities stay those of the unbiased logits: the forced token's is what the
     * unbiased row said of it. */
    const cellm_logprob* first = turn->rows;
    cellm_logit_bias ban = {first[1].token, -100.0f};
    options.logit_bias = &ban;
    options.n_logit_bias = 1;
    scored_turn* banned = calloc(1, sizeof *banned);
    REQUIRE(banned != NULL, "out of memory");
    scored_run(engine, &options, prompt, banned);
    REQUIRE(banned->tokens.n > 0, "the banned turn generated nothing");
    CHECK(banned->tokens.ids[0] == first[2].token, "banning %d gave %d first, not the second best %d",
          (int)first[1].token, (int)banned->tokens.ids[0], (int)first[2].token);
    for (size_t i = 0; i < banned->tokens.n; ++i) {
        CHECK(banned->tokens.ids[i] != ban.token, "the banned token %d came at %zu", (int)ban.token, i);
    }
    cellm_logit_bias force = {first[3].token, 100.0f};
    options.logit_bias = &force;
    scored_run(engine, &options, prompt, banned);
    CHECK(banned->tokens.n == 6, "the forced turn has %zu tokens", banned->tokens.n);
    for (size_t i = 0; i < banned->tokens.n; ++i) {
        CHECK(banned->tokens.ids[i] == force.token, "token %zu is %d, forced %d", i, (int)banned->tokens.ids[i],
              (int)force.token);
    }
    CHECK(banned->n_rows > 0 && fabs((double)banned->rows[0].logprob - (double)first[3].logprob) < 1e-4,
          "the forced token's log-probability %g, unbiased %g", (double)banned->rows[0].logprob,
          (double)first[3].logprob);
    free(plain);
    free(turn);
    free(banned);

    /* Bad options: each an invalid argument that says why. */
    cellm_session* session = NULL;
    cellm_logit_bias bad = {n_vocab, 1.0f};
    options.logit_bias = &bad;
    EXPECT_ERROR(cellm_session_create(engine, &options, &session), CELLM_E_INVALID_ARGUMENT, "outside the vocabulary");
    bad.token = -1;
    EXPECT_ERROR(cellm_session_create(engine, &options, &session), CELLM_E_INVALID_ARGUMENT, "outside the vocabulary");
    bad.token = 0;
    bad.bias = (float)NAN;
    EXPECT_ERROR(cellm_session_create(engine, &options, &session), CELLM_E_INVALID_ARGUMENT, "finite");
    options.logit_bias = NULL;
    EXPECT_ERROR(cellm_session_create(engine, &options, &session), CELLM_E_INVALID_ARGUMENT, "logit_bias is NULL");
    options.n_logit_bias = 0;
    options.top_logprobs = 21;
    EXPECT_ERROR(cellm_session_create(engine, &options, &session), CELLM_E_INVALID_ARGUMENT, "top_logprobs");
    options.top_logprobs = 3;
    options.logprobs = 0;
    EXPECT_ERROR(cellm_session_create(engine, &options, &session), CELLM_E_INVALID_ARGUMENT, "needs logprobs");
    CHECK(session == NULL, "a refused create left a session");
    /* ... and through configure too. */
    options.top_logprobs = 0;
    session = new_session(engine, &options);
    options.top_logprobs = -1;
    EXPECT_ERROR(cellm_session_configure(session, &options), CELLM_E_INVALID_ARGUMENT, "top_logprobs");
    cellm_session_destroy(session);

    /* Detokenize: the inverse of tokenize without specials, with tokenize's sizing protocol. */
    const char* text = "the cat sat on the mat";
    token_list ids;
    tokenize(engine, text, 0, &ids);
    size_t length = 99;
    OK(cellm_engine_detokenize(engine, ids.ids, ids.n, NULL, 0, &length));
    CHECK(length == strlen(text), "detokenize's size %zu for '%s'", length, text);
    char back[64];
    memset(back, '#', sizeof back);
    OK(cellm_engine_detokenize(engine, ids.ids, ids.n, back, sizeof back, &length));
    CHECK(length == strlen(text) && memcmp(back, text, length) == 0 && back[length] == '#',
          "detokenize gave '%.*s' (%zu bytes) for '%s'", (int)length, back, length, text);
    memset(back, '#', sizeof back);
    OK(cellm_engine_detokenize(engine, ids.ids, ids.n, back, 5, &length));
    CHECK(length == strlen(text) && memcmp(back, text, 5) == 0 && back[5] == '#',
          "a 5-byte buffer got '%.*s' and size %zu", 5, back, length);
    OK(cellm_engine_detokenize(engine, NULL, 0, NULL, 0, &length));
    CHECK(length == 0, "no tokens are %zu bytes", length);
    const int32_t outside[2] = {0, n_vocab};
    EXPECT_ERROR(cellm_engine_detokenize(engine, outside, 2, back, sizeof back, &length), CELLM_E_PROMPT,
                 "outside the vocabulary");
    EXPECT_RESULT(cellm_engine_detokenize(engine, ids.ids, ids.n, back, sizeof back, NULL), CELLM_E_INVALID_ARGUMENT);
    EXPECT_RESULT(cellm_engine_detokenize(NULL, ids.ids, ids.n, back, sizeof back, &length),
                  CELLM_E_INVALID_ARGUMENT);
    cellm_engine_close(engine);
}

/* ---- Tools ----------------------------------------------------------------------------------------------- */

static const char* const weather_tools =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"The weather in a city\","
    " \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\", \"maxLength\": 8}},"
    " \"required\": [\"city\"], \"additionalProperties\": false}}}]";

/* Two turns of a tool conversation on SmolLM2-135M: a required call, streamed as TOOL_CALL events that
 * reassemble to cellm_session_get_tool_calls' call; then the call and its result in the history and an answer
 * without tools. SmolLM2's template knows no tools: cellm's prompt for the family offers them. */
static void case_tools(void) {
    cellm_engine* engine = open_real_engine();
    cellm_session_options options = greedy_options(engine, 48);
    CHECK(options.parallel_tool_calls == 1, "parallel_tool_calls defaults to %d", options.parallel_tool_calls);
    options.tools = weather_tools;
    options.tool_choice = "required";
    options.parallel_tool_calls = 0;
    cellm_session* session = new_session(engine, &options);
    OK(cellm_session_submit_chat_json(session, "[{\"role\": \"user\", \"content\": \"weather in Oslo?\"}]"));

    char name[64] = "", id[64] = "", arguments[512] = "";
    int calls = 0, announced = 0;
    cellm_finish_reason reason = CELLM_FINISH_NONE;
    for (;;) {
        cellm_event event;
        event.struct_size = sizeof event;
        OK(cellm_session_poll(session, 60000, &event));
        if (event.kind == CELLM_EVENT_DONE) {
            reason = event.finish_reason;
            break;
        }
        if (event.kind != CELLM_EVENT_TOOL_CALL) continue;
        REQUIRE(event.tool_call_index == 0 && event.tool_name != NULL && event.tool_call_id != NULL,
                "a tool call event of call %d", event.tool_call_index);
        if (event.text_len == 0) {
            ++announced;
            snprintf(name, sizeof name, "%s", event.tool_name);
            snprintf(id, sizeof id, "%s", event.tool_call_id);
        } else {
            const size_t used = strlen(arguments);
            REQUIRE(announced == 1 && used + event.text_len < sizeof arguments, "arguments before the name");
            memcpy(arguments + used, event.text, event.text_len);
            arguments[used + event.text_len] = '\0';
        }
        ++calls;
    }
    CHECK(reason == CELLM_FINISH_TOOL_CALLS, "finish reason %s", cellm_finish_reason_name(reason));
    CHECK(strcmp(cellm_finish_reason_name(reason), "tool_calls") == 0, "named %s", cellm_finish_reason_name(reason));
    CHECK(announced == 1 && strcmp(name, "get_weather") == 0, "%d calls announced, name '%s'", announced, name);
    CHECK(strncmp(arguments, "{", 1) == 0 && strstr(arguments, "\"city\"") != NULL, "arguments %s", arguments);
    const char* json = NULL;
    size_t length = 0;
    OK(cellm_session_get_tool_calls(session, &json, &length));
    char expected[1024];
    snprintf(expected, sizeof expected, "\"id\":\"%s\"", id);
    CHECK(strstr(json, expected) != NULL && strstr(json, "\"name\":\"get_weather\"") != NULL, "calls %s", json);
    CHECK(strlen(json) == length, "length %zu of %s", length, json);
    CHECK(session_stats(session).finish_reason == CELLM_FINISH_TOOL_CALLS, "stats finish reason");
    size_t text_length = 0;
    free(session_text(session, &text_length));
    CHECK(text_length == 0, "a required call leaves no text, got %zu bytes", text_length);

    /* Turn 2: the call and its result in the history; tool_choice none answers in text. */
    char history[2048];
    char quoted[1024];
    size_t q = 0;
    for (const char* c = arguments; *c != '\0' && q + 3 < sizeof quoted; ++c) {
        if (*c == '"' || *c == '\\') quoted[q++] = '\\';
        quoted[q++] = *c;
    }
    quoted[q] = '\0';
    snprintf(history, sizeof history,
             "[{\"role\": \"user\", \"content\": \"weather in Oslo?\"},"
             " {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"%s\", \"type\": \"function\","
             " \"function\": {\"name\": \"get_weather\", \"arguments\": \"%s\"}}]},"
             " {\"role\": \"tool\", \"tool_call_id\": \"%s\", \"content\": \"{\\\"celsius\\\": 4}\"}]",
             id, quoted, id);
    options.tool_choice = "none";
    options.max_tokens = 8;
    OK(cellm_session_configure(session, &options));
    OK(cellm_session_submit_chat_json(session, history));
    reason = poll_until_done(session);
    CHECK(reason == CELLM_FINISH_EOG || reason == CELLM_FINISH_LENGTH, "turn 2 ended %s", cellm_finish_reason_name(reason));
    OK(cellm_session_get_tool_calls(session, &json, &length));
    CHECK(strcmp(json, "[]") == 0, "no calls in turn 2: %s", json);
    const cellm_session_stats second = session_stats(session);
    CHECK(second.cached_tokens > 0, "turn 2 reuses turn 1's prompt: %d cached", second.cached_tokens);

    /* Bad input: each one error naming its field. */
    EXPECT_ERROR(cellm_session_submit_chat_json(session, "[{\"role\": \"tool\", \"tool_call_id\": \"x\", \"content\": \"1\"}]"),
                 CELLM_E_INVALID_ARGUMENT, "messages[0].tool_call_id");
    EXPECT_ERROR(cellm_session_submit_chat_json(session, "{\"role\": \"user\"}"), CELLM_E_INVALID_ARGUMENT, "messages");
    EXPECT_ERROR(cellm_session_submit_chat_json(session, "[{\"role\": \"robot\", \"content\": \"1\"}]"),
                 CELLM_E_INVALID_ARGUMENT, "messages[0].role");
    EXPECT_ERROR(cellm_session_submit_chat_json(
                     session, "[{\"role\": \"user\", \"content\": [{\"type\": \"image_url\", \"image_url\": {}}]}]"),
                 CELLM_E_INVALID_ARGUMENT, "messages[0].content[0]");
    /* OpenAI's developer role and text parts, as the server takes them. */
    OK(cellm_session_submit_chat_json(session, "[{\"role\": \"developer\", \"content\": \"Be brief.\"}, {\"role\": "
                                               "\"user\", \"content\": [{\"type\": \"text\", \"text\": \"hi\"}]}]"));
    reason = poll_until_done(session);
    CHECK(reason == CELLM_FINISH_EOG || reason == CELLM_FINISH_LENGTH, "parts ended %s", cellm_finish_reason_name(reason));
    cellm_session_destroy(session);
    options.tool_choice = "launch_rocket";
    cellm_session* refused = NULL;
    EXPECT_ERROR(cellm_session_create(engine, &options, &refused), CELLM_E_INVALID_ARGUMENT, "tool_choice");
    options.tool_choice = NULL;
    options.tools = "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": 3}}]";
    EXPECT_ERROR(cellm_session_create(engine, &options, &refused), CELLM_E_INVALID_ARGUMENT,
                 "tools[0].function.parameters");
    options.tools = "[{";
    EXPECT_ERROR(cellm_session_create(engine, &options, &refused), CELLM_E_INVALID_ARGUMENT, "tools");
    options.tools = weather_tools;
    options.json_schema = "{\"type\": \"object\"}";
    EXPECT_ERROR(cellm_session_create(engine, &options, &refused), CELLM_E_INVALID_ARGUMENT, "json_schema");
    CHECK(refused == NULL, "a refused create leaves no session");
    cellm_engine_close(engine);
}

/* ---- Evaluate: every position's logits (1.6) ------------------------------------------------------------- */

typedef struct {
    cellm_engine* engine;
    int32_t expected_position, calls;
    const int32_t* next;    /* the token after each position, or NULL */
    int32_t argmax[MAX_IDS];
    double log_p_next[MAX_IDS];
    int64_t steps_seen;     /* from cellm_engine_get_stats inside the callback: the engine is not locked */
} evaluation;

static void on_logits(int32_t position, const float* logits, int32_t n_vocab, void* user_data) {
    evaluation* e = user_data;
    CHECK(position == e->expected_position, "logits of position %d, expected %d", (int)position,
          (int)e->expected_position);
    e->expected_position = position + 1;
    ++e->calls;
    if (position < 0 || position >= MAX_IDS) return;
    int32_t best = 0;
    float max = logits[0];
    for (int32_t i = 1; i < n_vocab; ++i) {
        if (logits[i] > max) {
            max = logits[i];
            best = i;
        }
    }
    double sum = 0;
    for (int32_t i = 0; i < n_vocab; ++i) sum += exp((double)logits[i] - max);
    e->argmax[position] = best;
    if (e->next != NULL) e->log_p_next[position] = (double)logits[e->next[position]] - max - log(sum);
    e->steps_seen = engine_stats(e->engine).steps;
}

static void case_evaluate(void) {
    cellm_engine* engine = open_engine(NULL, tiny_manifest_text(""));
    const cellm_engine_info info = engine_info(engine);
    const char* prompt = "the cat sat on";

    /* A greedy turn with log-probabilities: what the evaluated logits must say position by position. */
    cellm_session_options options = greedy_options(engine, 8);
    options.logprobs = 1;
    scored_turn* turn = calloc(1, sizeof *turn);
    REQUIRE(turn != NULL, "out of memory");
    scored_run(engine, &options, prompt, turn);
    REQUIRE(turn->tokens.n >= 2 && turn->n_rows == turn->tokens.n, "%zu tokens, %zu rows", turn->tokens.n,
            turn->n_rows);

    /* The prompt and all but the last generated token: the positions from the prompt's last one on predict the
     * generated tokens. */
    token_list sequence;
    tokenize(engine, prompt, 1, &sequence);
    const size_t prompt_n = sequence.n;
    for (size_t i = 0; i + 1 < turn->tokens.n; ++i) sequence.ids[sequence.n++] = turn->tokens.ids[i];
    int32_t next[MAX_IDS];
    for (size_t i = 0; i + 1 < sequence.n; ++i) next[i] = sequence.ids[i + 1];
    next[sequence.n - 1] = turn->tokens.ids[turn->tokens.n - 1];

    evaluation e = {engine, (int32_t)prompt_n - 1, 0, next, {0}, {0}, -1};
    OK(cellm_engine_evaluate(engine, sequence.ids, sequence.n, (int32_t)prompt_n - 1, on_logits, &e));
    CHECK(e.calls == (int32_t)turn->tokens.n, "%d calls for %zu generated tokens", (int)e.calls, turn->tokens.n);
    CHECK(e.steps_seen >= 0, "the callback could not read the engine's stats");
    for (size_t k = 0; k < turn->tokens.n; ++k) {
        const size_t p = prompt_n - 1 + k;
        CHECK(e.argmax[p] == turn->tokens.ids[k], "position %zu: argmax %d, greedy generated %d", p, (int)e.argmax[p],
              (int)turn->tokens.ids[k]);
        CHECK(fabs(e.log_p_next[p] - (double)turn->rows[k].logprob) < 1e-4,
              "position %zu: log-probability %g, the session's %g", p, e.log_p_next[p], (double)turn->rows[k].logprob);
    }

    /* From position 0, while another session generates: both calls see the same logits, and the session's tokens
     * are those it generates alone. */
    cellm_session* session = new_session(engine, &options);
    OK(cellm_session_submit_text(session, prompt));
    evaluation all = {engine, 0, 0, NULL, {0}, {0}, -1};
    OK(cellm_engine_evaluate(engine, sequence.ids, sequence.n, 0, on_logits, &all));
    CHECK(poll_until_done(session) == CELLM_FINISH_LENGTH, "the session beside the evaluation did not finish");
    token_list beside;
    session_tokens(session, &beside);
    SAME_TOKENS(&beside, &turn->tokens, "a session generating while cellm_engine_evaluate runs");
    CHECK(all.calls == (int32_t)sequence.n, "%d calls for %zu tokens", (int)all.calls, sequence.n);
    for (size_t p = prompt_n - 1; p < sequence.n; ++p) {
        CHECK(all.argmax[p] == e.argmax[p], "position %zu: argmax %d from 0, %d from the prompt's end", p,
              (int)all.argmax[p], (int)e.argmax[p]);
    }
    cellm_session_destroy(session);
    CHECK(engine_stats(engine).kv_blocks_used == 0, "%d KV blocks used after the evaluations",
          (int)engine_stats(engine).kv_blocks_used);

    /* Refusals, each with its message. */
    const int32_t out_of_vocab[2] = {0, info.n_vocab};
    int32_t too_long[129] = {0};
    EXPECT_ERROR(cellm_engine_evaluate(NULL, sequence.ids, sequence.n, 0, on_logits, &e), CELLM_E_INVALID_ARGUMENT,
                 "engine");
    EXPECT_ERROR(cellm_engine_evaluate(engine, sequence.ids, sequence.n, 0, NULL, &e), CELLM_E_INVALID_ARGUMENT, "fn");
    EXPECT_ERROR(cellm_engine_evaluate(engine, sequence.ids, 0, 0, on_logits, &e), CELLM_E_PROMPT, "no tokens");
    EXPECT_ERROR(cellm_engine_evaluate(engine, out_of_vocab, 2, 0, on_logits, &e), CELLM_E_PROMPT, "vocabulary");
    EXPECT_ERROR(cellm_engine_evaluate(engine, too_long, 129, 0, on_logits, &e), CELLM_E_TOO_LONG, "context length");
    EXPECT_ERROR(cellm_engine_evaluate(engine, sequence.ids, sequence.n, (int32_t)sequence.n, on_logits, &e),
                 CELLM_E_INVALID_ARGUMENT, "first_position");
    EXPECT_ERROR(cellm_engine_evaluate(engine, sequence.ids, sequence.n, -1, on_logits, &e), CELLM_E_INVALID_ARGUMENT,
                 "first_position");
    /* The whole context is fine. */
    all.expected_position = 127;
    all.calls = 0;
    OK(cellm_engine_evaluate(engine, too_long, 128, 127, on_logits, &all));
    CHECK(all.calls == 1, "%d calls for the last position of a full context", (int)all.calls);
    free(turn);
    cellm_engine_close(engine);
}

/* ---- Driver ---------------------------------------------------------------------------------------------- */

static const struct {
    const char* name;
    void (*run)(void);
    int needs_model;
} cases[] = {
    {"basics", case_basics, 1},           {"errors", case_errors, 1},       {"greedy_text", case_greedy_text, 1},
    {"greedy_chat", case_greedy_chat, 1}, {"streaming", case_streaming, 1}, {"concurrent", case_concurrent, 1},
    {"cancel", case_cancel, 1},           {"fork", case_fork, 1},           {"closed", case_closed, 1},
    {"real_model", case_real_model, 0},   {"images", case_images, 1},       {"model_only", case_model_only, 1},
    {"bias_logprobs", case_bias_logprobs, 1}, {"tools", case_tools, 0},    {"evaluate", case_evaluate, 1},
};

int main(int argc, char** argv) {
    for (int i = 2; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--host") == 0) cfg.host = argv[i + 1];
        if (strcmp(argv[i], "--manifest") == 0) cfg.manifest = argv[i + 1];
        if (strcmp(argv[i], "--model") == 0) cfg.model = argv[i + 1];
        if (strcmp(argv[i], "--image") == 0) cfg.image = argv[i + 1];
    }
    for (size_t i = 0; argc >= 2 && i < sizeof cases / sizeof cases[0]; ++i) {
        if (strcmp(argv[1], cases[i].name) != 0) continue;
        if (cfg.host == NULL || cfg.manifest == NULL || (cases[i].needs_model && cfg.model == NULL)) break;
        cases[i].run();
        printf("%s %s\n", failures == 0 ? "PASS" : "FAIL", cases[i].name);
        return failures == 0 ? 0 : 1;
    }
    fprintf(stderr, "usage: %s CASE --host CELLM_HOST --manifest MANIFEST [--model MODEL]\ncases:", argv[0]);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) fprintf(stderr, " %s", cases[i].name);
    fprintf(stderr, "\n");
    return 2;
}
