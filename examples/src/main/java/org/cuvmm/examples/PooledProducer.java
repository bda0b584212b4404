package org.cuvmm.examples;

import java.io.IOException;
import java.io.PrintStream;
import java.lang.management.ManagementFactory;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import javax.management.Attribute;
import javax.management.JMException;
import javax.management.MBeanServer;
import javax.management.ObjectName;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.ipc.Attachment;
import org.cuvmm.ipc.ErrorCode;
import org.cuvmm.ipc.ImportCache;
import org.cuvmm.ipc.LeaseEvent;
import org.cuvmm.ipc.SharingClient;
import org.cuvmm.ipc.SharingException;
import org.cuvmm.ipc.SharingListener;
import org.cuvmm.ipc.SharingServer;
import org.cuvmm.pool.PoolLifetime;
import org.cuvmm.pool.PoolStats;
import org.cuvmm.pool.VirtualMemoryPool;

/**
 * A producer that shares one buffer per round from a {@link VirtualMemoryPool}, and gets the
 * same memory back for the next round once the consumers let go of it: one driver allocation
 * serves every round. {@link Consumer} (below) is the other half, in another process.
 *
 * <pre>
 * terminal 1:  mvn -q -pl examples exec:java -Dexec.mainClass=org.cuvmm.examples.PooledProducer
 * terminal 2:  mvn -q -pl examples exec:java -Dexec.mainClass='org.cuvmm.examples.PooledProducer$Consumer'
 * </pre>
 *
 * <p>Producer arguments: {@code [SOCKET [ROUNDS [CONSUMERS]]]}; consumer arguments:
 * {@code [SOCKET [ROUNDS]]}. SOCKET defaults to {@code /tmp/cuvmm-pooled-$USER.sock}, ROUNDS
 * to 5, CONSUMERS (consumers per round, each attaching every frame) to 1. Ctrl-C stops the
 * producer between or inside rounds.
 *
 * <p>Each round, the producer:
 * <ol>
 * <li>takes a buffer from the pool's exported lifetime ({@code allocateExported}): new
 *     memory the first time (a miss), the previous round's memory after that (a hit);</li>
 * <li>fills it with the round's pattern (seed = round) and publishes it as
 *     {@code frame-<round>};</li>
 * <li>waits until every consumer attached, then gives the buffer up with
 *     {@code closeWhenUnused()}: the consumers' leases keep it out of the pool, so the stats
 *     show it live, not retained;</li>
 * <li>withdraws the name (each consumer gets a DROP notice, its cue to let go) and waits until
 *     every consumer released; the last release returns the memory to the pool;</li>
 * <li>prints the pool's stats, and reads the same numbers from the pool's JMX bean.</li>
 * </ol>
 * After the last round it waits (5 s at most) for its consumers to disconnect before it closes
 * the server: closing it ends their connections, and a consumer's import cache then unmaps
 * what it kept, which would otherwise fall into the consumer's count of its last release.
 *
 * <p><b>Steady state.</b> Both halves speak sharing protocol version 2 (the default): the
 * server names each physical allocation with an id of the connection and sends its fd only
 * the first time, and the consumer's {@link org.cuvmm.ipc.ImportCache} keeps what it imported
 * mapped between rounds. From round 2 on, the same pooled memory comes back, so a round costs
 * no fd and no driver call on either side: only the lease travels. The consumer prints, per
 * round, whether its cache served it (hit) and the driver calls its attach and release made,
 * then the cache's figures; the producer prints the fds its server sent.
 *
 * <p>Why one name per round ({@code frame-1}, {@code frame-2}, ...) rather than one name
 * published again each round: a consumer asking for {@code frame-3} can only get round 3's
 * bytes, never the previous round's buffer caught between unpublish and publish, and it knows
 * the pattern seed to check from the name alone.
 *
 * <p><b>JMX.</b> The pool registers one bean per lifetime; this example reads its own through
 * the platform MBean server, as a monitoring tool would. To watch them live, run
 * {@code jconsole} (from the JDK's bin), pick the producer's process (the pid it prints first;
 * under {@code exec:java} that is the Maven JVM), and open MBeans, {@code org.cuvmm},
 * {@code VirtualMemoryPool}, {@code pooled-producer}, {@code exported}: {@code Hits} and
 * {@code Misses} change as rounds run. The producer waits for a consumer before each round, so
 * there is time to connect before starting one. VisualVM shows the same with its MBeans plugin.
 */
public final class PooledProducer {
    /** The pool's name, part of its JMX object names. */
    public static final String POOL_NAME = "pooled-producer";
    /** Rounds when none are given. */
    public static final int DEFAULT_ROUNDS = 5;
    /** 8 MiB per frame: a whole number of granules, so the class size is the request. */
    public static final long SIZE = 8L << 20;
    /** The bean attributes read each round, next to the stats they mirror. */
    static final String[] BEAN_ATTRIBUTES = {"Count", "MemoryUsed", "TotalCapacity", "PeakMemoryUsed",
            "RetainedCount", "RetainedBytes", "Hits", "Misses"};
    /** How long a shutdown waits for consumers to let go before closing their connections. */
    static final long GRACE_MILLIS = 5_000;

    private PooledProducer() {}

    /** Where producer and consumer meet when no socket is given: one path per user, under /tmp. */
    public static Path defaultSocket() {
        return Path.of("/tmp", "cuvmm-pooled-" + System.getProperty("user.name", "user") + ".sock");
    }

    /** The name round {@code round} (from 1) is published under; its pattern seed is {@code round}. */
    public static String frameName(int round) {
        return "frame-" + round;
    }

    /**
     * What one round saw.
     *
     * @param round the round, from 1; also the pattern seed
     * @param address the buffer's address in this process
     * @param hit whether {@code allocateExported} reused idle memory (no driver call)
     * @param reusedFrom the earlier round whose memory this one got (same address), or 0
     * @param whileLeased the exported pool's stats after the producer gave the buffer up while
     *     the consumers still held it
     * @param beanWhileLeased the bean's attributes read at the same moment
     * @param afterRelease the exported pool's stats after the last consumer released
     * @param beanAfterRelease the bean's attributes read at the same moment
     */
    public record Round(int round, long address, boolean hit, int reusedFrom, PoolStats whileLeased,
                        Map<String, Long> beanWhileLeased, PoolStats afterRelease, Map<String, Long> beanAfterRelease) {}

    /** The rounds done, and whether all of them were served and released cleanly. */
    public record Result(List<Round> rounds, boolean ok) {}

    public static void main(String[] args) throws InterruptedException {
        String usage = "PooledProducer [SOCKET [ROUNDS [CONSUMERS]]]";
        if (ExampleArgs.wantsHelp(args)) {
            ExampleArgs.printUsage(usage);
            return;
        }
        Path socket;
        int rounds;
        int consumers;
        try {
            socket = ExampleArgs.socketPath(args, 0, defaultSocket());
            rounds = ExampleArgs.wholeNumber(args, 1, "ROUNDS", DEFAULT_ROUNDS, 1);
            consumers = ExampleArgs.wholeNumber(args, 2, "CONSUMERS", 1, 1);
        } catch (IllegalArgumentException e) {
            ExampleArgs.exitWithUsage("PooledProducer", e, usage);
            return;
        }

        // Ctrl-C: the hook only asks the run to stop, then waits for its cleanup (StopOnSignal).
        StopOnSignal signal = StopOnSignal.install("PooledProducer", GRACE_MILLIS + 5_000);
        CountDownLatch stop = signal.stop;
        boolean ok = run(socket, rounds, consumers, System.out, stop).ok();
        if (!signal.remove()) return; // stopped by the hook, which waits for this thread to end
        if (!ok) System.exit(1);
    }

    /**
     * Serves {@code rounds} frames on {@code socket}, each to {@code consumers} consumers, or
     * until {@code stop} is counted down.
     */
    public static Result run(Path socket, int rounds, int consumers, PrintStream out, CountDownLatch stop)
            throws InterruptedException {
        if (rounds < 1 || consumers < 1) {
            throw new IllegalArgumentException("rounds " + rounds + ", consumers " + consumers + " (expected: >= 1 each)");
        }
        List<Round> done = new ArrayList<>();
        LeaseCounter leases = new LeaseCounter(out);
        MBeanServer jmx = ManagementFactory.getPlatformMBeanServer();

        // Closed in reverse order: the server (ends any lease still held, removes the socket
        // file), the pool (releases its idle memory, unregisters its beans), then the resource,
        // which the pool never closes itself. The default options make POSIX_FD memory, which
        // allocateExported needs.
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = VirtualMemoryPool.builder()
                     .resource(resource)
                     .name(POOL_NAME)
                     .registerMBeans(true) // org.cuvmm:type=VirtualMemoryPool,name=pooled-producer,lifetime=...
                     .build();
             SharingServer server = SharingServer.builder(socket).listener(leases).build()) {
            ObjectName bean = pool.objectName(PoolLifetime.EXPORTED);
            out.printf("pool '%s' over the %s driver, pid %d; its exported lifetime is the JMX bean %s%n",
                    pool.name(), resource.driver().kind(), ProcessHandle.current().pid(), bean);
            out.printf("serving %d round(s) of %d bytes on %s to %d consumer(s) each; Ctrl-C stops earlier%n",
                    rounds, SIZE, server.socketPath(), consumers);

            Map<Long, Integer> roundAt = new HashMap<>(); // address -> the last round that used it
            for (int round = 1; round <= rounds; round++) {
                String name = frameName(round);
                long missesBefore = pool.stats(PoolLifetime.EXPORTED).misses();
                VirtualMemoryBuffer buffer = pool.allocateExported(SIZE);
                try {
                    boolean hit = pool.stats(PoolLifetime.EXPORTED).misses() == missesBefore;
                    long address = buffer.address();
                    // Only released memory comes back: every earlier round at this address must
                    // have been given up by the producer and released by all its consumers.
                    Integer earlier = roundAt.put(address, round);
                    int reusedFrom = earlier == null ? 0 : earlier;
                    if (earlier != null && !leases.allEnded(frameName(earlier), consumers)) {
                        out.println("ERROR: round " + round + " got the memory of round " + earlier
                                + ", which a consumer still holds");
                        return new Result(done, false);
                    }
                    out.printf("round %d: %s at 0x%x, %s%n", round, name, address, hit
                            ? "idle memory from the pool (hit)" + (earlier != null ? ": round " + earlier
                            + "'s, released by its consumer(s)" : "")
                            : "new memory from the driver (miss)");

                    // The pool does not clear reused memory: this fill is what keeps the previous
                    // round's bytes from reaching this round's consumers.
                    SeededPattern.fill(buffer, round);
                    server.publish(name, buffer); // each attach takes a lease on the buffer
                    if (!leases.await(name, consumers, false, stop)) return stopped(done, out);

                    // Our part is done. close() would refuse while a consumer holds a lease;
                    // closeWhenUnused() closes when the last lease ends, and only then does
                    // the memory go back to the pool: live, not retained, meanwhile.
                    buffer.closeWhenUnused();
                    PoolStats whileLeased = pool.stats(PoolLifetime.EXPORTED);
                    Map<String, Long> beanWhileLeased = readBean(jmx, bean);
                    out.println("  given up, still leased: " + format(whileLeased));

                    // DROP notices: the consumers' cue to let go. Leases end with RELEASED, or
                    // DISCONNECTED when a consumer died: either way the memory comes back.
                    server.unpublish(name);
                    if (!leases.await(name, consumers, true, stop)) return stopped(done, out);
                    PoolStats afterRelease = pool.stats(PoolLifetime.EXPORTED);
                    Map<String, Long> beanAfterRelease = readBean(jmx, bean);
                    out.println("  released, back in pool: " + format(afterRelease));
                    out.println("  JMX " + bean.getKeyProperty("lifetime") + " bean: " + beanAfterRelease);
                    done.add(new Round(round, address, hit, reusedFrom, whileLeased, beanWhileLeased, afterRelease,
                            beanAfterRelease));
                } finally {
                    // On the way out early (Ctrl-C, an error), give it up too (idempotent);
                    // server.close() below ends any lease still held.
                    server.unpublish(name);
                    buffer.closeWhenUnused();
                }
            }
            PoolStats last = pool.stats(PoolLifetime.EXPORTED);
            out.printf("sharing: %d fd(s) sent in %d round(s) (a version-2 consumer receives each allocation's fd "
                    + "once)%n", server.stats().fdsSent(), done.size());
            out.printf("done: %d round(s), %d miss(es), %d hit(s): %d driver allocation(s) served every frame%n",
                    done.size(), last.misses(), last.hits(), last.misses());
            // Closing the server ends every connection, and a consumer's import cache then
            // unmaps what it kept: let the consumers leave first, so that this never lands in
            // the middle of their last release (whose driver calls they count). Bounded.
            int left = awaitConsumersGone(server, stop, CONSUMERS_GONE_MILLIS);
            if (left > 0) {
                out.printf("%d consumer(s) still connected after %d ms: closing their connections%n", left,
                        CONSUMERS_GONE_MILLIS);
            }
            return new Result(done, true);
        } catch (IOException e) {
            // Binding failed: another producer is live on this path, or the directory is missing.
            out.println("cannot serve: " + e.getMessage());
            return new Result(done, false);
        }
    }

    /** How long {@link #run} waits at the end for its consumers to disconnect. */
    static final long CONSUMERS_GONE_MILLIS = 5_000;

    /**
     * Waits until no consumer is connected, {@code millis} have passed, or {@code stop} is
     * counted down; returns how many are still connected.
     */
    private static int awaitConsumersGone(SharingServer server, CountDownLatch stop, long millis)
            throws InterruptedException {
        long deadline = System.nanoTime() + millis * 1_000_000L;
        while (server.connectionCount() > 0 && System.nanoTime() - deadline < 0) {
            if (stop.await(10, TimeUnit.MILLISECONDS)) break;
        }
        return server.connectionCount();
    }

    private static Result stopped(List<Round> done, PrintStream out) {
        out.println("stopped after " + done.size() + " round(s)");
        return new Result(done, false);
    }

    /** One line of a {@link PoolStats}. */
    static String format(PoolStats s) {
        return String.format("live %d (%d B), retained %d (%d B), peak %d B, hits %d, misses %d", s.liveCount(),
                s.liveBytes(), s.retainedCount(), s.retainedBytes(), s.peakLiveBytes(), s.hits(), s.misses());
    }

    /** {@link #BEAN_ATTRIBUTES} of {@code bean}, as JConsole would read them. */
    static Map<String, Long> readBean(MBeanServer jmx, ObjectName bean) {
        Map<String, Long> m = new LinkedHashMap<>();
        try {
            for (Attribute a : jmx.getAttributes(bean, BEAN_ATTRIBUTES).asList()) m.put(a.getName(), (Long) a.getValue());
        } catch (JMException e) {
            throw new IllegalStateException("reading " + bean + ": " + e, e);
        }
        return m;
    }

    /** Counts, per published name, the leases that began and ended; prints each event. */
    private static final class LeaseCounter implements SharingListener {
        private final PrintStream out;
        private final Map<String, int[]> counts = new HashMap<>(); // name -> {attached, ended}

        LeaseCounter(PrintStream out) { this.out = out; }

        @Override
        public synchronized void attached(LeaseEvent e) {
            out.println("  attach  " + e);
            counts.computeIfAbsent(e.name(), k -> new int[2])[0]++;
            notifyAll();
        }

        @Override
        public synchronized void released(LeaseEvent e) {
            out.println("  release " + e);
            counts.computeIfAbsent(e.name(), k -> new int[2])[1]++;
            notifyAll();
        }

        synchronized boolean allEnded(String name, int n) {
            int[] c = counts.get(name);
            return c != null && c[1] >= n && c[1] == c[0];
        }

        /** Waits until {@code n} leases on {@code name} began (or ended); false when stopped first. */
        synchronized boolean await(String name, int n, boolean ended, CountDownLatch stop) throws InterruptedException {
            while (stop.getCount() > 0) {
                int[] c = counts.get(name);
                if (c != null && c[ended ? 1 : 0] >= n) return true;
                wait(50); // wakes on each event, and checks stop now and then
            }
            return false;
        }
    }

    /**
     * The consuming half: attaches to {@code frame-1}, {@code frame-2}, ... in turn over one
     * connection, checks every byte against the round's pattern, holds the frame until the
     * producer withdraws it, and releases it.
     *
     * <p>Exit status: 0 when every frame matched, 1 when one did not, 2 when attaching failed or
     * an argument is wrong.
     */
    public static final class Consumer {
        private Consumer() {}

        public static void main(String[] args) {
            String usage = "PooledProducer$Consumer [SOCKET [ROUNDS]]";
            if (ExampleArgs.wantsHelp(args)) {
                ExampleArgs.printUsage(usage);
                return;
            }
            Path socket;
            int rounds;
            try {
                socket = ExampleArgs.socketPath(args, 0, defaultSocket());
                rounds = ExampleArgs.wholeNumber(args, 1, "ROUNDS", DEFAULT_ROUNDS, 1);
            } catch (IllegalArgumentException e) {
                ExampleArgs.exitWithUsage("PooledProducer.Consumer", e, usage);
                return;
            }
            int status = run(socket, rounds, System.out);
            if (status != 0) System.exit(status);
        }

        /** Consumes {@code rounds} frames from the producer on {@code socket}; returns the exit status. */
        public static int run(Path socket, int rounds, PrintStream out) {
            org.cuvmm.DriverCounters calls = org.cuvmm.Driver.get().counters();
            try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
                 SharingClient client = SharingClient.connect(socket,
                         "PooledProducer.Consumer pid " + ProcessHandle.current().pid())) {
                ImportCache cache = client.importCache();
                long firstRoundCalls = 0;
                long laterCalls = 0;
                for (int round = 1; round <= rounds; round++) {
                    long hits = cache.stats().hits();
                    long c0 = calls.totalCalls();
                    Attachment a = attachWhenPublished(client, frameName(round), resource);
                    long attachCalls = calls.totalCalls() - c0;
                    String served = cache.stats().hits() > hits ? "cache hit" : "cache miss";
                    try {
                        VirtualMemoryBuffer buffer = a.buffer();
                        long bad = SeededPattern.firstMismatch(buffer, round);
                        if (bad >= 0) {
                            out.println(a.name() + ": MISMATCH at byte " + bad + " (pattern seed " + round + ")");
                            return 1;
                        }
                        out.printf("%s: %d bytes at 0x%x (lease %d, %s) hold pattern seed %d%n", a.name(),
                                buffer.size(), buffer.address(), a.leaseId(), served, round);
                        // Hold it until the producer withdraws it (or goes away): meanwhile the
                        // producer's pool cannot hand this memory out again.
                        while (!a.isDropped() && client.isConnected()) Thread.sleep(5);
                    } finally {
                        long c1 = calls.totalCalls();
                        a.close(); // RELEASE; the cache keeps the mapping for the next round
                        long roundCalls = attachCalls + calls.totalCalls() - c1;
                        if (round == 1) firstRoundCalls = roundCalls;
                        else laterCalls += roundCalls;
                    }
                    out.println(frameName(round) + ": released");
                }
                ImportCache.Stats s = cache.stats();
                out.printf("import cache (protocol v%d): %d hit(s), %d miss(es), %d fd(s) received; driver calls in "
                        + "attach and release: %d in round 1, %d in the %d later round(s)%n", client.protocolVersion(),
                        s.hits(), s.misses(), s.fdsReceived(), firstRoundCalls, laterCalls, rounds - 1);
                return 0;
            } catch (IOException e) {
                // Nothing listens on the socket, the producer went away, or this uid is not allowed.
                out.println("cannot attach: " + e.getMessage());
                return 2;
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                return 2;
            }
        }

        /** Attaches to {@code name}, asking again every 10 ms while it is not published yet. */
        private static Attachment attachWhenPublished(SharingClient client, String name, VirtualMemoryResource resource)
                throws IOException, InterruptedException {
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (true) {
                try {
                    return client.attach(name, resource);
                } catch (SharingException e) {
                    // The producer publishes frame N+1 only after every consumer released frame N.
                    if (e.code() != ErrorCode.UNKNOWN_NAME || System.nanoTime() > until) throw e;
                    Thread.sleep(10);
                }
            }
        }
    }
}
