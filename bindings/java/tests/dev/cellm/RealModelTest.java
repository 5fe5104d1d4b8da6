package dev.cellm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * SmolLM2-135M-Instruct Q4_1 (CELLM_REAL_MODEL, set by ctest, which skips this class without the file) with
 * config/smollm2-135m.toml: greedy turns equal cellm-host's, and replies with emoji and CJK stream byte-exact.
 */
class RealModelTest {
    private static String manifest;
    private static String model;
    private static Engine engine;

    @BeforeAll
    static void open() {
        manifest = System.getProperty("cellm.smollmManifest");
        model = System.getenv("CELLM_REAL_MODEL");
        engine = Engine.builder().manifestPath(manifest).modelPath(model).open();
    }

    @AfterAll
    static void close() {
        engine.close();
    }

    /** A greedy turn equal to cellm-host's whose streamed pieces add up to its text; the text. */
    private static String compare(String prompt, boolean chat, int maxTokens) {
        TestSupport.HostReply want = TestSupport.hostRun(manifest, model, prompt, chat, maxTokens);
        try (Session session = engine.newSession(TestSupport.greedy(maxTokens))) {
            StringBuilder streamed = new StringBuilder();
            Session.Result got = session.generate(chat ? Prompt.chat(Message.user(prompt)) : Prompt.text(prompt),
                                                  (text, n) -> streamed.append(text));
            TestSupport.assertSameReply(want, got, (chat ? "chat '" : "text '") + prompt + "'");
            assertEquals(got.text(), streamed.toString());
            if (!chat) {
                TestSupport.assertSameReply(want, session.generate(Prompt.tokens(engine.tokenize(prompt))),
                                            "tokens '" + prompt + "'");
            }
            return got.text();
        }
    }

    @Test
    void greedyEqualsCellmHost() {
        compare("What is the capital of France?", true, 24);
        compare("The capital of France is", false, 16);
    }

    @Test
    void emojiAndCjkStreamIntact() {
        // The model answers with a row of 👌 (four bytes each: a surrogate pair in Java)...
        String emoji = compare("What emoji means happy? 😀 or 😢", true, 24);
        assertTrue(emoji.contains("👌"), emoji);
        // ... and with Japanese (three-byte characters).
        String japanese = compare("Translate to Japanese: I love cats 🐱", true, 24);
        assertTrue(japanese.codePoints().anyMatch(c -> c >= 0x3040 && c <= 0x30ff), japanese);
        assertTrue(japanese.indexOf('\ufffd') < 0, japanese);
    }
}
