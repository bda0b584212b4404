package org.cuvmm.ipc;

import jnr.posix.POSIX;
import jnr.posix.POSIXFactory;

/**
 * The native POSIX calls this module makes (jnr-posix's native implementation: its Java
 * fallback throws for {@code sendmsg}/{@code recvmsg}), and the Linux constants jnr-constants
 * lacks. Package-private.
 */
final class NativeIo {
    static final int SOL_SOCKET = 1;
    static final int SCM_RIGHTS = 1;
    static final int MSG_CTRUNC = 0x8;
    /** Read without taking the bytes off the socket's queue (FdSocket's deferred consumption). */
    static final int MSG_PEEK = 0x2;
    /**
     * Where a {@code MSG_PEEK} read starts (Linux, asm-generic: x86-64 and aarch64): set to 0,
     * each peek then moves it past what it read and each consuming read back by what it took.
     */
    static final int SO_PEEK_OFF = 42;
    static final int MSG_NOSIGNAL = 0x4000;
    /** This call only: fail with {@code EAGAIN} instead of blocking. */
    static final int MSG_DONTWAIT = 0x40;
    /** Not in jnr-constants: received fds get {@code FD_CLOEXEC} atomically. */
    static final int MSG_CMSG_CLOEXEC = 0x40000000;
    static final int SHUT_RDWR = 2;

    static final int EINTR = 4;
    static final int EBADF = 9;
    static final int EAGAIN = 11;
    static final int EPIPE = 32;
    static final int ECONNRESET = 104;
    static final int ECONNREFUSED = 111;

    /** Linux's {@code SCM_MAX_FD}: the most fds one {@code sendmsg} may carry. */
    static final int MAX_FDS_PER_MESSAGE = 253;

    private static volatile POSIX posix;
    private static final int RLIMIT_NOFILE = 7;

    private NativeIo() {}

    /**
     * "RLIMIT_NOFILE soft limit N" for messages about fds the kernel dropped, or just
     * "RLIMIT_NOFILE" when the limit cannot be read (never throws: it builds an error message).
     */
    static String openFileLimitText() {
        // (RLIMIT_NOFILE: 7 on Linux, x86-64 and aarch64 alike, the only platforms this module runs on.)
        try {
            jnr.posix.RLimit l = posix().getrlimit(RLIMIT_NOFILE);
            return l == null ? "RLIMIT_NOFILE" : "RLIMIT_NOFILE soft limit " + l.rlimCur();
        } catch (RuntimeException | LinkageError e) {
            return "RLIMIT_NOFILE";
        }
    }

    /** Set once {@link #load} succeeded (then it does nothing). */
    private static volatile boolean loaded;

    /**
     * Loads the native layer once per JVM, before the first socket: jnr-posix's libc, {@link
     * NativeMsg}'s {@code sendmsg}/{@code recvmsg} and {@code poll}, after the core's {@link
     * org.cuvmm.internal.FirstUse#prepare}, which checks the free fds and opens what the JDK
     * opens lazily. Why: jnr-ffi and jffi open files while they initialize static holders, and a
     * class whose static initializer failed stays broken for the life of the JVM. A first
     * connect at the open-file limit left every later socket failing with {@code
     * NoClassDefFoundError}, after fds were freed too; and jars the JDK could not open then
     * (jnr's, asm's) were dropped from the class path for good (independent fault probes).
     * Checked first, it is an IOException the caller can retry.
     *
     * @throws IOException when too few fds are free (the message names RLIMIT_NOFILE and the
     *     count); nothing was loaded, and a later call tries again
     * @throws UnsupportedOperationException when the layer cannot load (not Linux, no jffi
     *     native jar, or an earlier failed load in this JVM: the message says which to check)
     */
    static void load() throws java.io.IOException {
        if (loaded) return;
        synchronized (NativeIo.class) {
            if (loaded) return;
            String shortage = org.cuvmm.internal.FirstUse.prepare();
            if (shortage != null) {
                throw new java.io.IOException("cannot load cuvmm-ipc's native layer (jnr-posix, jnr-ffi, jffi) now: "
                        + shortage + ": the process is at its open-file limit (RLIMIT_NOFILE). Close fds or raise "
                        + "the limit (ulimit -n), then try again; nothing was loaded (a first load that ran out of fds "
                        + "would leave it broken until the JVM restarts, so it is not tried)");
            }
            try {
                posix();
                NativeMsg.bind();
                loadPollLibc();
                FdServerSocket.Names.RANDOM.hashCode(); // made while fds are free (FdServerSocket.Names)
            } catch (LinkageError e) {
                throw new UnsupportedOperationException("cuvmm-ipc's native layer (jnr-posix, jnr-ffi, jffi) failed to "
                        + "load: " + e + ". Check that the jffi native jar (com.github.jnr:jffi:native) is on the class "
                        + "path. If jnr was first used in this JVM while the process had no free file descriptors, its "
                        + "classes stay broken until the JVM restarts: restart it with fds to spare", e);
            }
            loaded = true;
        }
    }

    /**
     * {@code e} when it is not about the fd limit; else an IOException that says what could not
     * be made for want of an fd, names the limit and what to do (jnr reports {@code EMFILE} as
     * a bare "Too many open files", naming no path and no remedy: an independent probe).
     */
    static java.io.IOException explainedFdShortage(String what, java.io.IOException e) {
        String m = String.valueOf(e.getMessage());
        if (!m.contains("Too many open files")) return e;
        return new java.io.IOException(what + ": " + m + ": the process is at its open-file limit ("
                + openFileLimitText() + "); close fds or raise the limit (ulimit -n), then try again", e);
    }

    static POSIX posix() {
        POSIX p = posix;
        if (p != null) return p;
        synchronized (NativeIo.class) {
            if (posix == null) {
                String os = System.getProperty("os.name", "");
                if (!os.toLowerCase(java.util.Locale.ROOT).contains("linux")) {
                    throw new UnsupportedOperationException("cuvmm-ipc runs on Linux only (os.name: " + os + ")");
                }
                POSIX candidate = POSIXFactory.getNativePOSIX();
                if (candidate == null || !candidate.isNative()) {
                    throw new UnsupportedOperationException("jnr-posix could not load its native implementation "
                            + "(libc through jnr-ffi/jffi); SCM_RIGHTS needs native sendmsg/recvmsg. Check that the "
                            + "jffi native jar (com.github.jnr:jffi:native) is on the class path");
                }
                posix = candidate;
            }
            return posix;
        }
    }

    /** Closes {@code fd}; never throws. Retries nothing: on Linux, close never needs a retry. */
    static void closeQuietly(int fd) {
        if (fd >= 0) posix().close(fd);
    }

    /** Closes every non-negative fd in {@code fds}; never throws. */
    static void closeAll(int[] fds) {
        if (fds == null) return;
        for (int fd : fds) closeQuietly(fd);
    }

    /** {@code poll(2)}'s {@code POLLIN}: data (or end of stream, or an error) to read. */
    static final short POLLIN = 0x1;

    /** {@code poll(2)}'s {@code POLLOUT}: room to write (or an error, or the peer gone). */
    static final short POLLOUT = 0x4;

    /**
     * libc's {@code poll}, bound by jnr-ffi's {@link jnr.ffi.LibraryLoader} (jnr-posix has no
     * {@code poll}). Public only because jnr-ffi's generated class, defined in a class loader
     * of its own, implements it; {@code NativeIo} is package-private, so it is no API.
     */
    public interface PollLibc {
        int poll(@jnr.ffi.annotations.In @jnr.ffi.annotations.Out java.nio.ByteBuffer fds, int nfds, int timeout);
    }

    private static volatile PollLibc pollLibc;
    private static volatile jnr.ffi.Runtime pollRuntime;

    /**
     * {@code poll(fds, n, timeoutMillis)} on an array of {@code struct pollfd} (8 bytes each:
     * fd, events, revents, native order) in a buffer (jnr passes a direct one's address and
     * copies a heap one in and out); returns poll's result, or minus the errno on failure.
     */
    static int poll(java.nio.ByteBuffer fds, int n, int timeoutMillis) {
        PollLibc libc = pollLibc;
        if (libc == null) libc = loadPollLibc();
        int r = libc.poll(fds, n, timeoutMillis);
        if (r >= 0) return r;
        int errno = jnr.ffi.LastError.getLastError(pollRuntime);
        return errno > 0 ? -errno : -EINTR;
    }

    /**
     * Binds {@code poll} now if it is not bound yet ({@link FdSocket}'s constructor), so that
     * its first use does not load a class (ErrorPathClasses says why that can fail at the fd
     * limit). A failure here is left to the first use, which reports it.
     */
    static void bindPollEarly() {
        if (pollLibc != null) return;
        try {
            loadPollLibc();
        } catch (UnsupportedOperationException reportedAtFirstUse) {
            // poll() tries again and throws it where it is needed
        }
    }

    private static synchronized PollLibc loadPollLibc() {
        if (pollLibc == null) {
            posix(); // Linux only, with jnr's native support: says so clearly otherwise
            try {
                PollLibc libc = jnr.ffi.LibraryLoader.create(PollLibc.class)
                        .load(jnr.ffi.Platform.getNativePlatform().getStandardCLibraryName());
                pollRuntime = jnr.ffi.Runtime.getRuntime(libc);
                pollLibc = libc;
            } catch (RuntimeException | LinkageError e) {
                throw new UnsupportedOperationException("jnr-ffi could not bind libc's poll (cuvmm-ipc's client waits "
                        + "for bytes with it): " + e, e);
            }
        }
        return pollLibc;
    }

    static String strerror(int errno) {
        try {
            return posix().strerror(errno) + " (errno " + errno + ")";
        } catch (RuntimeException e) {
            return "errno " + errno;
        }
    }
}
