package org.cuvmm.ipc;

/** Error codes of the ERROR frame (docs/PROTOCOL.md section 4). */
public enum ErrorCode {
    BAD_MAGIC(1, true),
    BAD_VERSION(2, false),
    UNKNOWN_TYPE(3, false),
    TRUNCATED(4, true),
    TOO_LARGE(5, true),
    UNEXPECTED_FDS(6, false),
    FD_COUNT_MISMATCH(7, false),
    UNKNOWN_NAME(8, false),
    UNKNOWN_LEASE(9, false),
    NOT_ALLOWED(10, true),
    INTERNAL(11, false),
    BAD_PAYLOAD(12, false),
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
