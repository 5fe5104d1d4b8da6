package dev.cellm;

import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

/**
 * An engine from a model file alone, no manifest (cellm.h 1.3: manifest_path and manifest_text both NULL), equal to
 * `cellm-host run --model FILE` without --manifest.
 */
class ModelOnlyTest {
    @Test
    void opensAModelFileAlone() {
        String prompt = "the cat sat on the mat";
        TestSupport.HostReply want =
                TestSupport.hostRun(null, TestSupport.model(), prompt, false, 16, "--backend", "scalar", "--threads", "1");
        try (Engine engine = Engine.builder().modelPath(TestSupport.model()).backend("scalar").threads(1).open();
             Session session = engine.newSession(TestSupport.greedy(16))) {
            assertTrue(engine.info().modelPath().endsWith("tiny-q8_0.gguf"), engine.info().modelPath());
            TestSupport.assertSameReply(want, session.generate(prompt), "the model file alone");
        }
    }
}
