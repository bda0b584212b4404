package org.cuvmm.ipc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;

import org.cuvmm.Driver;
import org.cuvmm.DriverCounters;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.ipc.internal.BytePattern;
import org.cuvmm.pool.PoolLifetime;
import org.cuvmm.pool.VirtualMemoryPool;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * Steady-state sharing across processes (issue 11): a pooled frame shared round after round
 * with a protocol-version-2 consumer in a second JVM ({@link CachedConsumerMain}) costs, after
 * the first round, no driver call and no fd on either side; a consumer killed while its cache
 * keeps mappings frees everything on the producer's side.
 */
class CachedSharingTest {
    private static final int CHILD_START_SECONDS = 60;
    private static final int ROUNDS = 5;

    private Path sock;

    @BeforeAll
    static void warmUp() throws Exception {
        // Load the classes of a round (pool, server, release notices) before counting.
        Path s = IpcTestSupport.socketPath();
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(resource).leakSampleRate(0).build();
             SharingServer server = SharingServer.builder(s).build()) {
            VirtualMemoryBuffer b = pool.allocateExported(resource.granularity());
            server.publish("warm", b);
            try (SharingClient client = SharingClient.connect(s, "warm-up");
                 Attachment a = client.attach("warm", resource)) {
                a.buffer().size();
            }
            server.unpublish("warm");
            b.closeWhenUnused();
            server.stats();
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
    void repeatAttachOfAPooledFrameMakesNoDriverCallAndPassesNoFdOnEitherSide() throws Exception {
        DriverCounters counters = Driver.get().counters();
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(resource).name("cst-rounds")
                     .leakSampleRate(0).build();
             SharingServer server = SharingServer.builder(sock).build();
             Consumer child = new Consumer()) {
            child.awaitLine("CONNECTED version 2", 1, CHILD_START_SECONDS);
            long n = 3 * resource.granularity();
            VirtualMemoryBuffer frame = pool.allocateExported(n);
            long chunks = frame.chunkCount();
            long[] ids = frame.allocationIds();
            for (int round = 1; round <= ROUNDS; round++) {
                BytePattern.fill(frame, round); // the producer writes the frame (copies: not counted)
                long fdsSent0 = server.stats().fdsSent();
                long calls0 = counters.totalCalls();
                server.publish("frame", frame);
                child.command("round frame " + round);
                String line = child.awaitLine("ROUND", round, 30);
                assertTrue(server.unpublish("frame"));
                frame.closeWhenUnused(); // the consumer released: back to the pool now
                VirtualMemoryBuffer next = pool.allocateExported(n); // the same memory again
                long producerCalls = counters.totalCalls() - calls0;
                long fdsSent = server.stats().fdsSent() - fdsSent0;
                System.out.println("CachedSharingTest round " + round + ": producer calls " + producerCalls
                        + ", fds sent " + fdsSent + "; consumer: " + line);
                assertEquals(java.util.Arrays.toString(ids), java.util.Arrays.toString(next.allocationIds()),
                        "the pool hands out the same allocations");
                if (round == 1) {
                    assertEquals(chunks, fdsSent, "round 1: one fd per allocation");
                    assertTrue(line.contains(" fds=" + chunks + " "), line);
                    assertTrue(line.contains("misses=1"), line);
                } else {
                    assertEquals(0, producerCalls, "round " + round + ": producer driver calls");
                    assertEquals(0, fdsSent, "round " + round + ": fds sent");
                    assertTrue(line.startsWith("ROUND calls=0 fds=0 "), "round " + round + " in the consumer: " + line);
                    assertTrue(line.contains("hits=" + (round - 1) + " misses=1"), line);
                }
                frame = next;
            }
            SharingStats s = server.stats();
            assertEquals(1, s.connections().size());
            assertEquals(chunks, s.connections().get(0).idsHeld(), "the consumer holds the frame's ids: " + s);
            assertEquals(2, s.connections().get(0).version());
            frame.close();
            child.exit();
        }
    }

    @Test
    void aConsumerKilledWithCachedMappingsFreesEverythingOnTheProducerSide() throws Exception {
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(resource).name("cst-killed")
                     .leakSampleRate(0).build();
             SharingServer server = SharingServer.builder(sock).build();
             Consumer child = new Consumer()) {
            child.awaitLine("CONNECTED version 2", 1, CHILD_START_SECONDS);
            long n = resource.granularity();
            VirtualMemoryBuffer idle = pool.allocateExported(n);
            VirtualMemoryBuffer held = pool.allocateExported(n);
            long capacity = idle.mappedSize();
            BytePattern.fill(idle, 5);
            BytePattern.fill(held, 6);
            server.publish("idle", idle);
            server.publish("held", held);
            child.command("round idle 5"); // cached, no lease
            child.awaitLine("ROUND", 1, 30);
            child.command("hold held 6"); // cached and leased
            child.awaitLine("HELD", 1, 30);
            assertEquals(2, server.stats().idsHeld(), "the consumer holds both allocations");
            assertEquals(1, server.totalLeaseCount());

            child.process.destroyForcibly();
            assertTrue(child.process.waitFor(10, TimeUnit.SECONDS), "the killed consumer exits");
            IpcTestSupport.await("the killed consumer's connection gone", 10, () -> server.connectionCount() == 0);
            assertEquals(0, server.totalLeaseCount(), "its lease ended with the connection");
            SharingStats s = server.stats();
            assertEquals(0, s.idsHeld(), "its ids went with the connection: " + s);
            assertEquals(0, s.releasedStillMappedAllocations(), s.toString());

            server.unpublish("idle");
            server.unpublish("held");
            idle.closeWhenUnused();
            held.closeWhenUnused();
            assertTrue(idle.isClosed() && held.isClosed(), "both back in the pool");
            assertEquals(2 * capacity, pool.trim(), "trim releases both: no consumer maps them any more");
            assertEquals(0, server.stats().releasedStillMappedAllocations(), "no consumer holds the trimmed memory");
        }
    }

    // ------------------------------------------------------------------ a consumer process

    private final class Consumer implements AutoCloseable {
        final Process process;
        final OutputStream stdin;
        /** The child's output lines, read by {@link #pump}; guarded by itself. */
        private final List<String> lines = new java.util.ArrayList<>();
        private boolean ended;
        private final Thread pump;

        Consumer() throws IOException {
            // Started as ChildJvm does, but with its output on a pipe, read line by line.
            List<String> cmd = List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString(), "-cp",
                    System.getProperty("java.class.path"), CachedConsumerMain.class.getName(), sock.toString());
            process = new ProcessBuilder(cmd).redirectErrorStream(true).start();
            stdin = process.getOutputStream();
            pump = new Thread(this::pump, "cached-consumer-output");
            pump.setDaemon(true);
            pump.start();
        }

        private void pump() {
            try (java.io.BufferedReader r = new java.io.BufferedReader(new java.io.InputStreamReader(
                    process.getInputStream(), StandardCharsets.UTF_8))) {
                String l;
                while ((l = r.readLine()) != null) {
                    synchronized (lines) {
                        lines.add(l);
                        lines.notifyAll();
                    }
                }
            } catch (IOException ignored) {
                // the child has gone: its output ends here
            } finally {
                synchronized (lines) {
                    ended = true;
                    lines.notifyAll();
                }
            }
        }

        String output() {
            synchronized (lines) {
                return String.join("\n", lines);
            }
        }

        void command(String line) throws IOException {
            stdin.write((line + "\n").getBytes(StandardCharsets.UTF_8));
            stdin.flush();
        }

        /**
         * The {@code k}-th (from 1) output line starting with {@code prefix}, waiting at most
         * {@code seconds} for it (a blocking wait on the output, woken by each line); fails if
         * the child failed or its output ended first.
         */
        String awaitLine(String prefix, int k, int seconds) throws InterruptedException {
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(seconds);
            synchronized (lines) {
                for (;;) {
                    int seen = 0;
                    boolean failed = ended;
                    for (String l : lines) {
                        if (l.startsWith(prefix) && ++seen == k) return l;
                        if (l.startsWith("FAILED")) failed = true;
                    }
                    if (failed) {
                        // The rest of its output (the stack), until it ends: bounded.
                        long stop = System.nanoTime() + TimeUnit.SECONDS.toNanos(10);
                        for (long w; !ended && (w = stop - System.nanoTime()) > 0; ) {
                            TimeUnit.NANOSECONDS.timedWait(lines, w);
                        }
                        fail("consumer pid " + process.pid() + " failed or exited waiting for " + prefix + " #" + k
                                + ":\n" + String.join("\n", lines));
                    }
                    long left = until - System.nanoTime();
                    if (left <= 0) {
                        fail("consumer pid " + process.pid() + ": no " + prefix + " #" + k + " within " + seconds
                                + " s:\n" + String.join("\n", lines));
                    }
                    TimeUnit.NANOSECONDS.timedWait(lines, left);
                }
            }
        }

        void exit() throws IOException, InterruptedException {
            command("exit");
            assertTrue(process.waitFor(10, TimeUnit.SECONDS), "consumer exits:\n" + output());
            pump.join(TimeUnit.SECONDS.toMillis(10));
            assertEquals(0, process.exitValue(), output());
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
            pump.join(TimeUnit.SECONDS.toMillis(10));
        }
    }
}
