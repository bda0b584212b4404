package org.cuvmm.ipc;

import java.io.IOException;

/**
 * The sharing protocol failed: the server answered with an ERROR ({@link #code()} is its
 * code and the message is the server's), the server sent a frame this client rejected
 * ({@link #code()} is the code of that rejection, such as {@code BAD_PAYLOAD} or {@code
 * FD_COUNT_MISMATCH}), or what the server sent could not be received or imported here
 * ({@link #code()} null, a local failure: the kernel dropped the reply's fds at this
 * process's fd limit, or the import failed; the message and the cause say why).
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
     * The protocol error code: the server's, for an ERROR; the client's, for a frame it
     * rejected. Null for a local failure (fds the kernel dropped here, a failed import) and for
     * an ERROR whose code this client does not know (the message then ends with {@code
     * "(code N)"}).
     */
    public ErrorCode code() { return code; }
}
