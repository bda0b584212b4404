package org.cuvmm.ipc;

/** Constants of the sharing protocol, version 1 (docs/PROTOCOL.md). */
public final class Protocol {
    /** The ASCII bytes "CVMM", big-endian. */
    public static final int MAGIC = 0x43564D4D;
    public static final int VERSION = 1;
    public static final int HEADER_SIZE = 16;
    /** Largest payload (bytes). */
    public static final int MAX_PAYLOAD = 65536;
    /** Most fds one frame may carry (Linux's {@code SCM_MAX_FD}). */
    public static final int MAX_FDS_PER_FRAME = NativeIo.MAX_FDS_PER_MESSAGE;
    /** Longest buffer name, in UTF-8 bytes (names are 1 to this). */
    public static final int MAX_NAME_BYTES = 255;
    /** Longest client name in HELLO, in UTF-8 bytes. */
    public static final int MAX_CLIENT_NAME_BYTES = 255;
    /** Longest error message, in UTF-8 bytes. */
    public static final int MAX_MESSAGE_BYTES = 4096;
    /** The only handle type of version 1: one POSIX fd per chunk. */
    public static final int HANDLE_TYPE_POSIX_FD = 1;

    private Protocol() {}
}
