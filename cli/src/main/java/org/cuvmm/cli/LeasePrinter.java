package org.cuvmm.cli;

import java.io.PrintStream;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.IntSupplier;

import org.cuvmm.ipc.LeaseEvent;
import org.cuvmm.ipc.SharingListener;

/**
 * Prints the attach and release lines of {@code cuvmm serve} from one thread of its own. The
 * server's threads only queue events (never block on the output); the printing thread takes
 * them in order and reads the lease count as it prints, so each "leases now N" is the
 * server's count at that moment and the last line printed is the final count. Nothing is
 * locked while printing. The queue is bounded ({@value #CAPACITY} lines): when the output
 * cannot keep up, lines are dropped, counted, and the count is printed with the next line.
 */
final class LeasePrinter implements SharingListener, AutoCloseable {
    private static final Object STOP = new Object();

    private record Line(String verb, LeaseEvent event) {}

    /** Lines waiting to be printed at most; beyond, a line is dropped and counted (the server never waits on the output). */
    static final int CAPACITY = 10_000;

    private final PrintStream out;
    private final BlockingQueue<Object> queue;
    /** Lines dropped because the queue was full (output slower than the events); printed with the next line. */
    private final AtomicLong dropped = new AtomicLong();
    private final Thread thread;
    private volatile IntSupplier leaseCount = () -> 0;

    LeasePrinter(PrintStream out) { this(out, CAPACITY); }

    LeasePrinter(PrintStream out, int capacity) {
        this.out = out;
        this.queue = new LinkedBlockingQueue<>(capacity);
        this.thread = new Thread(this::run, "cuvmm-serve-printer");
        thread.setDaemon(true);
        thread.start();
    }

    /** Where the count comes from (the server, once built; before, no lease can exist). */
    void countFrom(IntSupplier count) { leaseCount = count; }

    @Override
    public void attached(LeaseEvent e) { enqueue(new Line("attach ", e)); }

    @Override
    public void released(LeaseEvent e) { enqueue(new Line("release", e)); }

    private void enqueue(Line l) {
        if (!queue.offer(l)) dropped.incrementAndGet();
    }

    /** Lines dropped so far because the output could not keep up. */
    long dropped() { return dropped.get(); }

    private void run() {
        for (;;) {
            Object o;
            try {
                o = queue.take();
            } catch (InterruptedException e) {
                return;
            }
            long lost = dropped.getAndSet(0);
            if (lost > 0) out.println("(" + lost + " attach/release lines dropped: the output could not keep up)");
            if (o == STOP) {
                out.flush();
                return;
            }
            Line l = (Line) o;
            LeaseEvent e = l.event();
            out.println(l.verb() + " " + e.reason() + " '" + e.name() + "' lease " + e.leaseId() + " by "
                    + (e.clientName().isEmpty() ? "?" : e.clientName()) + " (" + e.peer() + "), leases now "
                    + leaseCount.getAsInt());
            out.flush();
        }
    }

    /** Prints what is queued, then stops the thread (waits at most 10 s). */
    @Override
    public void close() {
        try {
            if (queue.offer(STOP, 10, java.util.concurrent.TimeUnit.SECONDS)) thread.join(10_000);
            else thread.interrupt(); // the output is stuck: give up on what is queued
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
