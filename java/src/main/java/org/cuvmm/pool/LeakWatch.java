package org.cuvmm.pool;

import java.lang.ref.ReferenceQueue;
import java.lang.ref.WeakReference;

import org.cuvmm.VirtualMemoryBuffer;

/**
 * The pool's watch on one pooled buffer it handed out: a weak reference to the buffer, held
 * by the buffer's {@link PoolSlot} (so it lives exactly as long as the slot is reachable from
 * its {@link LifetimePool}), enqueued when the garbage collector finds the buffer unreachable.
 * One daemon thread, "cuvmm-pool-leaks", shared by all pools, takes each enqueued watch and
 * hands the slot back through {@link LifetimePool#leaked}, which warns, counts and recycles.
 *
 * <p>Why not the core's {@link java.lang.ref.Cleaner}: a Cleaner registration links the
 * cleanable into one list under one lock shared by every thread, on every allocation. A
 * watch is one object and no lock; the slot drops it when the buffer is closed, so the
 * garbage collector never even sees the watch of a buffer closed in time.
 *
 * <p>Failure contract: a watch whose buffer was closed (or whose slot was handed out again)
 * before the watch came off the queue is ignored ({@link PoolSlotFields#claimWatch}); the
 * thread never stops on an exception (logged, logger {@code org.cuvmm.pool}).
 */
final class LeakWatch extends WeakReference<VirtualMemoryBuffer> {
    private static final System.Logger LOG = System.getLogger("org.cuvmm.pool");
    private static final ReferenceQueue<VirtualMemoryBuffer> QUEUE = new ReferenceQueue<>();

    static {
        Thread t = new Thread(LeakWatch::drain, "cuvmm-pool-leaks");
        t.setDaemon(true);
        t.start();
    }

    final PoolSlot slot;
    /** Where the buffer was allocated, or null (see {@link org.cuvmm.LeakDetection}). */
    final Throwable site;

    LeakWatch(VirtualMemoryBuffer buffer, PoolSlot slot, Throwable site) {
        super(buffer, QUEUE);
        this.slot = slot;
        this.site = site;
    }

    private static void drain() {
        for (;;) {
            try {
                LeakWatch w = (LeakWatch) QUEUE.remove();
                w.slot.home.leaked(w.slot, w);
            } catch (InterruptedException e) {
                // A daemon that nobody owns: keep watching.
            } catch (Throwable t) {
                LOG.log(System.Logger.Level.ERROR, "returning a leaked pooled buffer failed", t);
            }
        }
    }
}
