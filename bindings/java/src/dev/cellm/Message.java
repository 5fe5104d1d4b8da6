package dev.cellm;

import java.util.Objects;

/** One chat message: role "system", "user" or "assistant", and its content. */
public record Message(String role, String content) {
    public Message {
        Objects.requireNonNull(role, "role");
        Objects.requireNonNull(content, "content");
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
}
