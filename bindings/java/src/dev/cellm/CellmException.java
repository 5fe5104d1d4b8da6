package dev.cellm;

/**
 * A cellm call failed: {@link #code()} is its cellm_result, {@link #getMessage()} the one line cellm_last_error()
 * gave. Also thrown for calls on a closed {@link Engine} or {@link Session} (code {@link Code#CLOSED}).
 */
public class CellmException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    /** cellm_result, value for value. */
    public enum Code {
        SUCCESS(0),
        /** A null or out-of-range argument. */
        INVALID_ARGUMENT(1),
        /** The manifest file or text does not parse or validate. */
        MANIFEST(2),
        /** Plugins, model or backend could not be set up. */
        LOAD(3),
        /** The prompt is unusable: empty, a token outside the vocabulary, messages the template cannot render. */
        PROMPT(4),
        /** The session is still generating its previous turn. */
        BUSY(5),
        /** The engine (or this object) was closed. */
        CLOSED(6),
        /** A wait ran out of time. */
        TIMEOUT(7),
        /** Anything else; the message says what. */
        INTERNAL(8),
        /** The prompt can never run: longer than the context, or than the whole KV pool. */
        TOO_LONG(9),
        /**
         * A grammar or JSON schema that does not parse, uses a keyword the engine cannot honour, or is too large;
         * the message names the keyword or position.
         */
        GRAMMAR(10);

        private final int value;

        Code(int value) {
            this.value = value;
        }

        /** The cellm_result value. */
        public int value() {
            return value;
        }

        /** The code of a cellm_result value; INTERNAL for one this binding does not know. */
        public static Code of(int value) {
            for (Code code : values()) {
                if (code.value == value) return code;
            }
            return INTERNAL;
        }
    }

    private final Code code;

    public CellmException(Code code, String message) {
        super(message);
        this.code = code;
    }

    public Code code() {
        return code;
    }

    @Override
    public String toString() {
        return getClass().getName() + " [" + code + "]: " + getMessage();
    }

    /** Called by the JNI layer with cellm_last_error() as UTF-8. */
    static CellmException fromNative(int result, byte[] message) {
        return new CellmException(Code.of(result), CellmNative.string(message));
    }

    static CellmException closed(String what) {
        return new CellmException(Code.CLOSED, what + " is closed");
    }
}
