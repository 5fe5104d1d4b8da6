package dev.cellm;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Objects;

/**
 * One chat message: role "system", "user", "assistant" or "tool", and its content. An assistant message may carry
 * the function calls of an earlier answer (its content may then be null), and a tool message the id of the call
 * whose result it is: a conversation with either goes to cellm as OpenAI's messages JSON
 * (cellm_session_submit_chat_json).
 */
public record Message(String role, String content, List<Session.ToolCall> toolCalls, String toolCallId) {
    public Message {
        Objects.requireNonNull(role, "role");
        toolCalls = toolCalls == null ? Collections.emptyList()
                                      : Collections.unmodifiableList(new ArrayList<>(toolCalls));
        if (content == null && toolCalls.isEmpty()) throw new NullPointerException("content");
    }

    public Message(String role, String content) {
        this(role, content, null, null);
    }

    public static Message system(String content) {
        return new Message("system", content);
    }

    public static Message user(String content) {
        return new Message("user", content);
    }

    public static Message assistant(String content) {
        return new Message("assistant", content);
    }

    /** An answer that called functions ({@link Session.Result#toolCalls()}), with no other text. */
    public static Message assistant(List<Session.ToolCall> toolCalls) {
        return new Message("assistant", null, toolCalls, null);
    }

    /** The result of the call with this id, as text (often JSON). */
    public static Message tool(String toolCallId, String content) {
        return new Message("tool", content, null, Objects.requireNonNull(toolCallId, "toolCallId"));
    }

    /** Whether only cellm_session_submit_chat_json takes this message. */
    boolean needsJson() {
        return !toolCalls.isEmpty() || toolCallId != null || role.equals("tool");
    }
}
