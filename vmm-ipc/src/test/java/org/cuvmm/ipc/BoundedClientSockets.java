package org.cuvmm.ipc;

import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.Executors;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.TimeUnit;

/**
 * Raw client sockets whose reads are bounded: a frame the server never sends would leave a
 * test blocked in {@code recvmsg}, which an interrupt (the class's timeout) does not wake;
 * closing the socket does (docs/PROTOCOL.md section 12). So every socket added here is closed
 * {@link #CUTOFF_SECONDS} after {@link #start()}, and a read still waiting then fails instead
 * of hanging. One per test instance: {@code start()} in setUp, {@link #stop()} in tearDown.
 */
final class BoundedClientSockets {
    static final long CUTOFF_SECONDS = 60;

    private final List<FdSocket> sockets = new CopyOnWriteArrayList<>();
    private final ScheduledExecutorService cutoff;

    BoundedClientSockets(String name) {
        cutoff = Executors.newSingleThreadScheduledExecutor(r -> {
            Thread t = new Thread(r, name + "-cutoff");
            t.setDaemon(true);
            return t;
        });
    }

    void start() {
        cutoff.schedule(() -> sockets.forEach(FdSocket::close), CUTOFF_SECONDS, TimeUnit.SECONDS);
    }

    /** {@code s}, closed at the cutoff if the test has not finished by then. */
    FdSocket add(FdSocket s) {
        sockets.add(s);
        return s;
    }

    /** Cancels the cutoff (the sockets are the test's to close). */
    void stop() {
        cutoff.shutdownNow();
    }
}
