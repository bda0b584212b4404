package org.cuvmm.ipc;

import java.io.IOException;

/**
 * File descriptors arrived that could not be handed over intact. Every fd that did arrive
 * has been closed. The bytes read are in {@link #data()}: all that were asked for (the
 * stream is still in step), unless more fds than allowed arrived before they were all read
 * ({@link #streamInStep()} false: reading stopped at once, so the connection should be closed).
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
    private final boolean streamInStep;

    FdTransferException(Reason reason, String message, byte[] data, int fdsClosed, boolean streamInStep) {
        super(message);
        this.reason = reason;
        this.data = data;
        this.fdsClosed = fdsClosed;
        this.streamInStep = streamInStep;
    }

    /** Why the transfer failed. */
    public Reason reason() { return reason; }

    /** The bytes that were received with the fds (never null). */
    public byte[] data() { return data == null ? new byte[0] : data.clone(); }

    /** How many received fds were closed. */
    public int fdsClosed() { return fdsClosed; }

    /**
     * True when every byte asked for was read, so the next receive starts where the sender's
     * next message does; false when reading stopped early because too many fds arrived.
     */
    public boolean streamInStep() { return streamInStep; }
}
