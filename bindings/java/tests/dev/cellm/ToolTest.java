package dev.cellm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.regex.Pattern;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * Function calling (cellm.h 1.5) through the binding, on SmolLM2-135M-Instruct Q4_1 (CELLM_REAL_MODEL; ctest skips
 * this class without the file): the tools' prompt is some 300 tokens, more than the synthetic model's context.
 */
class ToolTest {
    private static final String WEATHER = "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\","
                                          + "\"maxLength\":8}},\"required\":[\"city\"],\"additionalProperties\":false}";
    /** The arguments WEATHER allows, with the whitespace the grammar allows between tokens. */
    private static final Pattern FITS = Pattern.compile("\\{\\s*\"city\"\\s*:\\s*\"[^\"\\\\]{0,8}\"\\s*}");
    private static final List<SamplingOptions.Tool> TOOLS = List.of(
        SamplingOptions.Tool.function("get_weather", "The weather in a city", WEATHER),
        SamplingOptions.Tool.function("get_time", "The local time in a \"city\"",
                                      "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}"));
    private static final Message QUESTION = Message.user("What is the weather in Oslo?");

    private static Engine engine;

    @BeforeAll
    static void open() {
        engine = Engine.builder().manifestPath(System.getProperty("cellm.smollmManifest"))
                     .modelPath(System.getenv("CELLM_REAL_MODEL")).open();
    }

    @AfterAll
    static void close() {
        engine.close();
    }

    private static SamplingOptions.Builder tools(String choice) {
        return TestSupport.greedy(48).toBuilder().tools(TOOLS).toolChoice(choice);
    }

    @Test
    void requiredCallStreamsAndFits() {
        try (Session session = engine.newSession(tools("required").parallelToolCalls(false).build())) {
            List<Session.ToolCallDelta> deltas = new ArrayList<>();
            StringBuilder text = new StringBuilder();
            Session.Result result = session.generate(Prompt.chat(QUESTION), new Session.TokenListener() {
                @Override
                public void onText(String piece, int generated) {
                    text.append(piece);
                }

                @Override
                public void onToolCall(Session.ToolCallDelta delta, int generated) {
                    deltas.add(delta);
                }
            });
            assertEquals(Session.FinishReason.TOOL_CALLS, result.finishReason());
            assertEquals(Session.FinishReason.TOOL_CALLS, result.stats().finishReason());
            assertEquals("", result.text());
            assertEquals("", text.toString());
            assertEquals(1, result.toolCalls().size(), result.toolCallsJson());
            Session.ToolCall call = result.toolCalls().get(0);
            assertTrue(call.name().equals("get_weather") || call.name().equals("get_time"), call.name());
            if (call.name().equals("get_weather")) {
                assertTrue(FITS.matcher(call.arguments()).matches(), call.arguments());
            }
            // The deltas: an announcement with arguments "", then pieces that join to the arguments.
            assertEquals(new Session.ToolCallDelta(0, call.id(), call.name(), ""), deltas.get(0));
            StringBuilder joined = new StringBuilder();
            for (Session.ToolCallDelta d : deltas) {
                assertEquals(0, d.index());
                assertEquals(call.id(), d.id());
                joined.append(d.arguments());
            }
            assertEquals(call.arguments(), joined.toString());
            // The records and cellm_session_get_tool_calls' JSON say the same.
            StringBuilder json = new StringBuilder("[{\"id\":");
            Prompt.appendJsonString(json, call.id()).append(",\"type\":\"function\",\"function\":{\"name\":");
            Prompt.appendJsonString(json, call.name()).append(",\"arguments\":");
            Prompt.appendJsonString(json, call.arguments()).append("}}]");
            assertEquals(json.toString(), result.toolCallsJson());
        }
    }

    @Test
    void namedCallAndTwoTurns() {
        try (Session session = engine.newSession(tools("get_weather").build())) {
            Session.Result first = session.generate(Prompt.chat(QUESTION));
            assertEquals(Session.FinishReason.TOOL_CALLS, first.finishReason());
            assertEquals(1, first.toolCalls().size(), first.toolCallsJson());
            Session.ToolCall call = first.toolCalls().get(0);
            assertEquals("get_weather", call.name());
            assertTrue(FITS.matcher(call.arguments()).matches(), call.arguments());

            // The call and its result in the history, an answer in text.
            session.configure(tools("none").maxTokens(16).build());
            Session.Result answer = session.generate(Prompt.chat(QUESTION, Message.assistant(first.toolCalls()),
                                                                 Message.tool(call.id(), "{\"celsius\": 4}")));
            assertTrue(answer.finishReason() == Session.FinishReason.EOG
                       || answer.finishReason() == Session.FinishReason.LENGTH, answer.finishReason().toString());
            assertFalse(answer.text().isEmpty());
            assertTrue(answer.toolCalls().isEmpty());
            assertEquals("[]", answer.toolCallsJson());
            assertTrue(answer.stats().cachedTokens() > 0, "the second turn reuses the first's context");

            // The same conversation as messages JSON, written by hand.
            String json = "[{\"role\":\"user\",\"content\":\"What is the weather in Oslo?\"},"
                          + "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":" + first.toolCallsJson() + "},"
                          + "{\"role\":\"tool\",\"tool_call_id\":\"" + call.id() + "\",\"content\":\"4 degrees\"}]";
            Session.Result again = session.generate(Prompt.chatJson(json));
            assertFalse(again.text().isEmpty());
            assertTrue(again.stats().cachedTokens() > 0);
        }
    }

    @Test
    void refusalsNameTheField() {
        CellmException bad = assertThrows(CellmException.class, () -> engine.newSession(
            SamplingOptions.builder().tools("[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":3}}]")
                .build()));
        assertEquals(CellmException.Code.INVALID_ARGUMENT, bad.code());
        assertTrue(bad.getMessage().contains("tools[0].function.parameters"), bad.getMessage());
        bad = assertThrows(CellmException.class, () -> engine.newSession(tools("launch_rocket").build()));
        assertEquals(CellmException.Code.INVALID_ARGUMENT, bad.code());
        assertTrue(bad.getMessage().contains("tool_choice"), bad.getMessage());
        try (Session session = engine.newSession(tools("auto").build())) {
            CellmException unknown = assertThrows(CellmException.class, () -> session.generate(
                Prompt.chat(QUESTION, Message.tool("nobody", "1"))));
            assertEquals(CellmException.Code.INVALID_ARGUMENT, unknown.code());
            assertTrue(unknown.getMessage().contains("messages[1].tool_call_id"), unknown.getMessage());
            assertThrows(IllegalArgumentException.class, () -> Prompt.chatJson("[]").withImages(new byte[1]));
            assertThrows(NullPointerException.class, () -> new Message("assistant", null));
        }
    }
}
