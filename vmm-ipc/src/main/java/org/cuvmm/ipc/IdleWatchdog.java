package org.cuvmm.ipc;

import java.util.concurrent.RejectedExecutionException;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Consumer;

/**
 * Ends connections that do not speak (docs/PROTOCOL.md section 8): one that sent no HELLO
 * within the handshake timeout, and one that holds no lease and sent nothing for the idle
 * timeout. A connection that holds a lease is never idle: a consumer may map memory and read
 * it for hours without a frame. One daemon thread per server; each connection has at most one
 * check scheduled at a time, at the moment it could first be due. A due check only queues an
 * ERROR {@code TIMEOUT} and asks the connection to end ({@link ServerConnection#timeOut});
 * it never blocks. Package-private.
 */
final class IdleWatchdog implements AutoCloseable {
    private final long handshakeNanos;
    private final long idleNanos;
    private final ScheduledThreadPoolExecutor timer;
    /** Checks run so far (tests wait on it instead of on the clock). */
    final AtomicLong checks = new AtomicLong();

    IdleWatchdog(ConnectionLimits limits, String name) {
        this.handshakeNanos = limits.handshakeTimeout().toNanos();
        this.idleNanos = limits.idleTimeout().toNanos();
        this.timer = new ScheduledThreadPoolExecutor(1, r -> {
            Thread t = new Thread(r, "cuvmm-ipc-watchdog " + name);
            t.setDaemon(true);
            return t;
        });
        timer.setRemoveOnCancelPolicy(true);
        timer.setExecuteExistingDelayedTasksAfterShutdownPolicy(false);
    }

    /**
     * Starts watching a connection that was just accepted: its first check is at the earlier
     * of the two timeouts that are on. Both clocks start at {@code accept} (a connection that
     * has sent nothing yet holds no lease, so it is idle too): with an idle timeout shorter
     * than the handshake timeout, the idle rule is the one that is due first.
     */
    void watch(ServerConnection c) {
        long first = Math.min(handshakeNanos > 0 ? handshakeNanos : Long.MAX_VALUE,
                idleNanos > 0 ? idleNanos : Long.MAX_VALUE);
        if (first != Long.MAX_VALUE) schedule(c, first);
    }

    private void schedule(ServerConnection c, long delayNanos) {
        if (timer.isShutdown() || c.isEnding()) return;
        try {
            c.watchdogTask = timer.schedule(() -> check(c), Math.max(delayNanos, 1), TimeUnit.NANOSECONDS);
        } catch (RejectedExecutionException closing) {
            // the server is closing: it ends every connection itself
            return;
        }
        if (c.isEnding()) unwatch(c); // it ended meanwhile: its unwatch may have missed this task
    }

    /**
     * Stops watching a connection that ended: cancels its scheduled check (removed from the
     * timer's queue at once), so an ended connection is not kept reachable for up to a timeout.
     */
    void unwatch(ServerConnection c) {
        java.util.concurrent.ScheduledFuture<?> task = c.watchdogTask;
        if (task != null) task.cancel(false);
    }

    /** Checks waiting in the timer's queue (tests: none is left for an ended connection). */
    int queued() { return timer.getQueue().size(); }

    /**
     * Test seam: called on the watchdog thread after a check decided to time a connection
     * out and before {@link ServerConnection#timeOut} re-checks that decision under the
     * connection's lock, so tests can make a frame arrive in between. Does nothing by default.
     */
    static volatile Consumer<ServerConnection> beforeTimeOut = c -> {};

    /**
     * Times the connection out under the first rule that is due (the handshake, then the idle
     * rule), else schedules the next check at the earliest moment one could be due. A
     * connection that holds a lease is not idle: it is looked at again one idle timeout later
     * (its {@code RELEASE} restarts the idle clock, so that check is never late).
     */
    private void check(ServerConnection c) {
        checks.incrementAndGet();
        if (c.isEnding()) return;
        long seen = c.lastFrameNanos(); // read first: a frame arriving after this makes timeOut decline
        long now = System.nanoTime();
        long next = Long.MAX_VALUE; // nanos to the next check; MAX_VALUE: none
        if (handshakeNanos > 0 && !c.helloDone()) {
            long late = now - (c.startNanos + handshakeNanos);
            if (late >= 0) {
                timeOut(c, "no HELLO within " + text(handshakeNanos) + " of connecting (the server's handshake "
                        + "timeout); closing the connection", seen);
                return;
            }
            next = -late;
        }
        if (idleNanos > 0) {
            if (c.holdsLeases()) {
                next = Math.min(next, idleNanos); // not idle while it holds a lease; look again later
            } else {
                long late = now - (seen + idleNanos);
                if (late >= 0) {
                    timeOut(c, "no frame for " + text(idleNanos) + " while holding no lease (the server's idle "
                            + "timeout); closing the connection", seen);
                    return;
                }
                next = Math.min(next, -late);
            }
        }
        if (next != Long.MAX_VALUE) schedule(c, next);
    }

    /**
     * Asks the connection to end with {@code reason}; looks again at once when a frame or a
     * lease came meanwhile. Once it is ending, its socket is shut down after the writer's
     * grace unless the writer finished by then ({@link ServerConnection#cutIfStillSending}):
     * the cut is bounded even for a client that does not read.
     */
    private void timeOut(ServerConnection c, String reason, long seen) {
        beforeTimeOut.accept(c);
        if (!c.timeOut(reason, seen)) {
            schedule(c, 1); // a frame or a lease arrived meanwhile: decide again
            return;
        }
        try {
            c.watchdogTask = timer.schedule(c::cutIfStillSending, ServerConnection.WRITER_GRACE_MILLIS,
                    TimeUnit.MILLISECONDS);
        } catch (RejectedExecutionException closing) {
            return; // the server is closing: it ends every connection itself
        }
        if (c.hasEnded()) unwatch(c); // it ended meanwhile: its unwatch may have missed this task
    }

    private static String text(long nanos) {
        long ms = TimeUnit.NANOSECONDS.toMillis(nanos);
        return ms % 1000 == 0 ? ms / 1000 + " s" : ms + " ms";
    }

    @Override
    public void close() { timer.shutdownNow(); }
}
