package dev.cellm;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * Streaming on the synthetic model, whose replies are random bytes: many of them multi-byte characters. The
 * pieces a listener gets must add up to the turn's text exactly, and the bytes under them to get_text's.
 */
class StreamingTest {
    private static Engine engine;

    @BeforeAll
    static void open() {
        engine = TestSupport.openLong();
    }

    @AfterAll
    static void close() {
        engine.close();
    }

    record Piece(String text, int generatedTokens, Thread thread) {}

    @Test
    void piecesAddUpToTheText() throws Exception {
        try (Session session = engine.newSession(TestSupport.greedy(200))) {
            List<Piece> pieces = new ArrayList<>();
            CompletableFuture<Session.Result> future = session.submit(Prompt.text(TestSupport.LONG_PROMPT),
                    (text, generated) -> pieces.add(new Piece(text, generated, Thread.currentThread())));
            Session.Result result = future.get();
            StringBuilder streamed = new StringBuilder();
            int last = 0;
            for (Piece piece : pieces) {
                assertFalse(piece.text().isEmpty());
                assertTrue(piece.generatedTokens() >= last, "generated tokens went down");
                assertTrue(piece.thread().getName().startsWith("cellm-dispatch-"), piece.thread().getName());
                last = piece.generatedTokens();
                streamed.append(piece.text());
            }
            assertEquals(result.text(), streamed.toString());
            assertEquals(Session.FinishReason.LENGTH, result.finishReason());
            assertEquals(200, result.tokens().length);
            assertEquals(200, result.stats().generatedTokens());
            assertTrue(last <= 200 && last > 0);
            // Characters past ASCII came through (not only the replacement character of a stray byte).
            long multiByte = result.text().codePoints().filter(c -> c > 0x7f && c != 0xfffd).count();
            assertTrue(multiByte > 0, () -> "no multi-byte character in " + result.text());
        }
    }

    /** The bytes of the events, polled through the JNI layer itself, are get_text's bytes, and decode to Result.text. */
    @Test
    void bytesAreExact() throws Exception {
        Session.Result viaApi;
        try (Session session = engine.newSession(TestSupport.greedy(200))) {
            viaApi = session.generate(TestSupport.LONG_PROMPT);
        }
        TestSupport.withNativeLongTurn(s -> {
            ByteArrayOutputStream streamed = new ByteArrayOutputStream();
            int[] event = new int[CellmNative.EVENT_INTS];
            int pieces = 0;
            for (;;) {
                byte[] text = CellmNative.sessionPoll(s, 60000, event, null);
                if (event[CellmNative.EVENT_KIND] == CellmNative.EVENT_DONE) {
                    assertEquals(0, text.length);
                    break;
                }
                assertEquals(CellmNative.EVENT_TEXT, event[CellmNative.EVENT_KIND]);
                streamed.write(text);
                ++pieces;
            }
            assertTrue(pieces > 1);
            byte[] whole = CellmNative.sessionText(s);
            assertArrayEquals(whole, streamed.toByteArray());
            assertEquals(viaApi.text(), new String(whole, StandardCharsets.UTF_8));
            assertArrayEquals(viaApi.tokens(), CellmNative.sessionTokens(s));
            assertEquals(-1, indexOf(whole, (byte) 0), "a NUL byte in the text");
        });
    }

    /** Emoji and CJK in a chat prompt go down intact: the session's prompt has the tokens of that text. */
    @Test
    void unicodePromptsGoDownIntact() {
        String content = "😀🎉 你好世界 ünïcödé";
        try (Session session = engine.newSession(TestSupport.greedy(4))) {
            Session.Result result = session.generate(Prompt.text(content));
            assertEquals(engine.tokenize(content).length, result.stats().promptTokens());
            Session.Result chat = session.generate(List.of(Message.user(content)));
            assertTrue(chat.stats().promptTokens() > result.stats().promptTokens());
        }
    }

    private static int indexOf(byte[] bytes, byte b) {
        for (int i = 0; i < bytes.length; ++i) {
            if (bytes[i] == b) return i;
        }
        return -1;
    }
}
