package org.cuvmm.ipc;

/** The frame types of protocol version 1 and who may send each. */
public enum FrameType {
    HELLO(1, true, false),
    HELLO_OK(2, false, true),
    ATTACH(3, true, false),
    /** Carries one fd per chunk. */
    DESCRIPTOR(4, false, true),
    RELEASE(5, true, false),
    RELEASED(6, false, true),
    DROP(7, false, true),
    ERROR(8, true, true);

    private final int code;
    private final boolean fromClient;
    private final boolean fromServer;

    FrameType(int code, boolean fromClient, boolean fromServer) {
        this.code = code;
        this.fromClient = fromClient;
        this.fromServer = fromServer;
    }

    public int code() { return code; }

    /** True when a client may send this type. */
    public boolean fromClient() { return fromClient; }

    /** True when a server may send this type. */
    public boolean fromServer() { return fromServer; }

    /** The type with this code, or null. */
    public static FrameType of(int code) {
        for (FrameType t : values()) if (t.code == code) return t;
        return null;
    }
}
