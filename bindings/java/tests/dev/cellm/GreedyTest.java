package dev.cellm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Arrays;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/** Greedy turns on the synthetic model give cellm-host run --json's tokens, for text, tokens and chat prompts. */
class GreedyTest {
    private static Engine engine;

    @BeforeAll
    static void open() {
        engine = TestSupport.openTiny();
    }

    @AfterAll
    static void close() {
        engine.close();
    }

    @Test
    void textAndTokensEqualCellmHostRaw() {
        for (String prompt : TestSupport.RAW_PROMPTS) {
            TestSupport.HostReply want = TestSupport.hostRun(prompt, false, 24);
            try (Session session = engine.newSession(TestSupport.greedy(24))) {
                TestSupport.assertSameReply(want, session.generate(prompt), "text '" + prompt + "'");
                TestSupport.assertSameReply(want, session.generate(Prompt.tokens(engine.tokenize(prompt))),
                                            "tokens '" + prompt + "'");
            }
        }
    }

    @Test
    void chatEqualsCellmHostChat() {
        for (String prompt : TestSupport.CHAT_PROMPTS) {
            TestSupport.HostReply want = TestSupport.hostRun(prompt, true, 24);
            try (Session session = engine.newSession(TestSupport.greedy(24))) {
                Session.Result got = session.generate(Prompt.chat(Message.user(prompt)));
                TestSupport.assertSameReply(want, got, "chat '" + prompt + "'");
                assertEquals(got.tokens().length, got.stats().generatedTokens());
                assertTrue(got.stats().promptTokens() > 0 && !got.stats().busy(), got.stats()::toString);
            }
        }
    }

    /** The options reach cellm: maxTokens, a stop string, and a seeded sampler that repeats itself. */
    @Test
    void samplingOptionsApply() {
        String prompt = TestSupport.RAW_PROMPTS.get(2);
        try (Session session = engine.newSession(TestSupport.greedy(24))) {
            Session.Result full = session.generate(prompt);
            assertTrue(full.text().length() > 4, full.text());

            session.configure(TestSupport.greedy(5));
            Session.Result five = session.generate(prompt);
            assertEquals(Session.FinishReason.LENGTH, five.finishReason());
            assertEquals(Arrays.toString(Arrays.copyOf(full.tokens(), 5)), Arrays.toString(five.tokens()));

            // A stop string from the reply (an ASCII character past its first) ends the turn just before it.
            String text = full.text();
            int at = 1;
            while (at < text.length() && (text.charAt(at) < 0x21 || text.charAt(at) > 0x7e)) ++at;
            assertTrue(at < text.length(), () -> "no ASCII character in '" + text + "'");
            String stop = text.substring(at, at + 1);
            session.configure(TestSupport.greedy(24).toBuilder().stop(stop).build());
            Session.Result stopped = session.generate(prompt);
            assertEquals(Session.FinishReason.STOP, stopped.finishReason());
            assertEquals(text.substring(0, text.indexOf(stop)), stopped.text());
        }
        SamplingOptions seeded = SamplingOptions.builder().temperature(0.9f).topK(40).topP(0.95f).minP(0.01f)
                .repeatPenalty(1.1f).repeatLastN(32).frequencyPenalty(0.1f).presencePenalty(0.1f).seed(1234)
                .maxTokens(16).priority(1).name("seeded").build();
        try (Session a = engine.newSession(seeded); Session b = engine.newSession(seeded)) {
            assertEquals(Arrays.toString(a.generate(prompt).tokens()), Arrays.toString(b.generate(prompt).tokens()));
        }
        CellmException e = assertThrowsCellm(() -> engine.newSession(SamplingOptions.builder().maxTokens(0).build()));
        assertEquals(CellmException.Code.INVALID_ARGUMENT, e.code());
        assertTrue(e.getMessage().contains("max_tokens"), e.getMessage());
    }

    private static CellmException assertThrowsCellm(Runnable run) {
        return org.junit.jupiter.api.Assertions.assertThrows(CellmException.class, run::run);
    }
}
