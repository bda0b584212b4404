package org.cuvmm;

import java.util.ArrayList;
import java.util.Iterator;
import java.util.List;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The reaper: releases that must wait for stream work run here, on one daemon thread
 * ("cuvmm-stream-release"), so that the caller never blocks: {@link
 * VirtualMemoryBuffer#close(Stream)}, a deferred close with pending stream work, and the
 * pinned staging of array copies.
 *
 * <p>Each task names events; the thread polls every pending task's events
 * ({@code cuEventQuery}, never {@code cuEventSynchronize}) and runs a task's release as soon as
 * all of its events have completed, in whatever order tasks complete: a task behind a slow or
 * held stream does not hold up a later one on another stream (one {@code close(s)} on a held
 * stream must not stall every other release, nor make the array copies' pinned staging grow
 * without bound). Between rounds with nothing completed it parks, from 50 us doubling to 2 ms,
 * and a new task wakes it at once. Releases are late, never early. A failed query (a faulted
 * context) is logged and the release runs anyway: the work will never complete, and holding
 * the memory forever would help no one. A release that throws is logged; the thread goes on.
 *
 * <p>The task (and with it the buffer it releases) stays strongly reachable until it ran, so a
 * buffer's cleaner cannot release it early. At JVM exit pending tasks are dropped with the
 * process. No lock is held across a driver call.
 *
 * <p>The thread starts with the first task. When it cannot be started ({@link Thread#start()}
 * throws, such as {@code OutOfMemoryError} "unable to create native thread"), nothing is thrown
 * to the caller and a later task tries the start again; the caller's task is released on the
 * calling thread instead, after waiting there for each of its events
 * ({@code cuEventSynchronize}; so the call blocks as long as that work runs), and a WARNING
 * names what was released and why. From a host function, where no CUDA call may be made and
 * a wait could never end, the task stays queued instead (WARNING): it runs once a later task
 * has started the thread.
 */
final class StreamOrderedRelease {
    /** Where failures are logged; tests replace it to see what is logged. */
    static volatile System.Logger log = System.getLogger("org.cuvmm");
    private static final LinkedBlockingQueue<Task> QUEUE = new LinkedBlockingQueue<>();
    private static final AtomicLong PENDING = new AtomicLong();
    private static final Object IDLE = new Object(); // notified when PENDING drops to 0
    private static volatile Thread thread;

    private StreamOrderedRelease() {}

    private static final class Task {
        final String what;
        final List<Event> waitFor;
        final Runnable release;
        int next; // waitFor[0, next) completed; only the reaper thread reads or writes it

        Task(String what, List<Event> waitFor, Runnable release) {
            this.what = what;
            this.waitFor = waitFor;
            this.release = release;
        }

        /** True when every event completed ({@code cuEventQuery} each, from the first not yet seen done). */
        boolean ready() {
            while (next < waitFor.size()) {
                Event e = waitFor.get(next);
                boolean done;
                try {
                    done = e.isDone();
                } catch (RuntimeException x) {
                    log.log(System.Logger.Level.WARNING, what + ": waiting for " + e + " failed (" + x.getMessage()
                            + "); going on with the release", x);
                    done = true;
                }
                if (!done) return false;
                next++;
            }
            return true;
        }
    }

    /** First and longest park between polling rounds that found nothing completed. */
    static final long MIN_PARK_NANOS = 50_000;
    static final long MAX_PARK_NANOS = 2_000_000;

    /**
     * Runs {@code release} on the reaper thread once every event of {@code waitFor} has
     * completed. The events stay valid (not closed) until then: the caller gives up using them.
     * Never throws. When the thread cannot be started, the release runs here instead, after
     * {@code cuEventSynchronize} of each event (a failed wait is logged and the release goes
     * on, as after a failed query on the thread), and is logged; called from a host function,
     * the task stays queued for a later start instead (see the class comment).
     *
     * @param what names the object released, for the log
     */
    static void later(String what, List<Event> waitFor, Runnable release) {
        Task task = new Task(what, waitFor, release);
        PENDING.incrementAndGet();
        // Started before the task is queued: when the start fails, the task was never where a
        // thread could also take it, so it runs exactly once, here.
        Throwable failed = start();
        if (failed == null) {
            QUEUE.add(task);
            return;
        }
        if (HostFunctions.insideHostFunction()) {
            // No driver call here (cuda.h, cuLaunchHostFunc), and waiting for work queued behind
            // this host function would never end: late (the next start), never early.
            QUEUE.add(task);
            warn(() -> "the stream-ordered release of " + what + " waits in the queue: "
                    + "cuvmm's release thread (\"" + THREAD_NAME + "\") could not be started (" + failed + "), and a host "
                    + "function may not release it itself; the next stream-ordered release starts the thread again", failed);
            return;
        }
        warn(() -> "cuvmm's release thread (\"" + THREAD_NAME + "\") could not be started ("
                + failed + "): " + what + " is released on this thread, after waiting here for its stream work", failed);
        try {
            for (Event e : waitFor) e.synchronizeQuietly(what); // logs a failure; the release goes on, as in ready()
        } catch (RuntimeException | Error x) {
            // Only an Error (synchronizeQuietly logs the rest): the work is not known to be
            // complete, so the task waits for the next start (late, never early), and the caller,
            // which gave the task up, is not told.
            QUEUE.add(task);
            warn(() -> "waiting for the stream work of " + what + " failed (" + x
                    + "); its release waits for the next start of cuvmm's release thread", x);
            return;
        }
        run(task);
    }

    /**
     * A WARNING from {@link #later}, which never throws: a logger that throws (a bridge, a
     * failing handler) must neither lose the task (the WARNING ahead of the wait came before
     * the task was queued or run) nor reach a caller that, seeing a throw, releases the
     * memory itself while the task is queued (LifetimePool.release, AsyncCopies' hand-over).
     */
    private static void warn(java.util.function.Supplier<String> message, Throwable thrown) {
        try {
            log.log(System.Logger.Level.WARNING, message.get(), thrown);
        } catch (RuntimeException | Error e) {
            // dropped: the release goes on
        }
    }

    /**
     * The rest of {@link VirtualMemoryBuffer#close(Stream)}, once the buffer is closed (no use can
     * start): {@code stream} waits for the buffer's uses on other streams, a marker event is
     * recorded on it, and the reaper releases after the marker. The caller holds a use of
     * {@code stream}. Never throws: when the driver refuses a step, the release happens here
     * after waiting for the stream and every recorded use (late, never early), and is logged;
     * when the reaper thread cannot be started, it happens here after waiting for the marker
     * ({@link #later}), and is logged.
     */
    static void closeOn(VirtualMemoryBuffer buffer, Stream stream, StreamUses uses) {
        Event marker = null;
        try {
            if (uses != null) uses.makeWait(stream);
            marker = Event.internal(stream.device());
            marker.record(stream);
        } catch (RuntimeException | Error e) {
            if (marker != null) marker.closeQuietly();
            log.log(System.Logger.Level.WARNING, "close(" + stream + ") of " + buffer + " could not be ordered on the "
                    + "stream (" + e.getMessage() + "); waiting for the stream here instead", e);
            org.cuvmm.internal.jni.NativeStatus st = org.cuvmm.internal.NativeCalls.status();
            org.cuvmm.internal.jni.NativeApi.stream_synchronize(stream.nativeHandle(), st);
            if (uses != null) uses.awaitAll(buffer.toString());
            buffer.releaseAfterStreamWork();
            return;
        }
        final Event m = marker;
        later(buffer.toString(), List.of(m), () -> {
            try {
                buffer.releaseAfterStreamWork();
            } finally {
                m.closeQuietly();
            }
        });
    }

    /** Tasks handed in and not yet finished (for tests). */
    static long pending() { return PENDING.get(); }

    /**
     * Waits until no task is pending (for tests: tasks no longer finish in the order handed
     * in, so a marker task proves nothing). Bounded.
     *
     * @return false when tasks were still pending after {@code timeoutMillis}
     */
    static boolean awaitIdle(long timeoutMillis) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(timeoutMillis);
        synchronized (IDLE) { // no driver call under this lock
            while (PENDING.get() != 0) {
                long left = TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime());
                if (left <= 0) return false;
                IDLE.wait(left);
            }
        }
        return true;
    }

    /** The reaper thread's name. */
    static final String THREAD_NAME = "cuvmm-stream-release";

    /**
     * Test seam: when set, {@link #start()} makes the thread with it, even while a thread already
     * runs, so a test can make the start fail whatever earlier tests started (a factory whose
     * thread does start adds a second reaper, which takes tasks from the same queue). Null (in
     * production): a new daemon thread named {@value #THREAD_NAME}.
     */
    static volatile java.util.function.Function<Runnable, Thread> threadFactoryForTest;

    /**
     * Starts the thread unless it runs. Returns null when it runs, else why it could not be
     * started; {@code thread} then stays as it was (null, but for the seam), so the next task
     * tries again.
     */
    private static Throwable start() {
        java.util.function.Function<Runnable, Thread> factory = threadFactoryForTest;
        if (factory == null && thread != null) return null;
        synchronized (StreamOrderedRelease.class) { // no driver call under this lock
            if (factory == null && thread != null) return null;
            try {
                Thread t = factory != null ? factory.apply(StreamOrderedRelease::loop)
                        : new Thread(StreamOrderedRelease::loop, THREAD_NAME);
                t.setDaemon(true);
                t.start();
                thread = t;
                return null;
            } catch (RuntimeException | Error e) { // OutOfMemoryError: "unable to create native thread"
                return e;
            }
        }
    }

    private static void loop() {
        List<Task> pending = new ArrayList<>(); // only this thread touches it
        long park = MIN_PARK_NANOS;
        for (;;) {
            try {
                if (pending.isEmpty()) {
                    pending.add(QUEUE.take());
                    park = MIN_PARK_NANOS;
                }
                QUEUE.drainTo(pending);
                boolean progress = false;
                for (Iterator<Task> it = pending.iterator(); it.hasNext(); ) {
                    Task task = it.next();
                    if (!task.ready()) continue;
                    it.remove();
                    progress = true;
                    run(task);
                }
                if (pending.isEmpty()) continue;
                if (progress) {
                    park = MIN_PARK_NANOS;
                    continue;
                }
                Task arrived = QUEUE.poll(park, TimeUnit.NANOSECONDS); // a new task wakes us at once
                if (arrived != null) {
                    pending.add(arrived);
                    park = MIN_PARK_NANOS;
                } else {
                    park = Math.min(park * 2, MAX_PARK_NANOS);
                }
            } catch (InterruptedException e) {
                // a daemon of cuvmm's own: nobody may stop it while releases are pending
            } catch (Throwable t) {
                log.log(System.Logger.Level.WARNING, "the stream-ordered release thread: " + t, t);
            }
        }
    }

    private static void run(Task task) {
        try {
            task.release.run();
        } catch (Throwable t) {
            log.log(System.Logger.Level.WARNING, "the stream-ordered release of " + task.what + " failed: " + t, t);
        } finally {
            if (PENDING.decrementAndGet() == 0) {
                synchronized (IDLE) {
                    IDLE.notifyAll();
                }
            }
        }
    }
}
