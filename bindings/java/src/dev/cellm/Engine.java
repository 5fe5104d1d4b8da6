package dev.cellm;

import java.lang.ref.Cleaner;
import java.util.Locale;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

/**
 * A loaded model with its backend, KV cache and scheduler thread (cellm_engine). Open one with {@link #builder()};
 * loading takes time, so do it off any thread that must stay responsive (an Android app's main thread).
 * Every method may be called from any thread.
 *
 * <p>{@link #close()} ends every running turn (their results come with {@link Session.FinishReason#CANCELLED}) and
 * frees the model. Sessions still open become closed handles: their calls throw {@link CellmException} with
 * {@link CellmException.Code#CLOSED} until they are closed themselves. An engine that is never closed is closed
 * when it becomes unreachable, but close it: a model holds much memory.
 */
public final class Engine implements AutoCloseable {
    static final Cleaner CLEANER = Cleaner.create();

    /** [backend].precision. */
    public enum Precision {
        /** The scalar reference's results, bit for bit. */
        EXACT,
        /** Other summation orders, within the bounds the backend documents. */
        FAST
    }

    /** What was loaded (cellm_engine_info). */
    public record Info(String modelName, String modelPath, String arch, String backend, String chatTemplate,
                       int nVocab, int contextLength, int maxSessions, int kvBlocks, int kvBlockSize,
                       long kvBytesPerToken, boolean modelHasChatTemplate, boolean modelTakesImages,
                       long weightsBytes, long scratchBytes, long kvPoolBytes) {}

    /** A snapshot between two scheduler steps (cellm_engine_stats). */
    public record Stats(int sessions, int running, int waiting, int kvBlocks, int kvBlocksUsed, int kvBlocksFree,
                        long prefixHitTokens, long steps, long batchedTokens, long preemptions, long copiedBlocks,
                        long kvBytesCommitted) {}

    /**
     * What to open: a manifest (a path or its text), a model file alone (the defaults for everything else), or a
     * manifest with a model file in place of its own. The other settings override the manifest's.
     */
    public static final class Builder {
        private String manifestPath, manifestText, modelPath, backend, pluginPath, mmprojPath;
        private int threads, contextLength, maxSessions, memoryBudgetMib;
        private Precision precision;
        private String kvType;

        private Builder() {}

        /** The manifest file, read like `cellm-host run --manifest`. */
        public Builder manifestPath(String path) {
            manifestPath = path;
            return this;
        }

        /** The manifest's TOML text, read as if it were a file in the current folder. */
        public Builder manifestText(String text) {
            manifestText = text;
            return this;
        }

        /** The model file ([model].path); it replaces the manifest's model, format, arch and mmproj. */
        public Builder modelPath(String path) {
            modelPath = path;
            return this;
        }

        /** A backend plugin ([backend].name): "scalar", "openblas", "vulkan"... */
        public Builder backend(String name) {
            backend = name;
            return this;
        }

        /** [backend].threads; 0 keeps the manifest's. */
        public Builder threads(int threads) {
            this.threads = threads;
            return this;
        }

        /** Tokens per session ([context].length); 0 keeps the manifest's. */
        public Builder contextLength(int tokens) {
            contextLength = tokens;
            return this;
        }

        /** Sessions in the scheduler's steps at once ([scheduler].max_running); 0 keeps the manifest's. */
        public Builder maxSessions(int sessions) {
            maxSessions = sessions;
            return this;
        }

        public Builder precision(Precision precision) {
            this.precision = precision;
            return this;
        }

        /** [context].kv_type: "f32", "f16", "q8", "r4" or "r3" (docs/memory.md). */
        public Builder kvType(String type) {
            kvType = type;
            return this;
        }

        /** [context].memory_budget_mib: MiB for weights, scratch and KV pool together; 0 keeps the manifest's. */
        public Builder memoryBudgetMib(int mib) {
            memoryBudgetMib = mib;
            return this;
        }

        /** One more folder to search for plugins. */
        public Builder pluginPath(String path) {
            pluginPath = path;
            return this;
        }

        /** llama.cpp's mmproj file beside a text GGUF (its vision tower). */
        public Builder mmprojPath(String path) {
            mmprojPath = path;
            return this;
        }

        /** Loads everything and starts the scheduler (cellm_engine_open); blocks while it loads. */
        public Engine open() {
            long pointer = CellmNative.engineOpen(CellmNative.utf8(manifestPath), CellmNative.utf8(manifestText),
                    CellmNative.utf8(modelPath), CellmNative.utf8(backend), threads, contextLength, maxSessions,
                    CellmNative.utf8(pluginPath), CellmNative.utf8(mmprojPath),
                    CellmNative.utf8(precision == null ? null : precision.name().toLowerCase(Locale.ROOT)),
                    CellmNative.utf8(kvType), memoryBudgetMib);
            return new Engine(pointer);
        }
    }

    final NativeHandle handle;
    private final Cleaner.Cleanable cleanable;
    /** Turns that have not finished, so that close() can cancel them and let them finish first. */
    final Set<Session.Turn> running = ConcurrentHashMap.newKeySet();

    private Engine(long pointer) {
        handle = new NativeHandle(pointer, CellmNative::engineClose, "the engine");
        cleanable = CLEANER.register(this, handle);
    }

    public static Builder builder() {
        return new Builder();
    }

    public Info info() {
        long[] n = new long[11];
        byte[][] s = handle.use(p -> CellmNative.engineInfo(p, n));
        return new Info(CellmNative.string(s[0]), CellmNative.string(s[1]), CellmNative.string(s[2]),
                CellmNative.string(s[3]), CellmNative.string(s[4]), (int) n[0], (int) n[1], (int) n[2], (int) n[3],
                (int) n[4], n[5], n[6] != 0, n[7] != 0, n[8], n[9], n[10]);
    }

    public Stats stats() {
        long[] n = new long[12];
        handle.run(p -> CellmNative.engineStats(p, n));
        return new Stats((int) n[0], (int) n[1], (int) n[2], (int) n[3], (int) n[4], (int) n[5], n[6], n[7], n[8],
                n[9], n[10], n[11]);
    }

    /** Token ids of text, BOS as the model asks, special-token text read as those tokens. */
    public int[] tokenize(String text) {
        return tokenize(text, true);
    }

    /** Token ids of text; addSpecial adds BOS as the model asks. */
    public int[] tokenize(String text, boolean addSpecial) {
        byte[] bytes = CellmNative.utf8(text);
        return handle.use(p -> CellmNative.engineTokenize(p, bytes, addSpecial));
    }

    /** A new idle session with the manifest's [sampling] settings. */
    public Session newSession() {
        return newSession(null);
    }

    /** A new idle session; options may be null for the manifest's settings. */
    public Session newSession(SamplingOptions options) {
        SamplingOptions o = options == null ? SamplingOptions.builder().build() : options;
        long session = handle.use(o::create);
        return new Session(this, session);
    }

    public boolean isClosed() {
        return handle.isFreed();
    }

    /**
     * Ends every running turn, waits for their results to be delivered (except the turn whose listener calls this)
     * and frees the model. Calls already in flight on this engine finish first. Idempotent.
     */
    @Override
    public void close() {
        for (Session.Turn turn : running) turn.cancel();
        for (Session.Turn turn : running) turn.awaitFinished();
        cleanable.clean();
    }
}
