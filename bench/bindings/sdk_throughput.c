/* The C side of the binding-overhead benchmark (docs/benchmarks.md, "Bindings"): SESSIONS greedy sessions on one
 * engine, each driven by a thread of its own that submits a prompt and polls its events until DONE, as the Java
 * and Python bindings drive theirs. Prints one JSON line per repetition: generated tokens over the wall time from
 * the first submit to the last DONE. The Java and Python programs of the same name do the same work.
 *
 *   sdk_throughput MODEL SESSIONS TOKENS REPETITIONS [SCHEMA CONSTRAINED]
 *
 * With SCHEMA (a JSON Schema file), the first CONSTRAINED sessions generate under it (docs/benchmarks.md,
 * "Grammar token masks": constrained and free sessions served together); the line then says how many.
 */
#include <cellm/cellm.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef struct {
    cellm_session* session;
    char prompt[96];
    int32_t generated;
    int failed;
} worker;

static void* run_turn(void* arg) {
    worker* w = arg;
    if (cellm_session_submit_text(w->session, w->prompt) != CELLM_SUCCESS) {
        fprintf(stderr, "sdk_throughput: submit failed: %s\n", cellm_last_error());
        w->failed = 1;
        return NULL;
    }
    cellm_event event;
    do {
        event.struct_size = sizeof event;
        if (cellm_session_poll(w->session, -1, &event) != CELLM_SUCCESS) {
            w->failed = 1;
            return NULL;
        }
    } while (event.kind != CELLM_EVENT_DONE);
    w->generated = event.generated_tokens;
    return NULL;
}

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
    if (argc != 5 && argc != 7) {
        fprintf(stderr, "usage: %s MODEL SESSIONS TOKENS REPETITIONS [SCHEMA CONSTRAINED]\n", argv[0]);
        return 2;
    }
    const int sessions = atoi(argv[2]), tokens = atoi(argv[3]), repetitions = atoi(argv[4]);
    const int constrained = argc == 7 ? atoi(argv[6]) : 0;
    char* schema = NULL;
    if (argc == 7) {
        FILE* f = fopen(argv[5], "rb");
        if (f == NULL) {
            fprintf(stderr, "sdk_throughput: cannot read %s\n", argv[5]);
            return 2;
        }
        schema = calloc(1 << 20, 1);
        const size_t n = fread(schema, 1, (1 << 20) - 1, f);
        fclose(f);
        if (n == 0) {
            fprintf(stderr, "sdk_throughput: %s is empty\n", argv[5]);
            return 2;
        }
    }
    if (sessions < 1 || tokens < 1 || repetitions < 1) {
        fprintf(stderr, "sdk_throughput: SESSIONS, TOKENS and REPETITIONS must be positive\n");
        return 2;
    }
    cellm_engine_options options;
    cellm_engine_options_init(&options);
    options.model_path = argv[1];
    options.max_sessions = sessions;
    cellm_engine* engine = NULL;
    if (cellm_engine_open(&options, &engine) != CELLM_SUCCESS) {
        fprintf(stderr, "sdk_throughput: %s\n", cellm_last_error());
        return 1;
    }
    worker* workers = calloc((size_t)sessions, sizeof *workers);
    pthread_t* threads = calloc((size_t)sessions, sizeof *threads);
    int status = 0;
    /* Repetition 0 warms up (page faults, thread pools) and is not printed. */
    for (int rep = 0; rep <= repetitions && status == 0; ++rep) {
        for (int i = 0; i < sessions; ++i) {
            cellm_session_options o;
            cellm_session_options_init(engine, &o);
            o.temperature = 0;
            o.max_tokens = tokens;
            if (i < constrained) o.json_schema = schema;
            workers[i] = (worker){0};
            snprintf(workers[i].prompt, sizeof workers[i].prompt, "Once upon a time, in village number %d, there lived", i);
            if (cellm_session_create(engine, &o, &workers[i].session) != CELLM_SUCCESS) {
                fprintf(stderr, "sdk_throughput: %s\n", cellm_last_error());
                return 1;
            }
        }
        const double start = now_s();
        for (int i = 0; i < sessions; ++i) pthread_create(&threads[i], NULL, run_turn, &workers[i]);
        long generated = 0;
        for (int i = 0; i < sessions; ++i) {
            pthread_join(threads[i], NULL);
            generated += workers[i].generated;
            status |= workers[i].failed;
        }
        const double seconds = now_s() - start;
        for (int i = 0; i < sessions; ++i) cellm_session_destroy(workers[i].session);
        if (rep > 0) {
            printf("{\"binding\": \"c\", \"sessions\": %d, \"constrained\": %d, \"generated_tokens\": %ld, "
                   "\"seconds\": %.4f, \"tok_s\": %.2f}\n",
                   sessions, constrained, generated, seconds, (double)generated / seconds);
        }
    }
    free(workers);
    free(threads);
    free(schema);
    cellm_engine_close(engine);
    return status;
}
