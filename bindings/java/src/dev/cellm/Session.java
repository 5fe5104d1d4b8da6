package dev.cellm;

import java.io.ByteArrayOutputStream;
import java.lang.ref.Cleaner;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Objects;
import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionException;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.SynchronousQueue;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.locks.ReentrantLock;

/**
 * A conversation on an {@link Engine} (cellm_session). Each turn submits the whole conversation so far; what an
 * earlier turn (or another session's identical prefix) left in the KV cache is reused. Every session with work goes
 * into the engine's steps, so sessions on one engine are batched together.
 *
 * <p>A turn runs in the background: {@link #submit} returns at once with a future of its {@link Result}, and
 * {@link #generate} waits for it. The generated text streams to a {@link TokenListener} on a dispatcher thread of
 * the binding (never the engine's scheduler thread), in order, in pieces of whole characters. A listener that
 * throws cancels the turn, and its exception completes the future (generate throws it). One turn at a time:
 * submitting while one runs throws {@link CellmException.Code#BUSY}. With tools
 * ({@link SamplingOptions.Builder#tools(String)}), the answer's function calls stream to
 * {@link TokenListener#onToolCall} and come back as {@link Result#toolCalls()}.
 *
 * <p>Every method may be called from any thread. {@link #close()} cancels a running turn, waits for its result and
 * frees the session; a session that is never closed is freed when it becomes unreachable.
 */
public final class Session implements AutoCloseable {
    /** How a turn ended (cellm_finish_reason). */
    public enum FinishReason {
        /** No turn has ended yet, or one is running. */
        NONE,
        /** The model ended its answer. */
        EOG,
        /** A stop string appeared (it is not part of the text). */
        STOP,
        /** maxTokens were generated. */
        LENGTH,
        /** The context is full. */
        CONTEXT,
        /** {@link #cancel()}, the engine or the session closed, or the listener threw. */
        CANCELLED,
        /** The turn failed; {@link Stats#error()} says why. */
        ERROR,
        /** The answer ended with function calls ({@link Result#toolCalls()}). */
        TOOL_CALLS;

        static FinishReason of(int value) {
            FinishReason[] all = values();
            return value >= 0 && value < all.length ? all[value] : ERROR;
        }
    }

    /** The current or last turn (cellm_session_stats). */
    public record Stats(boolean busy, int promptTokens, int cachedTokens, int generatedTokens, int preemptions,
                        double ttftMs, double prefillTokensPerSecond, double decodeTokensPerSecond,
                        FinishReason finishReason, String error) {}

    /**
     * A finished turn: its text (stop strings excluded; with tools, the answer without its calls), token ids (an
     * ending end-of-generation token excluded), and its function calls, as records and as OpenAI's tool_calls JSON
     * array (cellm_session_get_tool_calls; "[]" when none).
     */
    public record Result(String text, int[] tokens, FinishReason finishReason, Stats stats, List<ToolCall> toolCalls,
                         String toolCallsJson) {}

    /** A function call of an answer: its id (for the tool message of its result), function name, arguments' JSON. */
    public record ToolCall(String id, String name, String arguments) {}

    /**
     * A piece of a function call as it is generated (CELLM_EVENT_TOOL_CALL): the answer's index-th call. Its first
     * piece announces the call with arguments ""; the next ones carry pieces of its arguments' JSON text.
     */
    public record ToolCallDelta(int index, String id, String name, String arguments) {}

    /** Receives a turn's text as it is generated; generatedTokens counts the turn's tokens so far. */
    @FunctionalInterface
    public interface TokenListener {
        void onText(String text, int generatedTokens);

        /** Receives the pieces of the answer's function calls, in order with the text (a session with tools). */
        default void onToolCall(ToolCallDelta delta, int generatedTokens) {}
    }

    // ---- Dispatch: the binding's threads poll the session, so no Java code ever runs on the scheduler thread ----

    private static final class DispatchThread extends Thread {
        private static final AtomicInteger count = new AtomicInteger();

        DispatchThread(Runnable run) {
            super(run, "cellm-dispatch-" + count.incrementAndGet());
            setDaemon(true);
        }
    }

    /** One thread per running turn; idle threads end after 10 s. */
    private static final ExecutorService DISPATCHERS = new ThreadPoolExecutor(0, Integer.MAX_VALUE, 10,
            TimeUnit.SECONDS, new SynchronousQueue<>(), DispatchThread::new);

    /** A poll waits at most this long holding the session, so that other calls on it get their turn. */
    private static final int POLL_MS = 50;

    /** A submitted turn until its result is delivered. */
    final class Turn {
        final CompletableFuture<Result> future = new CompletableFuture<>();
        final TokenListener listener;
        final CountDownLatch finished = new CountDownLatch(1);

        Turn(TokenListener listener) {
            this.listener = listener;
        }

        /** Cancels this turn if it is still the session's. */
        void cancel() {
            synchronized (turnLock) {
                if (turn == this) cancelQuietly();
            }
        }

        /**
         * Waits until the result is delivered. Not on a dispatcher thread: a listener that closes its session or
         * engine (or another's) must not wait for a turn that may be waiting for it.
         */
        void awaitFinished() {
            if (Thread.currentThread() instanceof DispatchThread) return;
            boolean interrupted = false;
            for (;;) {
                try {
                    finished.await();
                    break;
                } catch (InterruptedException e) {
                    interrupted = true;
                }
            }
            if (interrupted) Thread.currentThread().interrupt();
        }
    }

    private final Engine engine;
    private final NativeHandle handle;
    private final Cleaner.Cleanable cleanable;
    /** cellm.h: a session handle is used by one thread at a time, cellm_session_cancel excepted. */
    private final ReentrantLock calls = new ReentrantLock(true);
    private final Object turnLock = new Object();
    private Turn turn; // guarded by turnLock

    Session(Engine engine, long pointer) {
        this.engine = engine;
        handle = new NativeHandle(pointer, CellmNative::sessionDestroy, "the session");
        cleanable = Engine.CLEANER.register(this, handle);
    }

    public Engine engine() {
        return engine;
    }

    /** Starts a turn and returns at once; cancelling the future cancels the turn. */
    public CompletableFuture<Result> submit(Prompt prompt) {
        return submit(prompt, null);
    }

    /** Starts a turn whose text streams to listener (may be null) and returns at once. */
    public CompletableFuture<Result> submit(Prompt prompt, TokenListener listener) {
        Objects.requireNonNull(prompt, "prompt");
        synchronized (turnLock) {
            if (turn != null) throw busy();
            call(p -> {
                prompt.submit(p);
                return null;
            });
            Turn t = new Turn(listener);
            turn = t;
            engine.running.add(t);
            t.future.whenComplete((result, error) -> {
                if (error instanceof CancellationException) t.cancel();
            });
            DISPATCHERS.execute(() -> dispatch(t));
            return t.future;
        }
    }

    /** Runs a turn to its end. */
    public Result generate(Prompt prompt) {
        return generate(prompt, null);
    }

    /** Runs a turn to its end, streaming its text to listener (may be null) on a dispatcher thread. */
    public Result generate(Prompt prompt, TokenListener listener) {
        CompletableFuture<Result> future = submit(prompt, listener);
        try {
            return future.get();
        } catch (InterruptedException e) {
            future.cancel(false);
            Thread.currentThread().interrupt();
            throw new CancellationException("interrupted while generating");
        } catch (ExecutionException e) {
            throw rethrow(e.getCause());
        }
    }

    /** Runs a turn on text as is. */
    public Result generate(String text) {
        return generate(Prompt.text(text), null);
    }

    /** Runs a turn on chat messages. */
    public Result generate(List<Message> messages) {
        return generate(Prompt.chat(messages), null);
    }

    /** Ends the running turn now (its result comes with CANCELLED); nothing when idle. Never blocks. */
    public void cancel() {
        handle.run(CellmNative::sessionCancel);
    }

    /** New settings for the next turn (BUSY while a turn runs). */
    public void configure(SamplingOptions options) {
        Objects.requireNonNull(options, "options");
        synchronized (turnLock) {
            if (turn != null) throw busy();
            engine.handle.run(e -> call(s -> {
                options.configure(e, s);
                return null;
            }));
        }
    }

    /**
     * A new idle session with this one's settings and cached context, its KV blocks shared copy-on-write: a turn
     * that starts with the same conversation computes only what is new. BUSY while a turn runs.
     */
    public Session fork() {
        synchronized (turnLock) {
            if (turn != null) throw busy();
            return new Session(engine, call(CellmNative::sessionFork));
        }
    }

    /** The current or last turn's statistics. */
    public Stats stats() {
        return call(Session::readStats);
    }

    public boolean isClosed() {
        return handle.isFreed();
    }

    /**
     * Cancels the running turn, waits until its result is delivered (unless called from a listener, whose turn then
     * fails with CLOSED), and frees the session and its KV blocks. Idempotent.
     */
    @Override
    public void close() {
        Turn t;
        synchronized (turnLock) {
            t = turn;
        }
        if (t != null) {
            t.cancel();
            t.awaitFinished();
        }
        cleanable.clean();
    }

    // ---- Internals -----------------------------------------------------------------------------------------------

    private <T> T call(NativeHandle.Call<T> call) {
        return handle.use(p -> {
            calls.lock();
            try {
                return call.apply(p);
            } finally {
                calls.unlock();
            }
        });
    }

    private void cancelQuietly() {
        try {
            cancel();
        } catch (CellmException closed) {
            // Closed: there is no turn left to cancel.
        }
    }

    private static CellmException busy() {
        return new CellmException(CellmException.Code.BUSY, "the session is still generating its previous turn");
    }

    /** The turn's failure for the caller of generate: a CellmException again, with this thread's stack. */
    private static RuntimeException rethrow(Throwable cause) {
        if (cause instanceof CellmException e) {
            CellmException again = new CellmException(e.code(), e.getMessage());
            again.initCause(e);
            return again;
        }
        if (cause instanceof RuntimeException e) return e;
        if (cause instanceof Error e) throw e;
        return new CompletionException(cause);
    }

    private static Stats readStats(long session) {
        int[] ints = new int[6];
        double[] doubles = new double[3];
        byte[] error = CellmNative.sessionStats(session, ints, doubles);
        return new Stats(ints[0] != 0, ints[1], ints[2], ints[3], ints[4], doubles[0], doubles[1], doubles[2],
                FinishReason.of(ints[5]), CellmNative.string(error));
    }

    /**
     * A turn's function calls as their TOOL_CALL events arrive. Each call's arguments are kept as bytes and decoded
     * once whole: cellm.h does not say that a call's pieces are whole characters.
     */
    private static final class ToolCalls {
        private final List<String[]> named = new ArrayList<>(); // {id, name} of call i
        private final List<ByteArrayOutputStream> arguments = new ArrayList<>();

        /** One event (its id and name in idAndName); the piece for the listener. */
        ToolCallDelta add(int index, byte[][] idAndName, byte[] piece) {
            String id = text(idAndName[CellmNative.EVENT_TOOL_CALL_ID]);
            String name = text(idAndName[CellmNative.EVENT_TOOL_NAME]);
            while (named.size() <= index) {
                named.add(new String[] {id, name});
                arguments.add(new ByteArrayOutputStream());
            }
            arguments.get(index).write(piece, 0, piece.length);
            return new ToolCallDelta(index, id, name, CellmNative.string(piece));
        }

        List<ToolCall> made() {
            List<ToolCall> out = new ArrayList<>();
            for (int i = 0; i < named.size(); ++i) {
                out.add(new ToolCall(named.get(i)[0], named.get(i)[1],
                                     CellmNative.string(arguments.get(i).toByteArray())));
            }
            return Collections.unmodifiableList(out);
        }

        private static String text(byte[] utf8) {
            return utf8 == null ? "" : CellmNative.string(utf8);
        }
    }

    /** Polls the turn's events on a dispatcher thread and hands them to the listener, then delivers the result. */
    private void dispatch(Turn t) {
        Result result = null;
        Throwable failure = null;
        try {
            int[] event = new int[CellmNative.EVENT_INTS];
            byte[][] toolCall = new byte[2][];
            ToolCalls calls = new ToolCalls();
            for (;;) {
                byte[] text = call(p -> CellmNative.sessionPoll(p, POLL_MS, event, toolCall));
                if (text == null) continue; // nothing yet
                int kind = event[CellmNative.EVENT_KIND];
                if (kind == CellmNative.EVENT_DONE) {
                    FinishReason reason = FinishReason.of(event[CellmNative.EVENT_FINISH]);
                    result = call(p -> new Result(CellmNative.string(CellmNative.sessionText(p)),
                            CellmNative.sessionTokens(p), reason, readStats(p), calls.made(),
                            CellmNative.string(CellmNative.sessionToolCalls(p))));
                    break;
                }
                ToolCallDelta delta = null;
                if (kind == CellmNative.EVENT_TOOL_CALL) {
                    delta = calls.add(event[CellmNative.EVENT_TOOL_CALL_INDEX], toolCall, text);
                } else if (kind != CellmNative.EVENT_TEXT) {
                    continue;
                }
                if (t.listener == null || failure != null) continue;
                try {
                    if (delta != null) t.listener.onToolCall(delta, event[CellmNative.EVENT_GENERATED]);
                    else t.listener.onText(CellmNative.string(text), event[CellmNative.EVENT_GENERATED]);
                } catch (Throwable e) { // the listener's failure is the turn's; its DONE still has to come
                    failure = e;
                    cancelQuietly();
                }
            }
        } catch (Throwable e) {
            if (failure == null) failure = e;
            else failure.addSuppressed(e);
        } finally {
            synchronized (turnLock) {
                if (turn == t) turn = null;
            }
            engine.running.remove(t);
        }
        // The session takes a new turn before the future completes (its callbacks may submit one), and close()
        // returns after it completed.
        try {
            if (failure != null) t.future.completeExceptionally(failure);
            else t.future.complete(result);
        } finally {
            t.finished.countDown();
        }
    }
}
