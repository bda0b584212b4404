package org.cuvmm.cli;

import java.io.PrintStream;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.function.IntSupplier;

import org.cuvmm.ipc.LeaseEvent;
import org.cuvmm.ipc.SharingListener;

/**
 * Prints the attach and release lines of {@code cuvmm serve} from one thread of its own. The
 * server's threads only queue events (never block on the output); the printing thread takes
 * them in order and reads the lease count as it prints, so each "leases now N" is the
 * server's count at that moment and the last line printed is the final count. Nothing is
 * locked while printing.
 */
final class LeasePrinter implements SharingListener, AutoCloseable {
    private static final Object STOP = new Object();

    private record Line(String verb, LeaseEvent event) {}

    private final PrintStream out;
    private final BlockingQueue<Object> queue = new LinkedBlockingQueue<>();
    private final Thread thread;
    private volatile IntSupplier leaseCount = () -> 0;

    LeasePrinter(PrintStream out) {
        this.out = out;
        this.thread = new Thread(this::run, "cuvmm-serve-printer");
        thread.setDaemon(true);
        thread.start();
    }

    /** Where the count comes from (the server, once built; before, no lease can exist). */
    void countFrom(IntSupplier count) { leaseCount = count; }

    @Override
    public void attached(LeaseEvent e) { queue.add(new Line("attach ", e)); }

    @Override
    public void released(LeaseEvent e) { queue.add(new Line("release", e)); }

    private void run() {
        for (;;) {
            Object o;
            try {
                o = queue.take();
            } catch (InterruptedException e) {
                return;
            }
            if (o == STOP) return;
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
        queue.add(STOP);
        try {
            thread.join(10_000);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
