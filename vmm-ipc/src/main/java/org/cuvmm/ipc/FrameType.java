package org.cuvmm.ipc;

/** The frame types of the protocol, who may send each and since which version. */
public enum FrameType {
    HELLO(1, true, false),
    HELLO_OK(2, false, true),
    ATTACH(3, true, false),
    /** Carries one fd per chunk. */
    DESCRIPTOR(4, false, true),
    RELEASE(5, true, false),
    RELEASED(6, false, true),
    DROP(7, false, true),
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
