package dev.cellm;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Objects;

/**
 * What a turn submits: the whole conversation so far, as text (BOS as the model asks), chat messages (rendered with
 * the chat template and the generation prompt) or token ids; text and chat may carry images (PNG or JPEG file
 * bytes) for a model that takes them, each "&lt;image&gt;" marker standing for the next one. Immutable.
 */
public final class Prompt {
    private enum Kind { TEXT, CHAT, TOKENS }

    private final Kind kind;
    private final byte[] text;        // TEXT
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

    /** Chat messages (cellm_session_submit_chat). */
    public static Prompt chat(List<Message> messages) {
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

    /** Token ids, e.g. from {@link Engine#tokenize} (cellm_session_submit_tokens). The array is copied. */
    public static Prompt tokens(int[] tokens) {
        return new Prompt(Kind.TOKENS, null, null, null, tokens.clone(), null);
    }

    /** This text or chat prompt with images (cellm_session_submit_*_images). The arrays are not copied. */
    public Prompt withImages(List<byte[]> images) {
        if (kind == Kind.TOKENS) throw new IllegalArgumentException("a token prompt takes no images");
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
            case TOKENS -> CellmNative.sessionSubmitTokens(session, tokens);
        }
    }
}
