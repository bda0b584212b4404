package org.cuvmm.ipc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.File;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.TreeMap;
import java.util.concurrent.TimeUnit;

import org.cuvmm.Driver;
import org.cuvmm.DriverCounters;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.ipc.internal.BytePattern;
import org.cuvmm.pool.PoolLifetime;
import org.cuvmm.pool.PoolStats;
import org.cuvmm.pool.VirtualMemoryPool;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * A pooled exported buffer shared with real consumer processes (issue 4, items 2 and 7): the
 * server takes a {@link org.cuvmm.BufferLease} per consumer, the owner gives the buffer up
 * with {@code closeWhenUnused()}, and the pool hands the memory out again only once every
 * consumer released it, by a RELEASE frame or by dying. Each consumer is a second JVM
 * ({@link PooledConsumerMain}) driven through its stdin.
 */
class PooledSharingTest {
    private static final PoolLifetime EXPORTED = PoolLifetime.EXPORTED;
    /** Generous: a cold child JVM loading the native library takes about a second, more on a loaded machine. */
    private static final int CHILD_START_SECONDS = 60;
    /** The longest the memory may take to return to the pool after the last consumer let go. */
    private static final int RETURN_SECONDS = 10;

    private Path sock;

    @BeforeAll
    static void warmUp() throws Exception {
        // Load every class and native library (and open every jar) the tests use before any
        // fd baseline is taken: one in-process round of pool, server, client, attach, release.
        Path s = IpcTestSupport.socketPath();
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(resource).leakSampleRate(0).build();
             SharingServer server = SharingServer.builder(s).build()) {
            VirtualMemoryBuffer b = pool.allocateExported(resource.granularity());
            BytePattern.fill(b, 1);
            server.publish("warm", b);
            try (SharingClient client = SharingClient.connect(s, "warm-up");
                 Attachment a = client.attach("warm", resource)) {
                BytePattern.verify(a.buffer(), 1);
            }
            server.unpublish("warm");
            b.closeWhenUnused();
            pool.stats(EXPORTED);
            Driver.get().counters().totalCalls();
        } finally {
            IpcTestSupport.deleteTree(s.getParent());
        }
    }

    @BeforeEach
    void setUp() throws IOException {
        sock = IpcTestSupport.socketPath();
    }

    @AfterEach
    void tearDown() {
        IpcTestSupport.deleteTree(sock.getParent());
    }

    @Test
    void leasedMemoryIsReusedOnlyAfterTheConsumerReleases() throws Exception {
        Baseline base = Baseline.take();
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = pool(resource, "pst-release");
             SharingServer server = SharingServer.builder(sock).build()) {
            long n = 2 * resource.granularity() + 12345; // class: 3 granules
            VirtualMemoryBuffer shared = pool.allocateExported(n);
            long address = shared.address();
            long capacity = shared.mappedSize();
            BytePattern.fill(shared, 41);
            server.publish("out", shared);
            try (Consumer child = new Consumer("out", 41)) {
                child.awaitOutput("ATTACHED", CHILD_START_SECONDS);
                assertEquals(1, server.leaseCount("out"));

                VirtualMemoryBuffer other = giveUpWhileLeased(server, pool, shared, "out", n, 1);
                BytePattern.fill(other, 99); // must not reach the consumer's mapping
                child.command("verify");
                child.awaitOutput("VERIFIED", 10);

                child.command("release");
                child.awaitOutput("RELEASED", 10);
                VirtualMemoryBuffer reused = awaitReturnThenReuse(pool, shared, n, address, 1, "the consumer's RELEASE");
                assertEquals(-1, BytePattern.firstMismatch(reused, 41), "the same memory (the pool does not clear it)");

                child.exit();
                reused.close();
                other.close();
                assertStats(pool.stats(EXPORTED), 0, 2, "every buffer closed");
            }
            IpcTestSupport.await("the consumer's connection gone", 10, () -> server.connectionCount() == 0);
            assertEquals(0, server.totalLeaseCount());
            assertEquals(2 * capacity, pool.trim(), "trim releases both idle buffers");
            assertStats(pool.stats(EXPORTED), 0, 0, "after trim");
        }
        base.assertBack("after sharing a pooled buffer with a consumer that released it");
    }

    @Test
    void aKilledConsumersLeaseEndsWithItsConnectionAndTheMemoryReturns() throws Exception {
        Baseline base = Baseline.take();
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = pool(resource, "pst-killed");
             SharingServer server = SharingServer.builder(sock).build()) {
            long n = 5 * resource.granularity() - 1; // class: 5 granules
            VirtualMemoryBuffer shared = pool.allocateExported(n);
            long address = shared.address();
            long capacity = shared.mappedSize();
            BytePattern.fill(shared, 42);
            server.publish("out", shared);
            try (Consumer child = new Consumer("out", 42)) {
                child.awaitOutput("ATTACHED", CHILD_START_SECONDS);
                assertEquals(1, server.leaseCount("out"));

                VirtualMemoryBuffer other = giveUpWhileLeased(server, pool, shared, "out", n, 1);

                child.process.destroyForcibly();
                assertTrue(child.process.waitFor(10, TimeUnit.SECONDS), "the killed consumer exits");
                VirtualMemoryBuffer reused = awaitReturnThenReuse(pool, shared, n, address, 1, "the consumer's death");
                assertEquals(0, server.totalLeaseCount(), "the lease ended with the connection");

                reused.close();
                other.close();
                assertStats(pool.stats(EXPORTED), 0, 2, "every buffer closed");
            }
            IpcTestSupport.await("the killed consumer's connection gone", 10, () -> server.connectionCount() == 0);
            assertEquals(2 * capacity, pool.trim(), "trim releases both idle buffers");
            assertStats(pool.stats(EXPORTED), 0, 0, "after trim");
        }
        base.assertBack("after sharing a pooled buffer with a consumer that was killed");
    }

    @Test
    void withTwoConsumersTheMemoryReturnsOnlyAfterBothReleased() throws Exception {
        Baseline base = Baseline.take();
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = pool(resource, "pst-two");
             SharingServer server = SharingServer.builder(sock).build()) {
            long n = resource.granularity(); // class: 1 granule
            VirtualMemoryBuffer shared = pool.allocateExported(n);
            long address = shared.address();
            long capacity = shared.mappedSize();
            BytePattern.fill(shared, 43);
            server.publish("out", shared);
            try (Consumer first = new Consumer("out", 43); Consumer second = new Consumer("out", 43)) {
                first.awaitOutput("ATTACHED", CHILD_START_SECONDS);
                second.awaitOutput("ATTACHED", CHILD_START_SECONDS);
                assertEquals(2, server.leaseCount("out"));

                VirtualMemoryBuffer other = giveUpWhileLeased(server, pool, shared, "out", n, 2);

                first.command("release");
                first.awaitOutput("RELEASED", 10);
                // The server drops a lease before it answers RELEASED: this state is final, not a race.
                assertEquals(1, server.totalLeaseCount(), "the second consumer still holds its lease");
                assertTrue(shared.isClosePending() && !shared.isClosed(), "one lease still holds " + shared);
                assertStats(pool.stats(EXPORTED), 2, 0, "one of two consumers released");
                VirtualMemoryBuffer third = pool.allocateExported(n);
                assertNotEquals(address, third.address(), "memory the second consumer maps is not handed out");
                second.command("verify");
                second.awaitOutput("VERIFIED", 10);

                second.command("release");
                second.awaitOutput("RELEASED", 10);
                VirtualMemoryBuffer reused = awaitReturnThenReuse(pool, shared, n, address, 2, "both RELEASEs");

                first.exit();
                second.exit();
                reused.close();
                other.close();
                third.close();
                assertStats(pool.stats(EXPORTED), 0, 3, "every buffer closed");
            }
            IpcTestSupport.await("both connections gone", 10, () -> server.connectionCount() == 0);
            assertEquals(3 * capacity, pool.trim(), "trim releases the three idle buffers");
            assertStats(pool.stats(EXPORTED), 0, 0, "after trim");
        }
        base.assertBack("after sharing a pooled buffer with two consumers");
    }

    // ------------------------------------------------------------------ steps

    private static VirtualMemoryPool pool(VirtualMemoryResource resource, String name) {
        // No leak sampling: a watched buffer would add a Cleaner registration, nothing else differs.
        return VirtualMemoryPool.builder().resource(resource).name(name).leakSampleRate(0).build();
    }

    /**
     * The owner withdraws {@code name} and gives {@code shared} up while {@code leases} consumers
     * hold it: it stays live (not retained), and a new allocation of the same size gets other
     * memory. Returns that new buffer, still open, so that it cannot be the one retained later.
     */
    private static VirtualMemoryBuffer giveUpWhileLeased(SharingServer server, VirtualMemoryPool pool,
                                                         VirtualMemoryBuffer shared, String name, long n, int leases) {
        long address = shared.address();
        assertTrue(server.unpublish(name));
        assertEquals(leases, server.totalLeaseCount(), "unpublishing ends no lease");
        shared.closeWhenUnused();
        assertTrue(shared.isClosePending(), "the consumers' leases keep " + shared + " open");
        assertFalse(shared.isClosed());
        PoolStats s = pool.stats(EXPORTED);
        assertEquals(1, s.liveCount(), "live count while leased: " + s);
        assertEquals(0, s.retainedCount(), "retained count while leased: " + s);
        VirtualMemoryBuffer other = pool.allocateExported(n);
        assertNotEquals(address, other.address(), "memory a consumer still maps is not handed out again");
        assertStats(pool.stats(EXPORTED), 2, 0, "the leased buffer and a new one");
        return other;
    }

    /**
     * Waits (at most {@link #RETURN_SECONDS}) for {@code shared}'s memory to be retained, then
     * allocates {@code n} again: the original address, with no driver call. {@code othersLive}:
     * the other exported buffers the test keeps open meanwhile.
     */
    private static VirtualMemoryBuffer awaitReturnThenReuse(VirtualMemoryPool pool, VirtualMemoryBuffer shared, long n,
                                                           long address, int othersLive, String after)
            throws InterruptedException {
        long t0 = System.nanoTime();
        long until = t0 + TimeUnit.SECONDS.toNanos(RETURN_SECONDS);
        while (pool.stats(EXPORTED).retainedCount() != 1) {
            if (System.nanoTime() > until) {
                fail("the memory did not return to the exported pool within " + RETURN_SECONDS + " s after " + after
                        + ": " + pool.stats(EXPORTED) + ", " + shared + " closed=" + shared.isClosed());
            }
            Thread.sleep(5);
        }
        System.out.printf("PooledSharingTest: memory back in the exported pool %.1f ms after %s%n",
                (System.nanoTime() - t0) / 1e6, after);
        assertTrue(shared.isClosed(), "the pending close ran");
        assertStats(pool.stats(EXPORTED), othersLive, 1, "after " + after);

        DriverCounters c = Driver.get().counters();
        Map<String, Long> before = c.calls();
        long hits = pool.stats(EXPORTED).hits();
        VirtualMemoryBuffer reused = pool.allocateExported(n);
        Map<String, Long> now = c.calls();
        assertEquals(address, reused.address(), "the returned memory is handed out again");
        assertEquals(before.values().stream().mapToLong(Long::longValue).sum(),
                now.values().stream().mapToLong(Long::longValue).sum(),
                "driver calls made by reusing the returned memory: " + diff(before, now));
        assertEquals(hits + 1, pool.stats(EXPORTED).hits(), "a pool hit");
        assertStats(pool.stats(EXPORTED), othersLive + 1, 0, "after reusing it");
        return reused;
    }

    private static Map<String, String> diff(Map<String, Long> a, Map<String, Long> b) {
        Map<String, String> d = new TreeMap<>();
        for (Map.Entry<String, Long> e : b.entrySet()) {
            long was = a.getOrDefault(e.getKey(), 0L);
            if (was != e.getValue()) d.put(e.getKey(), was + " -> " + e.getValue());
        }
        return d;
    }

    private static void assertStats(PoolStats s, long live, long retained, String when) {
        assertEquals("live " + live + ", retained " + retained, "live " + s.liveCount() + ", retained "
                + s.retainedCount(), "exported pool " + when + ": " + s);
    }

    // ------------------------------------------------------------------ a consumer process

    /** A {@link PooledConsumerMain} JVM attached to the test's server; killed at close if still running. */
    private final class Consumer implements AutoCloseable {
        final Process process;
        final File log;
        final OutputStream stdin;

        Consumer(String name, long seed) throws IOException {
            log = File.createTempFile("cuvmm-pooled-consumer", ".log");
            process = IpcTestSupport.startChild(PooledConsumerMain.class, log, List.of(), List.of(), sock.toString(),
                    name, Long.toString(seed));
            stdin = process.getOutputStream();
        }

        void command(String line) throws IOException {
            stdin.write((line + "\n").getBytes(StandardCharsets.UTF_8));
            stdin.flush();
        }

        /** Waits for {@code marker} in the output; fails at once if the child failed or exited. */
        void awaitOutput(String marker, int seconds) throws InterruptedException {
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds);
            while (true) {
                String out = IpcTestSupport.read(log);
                if (out.contains(marker)) return;
                if (out.contains("FAILED") || !process.isAlive()) {
                    Thread.sleep(100); // the rest of its output
                    fail("consumer pid " + process.pid() + " failed waiting for " + marker + ":\n"
                            + IpcTestSupport.read(log));
                }
                if (System.nanoTime() > until) {
                    fail("consumer pid " + process.pid() + ": no " + marker + " within " + seconds + " s:\n" + out);
                }
                Thread.sleep(10);
            }
        }

        void exit() throws IOException, InterruptedException {
            command("exit");
            assertTrue(process.waitFor(10, TimeUnit.SECONDS), "consumer exits:\n" + IpcTestSupport.read(log));
            assertEquals(0, process.exitValue(), IpcTestSupport.read(log));
        }

        @Override
        public void close() throws InterruptedException {
            if (process.isAlive()) process.destroyForcibly();
            process.waitFor(30, TimeUnit.SECONDS);
            try {
                stdin.close();
            } catch (IOException ignored) {
                // the pipe's reader has gone
            }
            log.delete();
        }
    }

    // ------------------------------------------------------------------ baseline

    /** Open fds (memfds included) and live native objects, to compare at the end of a test. */
    private record Baseline(Map<String, Integer> fds, long[] live) {
        static Baseline take() {
            return new Baseline(openFds(), liveObjects());
        }

        /**
         * Open fds by kind, without those the JVM opens and closes on its own: /proc files
         * (already left out), sockets, /dev/random, /dev/urandom and cgroup files.
         */
        static Map<String, Integer> openFds() {
            Map<String, Integer> m = IpcTestSupport.fdSnapshot();
            m.keySet().removeIf(k -> k.equals("socket") || k.equals("/dev/random") || k.equals("/dev/urandom")
                    || k.startsWith("/sys/fs/cgroup"));
            return m;
        }

        /** Ours (allocations, reservations, mappings, ranges) and the host driver's (the same, and memfds). */
        static long[] liveObjects() {
            DriverCounters c = Driver.get().counters();
            return new long[] {c.liveAllocations(), c.liveReservations(), c.liveMappings(), c.liveRanges(),
                    c.hostAllocations(), c.hostReservations(), c.hostMappings(), c.hostMemfds()};
        }

        void assertBack(String when) throws InterruptedException {
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
            Map<String, Integer> now = openFds();
            while (!now.equals(fds) && System.nanoTime() < until) {
                Thread.sleep(20);
                now = openFds();
            }
            if (!now.equals(fds)) {
                Map<String, String> diff = new TreeMap<>();
                java.util.Set<String> kinds = new java.util.TreeSet<>(fds.keySet());
                kinds.addAll(now.keySet());
                for (String k : kinds) {
                    int a = fds.getOrDefault(k, 0), b = now.getOrDefault(k, 0);
                    if (a != b) diff.put(k, a + " -> " + b);
                }
                fail("open fds by kind (memfds as /memfd:cuvmm-host) " + when + " differ from the baseline: " + diff);
            }
            assertEquals(Arrays.toString(live), Arrays.toString(liveObjects()), "live counters [ours: allocations, "
                    + "reservations, mappings, ranges; host: allocations, reservations, mappings, memfds] " + when);
        }
    }
}
