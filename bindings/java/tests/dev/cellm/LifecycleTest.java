package dev.cellm;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.function.Executable;

/** Closing while streaming, listeners that throw, use after close, refused prompts, forks and the Cleaner. */
class LifecycleTest {
    private static void assertCode(CellmException.Code code, Executable call) {
        assertEquals(code, assertThrows(CellmException.class, call).code());
    }

    /** Submits a long turn and returns once its first piece of text has come. */
    private static CompletableFuture<Session.Result> started(Session session) throws InterruptedException {
        CountDownLatch first = new CountDownLatch(1);
        CompletableFuture<Session.Result> future =
                session.submit(Prompt.text(TestSupport.LONG_PROMPT), (text, n) -> first.countDown());
        assertTrue(first.await(60, TimeUnit.SECONDS), "no text within 60 s");
        return future;
    }

    @Test
    void sessionCloseWhileStreaming() throws Exception {
        try (Engine engine = TestSupport.openLong()) {
            Session session = engine.newSession(TestSupport.greedy(TestSupport.LONG_TURN));
            CompletableFuture<Session.Result> future = started(session);
            session.close();
            // close waited for the turn's result, cancelled.
            assertTrue(future.isDone());
            assertEquals(Session.FinishReason.CANCELLED, future.get().finishReason());
            assertTrue(session.isClosed());
            Engine.Stats stats = engine.stats();
            assertEquals(0, stats.sessions());
            assertEquals(0, stats.kvBlocksUsed());
        }
    }

    @Test
    void engineCloseWhileStreaming() throws Exception {
        Engine engine = TestSupport.openLong();
        Session a = engine.newSession(TestSupport.greedy(TestSupport.LONG_TURN));
        Session b = engine.newSession(TestSupport.greedy(TestSupport.LONG_TURN));
        Session idle = engine.newSession(TestSupport.greedy(4));
        idle.generate("the cat");
        CompletableFuture<Session.Result> fa = started(a);
        CompletableFuture<Session.Result> fb = started(b);
        engine.close();
        assertTrue(engine.isClosed());
        assertEquals(Session.FinishReason.CANCELLED, fa.get().finishReason());
        assertEquals(Session.FinishReason.CANCELLED, fb.get().finishReason());
        // The sessions are closed handles now: cellm says CLOSED until they are closed themselves.
        for (Session s : List.of(a, b, idle)) {
            assertFalse(s.isClosed());
            assertCode(CellmException.Code.CLOSED, s::stats);
            assertCode(CellmException.Code.CLOSED, () -> s.generate("x"));
            assertCode(CellmException.Code.CLOSED, s::fork);
            assertCode(CellmException.Code.CLOSED, () -> s.configure(TestSupport.greedy(4)));
            s.close();
            assertTrue(s.isClosed());
        }
    }

    @Test
    void listenerThatThrows() throws Exception {
        try (Engine engine = TestSupport.openLong();
             Session session = engine.newSession(TestSupport.greedy(TestSupport.LONG_TURN))) {
            IllegalStateException boom = new IllegalStateException("boom");
            AtomicInteger calls = new AtomicInteger();
            IllegalStateException thrown = assertThrows(IllegalStateException.class,
                    () -> session.generate(Prompt.text(TestSupport.LONG_PROMPT), (text, n) -> {
                        calls.incrementAndGet();
                        throw boom;
                    }));
            assertSame(boom, thrown);
            assertEquals(1, calls.get(), "the listener was called after it threw");
            assertEquals(Session.FinishReason.CANCELLED, session.stats().finishReason());

            // Through the future, an Error too; the session goes on serving.
            CompletableFuture<Session.Result> future = session.submit(Prompt.text(TestSupport.LONG_PROMPT),
                    (text, n) -> {
                        throw new AssertionError("listener error");
                    });
            ExecutionException e = assertThrows(ExecutionException.class, future::get);
            assertInstanceOf(AssertionError.class, e.getCause());
            session.configure(TestSupport.greedy(8));
            assertEquals(Session.FinishReason.LENGTH, session.generate("the cat").finishReason());
        }
    }

    @Test
    void closeFromTheListener() throws Exception {
        try (Engine engine = TestSupport.openLong()) {
            Session session = engine.newSession(TestSupport.greedy(TestSupport.LONG_TURN));
            CompletableFuture<Session.Result> future = session.submit(Prompt.text(TestSupport.LONG_PROMPT),
                    (text, n) -> session.close());
            ExecutionException e = assertThrows(ExecutionException.class, () -> future.get(60, TimeUnit.SECONDS));
            assertEquals(CellmException.Code.CLOSED, assertInstanceOf(CellmException.class, e.getCause()).code());
            assertTrue(session.isClosed());
            assertEquals(0, engine.stats().sessions());
        }
    }

    @Test
    void useAfterClose() {
        try (Engine engine = TestSupport.openTiny()) {
            Session session = engine.newSession(TestSupport.greedy(4));
            session.close();
            assertCode(CellmException.Code.CLOSED, () -> session.generate("the cat"));
            assertCode(CellmException.Code.CLOSED, () -> session.submit(Prompt.text("the cat")));
            assertCode(CellmException.Code.CLOSED, session::cancel);
            assertCode(CellmException.Code.CLOSED, session::stats);
            assertCode(CellmException.Code.CLOSED, session::fork);
            assertCode(CellmException.Code.CLOSED, () -> session.configure(TestSupport.greedy(4)));
            session.close(); // again: nothing
        }
    }

    @Test
    void busyWhileATurnRuns() throws Exception {
        try (Engine engine = TestSupport.openLong();
             Session session = engine.newSession(TestSupport.greedy(TestSupport.LONG_TURN))) {
            CompletableFuture<Session.Result> future = started(session);
            assertCode(CellmException.Code.BUSY, () -> session.submit(Prompt.text("x")));
            assertCode(CellmException.Code.BUSY, () -> session.configure(TestSupport.greedy(4)));
            assertCode(CellmException.Code.BUSY, session::fork);
            assertTrue(session.stats().busy());
            session.cancel();
            assertEquals(Session.FinishReason.CANCELLED, future.get().finishReason());
        }
    }

    @Test
    void refusedPrompts() {
        try (Engine engine = TestSupport.openTiny(); Session session = engine.newSession(TestSupport.greedy(4))) {
            assertCode(CellmException.Code.PROMPT, () -> session.generate(""));
            assertCode(CellmException.Code.PROMPT, () -> session.generate(Prompt.tokens(new int[0])));
            assertCode(CellmException.Code.PROMPT,
                       () -> session.generate(Prompt.tokens(new int[] {engine.info().nVocab()})));
            CellmException wizard = assertThrows(CellmException.class,
                    () -> session.generate(List.of(new Message("wizard", "hello"))));
            assertEquals(CellmException.Code.PROMPT, wizard.code());
            assertTrue(wizard.getMessage().contains("wizard"), wizard.getMessage());
            assertCode(CellmException.Code.TOO_LONG, () -> session.generate("the cat ".repeat(200)));
            assertCode(CellmException.Code.PROMPT,
                       () -> session.generate(Prompt.text("the cat").withImages(new byte[] {1, 2, 3})));
            assertThrows(IllegalArgumentException.class, () -> session.generate("a\0b"));
            assertFalse(session.stats().busy());
            assertEquals(Session.FinishReason.LENGTH, session.generate("the cat").finishReason());
        }
    }

    /** A fork shares its source's context: its turn on the longer prompt reuses it and equals a fresh session's. */
    @Test
    void fork() {
        try (Engine engine = Engine.builder().manifestText(TestSupport.tinyManifestText("prefix_cache = false\n")).open();
             Session first = engine.newSession(TestSupport.greedy(24))) {
            int[] prompt = engine.tokenize("the cat sat");
            int[] more = engine.tokenize(" and then the dog ran", false);
            first.generate(Prompt.tokens(prompt));
            int[] diverging = Arrays.copyOf(prompt, prompt.length + more.length);
            System.arraycopy(more, 0, diverging, prompt.length, more.length);
            try (Session fork = first.fork(); Session fresh = engine.newSession(TestSupport.greedy(24))) {
                Session.Result forked = fork.generate(Prompt.tokens(diverging));
                assertTrue(forked.stats().cachedTokens() >= prompt.length, forked.stats()::toString);
                Session.Result alone = fresh.generate(Prompt.tokens(diverging));
                assertEquals(0, alone.stats().cachedTokens());
                assertArrayEquals(alone.tokens(), forked.tokens());
            }
        }
    }

    /** A session nobody closes is destroyed once unreachable. */
    @Test
    void cleanerDestroysForgottenSessions() throws Exception {
        try (Engine engine = TestSupport.openTiny()) {
            for (int i = 0; i < 3; ++i) engine.newSession().generate("the cat");
            assertEquals(3, engine.stats().sessions());
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
            while (engine.stats().sessions() > 0) {
                assertTrue(System.nanoTime() < deadline, "sessions left: " + engine.stats().sessions());
                System.gc();
                Thread.sleep(20);
            }
            assertEquals(0, engine.stats().kvBlocksUsed());
        }
    }
}
