package dev.cellm;

import java.nio.charset.StandardCharsets;
import java.util.List;

/**
 * The JNI layer (jni/cellm_jni.cpp): one static method per function of cellm.h, handles as longs, text as UTF-8
 * byte arrays (the native side adds the NUL). A failed call throws {@link CellmException} with cellm_last_error().
 * These methods know nothing of lifetimes: {@link Engine} and {@link Session} guard their handles so that no call
 * runs on a freed one, and call a session from one thread at a time (cancel excepted), as cellm.h asks.
 */
final class CellmNative {
    // The library registers this class's natives in its JNI_OnLoad, so it is loaded here and only here.
    static {
        String path = System.getProperty("cellm.jni.library");
        if (path != null && !path.isEmpty()) {
            System.load(path);
        } else {
            System.loadLibrary("cellm_jni");
        }
    }

    private CellmNative() {}

    /** Initialises this class, which loads the library. */
    static void load() {}

    // Indices into the float[] and long[] of sessionCreate/sessionConfigure, and the bits of `set` that say which
    // of them override cellm_session_options_init's defaults (float i: bit i; long j: bit FLOAT_COUNT + j).
    static final int TEMPERATURE = 0, TOP_P = 1, MIN_P = 2, REPEAT_PENALTY = 3, FREQUENCY_PENALTY = 4,
            PRESENCE_PENALTY = 5, FLOAT_COUNT = 6;
    static final int TOP_K = 0, REPEAT_LAST_N = 1, SEED = 2, MAX_TOKENS = 3, PRIORITY = 4, PARALLEL_TOOL_CALLS = 5,
            LONG_COUNT = 6;

    // cellm_event as sessionPoll writes it into its int[4], and into its byte[2][] for a TOOL_CALL event.
    static final int EVENT_KIND = 0, EVENT_GENERATED = 1, EVENT_FINISH = 2, EVENT_TOOL_CALL_INDEX = 3,
            EVENT_INTS = 4;
    static final int EVENT_TOOL_CALL_ID = 0, EVENT_TOOL_NAME = 1;
    static final int EVENT_TEXT = 1, EVENT_DONE = 2, EVENT_TOOL_CALL = 3;

    /** {major, minor} of cellm_version. */
    static native int[] version();

    /** cellm_list_backends: name, description, name, description, ... */
    static native byte[][] listBackends(byte[] pluginPath);

    /** cellm_engine_open with the fields of cellm_engine_options in their order; null or 0 keeps the manifest's. */
    static native long engineOpen(byte[] manifestPath, byte[] manifestText, byte[] modelPath, byte[] backend,
                                  int threads, int contextLength, int maxSessions, byte[] pluginPath, byte[] mmprojPath,
                                  byte[] precision, byte[] kvType, int memoryBudgetMib);

    static native void engineClose(long engine);

    /**
     * cellm_engine_get_info: returns {model_name, model_path, arch, backend, chat_template}; numbers gets n_vocab,
     * context_length, max_sessions, kv_blocks, kv_block_size, kv_bytes_per_token, model_has_chat_template,
     * model_takes_images, weights_bytes, scratch_bytes, kv_pool_bytes.
     */
    static native byte[][] engineInfo(long engine, long[] numbers);

    /** cellm_engine_get_stats into out[12], in the struct's order. */
    static native void engineStats(long engine, long[] out);

    static native int[] engineTokenize(long engine, byte[] text, boolean addSpecial);

    /**
     * cellm_session_options_init, then the values whose bit is in `set`, the name, the stop strings, the grammar
     * (GBNF) and the JSON schema when not null, the logit bias (biasTokens[i] gets biasValues[i]; null: none), the
     * tools (OpenAI's JSON text) and tool_choice when not null, then cellm_session_create.
     */
    static native long sessionCreate(long engine, byte[] name, int set, float[] floats, long[] longs, byte[][] stop,
                                     byte[] grammar, byte[] jsonSchema, int[] biasTokens, float[] biasValues,
                                     byte[] tools, byte[] toolChoice);

    /** As sessionCreate, for cellm_session_configure (the engine gives the defaults). */
    static native void sessionConfigure(long engine, long session, byte[] name, int set, float[] floats, long[] longs,
                                        byte[][] stop, byte[] grammar, byte[] jsonSchema, int[] biasTokens,
                                        float[] biasValues, byte[] tools, byte[] toolChoice);

    static native long sessionFork(long session);

    /** cellm_session_submit_text, or cellm_session_submit_text_images when images is not null. */
    static native void sessionSubmitText(long session, byte[] text, byte[][] images);

    /** cellm_session_submit_chat(_images): roles[i] and contents[i] make message i. */
    static native void sessionSubmitChat(long session, byte[][] roles, byte[][] contents, byte[][] images);

    static native void sessionSubmitTokens(long session, int[] tokens);

    /** cellm_session_submit_chat_json: OpenAI's messages array as JSON text. */
    static native void sessionSubmitChatJson(long session, byte[] messagesJson);

    /**
     * cellm_session_poll: the event's text (empty for DONE), its kind, generated_tokens, finish_reason and
     * tool_call_index in event[4]; for a TOOL_CALL event, its tool_call_id and tool_name in toolCall[2] (may be
     * null). Null when none came within timeoutMs.
     */
    static native byte[] sessionPoll(long session, int timeoutMs, int[] event, byte[][] toolCall);

    /** cellm_session_wait: false when the turn is still running after timeoutMs. */
    static native boolean sessionWait(long session, int timeoutMs);

    static native void sessionCancel(long session);

    /**
     * cellm_session_get_stats: returns error; ints gets busy, prompt_tokens, cached_tokens, generated_tokens,
     * preemptions, finish_reason; doubles gets ttft_ms, prefill_tok_s, decode_tok_s.
     */
    static native byte[] sessionStats(long session, int[] ints, double[] doubles);

    static native byte[] sessionText(long session);

    /** cellm_session_get_tool_calls: OpenAI's tool_calls JSON array, "[]" when none. */
    static native byte[] sessionToolCalls(long session);

    static native int[] sessionTokens(long session);

    static native void sessionDestroy(long session);

    // ---- UTF-8 across the boundary: never JNI's modified UTF-8 -------------------------------------------------

    /** A Java string as the UTF-8 bytes the native side NUL-terminates; null stays null. */
    static byte[] utf8(String text) {
        if (text == null) return null;
        if (text.indexOf('\0') >= 0) throw new IllegalArgumentException("text for cellm cannot contain NUL characters");
        return text.getBytes(StandardCharsets.UTF_8);
    }

    static byte[][] utf8(List<String> texts) {
        if (texts == null) return null;
        byte[][] out = new byte[texts.size()][];
        for (int i = 0; i < out.length; ++i) out[i] = utf8(texts.get(i));
        return out;
    }

    static String string(byte[] utf8) {
        return new String(utf8, StandardCharsets.UTF_8);
    }
}
