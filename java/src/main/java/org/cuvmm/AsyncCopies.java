package org.cuvmm;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ConcurrentLinkedDeque;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Consumer;

import org.cuvmm.internal.Checks;
import org.cuvmm.internal.NativeCalls;
import org.cuvmm.internal.jni.NativeApi;
import org.cuvmm.internal.jni.NativeEventHandle;
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
 * for it. The op and its records are one native call under one context scope
 * ({@link #queueRecorded}): the events are chosen (and, the first time, taken from
 * {@link EventCache}) before it, and recorded right after the op is queued. If a record fails
 * after the op was queued, the stream is synchronized before the error is thrown, so no queued
 * op is ever unrecorded. No cross-stream ordering is added: two
 * streams using one buffer must be ordered by the caller (events), as in CUDA.
 *
 * <p>Heap arrays go through pinned staging owned by cuvmm: 1 MiB pieces, filled from the array
 * by Java (no JNI critical region, so no GC stall) before the call returns, queued as copies
 * from pinned memory, a marker event (from {@link EventCache}) recorded behind every
 * {@link #STAGING_GROUP} pieces. A batch comes back to a small idle pool ({@link #STAGING_KEPT})
 * when its marker completed: taken back by the reaper, or sooner by a copy that needs a piece
 * ({@code cuEventQuery} on the caller's thread before any {@code cuMemHostAlloc}). One copy
 * holds at most {@link #STAGING_IN_FLIGHT} pieces: at the cap it waits for its oldest batch's
 * marker ({@code cuEventSynchronize}, no lock held), so a 2 GiB array never pins 2 GiB.
 */
final class AsyncCopies {
    /** Bytes per pinned staging piece of an array copy (1 MiB, as ArrayCopies' pieces). */
    static final int STAGING_PIECE = 1 << 20;
    /** Idle staging pieces kept (per process); more are freed when handed back. */
    static final int STAGING_KEPT = 8;
    /** Pieces one array copy may hold in flight; at the cap it waits for its oldest batch. */
    static final int STAGING_IN_FLIGHT = 8;
    /** Pieces queued behind one marker event (half the cap, so the copy keeps the stream fed while it waits). */
    static final int STAGING_GROUP = 4;
    private static final ConcurrentLinkedDeque<StagingPiece> IDLE = new ConcurrentLinkedDeque<>();
    // Batches of every copy whose marker may still be pending (until taken back).
    private static final java.util.concurrent.ConcurrentLinkedQueue<StagedBatch> IN_FLIGHT =
            new java.util.concurrent.ConcurrentLinkedQueue<>();
    private static final AtomicInteger IDLE_COUNT = new AtomicInteger();

    private AsyncCopies() {}

    // ---- asynchronous operations ----

    static void fromPinned(VirtualMemoryBuffer dst, long offset, PinnedHostBuffer src, long srcOffset, long length,
                           Stream stream) {
        dst.requireOpen(); // closed first, whatever the windows (as the synchronous copies)
        Checks.window("copyFromAsync", offset, length, dst.size());
        Checks.window("src", srcOffset, length, src.size());
        HostFunctions.refuseInsideHostFunction("copyFromAsync");
        holding(stream, dst, () -> src.acquireArgument("src"), src::release, () -> queueRecorded(stream,
                StreamUses.eventsToRecord(stream, dst.streamUses(), src.uses()),
                (e1, e2, st) -> NativeApi.write_pinned_async(dst.nativeRange(), offset, src.nativeHandle(), srcOffset,
                        length, stream.nativeHandle(), e1, e2, st)));
    }

    static void toPinned(VirtualMemoryBuffer src, long offset, PinnedHostBuffer dst, long dstOffset, long length,
                         Stream stream) {
        src.requireOpen(); // closed first, whatever the windows (as the synchronous copies)
        Checks.window("copyToAsync", offset, length, src.size());
        Checks.window("dst", dstOffset, length, dst.size());
        HostFunctions.refuseInsideHostFunction("copyToAsync");
        holding(stream, src, () -> dst.acquireArgument("dst"), dst::release, () -> queueRecorded(stream,
                StreamUses.eventsToRecord(stream, src.streamUses(), dst.uses()),
                (e1, e2, st) -> NativeApi.read_pinned_async(src.nativeRange(), offset, dst.nativeHandle(), dstOffset,
                        length, stream.nativeHandle(), e1, e2, st)));
    }

    static void fromBuffer(VirtualMemoryBuffer dst, long offset, VirtualMemoryBuffer src, long srcOffset, long length,
                           Stream stream) {
        dst.requireOpen(); // closed first, whatever the windows (as the synchronous copies)
        Checks.window("copyFromAsync", offset, length, dst.size());
        Checks.window("src", srcOffset, length, src.size());
        HostFunctions.refuseInsideHostFunction("copyFromAsync");
        holding(stream, dst, () -> src.acquireArgument("src"), src::endUse, () -> {
            dst.checkApart("copyFromAsync", offset, src, srcOffset, length);
            queueRecorded(stream, StreamUses.eventsToRecord(stream, dst.streamUses(), src.streamUses()),
                    (e1, e2, st) -> NativeApi.copy_range_async(dst.nativeRange(), offset, src.nativeRange(), srcOffset,
                            length, stream.nativeHandle(), e1, e2, st));
        });
    }

    static void fill(VirtualMemoryBuffer dst, long offset, long length, byte value, Stream stream) {
        dst.requireOpen(); // closed first, whatever the windows (as the synchronous copies)
        Checks.window("fillAsync", offset, length, dst.size());
        HostFunctions.refuseInsideHostFunction("fillAsync");
        holding(stream, dst, NOTHING, NOTHING, () -> queueRecorded(stream,
                StreamUses.eventsToRecord(stream, dst.streamUses(), null),
                (e1, e2, st) -> NativeApi.fill_async(dst.nativeRange(), offset, length, value, stream.nativeHandle(),
                        e1, e2, st)));
    }

    /** One native call that queues an op and records the given events right after it ({@link #queueRecorded}). */
    @FunctionalInterface
    private interface QueueAndRecord {
        /** Returns 1 when the op was queued (also when a record then failed), else 0. */
        int call(NativeEventHandle record1, NativeEventHandle record2, NativeStatus status);
    }

    /**
     * Queues an op and records {@code events} (one or two, from
     * {@link StreamUses#eventsToRecord}) on {@code stream} in ONE native call, under one context
     * scope: an async copy is one JNI crossing and one context check. The caller holds uses of
     * the stream and the owners; this holds a use of each event meanwhile. If a record fails
     * after the op was queued, the stream is synchronized before the error is thrown, so no
     * queued op is ever unrecorded (the same contract as when the record was a call of its own).
     * If the op was refused before anything was queued (a READ-only destination), the events
     * are still recorded on {@code stream} before the error is thrown: their uses are installed
     * already, and an event fresh from {@link EventCache} may still carry its previous owner's
     * record on another stream, which a close, a {@code makeWait} or a prune would otherwise
     * wait on. A record only moves the event later on the same stream, so it is always safe.
     */
    private static void queueRecorded(Stream stream, Event[] events, QueueAndRecord op) {
        Event first = events[0];
        Event second = events.length > 1 ? events[1] : null;
        first.acquireUse();
        try {
            if (second != null) second.acquireUse();
            try {
                NativeEventHandle h1 = recordable(first);
                NativeEventHandle h2 = second == null ? null : recordable(second);
                NativeStatus st = NativeCalls.status();
                int queued = op.call(h1, h2, st);
                if (st.code() != 0) {
                    CudaException error = NativeCalls.toException(st);
                    if (queued != 0) synchronizeQuietly(stream); // queued but not recorded: let it finish first
                    else recordRefused(stream, h1, h2, error); // nothing queued: the uses must not point elsewhere
                    throw error;
                }
            } finally {
                if (second != null) second.releaseUse();
            }
        } finally {
            first.releaseUse();
        }
    }

    /** Records {@code stream} on {@code buffer} (work queued elsewhere, a kernel). */
    static void recordUse(VirtualMemoryBuffer buffer, Stream stream) {
        HostFunctions.refuseInsideHostFunction("recordUse");
        holding(stream, buffer, NOTHING, NOTHING, () -> recordAfterForeignWork(buffer, stream, null));
    }

    /** Runs {@code action} with {@code address} holding uses of buffer and stream, then records the stream. */
    static void withAddress(VirtualMemoryBuffer buffer, long address, Stream stream, java.util.function.LongConsumer action) {
        // Before the action runs, as recordUse: the record after it is a driver call. Refused
        // only after the action, its work (a launch that then failed) was queued, the call threw,
        // and nothing recorded it.
        HostFunctions.refuseInsideHostFunction("VirtualMemoryBuffer.withAddress(Stream, LongConsumer)");
        holding(stream, buffer, NOTHING, NOTHING, () -> {
            try {
                action.accept(address);
            } catch (Throwable t) {
                recordAfterForeignWork(buffer, stream, t); // also when the action threw: it may have launched
                throw t;
            }
            recordAfterForeignWork(buffer, stream, null);
        });
    }

    /**
     * Records {@code stream} on {@code buffer} after work queued on it by other means (a kernel
     * launched through another binding). If the record fails, that work may use the buffer and
     * nothing recorded it, so a close() (a try-with-resources around the launch) would release
     * the memory under it: the stream is waited for before the error is thrown, as an
     * asynchronous operation's failed record is ({@link #queueRecorded}): late, never early.
     * The failure is thrown, or added to {@code actionFailure} (the action's own exception,
     * which the caller throws) as suppressed.
     */
    private static void recordAfterForeignWork(VirtualMemoryBuffer buffer, Stream stream, Throwable actionFailure) {
        try {
            buffer.streamUses().record(stream);
        } catch (RuntimeException | Error e) {
            synchronizeQuietly(stream);
            if (actionFailure == null) throw e;
            actionFailure.addSuppressed(e);
        }
    }

    private static final Runnable NOTHING = () -> {};

    /**
     * Runs {@code body} holding, in this order, a use of {@code stream}, a use of {@code buffer}
     * and the other side ({@code acquireOther}, e.g. a pinned buffer or a second buffer); lets
     * them go in the reverse order, also when an acquire or the body throws (only what was
     * acquired is released). Shared by every asynchronous operation, so a close of any of them
     * waits for the op to be queued and recorded.
     */
    private static void holding(Stream stream, VirtualMemoryBuffer buffer, Runnable acquireOther,
                                Runnable releaseOther, Runnable body) {
        stream.acquireArgument();
        try {
            buffer.acquireUse();
            try {
                acquireOther.run();
                try {
                    body.run();
                } finally {
                    releaseOther.run();
                }
            } finally {
                buffer.endUse();
            }
        } finally {
            stream.release();
        }
    }

    static void fromArray(VirtualMemoryBuffer dst, long offset, byte[] src, int srcOffset, int length, Stream stream) {
        dst.requireOpen(); // closed first, whatever the windows (as the synchronous copies)
        Checks.arrayWindow("src", srcOffset, length, src.length);
        Checks.window("copyFromAsync", offset, length, dst.size());
        HostFunctions.refuseInsideHostFunction("copyFromAsync");
        if (length == 0) {
            stream.acquireArgument();
            stream.release();
            dst.acquireUse();
            dst.endUse();
            return;
        }
        holding(stream, dst, NOTHING, NOTHING, () -> {
            List<StagingPiece> group = new ArrayList<>(STAGING_GROUP); // filled, not yet behind a marker
            java.util.ArrayDeque<StagedBatch> mine = new java.util.ArrayDeque<>(); // this copy's batches in flight
            int inFlight = 0; // pieces of this copy queued and not yet taken back
            boolean queued = false;
            boolean recorded = false;
            try {
                NativeStatus st = NativeCalls.status();
                for (int done = 0; done < length; ) {
                    int n = Math.min(STAGING_PIECE, length - done);
                    // Bounded pinning: at the cap, wait for this copy's oldest batch (no lock held).
                    while (inFlight >= STAGING_IN_FLIGHT && !mine.isEmpty()) {
                        StagedBatch oldest = mine.pollFirst();
                        inFlight -= oldest.pieces.size();
                        try {
                            oldest.marker.synchronize();
                            oldest.takeBack();
                        } finally {
                            oldest.unref();
                        }
                    }
                    StagingPiece piece = takePiece();
                    group.add(piece);
                    inFlight++;
                    piece.buffer.put(0, src, srcOffset + done, n); // Java copy: the array is never pinned
                    NativeApi.write_pinned_async(dst.nativeRange(), offset + done, piece.handle, 0, n,
                            stream.nativeHandle(), null, null, st);
                    NativeCalls.check(st);
                    queued = true;
                    done += n;
                    if (group.size() == STAGING_GROUP || done == length) {
                        mine.addLast(handOver(group, stream));
                        group = new ArrayList<>(STAGING_GROUP);
                    }
                }
                dst.streamUses().record(stream);
                recorded = true;
            } finally {
                for (StagedBatch b : mine) b.unref(); // the reaper takes them back
                if (!recorded) {
                    // Pieces may be queued behind no marker, or the buffer's record failed:
                    // let the stream finish before the pieces are reused or the error is thrown.
                    if (queued) synchronizeQuietly(stream);
                    for (StagingPiece p : group) givePiece(p);
                }
            }
        });
    }

    /**
     * {@code event}'s native handle for {@link #queueRecorded}, refused when empty: native reads
     * a null handle as "no record", so a deallocated one would silently leave a queued op
     * unrecorded. The caller holds a use of {@code event}, so this cannot happen today.
     */
    static NativeEventHandle recordable(Event event) {
        NativeEventHandle h = event.nativeHandle();
        if (h == null || h.isNull()) {
            throw new IllegalStateException(event + ": its native handle is empty (expected: an open event, held "
                    + "with acquireUse() across the call that records it)");
        }
        return h;
    }

    /**
     * Records {@code h1} and {@code h2} (may be null) on {@code stream} after its op was refused
     * before queueing ({@link #queueRecorded}); a failure of these records is added to
     * {@code error} as suppressed.
     */
    private static void recordRefused(Stream stream, NativeEventHandle h1, NativeEventHandle h2, CudaException error) {
        for (NativeEventHandle h : new NativeEventHandle[] {h1, h2}) {
            if (h == null) continue;
            NativeStatus st = NativeCalls.status();
            NativeApi.event_record(h, stream.nativeHandle(), st);
            if (st.code() != 0) error.addSuppressed(NativeCalls.toException(st));
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
            this.buffer = ByteViews.of(handle.address(), STAGING_PIECE);
        }
    }

    /**
     * Pieces queued behind one marker event, in flight until the marker completes. Taken back
     * exactly once ({@link #takeBack}: by the copying thread at its cap, by any thread that
     * needs a piece and finds the marker complete, or by the reaper). The marker is counted:
     * the reaper and the copying thread each hold a reference, a thread querying it takes one
     * while it does, and the last to let go gives it back to {@link EventCache}, so no thread
     * queries or waits on a marker that another owner already re-records or destroyed.
     */
    private static final class StagedBatch {
        final List<StagingPiece> pieces;
        final Event marker;
        private final java.util.concurrent.atomic.AtomicBoolean taken = new java.util.concurrent.atomic.AtomicBoolean();
        private final AtomicInteger refs = new AtomicInteger(2); // the reaper's and the copying thread's
        private volatile boolean handedBack; // set once takeBack's pieces are in the idle pool (or freed)

        /** Takes a reference to the marker; false when it was already given back. */
        boolean retain() {
            for (;;) {
                int r = refs.get();
                if (r == 0) return false;
                if (refs.compareAndSet(r, r + 1)) return true;
            }
        }

        /** Drops a reference; the last gives the marker back to the cache (its record completed or is no longer waited on). */
        void unref() {
            if (refs.decrementAndGet() == 0) EventCache.give(marker);
        }

        StagedBatch(List<StagingPiece> pieces, Event marker) {
            this.pieces = pieces;
            this.marker = marker;
        }

        /**
         * Gives the pieces back once; the marker has completed. Between the claim and the last
         * piece reaching the idle pool another thread can see the batch claimed but its pieces
         * not yet idle: {@link #awaitPieceHandedBack} is how it waits for them instead of allocating.
         */
        void takeBack() {
            if (!taken.compareAndSet(false, true)) return;
            try {
                Runnable hook = whileHandingBackForTest;
                if (hook != null) hook.run();
                IN_FLIGHT.remove(this);
                for (StagingPiece p : pieces) givePiece(p);
            } finally {
                handedBack = true;
            }
        }

        /**
         * For a batch claimed by another thread: an idle piece as soon as one is there, else
         * null once the batch has been handed back (its pieces taken by other copies, or freed
         * because the idle pool was full). Yields while it waits: the giver holds no lock and
         * blocks on nothing but the free of a piece beyond the idle pool's room.
         */
        StagingPiece awaitPieceHandedBack() {
            for (;;) {
                boolean over = handedBack; // read before the poll: a piece given before it is seen
                StagingPiece p = pollIdle();
                if (p != null || over) return p;
                Thread.yield();
            }
        }
    }

    /** Tests set it to hold a take-back between its claim and its pieces reaching the idle pool; null otherwise. */
    static volatile Runnable whileHandingBackForTest;

    /**
     * Records a marker (from {@link EventCache}) behind {@code pieces} on {@code stream} and
     * hands them to the in-flight list and the reaper. On failure the pieces stay the caller's.
     */
    private static StagedBatch handOver(List<StagingPiece> pieces, Stream stream) {
        Event marker = EventCache.take(stream.device());
        try {
            marker.record(stream);
        } catch (RuntimeException | Error e) {
            marker.closeQuietly();
            throw e;
        }
        StagedBatch batch = new StagedBatch(pieces, marker);
        IN_FLIGHT.add(batch);
        StreamOrderedRelease.later("the pinned staging of an array copy", List.of(marker), () -> {
            batch.takeBack();
            batch.unref();
        });
        return batch;
    }

    /**
     * An idle piece; else, on the caller's thread, the pieces of completed copies the reaper has
     * not taken back yet ({@code cuEventQuery} per batch in flight, oldest first, stopping at the
     * first with pieces; a batch another thread is handing back at that moment is waited for
     * rather than allocated around); else new pinned memory
     * ({@code cuMemHostAlloc}).
     */
    private static StagingPiece takePiece() {
        StagingPiece p = pollIdle();
        if (p != null) return p;
        for (StagedBatch b : IN_FLIGHT) {
            if (b.taken.get()) { // claimed by the reaper or another copy: its pieces are on their way
                p = b.awaitPieceHandedBack();
                if (p != null) return p;
                continue;
            }
            if (!b.retain()) continue;
            boolean done;
            try {
                done = b.marker.isDone();
            } catch (RuntimeException e) { // a faulted context: leave it to the reaper (which logs)
                continue;
            } finally {
                b.unref();
            }
            if (done) {
                b.takeBack();
                p = pollIdle();
                if (p != null) return p;
            }
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

    private static StagingPiece pollIdle() {
        StagingPiece p = IDLE.pollFirst();
        if (p != null) IDLE_COUNT.decrementAndGet();
        return p;
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
