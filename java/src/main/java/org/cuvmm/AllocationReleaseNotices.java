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
 * for it. An allocation released while no listener was registered is never reported.
 *
 * <h2>Which releases a listener hears</h2>
 * Each queued id gets the next number of a native sequence; a registration reads that
 * sequence when it is added and hears exactly the ids queued after that read. So a listener
 * hears every release whose {@code cuMemRelease} returned after
 * {@link Driver#addAllocationReleaseListener} returned, none that returned before the call
 * began, and for a release concurrent with the call either; in particular never one that
 * was already queued, or being delivered to other listeners, when it registered. Closing
 * the registration stops it: no notice reaches it once {@link Registration#close()}
 * returned, except the one it may be running at that moment on the notice thread.
 *
 * <h2>Failures</h2>
 * A listener that throws (any RuntimeException or Error) is logged (logger {@code org.cuvmm},
 * WARNING: with the stack trace the first time that registration throws, in one line after
 * that) and the delivery goes on; the release itself was complete before any listener ran,
 * so a listener can never break a close. If the notice thread cannot be started,
 * {@link Driver#addAllocationReleaseListener} throws and registers nothing (the queue is
 * turned off again when no other listener is left). If the notice thread itself dies (an
 * Error outside any listener, such as running out of memory), that is logged; when it had
 * delivered notices before, a new thread takes over the queue and nothing is lost;
 * otherwise the queue is turned off, releases meanwhile are not reported, and the next
 * registration turns it back on with a new thread (the registrations stay).
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
    /** Where failures are logged; tests replace it to count what is logged. */
    static volatile System.Logger log = System.getLogger("org.cuvmm");
    /** Ids taken from the native queue per call. */
    private static final int BATCH = 256;
    /** How long the thread waits in native code before it checks whether it is still needed. */
    private static final long WAIT_MILLIS = 1000;

    private static final CopyOnWriteArrayList<Registration> LISTENERS = new CopyOnWriteArrayList<>();
    // Guards `deliverer`, `queueOn`, the native on/off and the tests' thread factory; never held
    // across a driver call or a listener.
    private static final Object LOCK = new Object();
    private static Thread deliverer;
    private static boolean queueOn;
    /** Makes the notice thread; tests replace it to make a start fail. */
    static java.util.function.Function<Runnable, Thread> threadFactory = AllocationReleaseNotices::newThread;
    /** Tests set it to make the notice thread die before its next take; null otherwise. */
    static volatile Runnable beforeTakeForTest;

    private AllocationReleaseNotices() {}

    /**
     * One registered listener. {@link #close()} removes it: no notice reaches it once close
     * returned, except one already being delivered on the notice thread. Idempotent.
     */
    public static final class Registration implements AutoCloseable {
        private final LongConsumer listener;
        private volatile boolean closed;
        /** The native release sequence read at registration: only ids numbered above it are heard. */
        private long after;
        /** Whether a throw of this listener was already logged with its stack trace (notice thread only). */
        private volatile boolean stackLogged;

        private Registration(LongConsumer listener) { this.listener = listener; }

        @Override
        public void close() {
            if (closed) return;
            closed = true;
            remove(this);
        }

        /** True once {@link #close()} ran (no later id is delivered, but one already being delivered). */
        public boolean isClosed() { return closed; }

        @Override
        public String toString() { return "AllocationReleaseNotices.Registration[" + listener + (closed ? ", closed]" : "]"); }
    }

    private static Thread newThread(Runnable body) {
        Thread t = new Thread(body, THREAD_NAME);
        t.setDaemon(true);
        return t;
    }

    static Registration add(LongConsumer listener) {
        Registration r = new Registration(listener);
        synchronized (LOCK) {
            // Turn the queue on (remove turned it off with the last listener, a dead thread may
            // have too) before reading the sequence: every id numbered above it is queued.
            boolean turnedOn = !queueOn;
            if (turnedOn) {
                NativeApi.release_notices(1);
                queueOn = true;
            }
            r.after = NativeApi.release_notice_sequence();
            LISTENERS.add(r);
            if (deliverer == null) {
                try {
                    Thread t = threadFactory.apply(AllocationReleaseNotices::deliver);
                    t.start();
                    deliverer = t;
                } catch (RuntimeException | Error e) {
                    // Nothing registered: undo, so no dead registration keeps the queue on.
                    LISTENERS.remove(r);
                    r.closed = true;
                    if (LISTENERS.isEmpty()) turnOff();
                    throw e;
                }
            }
        }
        return r;
    }

    private static void remove(Registration r) {
        synchronized (LOCK) {
            LISTENERS.remove(r);
            // The last one gone: drop queued ids and wake the thread, which then ends.
            if (LISTENERS.isEmpty()) turnOff();
        }
    }

    /** Holding LOCK. */
    private static void turnOff() {
        NativeApi.release_notices(0);
        queueOn = false;
    }

    /** Registrations live (for tests). */
    static int listenerCount() { return LISTENERS.size(); }

    /** Whether a notice thread is running or about to (for tests). */
    static boolean delivering() {
        synchronized (LOCK) {
            return deliverer != null;
        }
    }

/** The notice thread: takes ids from the native queue until no listener is left. */
    private static void deliver() {
        boolean ended = false;
        boolean delivered = false; // a batch went through: a replacement after a death can make progress
        try (LongPointer ids = new LongPointer(BATCH); LongPointer seqs = new LongPointer(BATCH)) {
            for (;;) {
                Runnable hook = beforeTakeForTest;
                if (hook != null) hook.run();
                int n = NativeApi.take_released_allocations(ids, seqs, BATCH, WAIT_MILLIS);
                for (int i = 0; i < n; i++) {
                    long id = ids.get(i);
                    long seq = seqs.get(i);
                    for (Registration r : LISTENERS) {
                        if (!r.closed && seq > r.after) notify(r, id);
                    }
                }
                if (n > 0) delivered = true;
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
        } catch (RuntimeException | Error e) {
            log.log(System.Logger.Level.ERROR, "the allocation release notice thread failed: " + e
                    + (delivered ? "; a new thread takes over" : "; release notices are off until the next registration"), e);
        } finally {
            if (!ended) died(delivered);
        }
    }

    /** The notice thread ends abnormally: hand the queue to a new thread, or turn it off. */
    private static void died(boolean delivered) {
        synchronized (LOCK) {
            if (deliverer != Thread.currentThread()) return;
            deliverer = null;
            if (LISTENERS.isEmpty()) return;
            if (delivered) {
                try {
                    Thread t = threadFactory.apply(AllocationReleaseNotices::deliver);
                    t.start();
                    deliverer = t;
                    return;
                } catch (RuntimeException | Error e) {
                    log.log(System.Logger.Level.ERROR, "no new allocation release notice thread (" + e
                            + "); release notices are off until the next registration", e);
                }
            }
            // No progress (it would die again) or no thread: stop queueing; the next add turns
            // the queue on and starts a thread for every registration.
            turnOff();
        }
    }

    private static void notify(Registration r, long id) {
        try {
            r.listener.accept(id);
        } catch (RuntimeException | Error e) {
            // Nothing here may throw on: a throw would end the notice thread, and with it the
            // delivery of this batch to every later listener. What the listener threw, or the
            // listener itself, may fail to describe itself (a toString() that throws), and a
            // logger may fail: only the log line is lost then.
            try {
                String message = "allocation release listener " + describe(r.listener) + " threw "
                        + HostFunctions.describe(e) + " for allocation " + id
                        + "; the release was complete, delivery goes on";
                if (r.stackLogged) {
                    log.log(System.Logger.Level.WARNING, message + " (stack trace logged at its first throw)");
                } else {
                    r.stackLogged = true;
                    log.log(System.Logger.Level.WARNING, message, e);
                }
            } catch (RuntimeException | Error logFailed) {
                // the listener's failure is not ours to propagate; delivery goes on
            }
        }
    }

    /** {@code o}'s toString(), or its class when that throws. */
    private static String describe(Object o) {
        try {
            return String.valueOf(o);
        } catch (RuntimeException | Error e) {
            return o.getClass().getName() + " (its toString() threw " + e.getClass().getName() + ")";
        }
    }
}
