package dev.cellm;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import org.junit.jupiter.api.Test;

/** Opening engines, their information, statistics and tokenizer, and the errors of opening. */
class EngineTest {
    @Test
    void opensFromManifestPath() {
        assertTrue(Cellm.version().startsWith("1."), Cellm.version());
        List<Cellm.Backend> backends = Cellm.backends();
        assertTrue(backends.stream().anyMatch(b -> b.name().equals("scalar")), backends::toString);
        try (Engine engine = TestSupport.openTiny()) {
            Engine.Info info = engine.info();
            assertEquals("scalar", info.backend());
            assertEquals("llama", info.arch());
            assertEquals("chatml", info.chatTemplate());
            assertTrue(info.modelPath().endsWith("tiny-q8_0.gguf"), info.modelPath());
            assertFalse(info.modelName().isEmpty());
            assertEquals(128, info.contextLength());
            assertTrue(info.nVocab() > 0 && info.kvBlockSize() > 0 && info.kvBytesPerToken() > 0, info::toString);
            assertTrue(info.modelHasChatTemplate());
            assertFalse(info.modelTakesImages());
            assertTrue(info.weightsBytes() > 0 && info.kvPoolBytes() > 0 && info.scratchBytes() >= 0, info::toString);

            Engine.Stats stats = engine.stats();
            assertEquals(0, stats.sessions());
            assertEquals(0, stats.steps());
            assertEquals(info.kvBlocks(), stats.kvBlocks());
            assertEquals(stats.kvBlocks(), stats.kvBlocksFree());
            assertTrue(stats.kvBytesCommitted() >= 0 && stats.kvBytesCommitted() <= info.kvPoolBytes(), stats::toString);
        }
    }

    @Test
    void takesTheKvTypeAndMemoryBudget() {
        long f16 = 0;
        for (String type : new String[] {"f16", "r4"}) {
            try (Engine engine = Engine.builder().manifestPath(TestSupport.manifest()).kvType(type).open()) {
                long perToken = engine.info().kvBytesPerToken();
                if (type.equals("f16")) f16 = perToken;
                else assertTrue(perToken * 3 < f16, "r4 takes about a quarter of f16: " + perToken + " vs " + f16);
            }
        }
        CellmException e = assertThrows(CellmException.class,
                () -> Engine.builder().manifestPath(TestSupport.manifest()).memoryBudgetMib(1).open());
        assertTrue(e.getMessage().contains("memory budget"), e.getMessage());
    }

    @Test
    void overridesTheManifest() {
        try (Engine engine = Engine.builder().manifestPath(TestSupport.manifest()).backend("openblas").threads(1)
                .contextLength(64).maxSessions(3).precision(Engine.Precision.FAST).open()) {
            Engine.Info info = engine.info();
            assertEquals("openblas", info.backend());
            assertEquals(64, info.contextLength());
            assertEquals(3, info.maxSessions());
            assertTrue(info.kvBlocks() * info.kvBlockSize() >= 3 * 64, info::toString);
        }
    }

    @Test
    void opensFromManifestText() {
        try (Engine engine = Engine.builder().manifestText(TestSupport.tinyManifestText("")).open()) {
            assertTrue(engine.info().modelPath().endsWith("tiny-q8_0.gguf"));
        }
    }

    /** Text goes down as UTF-8: emoji and CJK tokenize as cellm-host tokenizes them. */
    @Test
    void tokenizesLikeCellmHost() {
        String text = "héllo 😀🎉 世界 <|im_end|> the cat";
        String json = TestSupport.run(List.of(TestSupport.host(), "tokenize", "--model", TestSupport.model(), "--text",
                                              text, "--parse-special", "--json"));
        try (Engine engine = TestSupport.openTiny()) {
            int[] ids = engine.tokenize(text, false);
            assertArrayEquals(TestSupport.jsonInts(json, "ids"), ids);
            assertTrue(ids.length > 10, () -> ids.length + " tokens");
            assertEquals(1, engine.tokenize("<|im_end|>", false).length);
            assertTrue(engine.tokenize("the cat").length >= engine.tokenize("the cat", false).length);
            assertThrows(IllegalArgumentException.class, () -> engine.tokenize("a\0b"));
        }
    }

    @Test
    void badManifestsThrowWithTheirCode() {
        CellmException e = assertThrows(CellmException.class,
                () -> Engine.builder().manifestText(TestSupport.tinyManifestText("[model\npath = \"x.gguf\"\n")).open());
        assertEquals(CellmException.Code.MANIFEST, e.code());
        assertFalse(e.getMessage().isEmpty());

        e = assertThrows(CellmException.class,
                () -> Engine.builder().manifestText(TestSupport.tinyManifestText("[sampling]\ntemprature = 0\n")).open());
        assertEquals(CellmException.Code.MANIFEST, e.code());
        assertTrue(e.getMessage().contains("temprature"), e.getMessage());

        // The message comes up as UTF-8: a path with emoji and CJK is quoted whole.
        String absent = "/nonexistent/cellm-java-test/ünï 😀 世界.toml";
        e = assertThrows(CellmException.class, () -> Engine.builder().manifestPath(absent).open());
        assertEquals(CellmException.Code.MANIFEST, e.code());
        assertTrue(e.getMessage().contains("ünï 😀 世界.toml"), e.getMessage());

        e = assertThrows(CellmException.class,
                () -> Engine.builder().manifestPath(TestSupport.manifest()).backend("warp").open());
        assertEquals(CellmException.Code.LOAD, e.code());
        assertTrue(e.getMessage().contains("warp"), e.getMessage());

        e = assertThrows(CellmException.class, () -> Engine.builder().manifestPath(TestSupport.manifest())
                .manifestText(TestSupport.tinyManifestText("")).open());
        assertEquals(CellmException.Code.INVALID_ARGUMENT, e.code());
    }

    @Test
    void useAfterCloseThrowsClosed() {
        Engine engine = TestSupport.openTiny();
        engine.close();
        assertTrue(engine.isClosed());
        assertEquals(CellmException.Code.CLOSED, assertThrows(CellmException.class, engine::info).code());
        assertEquals(CellmException.Code.CLOSED, assertThrows(CellmException.class, engine::stats).code());
        assertEquals(CellmException.Code.CLOSED,
                     assertThrows(CellmException.class, () -> engine.tokenize("x")).code());
        assertEquals(CellmException.Code.CLOSED, assertThrows(CellmException.class, engine::newSession).code());
        engine.close(); // again: nothing
    }
}
