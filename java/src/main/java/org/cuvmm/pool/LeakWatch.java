package org.cuvmm.pool;

import java.lang.ref.ReferenceQueue;
import java.lang.ref.WeakReference;

import org.cuvmm.VirtualMemoryBuffer;

/**
 * The pool's watch on one pooled buffer it handed out: a weak reference to the buffer, held
 * by the buffer's {@link PoolSlot} (so it lives exactly as long as the slot is reachable from
 * its {@link LifetimePool}), enqueued on its pool's {@linkplain VirtualMemoryPool#drainLeaks
 * leak queue} when the garbage collector finds the buffer unreachable.
 *
 * <p>No thread takes watches off the queue: the pool polls it on its slow paths (a miss,
 * eviction, trim, stats, close) and hands each slot back through {@link LifetimePool#leaked},
 * which warns, counts and recycles. A thread started on first use would inherit the first
 * allocating thread's context class loader and inheritable thread-locals (pinning, say, a
 * web application's loader), and a failed start would have to be handled somewhere; an
 * empty {@link ReferenceQueue#poll()} is one volatile read, so polling costs nothing that
 * matters, and never on the allocate/close hot path.
 *
 * <p>Why not the core's {@link java.lang.ref.Cleaner}: a Cleaner registration links the
 * cleanable into one list under one lock shared by every thread, on every allocation. A
 * watch is one object and no lock; the slot drops it when the buffer is closed, so the
 * garbage collector never even sees the watch of a buffer closed in time.
 *
 * <p>Failure contract: a watch whose buffer was closed (or whose slot was handed out again)
 * before the watch came off the queue is ignored ({@link PoolSlotFields#claimWatch}).
 */
final class LeakWatch extends WeakReference<VirtualMemoryBuffer> {
    final PoolSlot slot;
    /** Where the buffer was allocated, or null (see {@link org.cuvmm.LeakDetection}). */
    final Throwable site;

    /**
     * What tells, once the buffer is gone, which stream work was recorded on it ({@link
     * org.cuvmm.internal.BufferAccess.Bridge#recordedUsesToken}): the slot is recycled only
     * after that work, or a leaked buffer's queued fill would write the next owner's memory
     * (or memory already released: found by an independent probe).
     */
    final Object recordedUses;

    LeakWatch(VirtualMemoryBuffer buffer, PoolSlot slot, Throwable site, ReferenceQueue<VirtualMemoryBuffer> queue,
              Object recordedUses) {
        super(buffer, queue);
        this.slot = slot;
        this.site = site;
        this.recordedUses = recordedUses;
    }
}
