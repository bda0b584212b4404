package org.cuvmm;

import java.util.List;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.atomic.AtomicLong;

/**
 * The reaper: releases that must wait for stream work run here, on one daemon thread
 * ("cuvmm-stream-release"), so that the caller never blocks: {@link
 * VirtualMemoryBuffer#close(Stream)}, a deferred close with pending stream work, and the
 * pinned staging of array copies.
 *
 * <p>Each task names events; the thread waits for each ({@code cuEventSynchronize}), then runs
 * the task's release. Tasks run in the order they were handed in, so a task behind a slow
 * event waits for it too (releases are late, never early). A failed wait (a faulted context) is
 * logged and the release runs anyway: the work will never complete, and holding the memory
 * forever would help no one. A release that throws is logged; the thread goes on.
 *
 * <p>The task (and with it the buffer it releases) stays strongly reachable until it ran, so a
 * buffer's cleaner cannot release it early. At JVM exit pending tasks are dropped with the
 * process. No lock is held across a driver call.
 */
final class StreamOrderedRelease {
    private static final System.Logger LOG = System.getLogger("org.cuvmm");
    private static final LinkedBlockingQueue<Task> QUEUE = new LinkedBlockingQueue<>();
    private static final AtomicLong PENDING = new AtomicLong();
    private static volatile Thread thread;

    private StreamOrderedRelease() {}

    private static final class Task {
        final String what;
        final List<Event> waitFor;
        final Runnable release;

        Task(String what, List<Event> waitFor, Runnable release) {
            this.what = what;
            this.waitFor = waitFor;
            this.release = release;
        }
    }

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
        for (;;) {
            Task task;
            try {
                task = QUEUE.take();
            } catch (InterruptedException e) {
                continue; // a daemon of cuvmm's own: nobody may stop it while releases are pending
            }
            try {
                for (Event e : task.waitFor) e.synchronizeQuietly(task.what);
                task.release.run();
            } catch (Throwable t) {
                LOG.log(System.Logger.Level.WARNING, "the stream-ordered release of " + task.what + " failed: " + t, t);
            } finally {
                PENDING.decrementAndGet();
            }
        }
    }
}
