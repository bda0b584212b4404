package org.cuvmm.ipc;

import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;

import jnr.ffi.Pointer;
import jnr.posix.BaseMsgHdr;
import jnr.posix.MsgHdr;
import jnr.posix.POSIX;

/**
 * The memory of one {@code sendmsg}/{@code recvmsg} direction of a socket: the data buffer,
 * the {@code iovec} and the control buffer, all owned here for the life of the socket.
 *
 * <p>Why not {@link MsgHdr#setIov} and {@link MsgHdr#allocateControl}: they allocate the
 * iovec array and the control buffer with jnr-ffi's {@code allocateDirect}, whose memory is
 * freed by a finalizer once the Java object is unreachable, and {@code setIov} keeps no
 * reference to it. A GC during the call then frees memory the kernel is reading or writing
 * (seen as a SIGSEGV in libc under load). Here jnr-posix still makes the calls and lays out
 * the {@code msghdr} (one per direction, allocated once and held here); its iov and control
 * fields point into direct buffers held by this object, set through jnr-posix's own
 * (package-private) setters. Layout is Linux 64-bit:
 * {@code struct iovec {void*; size_t}}, {@code struct cmsghdr {size_t len; int level; int
 * type;}} + data aligned to 8. Package-private; not thread-safe (one per direction, used
 * under that direction's lock).
 */
final class NativeMsg {
    static final int CMSG_HEADER = 16;
    private static final int IOVEC = 16;
    /** CMSG_SPACE(4 * 253). */
    private static final int CONTROL_SPACE = CMSG_HEADER + align(4 * NativeIo.MAX_FDS_PER_MESSAGE);

    private static final Method SET_IOV_POINTER;
    private static final Method SET_IOV_LEN;
    private static final Method SET_CONTROL_POINTER;
    private static final Method SET_CONTROL_LEN;

    static {
        try {
            SET_IOV_POINTER = accessible("setIovPointer", Pointer.class);
            SET_IOV_LEN = accessible("setIovLen", int.class);
            SET_CONTROL_POINTER = accessible("setControlPointer", Pointer.class);
            SET_CONTROL_LEN = accessible("setControlLen", int.class);
        } catch (ReflectiveOperationException | RuntimeException e) {
            throw new ExceptionInInitializerError(new UnsupportedOperationException("this jnr-posix ("
                    + BaseMsgHdr.class.getPackage().getImplementationVersion() + ") lacks the msghdr setters cuvmm-ipc "
                    + "needs; use jnr-posix 3.1.x", e));
        }
    }

    private static Method accessible(String name, Class<?> arg) throws NoSuchMethodException {
        Method m = BaseMsgHdr.class.getDeclaredMethod(name, arg);
        m.setAccessible(true);
        return m;
    }

    static int align(int n) { return (n + 7) & ~7; }

    /** Reused for every call: each {@link #prepare} resets the fields a call reads. */
    private final MsgHdr msg;
    final ByteBuffer data;
    private final ByteBuffer meta;
    private final long dataAddress;
    private final long metaAddress;

    NativeMsg(int dataCapacity) {
        POSIX posix = NativeIo.posix();
        this.msg = posix.allocateMsgHdr();
        this.data = ByteBuffer.allocateDirect(dataCapacity);
        this.meta = ByteBuffer.allocateDirect(IOVEC + CONTROL_SPACE).order(ByteOrder.nativeOrder());
        jnr.ffi.Runtime rt = jnr.ffi.Runtime.getSystemRuntime();
        this.dataAddress = Pointer.wrap(rt, data).address();
        this.metaAddress = Pointer.wrap(rt, meta).address();
        if (dataAddress == 0 || metaAddress == 0) throw new IllegalStateException("no address for a direct buffer");
    }

    /** A msghdr for {@code length} bytes of {@link #data} and a control area of {@code controlLength} bytes (0: none). */
    MsgHdr prepare(int length, int controlLength) {
        if (length < 0 || length > data.capacity() || controlLength < 0 || controlLength > CONTROL_SPACE) {
            throw new IllegalArgumentException("length " + length + ", control " + controlLength);
        }
        meta.putLong(0, dataAddress);
        meta.putLong(8, length);
        jnr.ffi.Runtime rt = jnr.ffi.Runtime.getSystemRuntime();
        try {
            SET_IOV_POINTER.invoke(msg, rt.getMemoryManager().newPointer(metaAddress));
            SET_IOV_LEN.invoke(msg, 1);
            SET_CONTROL_POINTER.invoke(msg, controlLength == 0 ? null : rt.getMemoryManager().newPointer(metaAddress + IOVEC));
            SET_CONTROL_LEN.invoke(msg, controlLength);
            msg.setFlags(0);
        } catch (IllegalAccessException | InvocationTargetException e) {
            throw new IllegalStateException("setting up a msghdr failed: " + e, e);
        }
        return msg;
    }

    /** Writes one SCM_RIGHTS control message carrying {@code fds}; returns the control length (CMSG_SPACE). */
    int writeRights(int[] fds) {
        int dataLen = 4 * fds.length;
        int space = CMSG_HEADER + align(dataLen);
        for (int i = 0; i < space; i++) meta.put(IOVEC + i, (byte) 0);
        meta.putLong(IOVEC, CMSG_HEADER + dataLen); // cmsg_len = CMSG_LEN(data)
        meta.putInt(IOVEC + 8, NativeIo.SOL_SOCKET);
        meta.putInt(IOVEC + 12, NativeIo.SCM_RIGHTS);
        for (int i = 0; i < fds.length; i++) meta.putInt(IOVEC + CMSG_HEADER + 4 * i, fds[i]);
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
            long cmsgLen = meta.getLong(IOVEC + off);
            if (cmsgLen < CMSG_HEADER || off + cmsgLen > len) break;
            int level = meta.getInt(IOVEC + off + 8);
            int type = meta.getInt(IOVEC + off + 12);
            if (level == NativeIo.SOL_SOCKET && type == NativeIo.SCM_RIGHTS) {
                int n = (int) ((cmsgLen - CMSG_HEADER) / 4);
                for (int i = 0; i < n; i++) out.add(meta.getInt(IOVEC + off + CMSG_HEADER + 4 * i));
            }
            off += align((int) cmsgLen);
        }
    }
}
