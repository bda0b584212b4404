package org.cuvmm.examples;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.io.IOException;
import java.lang.management.ManagementFactory;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.FutureTask;
import java.util.concurrent.TimeUnit;

import javax.management.ObjectName;

import org.cuvmm.pool.PoolLifetime;
import org.cuvmm.pool.PoolStats;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * The pooled producer as a user runs it: the producer in this JVM (so its pool, bean and fds
 * can be checked), the consumer in a second JVM.
 */
class PooledProducerTest {
    private static final int ROUNDS = 3;

    private Path dir;
    private Path socket;
    private File childLog;
    private Process child;
    private final CountDownLatch stop = new CountDownLatch(1);
    private Leaks.Snapshot baseline;

    @BeforeEach
    void setUp() throws Exception {
        dir = Files.createTempDirectory(Path.of("/tmp"), "cuvmm-pp");
        socket = dir.resolve("p.sock");
        childLog = dir.resolve("consumer.log").toFile();
        // One round with the consumer in this JVM loads the classes, native code and JMX that
        // the test uses, then counts.
        baseline = Leaks.baselineAfter(() -> {
            Path warm = dir.resolve("warm.sock");
            Leaks.Output out = new Leaks.Output();
            FutureTask<PooledProducer.Result> p = startProducer(warm, 1, out, new CountDownLatch(1));
            awaitServing(out);
            Leaks.Output consumerOut = new Leaks.Output();
            assertEquals(0, PooledProducer.Consumer.run(warm, 1, consumerOut.stream), consumerOut.text());
            assertTrue(p.get(10, TimeUnit.SECONDS).ok(), out.text());
        });
    }

    @AfterEach
    void tearDown() throws Exception {
        stop.countDown();
        if (child != null && child.isAlive()) child.destroyForcibly().waitFor();
        try (var s = Files.walk(dir)) {
            s.sorted(java.util.Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        }
    }

    @Test
    void reusesTheReleasedBufferEachRoundAndShowsItOverJmx() throws Exception {
        Leaks.Output producerOut = new Leaks.Output();
        FutureTask<PooledProducer.Result> producer = startProducer(socket, ROUNDS, producerOut, stop);
        awaitServing(producerOut);
        ObjectName bean = new ObjectName("org.cuvmm:type=VirtualMemoryPool,name=" + PooledProducer.POOL_NAME
                + ",lifetime=exported");
        assertTrue(ManagementFactory.getPlatformMBeanServer().isRegistered(bean), "registered while it runs");

        child = startConsumer();
        assertTrue(child.waitFor(15, TimeUnit.SECONDS), "the consumer finished: " + read(childLog));
        String consumerOut = read(childLog);
        assertEquals(0, child.exitValue(), consumerOut);
        for (int r = 1; r <= ROUNDS; r++) {
            assertTrue(consumerOut.contains("frame-" + r + ": " + PooledProducer.SIZE + " bytes at 0x"), consumerOut);
            assertTrue(consumerOut.contains("hold pattern seed " + r + "\nframe-" + r + ": released\n"), consumerOut);
        }
        // Protocol version 2: round 1 imports (one fd), every later round is a cache hit with no
        // fd and no driver call in the consumer.
        assertTrue(consumerOut.contains("import cache (protocol v2): " + (ROUNDS - 1) + " hit(s), 1 miss(es), 1 fd(s) "
                + "received; driver calls in attach and release: "), consumerOut);
        assertTrue(consumerOut.contains(", 0 in the " + (ROUNDS - 1) + " later round(s)"), consumerOut);
        assertTrue(consumerOut.contains("(lease ") && consumerOut.contains(", cache hit) hold pattern seed 2"),
                consumerOut);

        PooledProducer.Result result = producer.get(10, TimeUnit.SECONDS);
        String out = producerOut.text();
        assertTrue(result.ok(), out);
        List<PooledProducer.Round> rounds = result.rounds();
        assertEquals(ROUNDS, rounds.size(), out);

        // Round 1 made the memory; every later round got that same memory back from the pool.
        PooledProducer.Round first = rounds.get(0);
        assertFalse(first.hit(), out);
        for (PooledProducer.Round r : rounds.subList(1, ROUNDS)) {
            assertTrue(r.hit(), out);
            assertEquals(first.address(), r.address(), "round " + r.round() + " reuses round 1's memory");
            assertEquals(r.round() - 1, r.reusedFrom(), out);
        }
        PoolStats end = rounds.get(ROUNDS - 1).afterRelease();
        assertTrue(end.hits() >= ROUNDS - 1, out);
        assertEquals(ROUNDS - 1, end.hits(), out);
        assertEquals(1, end.misses(), "one size: one driver allocation for every round\n" + out);
        assertEquals(PooledProducer.SIZE, end.peakLiveBytes(), out);

        for (PooledProducer.Round r : rounds) {
            // Given up by the producer but leased by the consumer: live, not idle, so the pool
            // cannot hand it out; after the release it is idle (retained) and not live.
            PoolStats leased = r.whileLeased();
            assertEquals(1, leased.liveCount(), out);
            assertEquals(PooledProducer.SIZE, leased.liveBytes(), out);
            assertEquals(0, leased.retainedCount(), out);
            PoolStats back = r.afterRelease();
            assertEquals(0, back.liveCount(), out);
            assertEquals(1, back.retainedCount(), out);
            assertEquals(PooledProducer.SIZE, back.retainedBytes(), out);
            assertEquals(r.round() - 1, back.hits(), out);
            // What a JMX client read while the example ran is what stats() said at that moment.
            assertBeanMatches(leased, r.beanWhileLeased());
            assertBeanMatches(back, r.beanAfterRelease());
        }

        assertTrue(out.contains("round 1: frame-1 at 0x"), out);
        assertTrue(out.contains("new memory from the driver (miss)"), out);
        assertTrue(out.contains("round 2: frame-2 at 0x" + Long.toHexString(first.address())
                + ", idle memory from the pool (hit): round 1's, released by its consumer(s)"), out);
        assertTrue(out.contains("  attach  ATTACHED 'frame-3' lease"), out);
        assertTrue(out.contains("by PooledProducer.Consumer pid " + child.pid()), out);
        assertTrue(out.contains("  release RELEASED 'frame-3' lease"), out);
        assertTrue(out.contains("  JMX exported bean: {Count=0, MemoryUsed=0"), out);
        assertTrue(out.contains("sharing: 1 fd(s) sent in " + ROUNDS + " round(s)"), out);
        assertTrue(out.endsWith("done: 3 round(s), 1 miss(es), 2 hit(s): 1 driver allocation(s) served every frame\n"),
                out);

        // Closing the pool unregistered its beans and released its idle memory.
        assertFalse(ManagementFactory.getPlatformMBeanServer().isRegistered(bean), "unregistered at close");
        assertFalse(Files.exists(socket), "the socket file is removed");
        baseline.assertBack("after three pooled rounds to a consumer in another JVM");
    }

    private static void assertBeanMatches(PoolStats s, Map<String, Long> bean) {
        assertEquals(Map.of("Count", s.liveCount(), "MemoryUsed", s.liveBytes(), "TotalCapacity",
                s.liveRequestedBytes(), "PeakMemoryUsed", s.peakLiveBytes(), "RetainedCount", s.retainedCount(),
                "RetainedBytes", s.retainedBytes(), "Hits", s.hits(), "Misses", s.misses()), bean);
    }

    // ---------------------------------------------------------------- helpers

    private static FutureTask<PooledProducer.Result> startProducer(Path socket, int rounds, Leaks.Output out,
                                                                   CountDownLatch stop) {
        FutureTask<PooledProducer.Result> f = new FutureTask<>(() -> PooledProducer.run(socket, rounds, 1, out.stream,
                stop));
        Thread t = new Thread(f, "producer");
        t.setDaemon(true);
        t.start();
        return f;
    }

    private static void awaitServing(Leaks.Output out) throws InterruptedException {
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
        while (!out.text().contains("\nserving ")) {
            if (System.nanoTime() > until) throw new AssertionError("the producer did not start:\n" + out.text());
            Thread.sleep(10);
        }
    }

    /** PooledProducer.Consumer in a second JVM: this JVM's java, class path and cuvmm.* properties. */
    private Process startConsumer() throws IOException {
        List<String> cmd = new ArrayList<>();
        cmd.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
        for (String k : System.getProperties().stringPropertyNames()) {
            if (k.startsWith("cuvmm.")) cmd.add("-D" + k + "=" + System.getProperty(k));
        }
        cmd.add("-cp");
        cmd.add(System.getProperty("java.class.path"));
        cmd.add(PooledProducer.Consumer.class.getName());
        cmd.add(socket.toString());
        cmd.add(String.valueOf(ROUNDS));
        return new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(childLog).start();
    }

    private static String read(File f) {
        try {
            return Files.readString(f.toPath(), StandardCharsets.UTF_8);
        } catch (IOException e) {
            return "(no output: " + e + ")";
        }
    }
}
