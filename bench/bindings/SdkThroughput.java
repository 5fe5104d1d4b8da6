import dev.cellm.Engine;
import dev.cellm.Prompt;
import dev.cellm.SamplingOptions;
import dev.cellm.Session;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The Java side of the binding-overhead benchmark: the work of bench/bindings/sdk_throughput.c (SESSIONS greedy
 * sessions on one engine, a prompt each, every TEXT event received) through dev.cellm, with a listener that
 * takes every piece of text as a String. One JSON line per repetition after a warm-up.
 *
 *   java -cp cellm.jar:cellm-throughput.jar SdkThroughput MODEL SESSIONS TOKENS REPETITIONS
 */
public final class SdkThroughput {
    public static void main(String[] args) {
        if (args.length != 4) {
            System.err.println("usage: SdkThroughput MODEL SESSIONS TOKENS REPETITIONS");
            System.exit(2);
        }
        int sessions = Integer.parseInt(args[1]), tokens = Integer.parseInt(args[2]);
        int repetitions = Integer.parseInt(args[3]);
        AtomicLong characters = new AtomicLong();
        try (Engine engine = Engine.builder().modelPath(args[0]).maxSessions(sessions).open()) {
            SamplingOptions greedy = SamplingOptions.builder().temperature(0).maxTokens(tokens).build();
            for (int rep = 0; rep <= repetitions; ++rep) {
                List<Session> open = new ArrayList<>();
                for (int i = 0; i < sessions; ++i) open.add(engine.newSession(greedy));
                long start = System.nanoTime();
                List<CompletableFuture<Session.Result>> turns = new ArrayList<>();
                for (int i = 0; i < sessions; ++i) {
                    Prompt prompt = Prompt.text("Once upon a time, in village number " + i + ", there lived");
                    turns.add(open.get(i).submit(prompt, (text, generated) -> characters.addAndGet(text.length())));
                }
                long generated = 0;
                for (CompletableFuture<Session.Result> turn : turns) generated += turn.join().stats().generatedTokens();
                double seconds = (System.nanoTime() - start) * 1e-9;
                for (Session s : open) s.close();
                if (rep > 0) {
                    System.out.printf("{\"binding\": \"java\", \"sessions\": %d, \"generated_tokens\": %d, "
                                      + "\"seconds\": %.4f, \"tok_s\": %.2f}%n",
                                      sessions, generated, seconds, generated / seconds);
                }
            }
        }
    }
}
