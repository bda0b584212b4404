package org.cuvmm.ipc;

/**
 * Constants of the sharing protocol (docs/PROTOCOL.md). Versions 1 and 2 are served side by
 * side: the version field of a client's HELLO picks its connection's version.
 */
public final class Protocol {
    /** The ASCII bytes "CVMM", big-endian. */
    public static final int MAGIC = 0x43564D4D;
    /** Version 1: one fd per chunk in every DESCRIPTOR. Frames a server sends before HELLO_OK carry it. */
    public static final int VERSION = 1;
    /** Version 2: allocation ids per connection, fds only for ids the client does not hold, FORGET, EVICT. */
    public static final int VERSION_2 = 2;
    /** The newest version this implementation speaks. */
    public static final int LATEST_VERSION = VERSION_2;
    /** Most ids one FORGET or EVICT frame names: (65536 - 4) / 8, rounded down to leave room. */
    public static final int MAX_IDS_PER_FRAME = 8190;
    /** DESCRIPTOR v2 chunk flag: this chunk's fd is attached to the frame. */
    public static final int CHUNK_FLAG_FD = 1;
    /** Bytes of a frame header (PROTOCOL.md section 2). */
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

    /**
     * The payload length a frame header announces when the header can be trusted (at least 16
     * bytes, the magic right, the length at most {@link #MAX_PAYLOAD}), else -1. One rule for
     * the frame reader's refusals ({@code FrameIO}) and the socket's one-pass read of a
     * buffered frame ({@code FdSocket}).
     */
    static long trustedPayloadLength(byte[] header) {
        if (header == null || header.length < HEADER_SIZE || Messages.Reader.intAt(header, 0) != MAGIC) return -1;
        long length = Integer.toUnsignedLong(Messages.Reader.intAt(header, 12));
        return length <= MAX_PAYLOAD ? length : -1;
    }
}
