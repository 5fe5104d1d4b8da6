package dev.cellm;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.Objects;

/**
 * A session's settings (cellm_session_options). What is not set keeps the manifest's [sampling] value; without a
 * seed there, each session draws its own. Immutable; make one with {@link #builder()}.
 */
public final class SamplingOptions {
    private final String name;
    private final int set;
    private final float[] floats = new float[CellmNative.FLOAT_COUNT];
    private final long[] longs = new long[CellmNative.LONG_COUNT];
    private final List<String> stop; // null: the manifest's
    private final String grammar; // null: none
    private final String jsonSchema; // null: none
    private final int[] biasTokens; // null: no bias
    private final float[] biasValues;
    private final String tools; // OpenAI's tools array as JSON text; null: none
    private final String toolChoice; // null: cellm's default ("auto" with tools)

    /**
     * A function the model may call (one entry of OpenAI's {@code tools}): its name, what it does (may be null) and
     * its parameters' JSON Schema as text (may be null: no parameters).
     */
    public record Tool(String name, String description, String parameters) {
        public Tool {
            Objects.requireNonNull(name, "name");
        }

        public static Tool function(String name, String description, String parametersSchema) {
            return new Tool(name, description, parametersSchema);
        }

        /** {"type": "function", "function": {"name", "description", "parameters"}}. */
        String toJson() {
            StringBuilder b = new StringBuilder("{\"type\":\"function\",\"function\":{\"name\":");
            Prompt.appendJsonString(b, name);
            if (description != null) Prompt.appendJsonString(b.append(",\"description\":"), description);
            if (parameters != null) b.append(",\"parameters\":").append(parameters);
            return b.append("}}").toString();
        }
    }

    private SamplingOptions(Builder b) {
        name = b.name;
        set = b.set;
        System.arraycopy(b.floats, 0, floats, 0, floats.length);
        System.arraycopy(b.longs, 0, longs, 0, longs.length);
        stop = b.stop;
        grammar = b.grammar;
        jsonSchema = b.jsonSchema;
        biasTokens = b.biasTokens;
        biasValues = b.biasValues;
        tools = b.tools;
        toolChoice = b.toolChoice;
    }

    public static Builder builder() {
        return new Builder();
    }

    /** Greedy decoding (temperature 0), everything else the manifest's. */
    public static SamplingOptions greedy() {
        return builder().temperature(0).build();
    }

    /** A builder that starts from these settings. */
    public Builder toBuilder() {
        Builder b = new Builder();
        b.name = name;
        b.set = set;
        System.arraycopy(floats, 0, b.floats, 0, floats.length);
        System.arraycopy(longs, 0, b.longs, 0, longs.length);
        b.stop = stop;
        b.grammar = grammar;
        b.jsonSchema = jsonSchema;
        b.biasTokens = biasTokens;
        b.biasValues = biasValues;
        b.tools = tools;
        b.toolChoice = toolChoice;
        return b;
    }

    long create(long engine) {
        return CellmNative.sessionCreate(engine, CellmNative.utf8(name), set, floats, longs, CellmNative.utf8(stop),
                                         CellmNative.utf8(grammar), CellmNative.utf8(jsonSchema), biasTokens,
                                         biasValues, CellmNative.utf8(tools), CellmNative.utf8(toolChoice));
    }

    void configure(long engine, long session) {
        CellmNative.sessionConfigure(engine, session, CellmNative.utf8(name), set, floats, longs,
                                     CellmNative.utf8(stop), CellmNative.utf8(grammar), CellmNative.utf8(jsonSchema),
                                     biasTokens, biasValues, CellmNative.utf8(tools), CellmNative.utf8(toolChoice));
    }

    /** Sampling runs in llama.cpp's order: penalties, top-k, top-p, min-p, temperature, seeded draw. */
    public static final class Builder {
        private String name;
        private int set;
        private final float[] floats = new float[CellmNative.FLOAT_COUNT];
        private final long[] longs = new long[CellmNative.LONG_COUNT];
        private List<String> stop;
        private String grammar;
        private String jsonSchema;
        private int[] biasTokens;
        private float[] biasValues;
        private String tools;
        private String toolChoice;

        private Builder() {}

        private Builder f(int index, float value) {
            floats[index] = value;
            set |= 1 << index;
            return this;
        }

        private Builder l(int index, long value) {
            longs[index] = value;
            set |= 1 << (CellmNative.FLOAT_COUNT + index);
            return this;
        }

        /** Shown in logs and errors. */
        public Builder name(String name) {
            this.name = name;
            return this;
        }

        /** 0: greedy. */
        public Builder temperature(float temperature) {
            return f(CellmNative.TEMPERATURE, temperature);
        }

        /** 0 or less: off. */
        public Builder topK(int topK) {
            return l(CellmNative.TOP_K, topK);
        }

        /** 1: off; 0 keeps only the most likely token. */
        public Builder topP(float topP) {
            return f(CellmNative.TOP_P, topP);
        }

        /** 0: off. */
        public Builder minP(float minP) {
            return f(CellmNative.MIN_P, minP);
        }

        /** 1: off; over the last repeatLastN tokens of the context. */
        public Builder repeatPenalty(float penalty) {
            return f(CellmNative.REPEAT_PENALTY, penalty);
        }

        public Builder repeatLastN(int n) {
            return l(CellmNative.REPEAT_LAST_N, n);
        }

        /** 0: off; subtracted once per earlier occurrence. */
        public Builder frequencyPenalty(float penalty) {
            return f(CellmNative.FREQUENCY_PENALTY, penalty);
        }

        /** 0: off; subtracted once if the token occurred. */
        public Builder presencePenalty(float penalty) {
            return f(CellmNative.PRESENCE_PENALTY, penalty);
        }

        /** Same seed and settings, same tokens (an unsigned 64-bit value). */
        public Builder seed(long seed) {
            return l(CellmNative.SEED, seed);
        }

        /** At least 1. */
        public Builder maxTokens(int maxTokens) {
            return l(CellmNative.MAX_TOKENS, maxTokens);
        }

        /** Strings that end the turn; they are not part of its text. Replaces the manifest's. */
        public Builder stop(List<String> stop) {
            this.stop = Collections.unmodifiableList(new ArrayList<>(stop)); // not List.copyOf: Android API 30+
            return this;
        }

        public Builder stop(String... stop) {
            return stop(Arrays.asList(stop));
        }

        /**
         * Every answer fits this grammar (llama.cpp's GBNF text), and the turn ends only where it may end
         * (docs/grammar.md). Compiled when the session is made or configured: a {@link CellmException} with code
         * {@link CellmException.Code#GRAMMAR} names what is wrong. Null: none.
         */
        public Builder grammar(String gbnf) {
            this.grammar = gbnf;
            return this;
        }

        /** As {@link #grammar}, for a JSON Schema (its text): every answer is JSON valid under it. Null: none. */
        public Builder jsonSchema(String schema) {
            this.jsonSchema = schema;
            return this;
        }

        /** Added to each token's logit before sampling; a very negative bias bans the token. Replaces earlier ones. */
        public Builder logitBias(Map<Integer, Float> bias) {
            biasTokens = new int[bias.size()];
            biasValues = new float[bias.size()];
            int i = 0;
            for (Map.Entry<Integer, Float> e : bias.entrySet()) {
                biasTokens[i] = e.getKey();
                biasValues[i++] = e.getValue();
            }
            return this;
        }

        /**
         * Functions the model may call, as OpenAI's {@code tools} array in JSON text (docs/sdk.md, Tools). The
         * answer's calls then arrive as {@link Session.ToolCall}s ({@link Session.Result#toolCalls()}, and streamed
         * to {@link Session.TokenListener#onToolCall}), its text is the rest, and the turn ends with
         * {@link Session.FinishReason#TOOL_CALLS}. A malformed tool throws {@link CellmException}
         * {@link CellmException.Code#INVALID_ARGUMENT} naming the field ("tools[0].function.parameters: ...") when
         * the session is made or configured. Not together with a grammar or JSON schema. Null: none.
         */
        public Builder tools(String toolsJson) {
            this.tools = toolsJson;
            return this;
        }

        /** As {@link #tools(String)}, from {@link Tool}s; an empty list is none. */
        public Builder tools(List<Tool> tools) {
            if (tools.isEmpty()) return tools((String) null);
            StringBuilder b = new StringBuilder("[");
            for (Tool tool : tools) b.append(b.length() > 1 ? "," : "").append(tool.toJson());
            return tools(b.append(']').toString());
        }

        public Builder tools(Tool... tools) {
            return tools(Arrays.asList(tools));
        }

        /**
         * Whether and which function to call: "auto" (the model decides; the default with tools), "none" (no calls;
         * the tools are not offered), "required" (at least one call), a function's name, or OpenAI's JSON object
         * {"type": "function", "function": {"name": ...}} as text. Calls asked for by "required" or a name always
         * parse and fit the function's schema. Null: the default.
         */
        public Builder toolChoice(String toolChoice) {
            this.toolChoice = toolChoice;
            return this;
        }

        /** Whether an answer may make several calls (cellm's default: it may). */
        public Builder parallelToolCalls(boolean parallel) {
            return l(CellmNative.PARALLEL_TOOL_CALLS, parallel ? 1 : 0);
        }

        /** Higher is served first when the scheduler must choose; 1 interactive, 0 background. */
        public Builder priority(int priority) {
            return l(CellmNative.PRIORITY, priority);
        }

        public SamplingOptions build() {
            return new SamplingOptions(this);
        }
    }
}
