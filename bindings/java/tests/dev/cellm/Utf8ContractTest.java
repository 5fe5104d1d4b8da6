package dev.cellm;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import org.junit.jupiter.api.Test;

/**
 * cellm.h promises that a TEXT event carries complete UTF-8 characters. On the synthetic model, whose replies are
 * random bytes, every piece must then decode strictly (libcellm's stream decoder replaces malformed bytes with
 * U+FFFD; before it did, they passed through).
 */
class Utf8ContractTest {
    @Test
    void everyPieceIsWellFormedUtf8() throws Exception {
        TestSupport.withNativeLongTurn(s -> {
            int[] event = new int[CellmNative.EVENT_INTS];
            StringBuilder bad = new StringBuilder();
            for (;;) {
                byte[] text = CellmNative.sessionPoll(s, 60000, event, null);
                if (event[CellmNative.EVENT_KIND] == CellmNative.EVENT_DONE) break;
                try {
                    StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPORT)
                            .onUnmappableCharacter(CodingErrorAction.REPORT).decode(ByteBuffer.wrap(text));
                } catch (CharacterCodingException malformed) {
                    bad.append(hex(text)).append(' ');
                }
            }
            assertTrue(bad.length() == 0, () -> "TEXT events with malformed UTF-8: " + bad);
        });
    }

    private static String hex(byte[] bytes) {
        StringBuilder out = new StringBuilder("[");
        for (byte b : bytes) out.append(String.format("%02x", b & 0xff));
        return out.append(']').toString();
    }
}
