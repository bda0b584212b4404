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
 */
final class StreamOrderedRelease {
    private static final System.Logger LOG = System.getLogger("org.cuvmm");
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
                    LOG.log(System.Logger.Level.WARNING, what + ": waiting for " + e + " failed (" + x.getMessage()
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
     *
     * @param what names the object released, for the log
     */
    static void later(String what, List<Event> waitFor, Runnable release) {
        PENDING.incrementAndGet();
        QUEUE.add(new Task(what, waitFor, release));
        start();
    }

    /**
     * The rest of {@link VirtualMemoryBuffer#close(Stream)}, once the buffer is closed (no use can
     * start): {@code stream} waits for the buffer's uses on other streams, a marker event is
     * recorded on it, and the reaper releases after the marker. The caller holds a use of
     * {@code stream}. Never throws: when the driver refuses a step, the release happens here
     * after waiting for the stream and every recorded use (late, never early), and is logged.
     */
    static void closeOn(VirtualMemoryBuffer buffer, Stream stream, StreamUses uses) {
        Event marker = null;
        try {
            if (uses != null) uses.makeWait(stream);
            marker = Event.internal(stream.device());
            marker.record(stream);
        } catch (RuntimeException | Error e) {
            if (marker != null) marker.closeQuietly();
            LOG.log(System.Logger.Level.WARNING, "close(" + stream + ") of " + buffer + " could not be ordered on the "
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

    private static void start() {
        if (thread != null) return;
        synchronized (StreamOrderedRelease.class) { // no driver call under this lock
            if (thread != null) return;
            Thread t = new Thread(StreamOrderedRelease::loop, "cuvmm-stream-release");
            t.setDaemon(true);
            t.start();
            thread = t;
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
                LOG.log(System.Logger.Level.WARNING, "the stream-ordered release thread: " + t, t);
            }
        }
    }

    private static void run(Task task) {
        try {
            task.release.run();
        } catch (Throwable t) {
            LOG.log(System.Logger.Level.WARNING, "the stream-ordered release of " + task.what + " failed: " + t, t);
        } finally {
            if (PENDING.decrementAndGet() == 0) {
                synchronized (IDLE) {
                    IDLE.notifyAll();
                }
            }
        }
    }
}
