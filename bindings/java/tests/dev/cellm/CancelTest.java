package dev.cellm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.concurrent.CancellationException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** Cancelling a long turn from its listener, from another thread and through its future. */
class CancelTest {
    private static Engine engine;

    @BeforeAll
    static void open() {
        engine = TestSupport.openLong();
    }

    @AfterAll
    static void close() {
        engine.close();
    }

    private static void assertCancelled(Session.Result result) {
        assertEquals(Session.FinishReason.CANCELLED, result.finishReason());
        assertTrue(result.tokens().length < TestSupport.LONG_TURN, () -> result.tokens().length + " tokens");
        assertEquals(Session.FinishReason.CANCELLED, result.stats().finishReason());
    }

    @Test
    void fromTheListener() {
        TestSupport.HostReply reference = TestSupport.hostRun(TestSupport.LONG_PROMPT, false, 24);
        try (Session session = engine.newSession(TestSupport.greedy(TestSupport.LONG_TURN))) {
            AtomicInteger pieces = new AtomicInteger();
            Session.Result result = session.generate(Prompt.text(TestSupport.LONG_PROMPT), (text, n) -> {
                if (pieces.incrementAndGet() == 2) session.cancel();
            });
            assertCancelled(result);
            assertEquals(0, engine.stats().kvBlocksUsed(), "the cancelled turn's blocks went back");

            // The session still works: a whole turn gives the tokens it gives alone.
            session.configure(TestSupport.greedy(24));
            TestSupport.assertSameReply(reference, session.generate(TestSupport.LONG_PROMPT), "after a cancel");
            session.cancel(); // idle: nothing
            assertEquals(Session.FinishReason.LENGTH, session.stats().finishReason());
        }
    }

    @Test
    void fromAnotherThread() throws Exception {
        try (Session session = engine.newSession(TestSupport.greedy(TestSupport.LONG_TURN))) {
            CountDownLatch started = new CountDownLatch(1);
            CompletableFuture<Session.Result> future =
                    session.submit(Prompt.text(TestSupport.LONG_PROMPT), (text, n) -> started.countDown());
            Thread canceller = new Thread(() -> {
                try {
                    if (started.await(60, TimeUnit.SECONDS)) session.cancel();
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            });
            canceller.start();
            assertCancelled(future.get(60, TimeUnit.SECONDS));
            canceller.join();
        }
    }

    @Test
    void throughTheFuture() throws Exception {
        try (Session session = engine.newSession(TestSupport.greedy(TestSupport.LONG_TURN))) {
            CountDownLatch started = new CountDownLatch(1);
            CompletableFuture<Session.Result> future =
                    session.submit(Prompt.text(TestSupport.LONG_PROMPT), (text, n) -> started.countDown());
            assertTrue(started.await(60, TimeUnit.SECONDS));
            assertTrue(future.cancel(true));
            assertThrows(CancellationException.class, future::join);
            // The turn ends soon after: the session takes the next one.
            long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(30);
            Session.Result next = null;
            while (next == null) {
                try {
                    next = session.generate(Prompt.text("the cat"));
                } catch (CellmException e) {
                    assertEquals(CellmException.Code.BUSY, e.code());
                    assertTrue(System.nanoTime() < deadline, "still busy 30 s after the cancel");
                    Thread.sleep(5);
                }
            }
            assertTrue(next.finishReason() != Session.FinishReason.CANCELLED, next.finishReason()::toString);
        }
    }
}
