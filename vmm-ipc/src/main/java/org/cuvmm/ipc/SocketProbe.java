package org.cuvmm.ipc;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;

import jnr.ffi.LastError;
import jnr.ffi.LibraryLoader;
import jnr.ffi.annotations.In;

/**
 * Asks whether anything listens on a Unix-domain socket path, answering with the errno of a
 * non-blocking {@code connect} (so that {@link FdServerSocket} decides by {@code ECONNREFUSED},
 * never by the words of a message). Package-private.
 */
final class SocketProbe {
    static final int ENOENT = 2;
    static final int EAGAIN = NativeIo.EAGAIN;
    static final int ECONNREFUSED = NativeIo.ECONNREFUSED;

    private static final int AF_UNIX = 1;
    private static final int SOCK_STREAM = 1;
    private static final int SOCK_NONBLOCK = 04000;
    private static final int SOCK_CLOEXEC = 02000000;
    /** sizeof(struct sockaddr_un) on Linux: a 2-byte family and 108 bytes of path. */
    private static final int SOCKADDR_UN_SIZE = 110;

    /** The libc calls of the probe (public: jnr-ffi implements it in its own class loader). */
    public interface LibC {
        int socket(int domain, int type, int protocol);

        int connect(int fd, @In byte[] address, int length);

        int close(int fd);
    }

    private static volatile LibC libc;

    private SocketProbe() {}

    private static LibC libc() {
        LibC l = libc;
        if (l == null) {
            synchronized (SocketProbe.class) {
                if (libc == null) libc = LibraryLoader.create(LibC.class).load("c");
                l = libc;
            }
        }
        return l;
    }

    /**
     * Connects to {@code path} without blocking and disconnects at once.
     *
     * @return 0 when a listener accepted the connection, else {@code connect}'s errno:
     *     {@code ECONNREFUSED} (a socket file nothing listens on), {@code EAGAIN} (a listener
     *     whose backlog is full: alive), {@code ENOENT} (no file), others (e.g. {@code EACCES})
     * @throws java.io.IOException when no socket can be made (the message says why)
     */
    static int connectErrno(Path path) throws java.io.IOException {
        byte[] p = path.toString().getBytes(StandardCharsets.UTF_8);
        if (p.length >= SOCKADDR_UN_SIZE - 2) throw new IllegalArgumentException("path: " + path + " (too long)");
        ByteBuffer a = ByteBuffer.allocate(SOCKADDR_UN_SIZE).order(ByteOrder.nativeOrder());
        a.putShort((short) AF_UNIX).put(p).put((byte) 0);
        LibC c = libc();
        jnr.ffi.Runtime rt = jnr.ffi.Runtime.getSystemRuntime();
        int fd = c.socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            throw new java.io.IOException("socket(AF_UNIX) for probing " + path + " failed: "
                    + NativeIo.strerror(LastError.getLastError(rt)));
        }
        try {
            int r;
            int errno;
            do {
                r = c.connect(fd, a.array(), 2 + p.length + 1);
                errno = r < 0 ? LastError.getLastError(rt) : 0;
            } while (r < 0 && errno == NativeIo.EINTR);
            return errno;
        } finally {
            c.close(fd);
        }
    }
}
