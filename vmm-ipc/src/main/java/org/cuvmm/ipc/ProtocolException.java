package org.cuvmm.ipc;

import java.io.IOException;

/**
 * A frame that broke the protocol. Every fd that arrived with it has been closed. {@link
 * #fatal()}: the stream can no longer be trusted and the connection must be closed.
 */
public final class ProtocolException extends IOException {
    private static final long serialVersionUID = 1L;

    private final ErrorCode code;
    private final boolean fatal;
    private final int requestId;
    private final long leaseId;
    /**
     * The frame's type when its header was trusted far enough to know it (set by FrameIO), else
     * null. Transient, as {@link #descriptor}: the receiving side's bookkeeping, not part of a
     * serialized exception.
     */
    transient FrameType frameType;
    /**
     * A version-2 DESCRIPTOR whose payload parsed but was rejected (fds, ids), else null: the
     * client forgets the ids of its FD chunks it did not hold before (docs/PROTOCOL.md 13.3),
     * which the server counts as held from the moment it sent them.
     */
    transient Messages.DescriptorV2 descriptor; // a record that is not Serializable: a SharingException caused by this did not serialize
    /**
     * The frame's fds were dropped by this process's kernel ({@code MSG_CTRUNC}: at its
     * open-file limit): the fault is here, not the peer's (set by FrameIO).
     */
    boolean fdsDroppedHere;

    ProtocolException(ErrorCode code, int requestId, String message) {
        this(code, code.fatal(), requestId, 0, message);
    }

    ProtocolException(ErrorCode code, boolean fatal, int requestId, long leaseId, String message) {
        super(message);
        this.code = code;
        this.fatal = fatal;
        this.requestId = requestId;
        this.leaseId = leaseId;
    }

    /** The code the ERROR frame answering this carries. */
    public ErrorCode code() { return code; }

    /** True when the stream cannot be trusted after this: the connection is closed. */
    public boolean fatal() { return fatal; }

    /** The request id of the offending frame (0 when its header could not be trusted). */
    public int requestId() { return requestId; }

    /** For a DESCRIPTOR that parsed but was rejected: its lease id, so the receiver can release it; else 0. */
    public long leaseId() { return leaseId; }

    ProtocolException withRequestId(int id) {
        ProtocolException e = new ProtocolException(code, fatal, id, leaseId, getMessage());
        e.descriptor = descriptor;
        e.fdsDroppedHere = fdsDroppedHere;
        e.setStackTrace(getStackTrace());
        return e;
    }

    ProtocolException withLeaseId(long lease) {
        ProtocolException e = new ProtocolException(code, fatal, requestId, lease, getMessage());
        e.descriptor = descriptor;
        e.fdsDroppedHere = fdsDroppedHere;
        e.setStackTrace(getStackTrace());
        return e;
    }

    /** As this, naming the rejected version-2 DESCRIPTOR {@code d}. */
    ProtocolException withDescriptor(Messages.DescriptorV2 d) {
        ProtocolException e = withLeaseId(d.leaseId());
        e.descriptor = d;
        return e;
    }

    @Override
    public String toString() { return "ProtocolException[" + code + (fatal ? ", fatal" : "") + "]: " + getMessage(); }
}
