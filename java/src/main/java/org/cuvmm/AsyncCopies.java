package org.cuvmm;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ConcurrentLinkedDeque;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Consumer;

import org.bytedeco.javacpp.BytePointer;
import org.cuvmm.internal.Checks;
import org.cuvmm.internal.NativeCalls;
import org.cuvmm.internal.jni.NativeApi;
import org.cuvmm.internal.jni.NativePinnedHandle;
import org.cuvmm.internal.jni.NativeStatus;
import org.cuvmm.internal.jni.NativeStreamHandle;

/**
 * The stream-ordered operations of {@link VirtualMemoryBuffer} (its public methods only check
 * arguments and delegate here), and the synchronous operations' run on cuvmm's own stream.
 *
 * <p>Every asynchronous operation holds a use of the stream, the buffer(s) and the pinned
 * memory while it queues the op and records the stream on each ({@link StreamUses}), so that a
 * close cannot pass between the two; the op itself runs later, and the records make close wait
 * for it. If a record fails after the op was queued, the stream is synchronized before the
 * error is thrown, so no queued op is ever unrecorded. No cross-stream ordering is added: two
 * streams using one buffer must be ordered by the caller (events), as in CUDA.
 *
 * <p>Heap arrays go through pinned staging owned by cuvmm: 1 MiB pieces, filled from the array
 * by Java (no JNI critical region, so no GC stall) before the call returns, queued as copies
 * from pinned memory, and handed back to a small pool by the reaper after an event recorded
 * behind the last piece completes.
 */
final class AsyncCopies {
    /** Bytes per pinned staging piece of an array copy (1 MiB, as ArrayCopies' pieces). */
    static final int STAGING_PIECE = 1 << 20;
    /** Idle staging pieces kept (per process); more are freed when handed back. */
    static final int STAGING_KEPT = 8;
    private static final ConcurrentLinkedDeque<StagingPiece> IDLE = new ConcurrentLinkedDeque<>();
    private static final AtomicInteger IDLE_COUNT = new AtomicInteger();

    private AsyncCopies() {}

    // ---- asynchronous operations ----

    static void fromPinned(VirtualMemoryBuffer dst, long offset, PinnedHostBuffer src, long srcOffset, long length,
                           Stream stream) {
        Checks.window("copyFromAsync", offset, length, dst.size());
        Checks.window("src", srcOffset, length, src.size());
        HostFunctions.refuseInsideHostFunction("copyFromAsync");
        stream.acquire();
        try {
            dst.acquireUse();
            try {
                src.acquire();
                try {
                    NativeStatus st = NativeCalls.status();
                    NativeApi.write_pinned_async(dst.nativeRange(), offset, src.nativeHandle(), srcOffset, length,
                            stream.nativeHandle(), st);
                    NativeCalls.check(st);
                    recordAfterQueueing(stream, dst.streamUses(), src.uses());
                } finally {
                    src.release();
                }
            } finally {
                dst.endUse();
            }
        } finally {
            stream.release();
        }
    }

    static void toPinned(VirtualMemoryBuffer src, long offset, PinnedHostBuffer dst, long dstOffset, long length,
                         Stream stream) {
        Checks.window("copyToAsync", offset, length, src.size());
        Checks.window("dst", dstOffset, length, dst.size());
        HostFunctions.refuseInsideHostFunction("copyToAsync");
        stream.acquire();
        try {
            src.acquireUse();
            try {
                dst.acquire();
                try {
                    NativeStatus st = NativeCalls.status();
                    NativeApi.read_pinned_async(src.nativeRange(), offset, dst.nativeHandle(), dstOffset, length,
                            stream.nativeHandle(), st);
                    NativeCalls.check(st);
                    recordAfterQueueing(stream, src.streamUses(), dst.uses());
                } finally {
                    dst.release();
                }
            } finally {
                src.endUse();
            }
        } finally {
            stream.release();
        }
    }

    static void fromBuffer(VirtualMemoryBuffer dst, long offset, VirtualMemoryBuffer src, long srcOffset, long length,
                           Stream stream) {
        Checks.window("copyFromAsync", offset, length, dst.size());
        Checks.window("src", srcOffset, length, src.size());
        HostFunctions.refuseInsideHostFunction("copyFromAsync");
        stream.acquire();
        try {
            dst.acquireUse();
            try {
                src.acquireUse();
                try {
                    NativeStatus st = NativeCalls.status();
                    NativeApi.copy_range_async(dst.nativeRange(), offset, src.nativeRange(), srcOffset, length,
                            stream.nativeHandle(), st);
                    NativeCalls.check(st);
                    recordAfterQueueing(stream, dst.streamUses(), src.streamUses());
                } finally {
                    src.endUse();
                }
            } finally {
                dst.endUse();
            }
        } finally {
            stream.release();
        }
    }

    static void fill(VirtualMemoryBuffer dst, long offset, long length, byte value, Stream stream) {
        Checks.window("fillAsync", offset, length, dst.size());
        HostFunctions.refuseInsideHostFunction("fillAsync");
        stream.acquire();
        try {
            dst.acquireUse();
            try {
                NativeStatus st = NativeCalls.status();
                NativeApi.fill_async(dst.nativeRange(), offset, length, value, stream.nativeHandle(), st);
                NativeCalls.check(st);
                recordAfterQueueing(stream, dst.streamUses(), null);
            } finally {
                dst.endUse();
            }
        } finally {
            stream.release();
        }
    }

    /** Records {@code stream} on {@code buffer} (work queued elsewhere, a kernel). */
    static void recordUse(VirtualMemoryBuffer buffer, Stream stream) {
        HostFunctions.refuseInsideHostFunction("recordUse");
        stream.acquire();
        try {
            buffer.acquireUse();
            try {
                buffer.streamUses().record(stream);
            } finally {
                buffer.endUse();
            }
        } finally {
            stream.release();
        }
    }

    /** Runs {@code action} with {@code address} holding uses of buffer and stream, then records the stream. */
    static void withAddress(VirtualMemoryBuffer buffer, long address, Stream stream, java.util.function.LongConsumer action) {
        stream.acquire();
        try {
            buffer.acquireUse();
            try {
                try {
                    action.accept(address);
                } finally {
                    buffer.streamUses().record(stream); // also when the action threw: it may have launched
                }
            } finally {
                buffer.endUse();
            }
        } finally {
            stream.release();
        }
    }

    static void fromArray(VirtualMemoryBuffer dst, long offset, byte[] src, int srcOffset, int length, Stream stream) {
        Checks.arrayWindow("src", srcOffset, length, src.length);
        Checks.window("copyFromAsync", offset, length, dst.size());
        HostFunctions.refuseInsideHostFunction("copyFromAsync");
        if (length == 0) {
            stream.acquire();
            stream.release();
            dst.acquireUse();
            dst.endUse();
            return;
        }
        stream.acquire();
        try {
            dst.acquireUse();
            try {
                List<StagingPiece> pieces = new ArrayList<>((length + STAGING_PIECE - 1) / STAGING_PIECE);
                boolean queued = false;
                boolean handedOver = false;
                try {
                    NativeStatus st = NativeCalls.status();
                    for (int done = 0; done < length; ) {
                        int n = Math.min(STAGING_PIECE, length - done);
                        StagingPiece piece = takePiece();
                        pieces.add(piece);
                        piece.buffer.put(0, src, srcOffset + done, n); // Java copy: the array is never pinned
                        NativeApi.write_pinned_async(dst.nativeRange(), offset + done, piece.handle, 0, n,
                                stream.nativeHandle(), st);
                        NativeCalls.check(st);
                        queued = true;
                        done += n;
                    }
                    dst.streamUses().record(stream);
                    Event marker = Event.internal(stream.device());
                    try {
                        marker.record(stream);
                    } catch (RuntimeException | Error e) {
                        marker.closeQuietly();
                        throw e;
                    }
                    final List<StagingPiece> staged = pieces;
                    StreamOrderedRelease.later("the pinned staging of an array copy", List.of(marker), () -> {
                        for (StagingPiece p : staged) givePiece(p);
                        marker.closeQuietly();
                    });
                    handedOver = true;
                } finally {
                    if (!handedOver) {
                        // Some pieces may be queued and unrecorded: wait before reusing them.
                        if (queued) synchronizeQuietly(stream);
                        for (StagingPiece p : pieces) givePiece(p);
                    }
                }
            } finally {
                dst.endUse();
            }
        } finally {
            stream.release();
        }
    }

    private static void recordAfterQueueing(Stream stream, StreamUses a, StreamUses b) {
        try {
            a.record(stream);
            if (b != null) b.record(stream);
        } catch (RuntimeException | Error e) {
            synchronizeQuietly(stream); // the op is queued but not recorded: let it finish first
            throw e;
        }
    }

    private static void synchronizeQuietly(Stream stream) {
        NativeStatus st = NativeCalls.status();
        NativeApi.stream_synchronize(stream.nativeHandle(), st);
        if (st.code() != 0) {
            System.getLogger("org.cuvmm").log(System.Logger.Level.WARNING, "waiting for " + stream
                    + " after a failed record: " + st.message());
        }
    }

    // ---- the synchronous operations, on cuvmm's own stream ----

    /**
     * Runs {@code op} (which queues on the stream it is given and waits for it) on a borrowed
     * internal stream of {@code device}, after making that stream wait for the recorded uses of
     * {@code a} and {@code b} (may be null). The caller holds uses of both buffers.
     */
    static void synchronous(int device, VirtualMemoryBuffer a, VirtualMemoryBuffer b, Consumer<NativeStreamHandle> op) {
        HostFunctions.refuseInsideHostFunction(null); // names the public call (copyFrom, fill, ...)
        Stream s = InternalStreams.borrow(device);
        boolean keep = false;
        try {
            s.acquire();
            try {
                StreamUses ua = a.streamUsesIfAny();
                if (ua != null) ua.makeWait(s);
                StreamUses ub = b == null ? null : b.streamUsesIfAny();
                if (ub != null) ub.makeWait(s);
                op.accept(s.nativeHandle());
                keep = true;
            } finally {
                s.release();
            }
        } catch (CudaException e) {
            // Refused before the driver ran anything (window, access): the stream is fine.
            keep = e.code() == 1; // CUDA_ERROR_INVALID_VALUE
            throw e;
        } finally {
            InternalStreams.giveBack(s, keep);
        }
    }

    // ---- pinned staging ----

    /** 1 MiB of pinned memory and a view of it that owns nothing (never escapes this class). */
    private static final class StagingPiece {
        final NativePinnedHandle handle;
        final ByteBuffer buffer;

        StagingPiece(NativePinnedHandle handle) {
            this.handle = handle;
            final long base = handle.address();
            this.buffer = new BytePointer() {
                {
                    address = base;
                }
            }.capacity(STAGING_PIECE).asByteBuffer();
        }
    }

    private static StagingPiece takePiece() {
        StagingPiece p = IDLE.pollFirst();
        if (p != null) {
            IDLE_COUNT.decrementAndGet();
            return p;
        }
        NativePinnedHandle h = new NativePinnedHandle();
        NativeStatus st = NativeCalls.status();
        NativeApi.pinned_allocate(h, STAGING_PIECE, st);
        if (st.code() != 0) {
            h.deallocate();
            throw NativeCalls.toException(st);
        }
        return new StagingPiece(h);
    }

    /** Keeps the piece if the pool has room, frees it otherwise. Its copies have completed. */
    private static void givePiece(StagingPiece piece) {
        if (IDLE_COUNT.incrementAndGet() <= STAGING_KEPT) {
            IDLE.addFirst(piece);
            return;
        }
        IDLE_COUNT.decrementAndGet();
        piece.handle.deallocate();
    }
}
