package dev.cellm;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import org.junit.jupiter.api.Test;

/**
 * cellm.h promises that a TEXT event carries complete UTF-8 characters. On the synthetic model, whose replies are
 * random bytes, every piece must then decode strictly. (Expected to fail until libcellm's stream decoder
 * replaces malformed bytes: today it passes them through, and Java shows each as U+FFFD.)
 */
class Utf8ContractTest {
    @Test
    void everyPieceIsWellFormedUtf8() {
        long e = CellmNative.engineOpen(CellmNative.utf8(TestSupport.manifest()), null, null, null, 0, 256, 0, null,
                                        null, null);
        try {
            float[] floats = new float[CellmNative.FLOAT_COUNT];
            long[] longs = new long[CellmNative.LONG_COUNT];
            longs[CellmNative.MAX_TOKENS] = 200;
            int set = (1 << CellmNative.TEMPERATURE) | (1 << (CellmNative.FLOAT_COUNT + CellmNative.MAX_TOKENS));
            long s = CellmNative.sessionCreate(e, null, set, floats, longs, null);
            try {
                CellmNative.sessionSubmitText(s, CellmNative.utf8(TestSupport.LONG_PROMPT), null);
                int[] event = new int[3];
                StringBuilder bad = new StringBuilder();
                for (;;) {
                    byte[] text = CellmNative.sessionPoll(s, 60000, event);
                    if (event[CellmNative.EVENT_KIND] == CellmNative.EVENT_DONE) break;
                    try {
                        StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPORT)
                                .onUnmappableCharacter(CodingErrorAction.REPORT).decode(ByteBuffer.wrap(text));
                    } catch (CharacterCodingException malformed) {
                        bad.append(hex(text)).append(' ');
                    }
                }
                assertTrue(bad.length() == 0, () -> "TEXT events with malformed UTF-8: " + bad);
            } finally {
                CellmNative.sessionDestroy(s);
            }
        } finally {
            CellmNative.engineClose(e);
        }
    }

    private static String hex(byte[] bytes) {
        StringBuilder out = new StringBuilder("[");
        for (byte b : bytes) out.append(String.format("%02x", b & 0xff));
        return out.append(']').toString();
    }
}
