package org.cuvmm.ipc;

import java.nio.ByteBuffer;

/**
 * The bytes and fds an {@link FdSocket}'s frame reader received ahead of the frame it
 * returned (docs/PROTOCOL.md section 1, "reading ahead"), so that a frame that arrives whole
 * costs one {@code recvmsg}, not two (header, then payload).
 *
 * <p>The bytes live in the socket's receive buffer ({@link NativeMsg#data}) at {@code [start,
 * end)}; after frame reads they begin at a frame boundary or inside the frame being read
 * (after a raw {@link FdSocket#receive(int)} that took part of them, anywhere). At most one frame in
 * them owns fds ({@link #fdsAt}): a {@code recvmsg} delivers the fds of one {@code sendmsg} at
 * most (Linux stops a stream read right after the segment that carries fds), and the socket
 * makes a {@code recvmsg} only once every buffered byte was taken, so the owner of one read's
 * fds has been returned (with them) before the next read.
 *
 * <p>Who owns the fds of a read ({@link #ownerOfRead}): the last frame whose first byte is in
 * that read; when no frame starts in it, the frame in progress. The kernel attaches a {@code
 * sendmsg}'s fds to its first byte, and a conforming sender starts every frame with its own
 * {@code sendmsg} (carrying only that frame), so the segment with the fds starts a frame, and
 * every byte the read took after it belongs to that same frame.
 *
 * <p>Not thread-safe: guarded by the socket's receive lock, and touched only between the
 * socket guard's enter and exit; {@link #closeFds()} runs once, from the guard's release,
 * when no call is inside. Package-private.
 */
final class FrameBuffer {
    /** Received bytes not yet returned: {@code data[start, end)}; both 0 when empty. */
    int start;
    int end;
    /** Offset in {@code data} of the first byte of the frame that owns {@link #fds}; -1: none held. */
    int fdsAt = -1;
    /**
     * The open fds of that frame (empty when they were too many: closed on arrival). Room for
     * every fd a read can bring (254 of room, +1 that CMSG alignment fits) from the start, so
     * moving fds in ({@link #adopt}) never allocates: an allocation failure halfway would leave
     * fds in both lists, closed twice.
     */
    final FdSocket.IntList fds = new FdSocket.IntList(NativeIo.MAX_FDS_PER_MESSAGE + 3);
    /** How many fds arrived for that frame (the closed ones included). */
    int arrived;
    /** More than a frame may carry arrived for it (closed at once): the frame is refused, fatally. */
    boolean excess;
    /** The kernel dropped fds of that frame ({@code MSG_CTRUNC}). */
    boolean truncated;

    int buffered() { return end - start; }

    /**
     * Keeps the fds of a read for the later frame starting at offset {@code at}: moves them
     * out of {@code from} (emptied). More than {@code maxFds} are closed at once (a guard: on
     * Linux one read brings the fds of one {@code sendmsg}, at most 253; the limit is
     * enforced as the fds arrive) and remembered as an excess.
     */
    void adopt(int at, FdSocket.IntList from, boolean dropped, int maxFds) {
        fdsAt = at;
        arrived = from.size();
        truncated = dropped;
        excess = arrived > maxFds;
        fds.clear();
        if (excess) {
            NativeIo.closeAll(from.toArray());
        } else {
            for (int i = 0; i < arrived; i++) fds.add(from.get(i));
        }
        from.clear();
    }

    /** Forgets the held fds (after they were moved to a receive). */
    void clearFds() {
        fdsAt = -1;
        fds.clear();
        arrived = 0;
        excess = false;
        truncated = false;
    }

    /** Drops the bytes, closes the fds held: the socket's last user left after its close. Idempotent. */
    void closeFds() {
        NativeIo.closeAll(fds.toArray());
        clearFds();
        start = 0;
        end = 0;
    }

    /**
     * The offset of the frame that owns the fds of a read that put {@code data[readFrom,
     * readTo)} after the frame in progress, which starts at offset 0 ({@code data[0,
     * readFrom)}: a partial header, or nothing): the last frame starting at or after {@code
     * readFrom}, else 0. Frames are walked by their headers' lengths; a header with a bad
     * magic or an impossible length ends the walk (that frame is refused, fatally, before any
     * frame after it could be read).
     */
    static int ownerOfRead(ByteBuffer data, int readFrom, int readTo) {
        int owner = 0;
        long p = 0;
        while (p < readTo) {
            if (p >= readFrom) owner = (int) p;
            if (p + Protocol.HEADER_SIZE > readTo) break;
            int at = (int) p;
            long length = Integer.toUnsignedLong(data.getInt(at + 12));
            if (data.getInt(at) != Protocol.MAGIC || length > Protocol.MAX_PAYLOAD) break;
            p += Protocol.HEADER_SIZE + length;
        }
        return owner;
    }
}
