/* A small chat client on libcellm: opens the engine a manifest describes, then sends each MESSAGE as the next
 * user turn of one conversation and streams the replies.
 *
 *   example MANIFEST MESSAGE [MESSAGE...]
 */
#include <cellm/cellm.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failed(const char* call) {
    fprintf(stderr, "example: %s failed: %s\n", call, cellm_last_error());
    return 1;
}

int main(int argc, char** argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s MANIFEST MESSAGE [MESSAGE...]\n", argv[0]);
        return 2;
    }

    cellm_engine_options options;
    cellm_engine_options_init(&options);
    options.manifest_path = argv[1];
    cellm_engine* engine = NULL;
    if (cellm_engine_open(&options, &engine) != CELLM_SUCCESS) return failed("cellm_engine_open");

    cellm_engine_info info;
    info.struct_size = sizeof info;
    cellm_engine_get_info(engine, &info);
    printf("%s (%s) on %s, chat template %s\n", info.model_name, info.arch, info.backend, info.chat_template);

    cellm_session* session = NULL;
    if (cellm_session_create(engine, NULL, &session) != CELLM_SUCCESS) {
        failed("cellm_session_create");
        cellm_engine_close(engine);
        return 1;
    }

    /* The whole conversation goes in with every turn; what the session already computed is reused. */
    const int turns = argc - 2;
    cellm_message* conversation = malloc(sizeof *conversation * (size_t)(2 * turns));
    char** replies = calloc((size_t)turns, sizeof *replies);
    size_t n_messages = 0;
    int status = 0;
    for (int turn = 0; turn < turns && status == 0; ++turn) {
        conversation[n_messages].role = "user";
        conversation[n_messages].content = argv[turn + 2];
        ++n_messages;
        printf("> %s\n", argv[turn + 2]);
        if (cellm_session_submit_chat(session, conversation, n_messages) != CELLM_SUCCESS) {
            status = failed("cellm_session_submit_chat");
            break;
        }

        /* Text arrives as events until DONE, the last event of every turn. */
        cellm_event event;
        do {
            event.struct_size = sizeof event;
            if (cellm_session_poll(session, -1, &event) != CELLM_SUCCESS) {
                status = failed("cellm_session_poll");
                break;
            }
            if (event.kind == CELLM_EVENT_TEXT) {
                fwrite(event.text, 1, event.text_len, stdout);
                fflush(stdout);
            }
        } while (event.kind != CELLM_EVENT_DONE);
        if (status != 0) break;

        cellm_session_stats stats;
        stats.struct_size = sizeof stats;
        cellm_session_get_stats(session, &stats);
        printf("\n[turn %d: %d prompt tokens, %d cached, %d generated, %.1f tok/s, %s]\n", turn + 1,
               stats.prompt_tokens, stats.cached_tokens, stats.generated_tokens, stats.decode_tok_s,
               cellm_finish_reason_name(stats.finish_reason));

        /* The reply joins the conversation; the session's copy lasts only until the next call on it. */
        const char* text = NULL;
        size_t length = 0;
        if (cellm_session_get_text(session, &text, &length) != CELLM_SUCCESS) {
            status = failed("cellm_session_get_text");
            break;
        }
        replies[turn] = malloc(length + 1);
        memcpy(replies[turn], text, length + 1);
        conversation[n_messages].role = "assistant";
        conversation[n_messages].content = replies[turn];
        ++n_messages;
    }

    cellm_session_destroy(session);
    cellm_engine_close(engine);
    for (int turn = 0; turn < turns; ++turn) free(replies[turn]);
    free(replies);
    free(conversation);
    return status;
}
