package dev.cellm;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * What the tests share: the paths ctest passes (system properties cellm.host, cellm.manifest, cellm.model,
 * cellm.smollmManifest; CELLM_REAL_MODEL in the environment), and cellm-host as the reference. Greedy tokens are
 * never written down here: they are compared with what `cellm-host run --json` generates at test time.
 */
final class TestSupport {
    private TestSupport() {}

    static final List<String> RAW_PROMPTS = List.of("the cat", "a dog ran", "the cat sat on the mat",
                                                    "one two three four five");
    static final List<String> CHAT_PROMPTS = List.of("the cat", "hello there", "what is two plus two");
    /** The synthetic model answers this with LONG_TURN tokens and no end of generation before. */
    static final String LONG_PROMPT = "it was the best of times";
    static final int LONG_TURN = 240;

    static String host() {
        return System.getProperty("cellm.host");
    }

    static String manifest() {
        return System.getProperty("cellm.manifest");
    }

    static String model() {
        return System.getProperty("cellm.model");
    }

    static Engine openTiny() {
        return Engine.builder().manifestPath(manifest()).open();
    }

    /** The synthetic model's whole context, room for a long turn. */
    static Engine openLong() {
        return Engine.builder().manifestPath(manifest()).contextLength(256).open();
    }

    /** A manifest text for the synthetic model; extra continues its [context] table. */
    static String tinyManifestText(String extra) {
        return "[model]\npath = \"" + model() + "\"\n[backend]\nname = \"scalar\"\nthreads = 1\n[context]\n"
                + "length = 128\n" + extra;
    }

    /** What a test does with a native session handle (CellmNative, below the Java API). */
    interface NativeTurn {
        void run(long session) throws Exception;
    }

    /**
     * A greedy 200-token turn of LONG_PROMPT on the synthetic model through CellmNative alone, submitted and handed
     * to {@code body}; the session and its engine are freed afterwards.
     */
    static void withNativeLongTurn(NativeTurn body) throws Exception {
        long e = CellmNative.engineOpen(CellmNative.utf8(manifest()), null, null, null, 0, 256, 0, null, null, null, null, 0);
        try {
            float[] floats = new float[CellmNative.FLOAT_COUNT];
            long[] longs = new long[CellmNative.LONG_COUNT];
            longs[CellmNative.MAX_TOKENS] = 200;
            int set = (1 << CellmNative.TEMPERATURE) | (1 << (CellmNative.FLOAT_COUNT + CellmNative.MAX_TOKENS));
            long s = CellmNative.sessionCreate(e, null, set, floats, longs, null, null, null, null, null, null, null);
            try {
                CellmNative.sessionSubmitText(s, CellmNative.utf8(LONG_PROMPT), null);
                body.run(s);
            } finally {
                CellmNative.sessionDestroy(s);
            }
        } finally {
            CellmNative.engineClose(e);
        }
    }

    static SamplingOptions greedy(int maxTokens) {
        return SamplingOptions.builder().temperature(0).maxTokens(maxTokens).build();
    }

    /** Runs a command, its standard error to ours; its standard output, which must end with status 0. */
    static String run(List<String> command) {
        try {
            Process process = new ProcessBuilder(command).redirectError(ProcessBuilder.Redirect.INHERIT).start();
            String out = new String(process.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            assertEquals(0, process.waitFor(), () -> command + " failed; output: " + out);
            return out;
        } catch (IOException e) {
            throw new IllegalStateException("cannot run " + command, e);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IllegalStateException("interrupted", e);
        }
    }

    /** The integers of "key": [...] in a one-line JSON object. */
    static int[] jsonInts(String json, String key) {
        Matcher m = Pattern.compile("\"" + Pattern.quote(key) + "\"\\s*:\\s*\\[([^\\]]*)\\]").matcher(json);
        if (!m.find()) throw new AssertionError("no \"" + key + "\" array in " + json);
        String body = m.group(1).trim();
        if (body.isEmpty()) return new int[0];
        return Arrays.stream(body.split(",")).map(String::trim).mapToInt(Integer::parseInt).toArray();
    }

    static String jsonString(String json, String key) {
        Matcher m = Pattern.compile("\"" + Pattern.quote(key) + "\"\\s*:\\s*\"([^\"]*)\"").matcher(json);
        if (!m.find()) throw new AssertionError("no \"" + key + "\" string in " + json);
        return m.group(1);
    }

    record HostReply(int[] tokens, String finishReason) {}

    /** cellm-host run --json, greedy: manifest may be null (the model file alone), model may be null. */
    static HostReply hostRun(String manifest, String model, String prompt, boolean chat, int maxTokens,
                             String... extra) {
        List<String> command = new ArrayList<>(List.of(host(), "run"));
        if (manifest != null) command.addAll(List.of("--manifest", manifest));
        if (model != null) command.addAll(List.of("--model", model));
        command.addAll(List.of("--prompt", prompt, chat ? "--chat" : "--raw", "--temperature", "0", "--max-tokens",
                               Integer.toString(maxTokens), "--json"));
        command.addAll(Arrays.asList(extra));
        String json = run(command);
        return new HostReply(jsonInts(json, "tokens"), jsonString(json, "finish_reason"));
    }

    static HostReply hostRun(String prompt, boolean chat, int maxTokens) {
        return hostRun(manifest(), null, prompt, chat, maxTokens);
    }

    /** cellm_finish_reason_name's spelling. */
    static String name(Session.FinishReason reason) {
        return reason == Session.FinishReason.NONE ? "" : reason.name().toLowerCase(java.util.Locale.ROOT);
    }

    static void assertSameReply(HostReply want, Session.Result got, String what) {
        assertEquals(Arrays.toString(want.tokens()), Arrays.toString(got.tokens()), what + ": tokens");
        assertEquals(want.finishReason(), name(got.finishReason()), what + ": finish reason");
    }
}
