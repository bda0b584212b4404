package org.cuvmm.ipc;

import java.lang.ref.Reference;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;

import jnr.ffi.LastError;
import jnr.ffi.LibraryLoader;
import jnr.ffi.Platform;
import jnr.ffi.Pointer;
import jnr.ffi.annotations.SaveError;

/**
 * The memory of one {@code sendmsg}/{@code recvmsg} direction of a socket, and the calls
 * themselves: the data buffer, the {@code struct msghdr}, the {@code iovec} and the control
 * buffer, all in direct buffers owned here for the life of the socket, and libc's {@code
 * sendmsg}/{@code recvmsg} bound once with jnr-ffi ({@link Libc}) to take the msghdr's
 * address.
 *
 * <p>Why not jnr-posix's {@code MsgHdr}: its {@code setIov}/{@code allocateControl} allocate
 * the iovec array and the control buffer with jnr-ffi's {@code allocateDirect}, whose memory
 * is freed by a finalizer once the Java object is unreachable, and {@code setIov} keeps no
 * reference to it (a GC during the call then frees memory the kernel is reading or writing:
 * seen as a SIGSEGV in libc under load); and setting its pointer fields took reflective calls
 * to package-private setters, four per call, with jnr struct reads after each {@code recvmsg}
 * (issue 11: about 15% of a cached round's CPU on each side). Here every field is a plain
 * store into this object's own memory, and nothing is allocated per call.
 *
 * <p>Layout is Linux 64-bit (x86-64 and aarch64): {@code struct msghdr {void *name;
 * socklen_t namelen; (pad) struct iovec *iov; size_t iovlen; void *control; size_t
 * controllen; int flags; (pad)}} (56 bytes), {@code struct iovec {void*; size_t}}, {@code
 * struct cmsghdr {size_t len; int level; int type;}} + data aligned to 8. The msghdr's name,
 * iov and iovlen never change (set once); each call sets the iovec's base and length, the control
 * pointer and length, and clears the flags. A send with no control area skips the msghdr: it
 * is a {@code send} of the data buffer ({@link #sendmsg}). Package-private; not thread-safe: one per
 * direction, confined to that direction's lock ({@link FdSocket}'s send or receive lock).
 */
final class NativeMsg {
    static final int CMSG_HEADER = 16;
    private static final int MSGHDR = 56;
    private static final int IOVEC = 16;
    /** Offsets in {@link #meta}: the msghdr, then the iovec, then the control area. */
    private static final int IOV_AT = MSGHDR;
    private static final int CONTROL_AT = MSGHDR + IOVEC;
    /** CMSG_SPACE(4 * 253). */
    private static final int CONTROL_SPACE = CMSG_HEADER + align(4 * NativeIo.MAX_FDS_PER_MESSAGE);
    private static final int MSG_IOV = 16;
    private static final int MSG_IOVLEN = 24;
    private static final int MSG_CONTROL = 32;
    private static final int MSG_CONTROLLEN = 40;
    private static final int MSG_FLAGS = 48;
    private static final int EIO = 5;

    /**
     * libc's {@code sendmsg}/{@code recvmsg} taking the msghdr's address as a plain 64-bit
     * integer (this class runs on 64-bit Linux only: see {@link Bound}): jnr-ffi then passes
     * every argument as a primitive, with no {@code Pointer} to check and unwrap per call
     * (issue 11: about 0.1 µs less per send and receive pair, measured on the host driver's
     * machine). Public only because jnr-ffi implements it in a class of its own (the
     * enclosing class is package-private). Not API.
     *
     * <p>{@code send} is for sends without fds: the kernel's {@code sendto} path skips the
     * msghdr and iovec copies from user memory (measured on this project's 2-vCPU machine, a C
     * ping-pong of a cached round's four messages: about 3% less per round with {@code send}
     * than with {@code sendmsg}, in interleaved segments; bench/RESULTS-sharing-v2.md Run 24).
     */
    public interface Libc {
        @SaveError
        int sendmsg(int fd, long msg, int flags);

        @SaveError
        long send(int fd, long buf, long len, int flags);

        @SaveError
        int recvmsg(int fd, long msg, int flags);

        @SaveError
        int setsockopt(int fd, int level, int optname, long optval, int optlen);
    }

    /** Loaded once, at the first socket's first call. */
    private static final class Bound {
        static final Libc LIBC;
        static final jnr.ffi.Runtime RUNTIME;

        static {
            if (!System.getProperty("os.name", "").toLowerCase(java.util.Locale.ROOT).contains("linux")
                    || !Platform.getNativePlatform().is64Bit()) {
                throw new UnsupportedOperationException("cuvmm-ipc runs on 64-bit Linux only (os.name: "
                        + System.getProperty("os.name") + ", os.arch: " + System.getProperty("os.arch") + ")");
            }
            LIBC = LibraryLoader.create(Libc.class).load(Platform.getNativePlatform().getStandardCLibraryName());
            RUNTIME = jnr.ffi.Runtime.getRuntime(LIBC);
        }
    }

    /** Binds the libc calls now ({@link NativeIo#load}), not at the first message. */
    static void bind() {
        if (Bound.RUNTIME == null) throw new AssertionError();
    }

    static int align(int n) { return (n + 7) & ~7; }

    final ByteBuffer data;
    /** The msghdr, the iovec and the control area, in native order. */
    private final ByteBuffer meta;
    private final long metaAddress;
    private final long dataAddress;

    NativeMsg(int dataCapacity) {
        this.data = ByteBuffer.allocateDirect(dataCapacity);
        this.meta = ByteBuffer.allocateDirect(CONTROL_AT + CONTROL_SPACE).order(ByteOrder.nativeOrder());
        jnr.ffi.Runtime rt = Bound.RUNTIME;
        this.dataAddress = Pointer.wrap(rt, data).address();
        this.metaAddress = Pointer.wrap(rt, meta).address();
        if (dataAddress == 0 || metaAddress == 0) throw new IllegalStateException("no address for a direct buffer");
        // Fixed for life: no name, one iovec (ours), pointing at the data buffer.
        meta.putLong(0, 0L);
        meta.putLong(8, 0L);
        meta.putLong(MSG_IOV, metaAddress + IOV_AT);
        meta.putLong(MSG_IOVLEN, 1L);
    }

    /**
     * Sets the msghdr for {@code length} bytes of {@link #data} from {@code offset} and a
     * control area of {@code controlLength} bytes (0: none).
     */
    private void prepare(int offset, int length, int controlLength) {
        if (offset < 0 || length < 0 || length > data.capacity() - offset || controlLength < 0
                || controlLength > CONTROL_SPACE) {
            throw new IllegalArgumentException("offset " + offset + ", length " + length + ", control " + controlLength);
        }
        meta.putLong(IOV_AT, dataAddress + offset);
        meta.putLong(IOV_AT + 8, length);
        meta.putLong(MSG_CONTROL, controlLength == 0 ? 0L : metaAddress + CONTROL_AT);
        meta.putLong(MSG_CONTROLLEN, controlLength);
        meta.putInt(MSG_FLAGS, 0);
    }

    /**
     * One {@code sendmsg(fd, msg, flags)} of the first {@code length} bytes of {@link #data}
     * with the first {@code controlLength} bytes of the control area ({@link #writeRights});
     * returns the bytes sent, or minus the errno. No retry. With no control area it is a
     * {@code send(fd, data, length, flags)}: the same to the peer and to errno, with less
     * for the kernel to copy (see {@link Libc}).
     */
    int sendmsg(int fd, int length, int controlLength, int flags) {
        int r;
        if (controlLength == 0) {
            if (length < 0 || length > data.capacity()) throw new IllegalArgumentException("length " + length);
            r = (int) Bound.LIBC.send(fd, dataAddress, length, flags); // at most the buffer's capacity: fits an int
        } else {
            prepare(0, length, controlLength);
            r = Bound.LIBC.sendmsg(fd, metaAddress, flags);
        }
        int result = r >= 0 ? r : -errno();
        Reference.reachabilityFence(this); // the kernel read our buffers: they must outlive the call
        return result;
    }

    /** {@link #recvmsg(int, int, int, int, int)} into {@link #data} from its start. */
    int recvmsg(int fd, int length, int controlLength, int flags) {
        return recvmsg(fd, 0, length, controlLength, flags);
    }

    /**
     * One {@code recvmsg(fd, msg, flags)} into {@code length} bytes of {@link #data} from
     * {@code offset} (the bytes before it are left as they are: {@link FdSocket}'s frame
     * buffer keeps a partial header there), with a control area of {@code controlLength}
     * bytes; returns the bytes read (0: end of stream), or minus the errno. After it, {@link
     * #controlLength()} and {@link #flags()} are what the kernel left. No retry.
     */
    int recvmsg(int fd, int offset, int length, int controlLength, int flags) {
        prepare(offset, length, controlLength);
        int r = Bound.LIBC.recvmsg(fd, metaAddress, flags);
        int result = r >= 0 ? r : -errno();
        Reference.reachabilityFence(this);
        return result;
    }

    /**
     * {@code setsockopt(fd, level, name, &value, sizeof(int))}, the int written into this
     * object's control area (free between calls: the caller holds this direction's lock);
     * returns 0, or minus the errno.
     */
    int setIntOption(int fd, int level, int name, int value) {
        meta.putInt(CONTROL_AT, value);
        int r = Bound.LIBC.setsockopt(fd, level, name, metaAddress + CONTROL_AT, 4);
        int result = r >= 0 ? 0 : -errno();
        Reference.reachabilityFence(this);
        return result;
    }

    private static int errno() {
        int e = LastError.getLastError(Bound.RUNTIME);
        return e > 0 ? e : EIO; // never 0; and not EINTR, which callers retry: a failure with no errno must not spin
    }

    /** The msghdr's {@code msg_controllen} as the last {@code recvmsg} left it. */
    int controlLength() {
        long n = meta.getLong(MSG_CONTROLLEN);
        return (int) Math.max(0, Math.min(n, CONTROL_SPACE));
    }

    /** The msghdr's {@code msg_flags} as the last {@code recvmsg} left them. */
    int flags() { return meta.getInt(MSG_FLAGS); }

    /** Writes one SCM_RIGHTS control message carrying {@code fds}; returns the control length (CMSG_SPACE). */
    int writeRights(int[] fds) {
        int dataLen = 4 * fds.length;
        int space = CMSG_HEADER + align(dataLen);
        for (int i = 0; i < space; i += 8) meta.putLong(CONTROL_AT + i, 0L);
        meta.putLong(CONTROL_AT, CMSG_HEADER + dataLen); // cmsg_len = CMSG_LEN(data)
        meta.putInt(CONTROL_AT + 8, NativeIo.SOL_SOCKET);
        meta.putInt(CONTROL_AT + 12, NativeIo.SCM_RIGHTS);
        for (int i = 0; i < fds.length; i++) meta.putInt(CONTROL_AT + CMSG_HEADER + 4 * i, fds[i]);
        return space;
    }

    /**
     * A control length with room for {@code fds} fds (CMSG_SPACE), at least 1 and at most
     * the most one message can carry (253, rounded up to 254 by alignment). The kernel installs up to {@code (length - 16) / 4} fds,
     * which alignment can make one more than asked.
     */
    static int controlSpaceFor(int fds) {
        if (fds < 1) throw new IllegalArgumentException("fds: " + fds + " (expected: >= 1)");
        return Math.min(CONTROL_SPACE, CMSG_HEADER + align(4 * fds));
    }

    /**
     * Appends the fds of every SCM_RIGHTS control message in the first {@code controlLength}
     * bytes of the control area (as the kernel left them), counting each from its length.
     */
    void readRights(int controlLength, FdSocket.IntList out) {
        int len = Math.min(controlLength, CONTROL_SPACE);
        int off = 0;
        while (off + CMSG_HEADER <= len) {
            long cmsgLen = meta.getLong(CONTROL_AT + off);
            if (cmsgLen < CMSG_HEADER || off + cmsgLen > len) break;
            int level = meta.getInt(CONTROL_AT + off + 8);
            int type = meta.getInt(CONTROL_AT + off + 12);
            if (level == NativeIo.SOL_SOCKET && type == NativeIo.SCM_RIGHTS) {
                int n = (int) ((cmsgLen - CMSG_HEADER) / 4);
                for (int i = 0; i < n; i++) out.add(meta.getInt(CONTROL_AT + off + CMSG_HEADER + 4 * i));
            }
            off += align((int) cmsgLen);
        }
    }
}
