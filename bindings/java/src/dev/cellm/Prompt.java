package dev.cellm;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Objects;

/**
 * What a turn submits: the whole conversation so far, as text (BOS as the model asks), chat messages (rendered with
 * the chat template and the generation prompt), OpenAI's messages JSON, or token ids; text and chat may carry images
 * (PNG or JPEG file bytes) for a model that takes them, each "&lt;image&gt;" marker standing for the next one.
 * Immutable.
 */
public final class Prompt {
    private enum Kind { TEXT, CHAT, CHAT_JSON, TOKENS }

    private final Kind kind;
    private final byte[] text;        // TEXT, CHAT_JSON
    private final byte[][] roles;     // CHAT
    private final byte[][] contents;  // CHAT
    private final int[] tokens;       // TOKENS
    private final byte[][] images;    // TEXT or CHAT; null: none

    private Prompt(Kind kind, byte[] text, byte[][] roles, byte[][] contents, int[] tokens, byte[][] images) {
        this.kind = kind;
        this.text = text;
        this.roles = roles;
        this.contents = contents;
        this.tokens = tokens;
        this.images = images;
    }

    /** The text as is (cellm_session_submit_text). */
    public static Prompt text(String text) {
        return new Prompt(Kind.TEXT, CellmNative.utf8(Objects.requireNonNull(text, "text")), null, null, null, null);
    }

    /**
     * Chat messages (cellm_session_submit_chat); with function calls or tool results among them, as OpenAI's
     * messages JSON (cellm_session_submit_chat_json).
     */
    public static Prompt chat(List<Message> messages) {
        for (Message message : messages) {
            if (Objects.requireNonNull(message, "message").needsJson()) return chatJson(json(messages));
        }
        byte[][] roles = new byte[messages.size()][];
        byte[][] contents = new byte[messages.size()][];
        for (int i = 0; i < roles.length; ++i) {
            Message message = Objects.requireNonNull(messages.get(i), "message");
            roles[i] = CellmNative.utf8(message.role());
            contents[i] = CellmNative.utf8(message.content());
        }
        return new Prompt(Kind.CHAT, null, roles, contents, null, null);
    }

    public static Prompt chat(Message... messages) {
        return chat(Arrays.asList(messages));
    }

    /**
     * A conversation as OpenAI's {@code messages} JSON array (cellm_session_submit_chat_json): roles system, user,
     * assistant and tool, assistant {@code tool_calls}, tool messages' {@code tool_call_id}. A malformed message
     * throws {@link CellmException} {@link CellmException.Code#INVALID_ARGUMENT} naming the field
     * ("messages[3].tool_call_id: ...") when submitted. Takes no images.
     */
    public static Prompt chatJson(String messagesJson) {
        return new Prompt(Kind.CHAT_JSON, CellmNative.utf8(Objects.requireNonNull(messagesJson, "messagesJson")), null,
                          null, null, null);
    }

    /** Token ids, e.g. from {@link Engine#tokenize} (cellm_session_submit_tokens). The array is copied. */
    public static Prompt tokens(int[] tokens) {
        return new Prompt(Kind.TOKENS, null, null, null, tokens.clone(), null);
    }

    /** This text or chat prompt with images (cellm_session_submit_*_images). The arrays are not copied. */
    public Prompt withImages(List<byte[]> images) {
        if (kind == Kind.TOKENS) throw new IllegalArgumentException("a token prompt takes no images");
        if (kind == Kind.CHAT_JSON) {
            throw new IllegalArgumentException("messages JSON (or messages with tool calls) take no images");
        }
        List<byte[]> list = new ArrayList<>(images);
        for (byte[] image : list) Objects.requireNonNull(image, "image");
        return new Prompt(kind, text, roles, contents, tokens, list.toArray(new byte[0][]));
    }

    public Prompt withImages(byte[]... images) {
        return withImages(Arrays.asList(images));
    }

    void submit(long session) {
        switch (kind) {
            case TEXT -> CellmNative.sessionSubmitText(session, text, images);
            case CHAT -> CellmNative.sessionSubmitChat(session, roles, contents, images);
            case CHAT_JSON -> CellmNative.sessionSubmitChatJson(session, text);
            case TOKENS -> CellmNative.sessionSubmitTokens(session, tokens);
        }
    }

    // ---- OpenAI's JSON, written -----------------------------------------------------------------------------------

    static String json(List<Message> messages) {
        StringBuilder b = new StringBuilder("[");
        for (Message m : messages) {
            if (b.length() > 1) b.append(',');
            appendJsonString(b.append("{\"role\":"), m.role());
            b.append(",\"content\":");
            if (m.content() == null) b.append("null");
            else appendJsonString(b, m.content());
            if (!m.toolCalls().isEmpty()) {
                b.append(",\"tool_calls\":[");
                for (int i = 0; i < m.toolCalls().size(); ++i) {
                    Session.ToolCall call = m.toolCalls().get(i);
                    appendJsonString(b.append(i > 0 ? "," : "").append("{\"id\":"), call.id());
                    appendJsonString(b.append(",\"type\":\"function\",\"function\":{\"name\":"), call.name());
                    appendJsonString(b.append(",\"arguments\":"), call.arguments()).append("}}");
                }
                b.append(']');
            }
            if (m.toolCallId() != null) appendJsonString(b.append(",\"tool_call_id\":"), m.toolCallId());
            b.append('}');
        }
        return b.append(']').toString();
    }

    /** text as a JSON string: quotes, backslashes and control characters escaped, the rest as is. */
    static StringBuilder appendJsonString(StringBuilder b, String text) {
        b.append('"');
        for (int i = 0; i < text.length(); ++i) {
            char c = text.charAt(i);
            switch (c) {
                case '"' -> b.append("\\\"");
                case '\\' -> b.append("\\\\");
                case '\n' -> b.append("\\n");
                case '\r' -> b.append("\\r");
                case '\t' -> b.append("\\t");
                default -> {
                    if (c < 0x20) b.append(String.format("\\u%04x", (int) c));
                    else b.append(c);
                }
            }
        }
        return b.append('"');
    }
}
