package org.cuvmm.ipc;

import java.io.IOException;

/**
 * The sharing protocol failed: the server answered with an ERROR ({@link #code()} is its
 * code and the message is the server's), the server sent a frame this client rejected, or
 * what the server sent could not be imported ({@link #code()} null, the cause says why).
 */
public class SharingException extends IOException {
    private static final long serialVersionUID = 1L;

    private final ErrorCode code;

    public SharingException(ErrorCode code, String message) {
        super(message);
        this.code = code;
    }

    public SharingException(ErrorCode code, String message, Throwable cause) {
        super(message, cause);
        this.code = code;
    }

    /**
     * The protocol error code, or null for a local failure and for an ERROR whose code this
     * client does not know (the message then ends with {@code "(code N)"}).
     */
    public ErrorCode code() { return code; }
}
