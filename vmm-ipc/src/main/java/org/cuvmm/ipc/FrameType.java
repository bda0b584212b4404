package org.cuvmm.ipc;

/** The frame types of the protocol, who may send each and since which version. */
public enum FrameType {
    /** Client to server, first: the protocol version and the client's name. */
    HELLO(1, true, false),
    /** The answer to HELLO: the version this connection speaks. */
    HELLO_OK(2, false, true),
    /** Asks for the buffer published under a name. */
    ATTACH(3, true, false),
    /** The answer to ATTACH: the lease and the chunks; version 1 carries one fd per chunk, version 2 one per chunk new to the connection. */
    DESCRIPTOR(4, false, true),
    /** Gives a lease back: the client no longer maps the memory. */
    RELEASE(5, true, false),
    /** The answer to RELEASE. */
    RELEASED(6, false, true),
    /** Unsolicited: the owner withdrew the buffer of this lease (release it when done). */
    DROP(7, false, true),
    /** A refusal or a protocol error, with a code and a message; never answered. */
    ERROR(8, true, true),
    /** Version 2: the client holds none of these ids any more (no mapping, no fd). */
    FORGET(9, true, false, 2),
    /** Version 2: the answer to FORGET: how many ids were forgotten. */
    FORGOTTEN(10, false, true, 2),
    /** Version 2, unsolicited: the producer released these allocations; no later DESCRIPTOR names them. */
    EVICT(11, false, true, 2);

    private final int code;
    private final boolean fromClient;
    private final boolean fromServer;
    private final int sinceVersion;

    /**
     * The types by code (null where no type has that code): every frame read looks its type
     * up, and {@link #values()} copies its array on each call.
     */
    private static final FrameType[] BY_CODE;

    static {
        int max = 0;
        for (FrameType t : values()) max = Math.max(max, t.code);
        BY_CODE = new FrameType[max + 1];
        for (FrameType t : values()) BY_CODE[t.code] = t;
    }

    FrameType(int code, boolean fromClient, boolean fromServer) {
        this(code, fromClient, fromServer, 1);
    }

    FrameType(int code, boolean fromClient, boolean fromServer, int sinceVersion) {
        this.code = code;
        this.fromClient = fromClient;
        this.fromServer = fromServer;
        this.sinceVersion = sinceVersion;
    }

    /** The first protocol version that has this type (on a version-1 connection types 9 to 11 are unknown). */
    public int sinceVersion() { return sinceVersion; }

    /** The number the header's type field carries for this type (PROTOCOL.md section 2). */
    public int code() { return code; }

    /** True when a client may send this type. */
    public boolean fromClient() { return fromClient; }

    /** True when a server may send this type. */
    public boolean fromServer() { return fromServer; }

    /** The type with this code, or null. */
    public static FrameType of(int code) {
        return code >= 0 && code < BY_CODE.length ? BY_CODE[code] : null;
    }

    /** The type with this code in protocol {@code version}, or null when that version has none. */
    public static FrameType of(int code, int version) {
        FrameType t = of(code);
        return t == null || t.sinceVersion > version ? null : t;
    }

    /** The highest type code of {@code version} (8 in version 1, 11 in version 2). */
    static int maxCode(int version) {
        int max = 0;
        for (FrameType t : values()) if (t.sinceVersion <= version) max = Math.max(max, t.code);
        return max;
    }
}
