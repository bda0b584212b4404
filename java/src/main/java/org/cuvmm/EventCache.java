package org.cuvmm;

import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicIntegerArray;
import java.util.concurrent.atomic.AtomicReferenceArray;

/**
 * cuvmm's own events (timing disabled), kept per device for reuse, so that the bookkeeping
 * events of buffers ({@link StreamUses}: one per buffer and stream) cost a
 * {@code cuEventCreate}/{@code cuEventDestroy} pair only until the cache is warm: a buffer
 * allocated and closed in a loop (a pooled one above all) then makes no event call besides its
 * records.
 *
 * <p>An event given back may still have a record pending: that is safe, because whoever gives
 * it back no longer waits on it ({@code cuStreamWaitEvent} captured the record it needed at
 * its call, and every host wait is over), and the next owner's record replaces the old one
 * (so every owner records an event it installs, even for an op refused before queueing:
 * {@link AsyncCopies}).
 * At most {@link #MAX_PER_DEVICE} events are kept per device; more are destroyed. Thread-safe,
 * no lock; events left in the cache at exit go with the process.
 */
final class EventCache {
    /** Events kept idle per device. */
    static final int MAX_PER_DEVICE = 256;
    private static final int DEVICES = 64; // the native layer's limit on device ordinals
    private static final AtomicReferenceArray<ConcurrentLinkedQueue<Event>> IDLE = new AtomicReferenceArray<>(DEVICES);
    private static final AtomicIntegerArray COUNT = new AtomicIntegerArray(DEVICES);
    private static final AtomicInteger CREATED = new AtomicInteger();

    private EventCache() {}

    /**
     * An idle event of {@code device}, or a new one ({@code cuEventCreate}); the caller owns it
     * until {@link #give}.
     *
     * @throws CudaException when a new one is needed and the driver refuses
     */
    static Event take(int device) {
        ConcurrentLinkedQueue<Event> q = IDLE.get(device);
        if (q != null) {
            Event e = q.poll();
            if (e != null) {
                COUNT.decrementAndGet(device);
                return e;
            }
        }
        CREATED.incrementAndGet();
        return Event.internal(device);
    }

    /** Gives back an event from {@link #take} that its owner no longer uses. Never throws. */
    static void give(Event e) {
        int device = e.device();
        if (e.isClosed()) return;
        if (COUNT.incrementAndGet(device) > MAX_PER_DEVICE) {
            COUNT.decrementAndGet(device);
            e.closeQuietly();
            return;
        }
        queue(device).offer(e);
    }

    private static ConcurrentLinkedQueue<Event> queue(int device) {
        ConcurrentLinkedQueue<Event> q = IDLE.get(device);
        if (q != null) return q;
        IDLE.compareAndSet(device, null, new ConcurrentLinkedQueue<>());
        return IDLE.get(device);
    }

    /** Events created through the cache so far (for tests). */
    static int created() { return CREATED.get(); }
}
