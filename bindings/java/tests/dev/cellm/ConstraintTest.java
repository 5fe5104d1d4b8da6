package dev.cellm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Arrays;
import java.util.Map;
import java.util.regex.Pattern;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * Grammars, JSON schemas and logit bias (cellm.h 1.4) through the binding, on the synthetic model: its random weights
 * never write JSON by themselves, so an answer that fits is the constraint's doing.
 */
class ConstraintTest {
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
    void jsonSchemaAnswersFit() {
        String schema = "{\"type\":\"object\",\"properties\":{\"ok\":{\"type\":\"boolean\"},"
                        + "\"n\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":9}},\"required\":[\"ok\",\"n\"]}";
        // The whole answer, with the whitespace the grammar allows between tokens (-0 is JSON's 0, within bounds).
        Pattern fits = Pattern.compile("\\{\\s*\"ok\"\\s*:\\s*(true|false)\\s*,\\s*\"n\"\\s*:\\s*(-?0|[1-9])\\s*}\\s*");
        for (long seed = 1; seed <= 3; ++seed) {
            SamplingOptions options =
                SamplingOptions.builder().temperature(1).seed(seed).maxTokens(200).jsonSchema(schema).build();
            try (Session session = engine.newSession(options)) {
                Session.Result answer = session.generate("anything");
                assertEquals(Session.FinishReason.EOG, answer.finishReason(), answer.text());
                assertTrue(fits.matcher(answer.text()).matches(), answer.text());
            }
        }
    }

    @Test
    void gbnfGrammarAndRefusals() {
        SamplingOptions options =
            SamplingOptions.builder().temperature(1).seed(7).maxTokens(50).grammar("root ::= \"yes\" | \"no\"").build();
        try (Session session = engine.newSession(options)) {
            String text = session.generate("say").text();
            assertTrue(text.equals("yes") || text.equals("no"), text);
        }
        CellmException refused = assertThrows(CellmException.class, () -> engine.newSession(
            SamplingOptions.builder().jsonSchema("{\"not\":{\"type\":\"string\"}}").build()));
        assertEquals(CellmException.Code.GRAMMAR, refused.code());
        assertTrue(refused.getMessage().contains("\"not\""), refused.getMessage());
        try (Session session = engine.newSession(SamplingOptions.greedy())) {
            CellmException bad = assertThrows(CellmException.class, () -> session.configure(
                SamplingOptions.builder().grammar("root ::= missing").build()));
            assertEquals(CellmException.Code.GRAMMAR, bad.code());
        }
    }

    @Test
    void logitBiasBansAndForces() {
        int[] free;
        try (Session session = engine.newSession(TestSupport.greedy(6))) {
            free = session.generate("the cat").tokens();
        }
        int banned = free[0];
        int favoured = (banned + 1) % engine.info().nVocab();
        try (Session session = engine.newSession(TestSupport.greedy(6).toBuilder()
                                                     .logitBias(Map.of(banned, -1e30f)).build())) {
            int[] got = session.generate("the cat").tokens();
            assertFalse(Arrays.stream(got).anyMatch(t -> t == banned), Arrays.toString(got));
        }
        try (Session session = engine.newSession(TestSupport.greedy(4).toBuilder()
                                                     .logitBias(Map.of(favoured, 1e4f)).build())) {
            assertTrue(Arrays.equals(new int[] {favoured, favoured, favoured, favoured},
                                     session.generate("the cat").tokens()));
        }
    }
}
