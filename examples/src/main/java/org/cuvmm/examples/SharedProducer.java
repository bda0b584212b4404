package org.cuvmm.examples;

import java.io.IOException;
import java.io.PrintStream;
import java.nio.file.Path;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.ipc.LeaseEvent;
import org.cuvmm.ipc.SharingListener;
import org.cuvmm.ipc.SharingServer;

/**
 * The owning half of a producer/consumer pair: allocates a buffer, fills it, and lets other
 * processes map the same memory by name over a Unix-domain socket. {@link SharedConsumer} is
 * the other half.
 *
 * <pre>
 * terminal 1:  mvn -q -pl examples exec:java -Dexec.mainClass=org.cuvmm.examples.SharedProducer
 * terminal 2:  mvn -q -pl examples exec:java -Dexec.mainClass=org.cuvmm.examples.SharedConsumer
 * </pre>
 *
 * <p>Arguments: {@code [SOCKET [CONSUMERS]]}. SOCKET defaults to
 * {@code /tmp/cuvmm-example-$USER.sock}; the producer stops after CONSUMERS consumers
 * (default 1) have come and gone, or at Ctrl-C; 0 serves until Ctrl-C. {@code ./cuvmm attach
 * --socket SOCKET --name example --verify --seed 42} is a consumer too: it speaks the same
 * protocol (docs/PROTOCOL.md), as can a process in another language.
 *
 * <p>What travels is not the data but the memory itself: for each physical allocation behind
 * the buffer, one file descriptor, passed with {@code SCM_RIGHTS}. The consumer maps those,
 * so both processes read and write the same bytes and nothing is copied.
 */
public final class SharedProducer {
    /** The name consumers attach to. */
    public static final String NAME = "example";
    /** The seed of the pattern the buffer is filled with ({@link SeededPattern}). */
    public static final long SEED = 42;
    /** 8 MiB, allocated at once: one physical allocation, so each consumer receives one fd. */
    public static final long SIZE = 8L << 20;
    /** How long a shutdown waits for consumers to let go before closing their connections. */
    static final long GRACE_MILLIS = 5_000;

    private SharedProducer() {}

    /** Where the pair meets when no socket is given: one path per user, under /tmp. */
    public static Path defaultSocket() {
        return Path.of("/tmp", "cuvmm-example-" + System.getProperty("user.name", "user") + ".sock");
    }

    public static void main(String[] args) throws InterruptedException {
        String usage = "SharedProducer [SOCKET [CONSUMERS (0: until Ctrl-C)]]";
        if (ExampleArgs.wantsHelp(args)) {
            ExampleArgs.printUsage(usage);
            return;
        }
        Path socket;
        int consumers;
        try {
            socket = ExampleArgs.socketPath(args, 0, defaultSocket());
            consumers = ExampleArgs.wholeNumber(args, 1, "CONSUMERS", 1, 0); // 0: until Ctrl-C
        } catch (IllegalArgumentException e) {
            ExampleArgs.exitWithUsage("SharedProducer", e, usage);
            return;
        }

        // Ctrl-C: the hook only asks the run to stop, then waits for its cleanup (StopOnSignal).
        StopOnSignal signal = StopOnSignal.install("SharedProducer", GRACE_MILLIS + 5_000);
        CountDownLatch stop = signal.stop;
        boolean ok = serve(socket, consumers, System.out, stop);
        if (!signal.remove()) return; // stopped by the hook, which waits for this thread to end
        if (!ok) System.exit(1);
    }

    /**
     * Serves {@link #NAME} on {@code socket} until {@code consumers} consumers have released
     * it (or their process ended), or until {@code stop} is counted down. Returns true when
     * everything was served and released cleanly.
     */
    public static boolean serve(Path socket, int consumers, PrintStream out, CountDownLatch stop)
            throws InterruptedException {
        // Counts consumers that have come and gone. A lease ends with RELEASED when the consumer
        // says so, and with DISCONNECTED when its connection ends without it: a consumer that
        // crashes or is killed (kill -9 included) cannot leak a lease, because the kernel closes
        // its socket and the server sees the end of the stream.
        AtomicInteger finished = new AtomicInteger();
        SharingListener printer = new SharingListener() {
            @Override
            public void attached(LeaseEvent e) {
                out.println("attach  " + e);
            }

            @Override
            public void released(LeaseEvent e) {
                out.println("release " + e);
                if (e.reason() != LeaseEvent.Reason.SERVER_CLOSED && finished.incrementAndGet() == consumers) {
                    stop.countDown();
                }
            }
        };

        // The default options export each allocation as a POSIX fd (HandleType.POSIX_FD): a
        // resource created with HandleType.NONE makes buffers that cannot be shared.
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0)) {
            VirtualMemoryBuffer buffer = resource.allocate(SIZE);
            try {
                SeededPattern.fill(buffer, SEED);
                // The server binds the socket with mode 0600 and only lets in processes of this
                // uid (checked with SO_PEERCRED); builder().allowUids(...) widens that. A socket
                // file left by a producer that died is replaced; a live producer's is not.
                try (SharingServer server = SharingServer.builder(socket).listener(printer).build()) {
                    // Publishing keeps no fd open: each attach exports fresh fds, sends them and
                    // closes the server's copies at once. Each attach also takes a lease on the
                    // buffer (BufferLease), held until that consumer releases or disconnects.
                    server.publish(NAME, buffer);
                    out.printf("serving '%s': %d bytes in %d chunk(s), pattern seed %d, on %s with the %s driver%n",
                            NAME, buffer.size(), buffer.chunkCount(), SEED, server.socketPath(),
                            resource.driver().kind());
                    out.println(consumers > 0 ? "waiting for " + consumers + " consumer(s); Ctrl-C stops earlier"
                            : "serving until Ctrl-C");
                    stop.await();

                    // Shutting down, in an order that never pulls memory from under a consumer:
                    // 1. No new attaches; consumers still holding it get a DROP notice (a hint to
                    //    let go; unpublish never waits for them).
                    server.unpublish(NAME);
                    // 2. Give our reference up. close() would refuse while a consumer holds a
                    //    lease (its message names the consumer); closeWhenUnused() closes now if
                    //    no one holds it, else when the last lease ends.
                    buffer.closeWhenUnused();
                    // 3. Let consumers finish and release, for a while.
                    long until = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(GRACE_MILLIS);
                    while (server.totalLeaseCount() > 0 && System.nanoTime() < until) Thread.sleep(20);
                    if (server.totalLeaseCount() > 0) {
                        out.println(server.totalLeaseCount() + " consumer(s) still attached after "
                                + GRACE_MILLIS + " ms; closing their connections");
                    }
                }
                // 4. server.close() ended any lease still held, so the buffer is closed now. A
                //    consumer that still maps the memory keeps it alive and keeps reading it:
                //    its import holds its own reference, and the driver frees the memory when
                //    the last process unmaps it. (This resource is not pooled: memory this
                //    process gave up is never handed out again while someone still maps it.)
            } finally {
                buffer.closeWhenUnused(); // on an error path, give it up too (idempotent)
            }
            boolean closed = buffer.isClosed();
            out.println(closed ? "stopped: buffer released, socket removed" : "stopped, but the buffer is still held");
            return closed;
        } catch (IOException e) {
            // Binding failed: another producer is live on this path, or the directory is missing.
            out.println("cannot serve: " + e.getMessage());
            return false;
        }
    }
}
