package dev.cellm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import org.junit.jupiter.api.Test;

/** Four sessions driven from four Java threads at once, batched on one engine, each equal to its prompt alone. */
class ConcurrentTest {
    @Test
    void fourThreadsEqualTheirPromptsAlone() throws Exception {
        List<String> prompts = TestSupport.RAW_PROMPTS;
        List<TestSupport.HostReply> alone = new ArrayList<>();
        for (String prompt : prompts) alone.add(TestSupport.hostRun(prompt, false, 32));

        try (Engine engine = TestSupport.openTiny()) {
            CyclicBarrier start = new CyclicBarrier(prompts.size());
            ExecutorService threads = Executors.newFixedThreadPool(prompts.size());
            List<Session> sessions = new ArrayList<>();
            List<Future<Session.Result>> results = new ArrayList<>();
            for (String prompt : prompts) {
                Session session = engine.newSession(TestSupport.greedy(32));
                sessions.add(session);
                results.add(threads.submit(() -> {
                    start.await();
                    StringBuilder streamed = new StringBuilder();
                    Session.Result result = session.generate(Prompt.text(prompt), (text, n) -> streamed.append(text));
                    assertEquals(result.text(), streamed.toString());
                    return result;
                }));
            }
            for (int i = 0; i < prompts.size(); ++i) {
                TestSupport.assertSameReply(alone.get(i), results.get(i).get(),
                                            "'" + prompts.get(i) + "' among " + prompts.size() + " sessions");
            }
            threads.shutdown();

            Engine.Stats stats = engine.stats();
            assertEquals(prompts.size(), stats.sessions());
            assertTrue(stats.kvBlocksUsed() > 0, "idle sessions keep their context");
            for (Session session : sessions) session.close();
            stats = engine.stats();
            assertEquals(0, stats.sessions());
            assertEquals(0, stats.kvBlocksUsed());
        }
    }
}
