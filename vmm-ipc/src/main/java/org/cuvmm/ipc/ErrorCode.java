package org.cuvmm.ipc;

/** Error codes of the ERROR frame (docs/PROTOCOL.md section 4). */
public enum ErrorCode {
    /** The first 4 bytes of a header are not the magic; fatal. */
    BAD_MAGIC(1, true),
    /** The header's version is not one the receiver speaks (the payload was skipped by its length). */
    BAD_VERSION(2, false),
    /** The type is not one of the header version's frame types. */
    UNKNOWN_TYPE(3, false),
    /** The stream ended in the middle of a frame; fatal. */
    TRUNCATED(4, true),
    /** The frame's length is above 65536; fatal. */
    TOO_LARGE(5, true),
    /** fds arrived with a frame type that carries none (and the kernel dropped none of them). */
    UNEXPECTED_FDS(6, false),
    /**
     * A DESCRIPTOR arrived with another number of fds than it names, more than 253 fds arrived
     * (then fatal), or the kernel dropped fds ({@code MSG_CTRUNC}).
     */
    FD_COUNT_MISMATCH(7, false),
    /** No buffer is published under the ATTACH's name (the message lists those that are), or it was withdrawn meanwhile. */
    UNKNOWN_NAME(8, false),
    /** RELEASE of a lease id this connection does not hold. */
    UNKNOWN_LEASE(9, false),
    /** The peer's uid is not on the server's allow-list; sent, then the connection is closed. */
    NOT_ALLOWED(10, true),
    /** The server could not do it (the buffer could not be leased or exported, say); the message says why. */
    INTERNAL(11, false),
    /** The payload does not parse (lengths, UTF-8, empty names, sizes that are 0 or overflow). */
    BAD_PAYLOAD(12, false),
    /** A known type sent in the wrong direction or at the wrong time (before HELLO, a second HELLO). */
    UNEXPECTED_FRAME(13, false),
    /** A request (HELLO, ATTACH, RELEASE) with request id 0, which is reserved for frames that answer nothing. */
    BAD_REQUEST_ID(14, false),
    /** The server already serves as many connections as it is configured for; sent, then the connection is closed. */
    TOO_MANY_CONNECTIONS(15, true),
    /** ATTACH refused: this connection already holds as many leases as the server allows one connection. */
    TOO_MANY_LEASES(16, false),
    /** The client sent no HELLO in time, or stayed idle without leases too long; sent, then the connection is closed. */
    TIMEOUT(17, true),
    /**
     * Version 2: a FORGET named an id this connection was never given or already forgot (nothing
     * was forgotten), or a client rejects a DESCRIPTOR naming, without its fd, an id it does not hold.
     */
    UNKNOWN_ID(18, false),
    /**
     * Version 2: ATTACH refused: its DESCRIPTOR would make this connection hold more allocation
     * ids than the server allows one connection; FORGET some first.
     */
    TOO_MANY_IDS(19, false);

    private final int code;
    private final boolean fatal;

    ErrorCode(int code, boolean fatal) {
        this.code = code;
        this.fatal = fatal;
    }

    /** The number the ERROR frame carries for this code (PROTOCOL.md section 4). */
    public int code() { return code; }

    /** True when the stream cannot be trusted after this error: the connection is closed. */
    public boolean fatal() { return fatal; }

    /** The code with this number, or null. */
    public static ErrorCode of(int code) {
        for (ErrorCode c : values()) if (c.code == code) return c;
        return null;
    }
}
