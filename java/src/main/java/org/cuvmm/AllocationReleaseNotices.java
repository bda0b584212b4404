package org.cuvmm;

import java.util.concurrent.CopyOnWriteArrayList;
import java.util.function.LongConsumer;

import org.bytedeco.javacpp.LongPointer;
import org.cuvmm.internal.jni.NativeApi;

/**
 * Tells listeners which physical allocations of this process were really released: the
 * {@linkplain VirtualMemoryBuffer#allocationIds() allocation id} of each allocation whose
 * {@code cuMemRelease} ran, whatever released it (close of an unpooled buffer or of the last
 * alias or view mapping it, a pool's eviction, {@code trim()} or close, the cleaner, cuvmm's
 * stream-ordered release, an import's last unmap). A buffer returned to its pool releases
 * nothing and is not reported. Register with {@link Driver#addAllocationReleaseListener}.
 *
 * <h2>Delivery</h2>
 * The native destructor that runs {@code cuMemRelease} queues the id after the call returned
 * (it runs inside a native call where no Java code may run, on whichever thread dropped the
 * last reference: a closing thread, the cleaner, a pool trimming). One daemon thread,
 * {@value #THREAD_NAME}, takes ids from that queue and calls every listener with each, in
 * release order, holding no lock. So a listener runs shortly <em>after</em> the release, never
 * on the releasing thread, and never while a pool or buffer lock is held; it must be quick
 * (hand slow work, such as socket writes, to another thread), since the next notices wait
 * for it. A listener that throws is logged (logger {@code org.cuvmm}) and the delivery goes
 * on; the release itself was complete before any listener ran, so a listener can never
 * break a close. An allocation released while no listener was registered is never reported.
 *
 * <h2>Cost</h2>
 * With no listener registered (the default) the queue is off: a release costs one atomic
 * load more, and no thread runs. The thread starts with the first registration and ends
 * when the last one is closed.
 *
 * <p>Thread-safe.
 */
public final class AllocationReleaseNotices {
    static final String THREAD_NAME = "cuvmm-release-notices";
    private static final System.Logger LOG = System.getLogger("org.cuvmm");
    /** Ids taken from the native queue per call. */
    private static final int BATCH = 256;
    /** How long the thread waits in native code before it checks whether it is still needed. */
    private static final long WAIT_MILLIS = 1000;

    private static final CopyOnWriteArrayList<Registration> LISTENERS = new CopyOnWriteArrayList<>();
    private static final Object LOCK = new Object(); // guards `deliverer` and the native on/off; no driver call
    private static Thread deliverer;

    private AllocationReleaseNotices() {}

    /**
     * One registered listener. {@link #close()} removes it: no notice reaches it once close
     * returned, except one already being delivered on the notice thread. Idempotent.
     */
    public static final class Registration implements AutoCloseable {
        private final LongConsumer listener;
        private volatile boolean closed;

        private Registration(LongConsumer listener) { this.listener = listener; }

        @Override
        public void close() {
            if (closed) return;
            closed = true;
            remove(this);
        }

        public boolean isClosed() { return closed; }

        @Override
        public String toString() { return "AllocationReleaseNotices.Registration[" + listener + (closed ? ", closed]" : "]"); }
    }

    static Registration add(LongConsumer listener) {
        Registration r = new Registration(listener);
        synchronized (LOCK) {
            // The first listener turns the queue on (remove turned it off with the last), before
            // add returns: no release after that is missed.
            if (LISTENERS.isEmpty()) NativeApi.release_notices(1);
            LISTENERS.add(r);
            if (deliverer == null) {
                Thread t = new Thread(AllocationReleaseNotices::deliver, THREAD_NAME);
                t.setDaemon(true);
                deliverer = t;
                t.start();
            }
        }
        return r;
    }

    private static void remove(Registration r) {
        synchronized (LOCK) {
            LISTENERS.remove(r);
            // The last one gone: drop queued ids and wake the thread, which then ends.
            if (LISTENERS.isEmpty()) NativeApi.release_notices(0);
        }
    }

    /** The notice thread: takes ids from the native queue until no listener is left. */
    private static void deliver() {
        boolean ended = false;
        try (LongPointer ids = new LongPointer(BATCH)) {
            for (;;) {
                int n = NativeApi.take_released_allocations(ids, BATCH, WAIT_MILLIS);
                for (int i = 0; i < n; i++) {
                    long id = ids.get(i);
                    for (Registration r : LISTENERS) {
                        if (!r.closed) notify(r, id);
                    }
                }
                if (n == 0) {
                    synchronized (LOCK) {
                        if (LISTENERS.isEmpty()) {
                            deliverer = null; // the next add starts a new thread (and turns the queue on)
                            ended = true;
                            return;
                        }
                    }
                }
            }
        } finally {
            if (!ended) { // an Error (out of native memory for the batch): let the next add start a thread
                synchronized (LOCK) {
                    if (deliverer == Thread.currentThread()) deliverer = null;
                }
            }
        }
    }

    private static void notify(Registration r, long id) {
        try {
            r.listener.accept(id);
        } catch (RuntimeException | Error e) {
            LOG.log(System.Logger.Level.WARNING, "allocation release listener " + r.listener + " threw " + e
                    + " for allocation " + id + "; the release was complete, delivery goes on", e);
        }
    }
}
