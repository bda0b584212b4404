package org.cuvmm.ipc;

import java.io.IOException;

/**
 * File descriptors arrived that could not be handed over intact. Every fd that did arrive
 * has been closed; the bytes were read (so the stream is still in step) and are in
 * {@link #data()}.
 */
public final class FdTransferException extends IOException {
    private static final long serialVersionUID = 1L;

    /** Why the fds were dropped. */
    public enum Reason {
        /**
         * The kernel dropped fds ({@code MSG_CTRUNC}): this process is at its open-file limit
         * ({@code RLIMIT_NOFILE}), or the sender sent more than fit.
         */
        CONTROL_TRUNCATED,
        /** More fds arrived than the caller allowed. */
        TOO_MANY_FDS
    }

    private final transient byte[] data;
    private final Reason reason;
    private final int fdsClosed;

    FdTransferException(Reason reason, String message, byte[] data, int fdsClosed) {
        super(message);
        this.reason = reason;
        this.data = data;
        this.fdsClosed = fdsClosed;
    }

    public Reason reason() { return reason; }

    /** The bytes that were received with the fds (never null). */
    public byte[] data() { return data == null ? new byte[0] : data.clone(); }

    /** How many received fds were closed. */
    public int fdsClosed() { return fdsClosed; }
}
