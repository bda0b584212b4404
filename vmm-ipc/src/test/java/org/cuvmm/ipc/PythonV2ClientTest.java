package org.cuvmm.ipc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.File;
import java.io.IOException;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.concurrent.TimeUnit;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.ipc.internal.BytePattern;
import org.cuvmm.pool.VirtualMemoryPool;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * The Python test client ({@code src/test/python/attach_client.py}, written from
 * docs/PROTOCOL.md alone) speaking version 2 (section 13) to a {@link SharingServer} whose
 * producer hands out one pooled frame round after round, beside a version-1 Python client on
 * the same server: the version-2 client receives fds on the first round only (it counts the
 * fds it receives and prints them), the version-1 client every round; after the producer's
 * {@code trim()} the version-2 client gets EVICT, unmaps, FORGETs, and the server stops
 * counting the memory as released but still mapped. A FORGET of an id the connection never
 * got is UNKNOWN_ID and forgets nothing.
 */
class PythonV2ClientTest {
    private static final int ROUNDS = 4;
    private static final int CHILD_SECONDS = 60;

    private Path sock;

    @BeforeEach
    void setUp() throws IOException {
        sock = IpcTestSupport.socketPath();
    }

    @AfterEach
    void tearDown() {
        IpcTestSupport.deleteTree(sock.getParent());
    }

    @Test
    void repeatAttachesGetFdsOnlyOnTheFirstRoundThenEvictAfterTrimBesideAVersion1Client() throws Exception {
        Assumptions.assumeTrue(IpcTestSupport.onHostDriver(), "skipped: the Python client maps host-driver memfds");
        String python = System.getProperty("cuvmm.test.python", "python3");
        Assumptions.assumeTrue(CrossProcessTest.works(python, "-c", "import socket, sys; socket.recv_fds; sys.exit(0)"),
                "skipped: no Python 3.9+ (" + python + " with socket.recv_fds) on this machine");
        Path script = Path.of("src/test/python/attach_client.py").toAbsolutePath();
        assertTrue(Files.exists(script), script.toString());
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(resource).name("py-v2").leakSampleRate(0).build();
             SharingServer server = SharingServer.builder(sock).build();
             IpcTestSupport.ThreeChunks three = new IpcTestSupport.ThreeChunks();
             Py v2 = new Py(python, script, 2);
             Py v1 = new Py(python, script, 1)) {
            v2.awaitLine("HELLO_OK version 2", 1);
            v1.awaitLine("HELLO_OK version 1", 1);
            long n = 3 * resource.granularity();
            VirtualMemoryBuffer frame = pool.allocateExported(n);
            int chunks = frame.chunkCount();
            long[] ids = frame.allocationIds();
            // Besides the pooled frame, a buffer of three allocations, published throughout: per-chunk ids and flags.
            BytePattern.fill(three.buffer, 7);
            server.publish("three", three.buffer);
            assertEquals(3, three.buffer.chunkCount());
            for (int round = 1; round <= ROUNDS; round++) {
                BytePattern.fill(frame, 40 + round); // new bytes each round: the kept mappings see them
                long fdsSent0 = server.stats().fdsSent();
                server.publish("frame", frame);
                v2.command("attach frame " + (40 + round));
                v1.command("attach frame " + (40 + round));
                String l2 = v2.awaitLine("ROUND " + (2 * round - 1) + " ", 1);
                String l1 = v1.awaitLine("ROUND " + round + " ", 1);
                v2.command("attach three 7");
                String l3 = v2.awaitLine("ROUND " + (2 * round) + " ", 1);
                long fdsSent = server.stats().fdsSent() - fdsSent0;
                System.out.println("PythonV2ClientTest round " + round + ": fds sent " + fdsSent + "; v2: " + l2
                        + "; v1: " + l1 + "; v2 three: " + l3);
                assertTrue(server.unpublish("frame"));
                frame.closeWhenUnused(); // both consumers released: back to the pool
                VirtualMemoryBuffer next = pool.allocateExported(n);
                assertEquals(Arrays.toString(ids), Arrays.toString(next.allocationIds()), "the pool hands out the same frame");
                frame = next;
                assertTrue(l2.contains(" verified=yes") && l1.contains(" verified=yes") && l3.contains(" verified=yes"),
                        l2 + " / " + l1 + " / " + l3);
                assertTrue(l1.contains(" fds=" + chunks + " fds_total=" + chunks * round + " "), "v1, every round: " + l1);
                if (round == 1) {
                    assertTrue(l2.contains(" fds=" + chunks + " fds_total=" + chunks + " hits=0 misses=1 held=" + chunks),
                            "v2, round 1: one fd per allocation: " + l2);
                    assertTrue(l3.contains(" chunks=3 fds=3 fds_total=" + (chunks + 3) + " hits=0 misses=2 held=" + (chunks + 3)),
                            "v2, round 1 of three: " + l3);
                    assertEquals(2L * chunks + 3, fdsSent, "round 1: both clients get the fds");
                } else {
                    assertTrue(l2.contains(" fds=0 fds_total=" + (chunks + 3) + " hits=" + (2 * round - 3) + " misses=2 held="
                            + (chunks + 3)), "v2, round " + round + ": no fd, the kept mappings: " + l2);
                    assertTrue(l3.contains(" chunks=3 fds=0 fds_total=" + (chunks + 3) + " hits=" + (2 * round - 2)
                            + " misses=2 held=" + (chunks + 3)), "v2, round " + round + " of three: " + l3);
                    assertEquals(chunks, fdsSent, "round " + round + ": only the version-1 client gets fds");
                }
            }
            SharingStats s = server.stats();
            assertEquals(chunks + 3, s.idsHeld(), "the v2 client holds the frames' ids, the v1 client none: " + s);

            // A FORGET of ids this connection never got: UNKNOWN_ID, nothing forgotten (all or nothing).
            v2.command("forget 999999 " + Long.MAX_VALUE);
            assertTrue(v2.awaitLine("ERROR ", 1).startsWith("ERROR UNKNOWN_ID (18)"), v2.output());
            assertEquals(chunks + 3, server.stats().idsHeld(), "nothing forgotten");

            // The producer really releases the frame: EVICT to the v2 client, which maps it still.
            frame.close();
            assertEquals(n, pool.trim(), "trim releases the idle frame");
            IpcTestSupport.await("released, still mapped by the v2 client", 10,
                    () -> server.stats().releasedStillMappedAllocations() == chunks);
            assertTrue(server.stats().releasedStillMapped().stream().allMatch(a -> a.consumers() == 1), server.stats().toString());
            v2.command("evict");
            String ev = v2.awaitLine("EVICTED ", 1);
            assertTrue(ev.endsWith(" forgotten=" + chunks + " held=3"), "the frame's ids go, three's stay: " + ev);
            IpcTestSupport.await("FORGET processed", 10, () -> server.stats().releasedStillMappedAllocations() == 0);
            assertEquals(3, server.stats().idsHeld());
            assertEquals(0, server.stats().releasedStillMappedBytes());
            v1.exit();
            v2.exit(); // quit: FORGET of the ids it still holds (three's)
            IpcTestSupport.await("the v2 client's ids forgotten", 10, () -> server.stats().idsHeld() == 0);
            server.unpublish("three");
            assertTrue(v2.output().contains("EVICT ids "), v2.output());
        }
    }

    /**
     * Against a server that speaks version 1 only, the version-2 Python client's HELLO gets
     * BAD_VERSION and it says HELLO again in version 1 on the same connection (section 13.1),
     * then attaches as a version-1 client (one fd per chunk).
     */
    @Test
    void aVersion2ClientFallsBackToVersion1OnBadVersion() throws Exception {
        Assumptions.assumeTrue(IpcTestSupport.onHostDriver(), "skipped: the Python client maps host-driver memfds");
        String python = System.getProperty("cuvmm.test.python", "python3");
        Assumptions.assumeTrue(CrossProcessTest.works(python, "-c", "import socket, sys; socket.recv_fds; sys.exit(0)"),
                "skipped: no Python 3.9+ (" + python + " with socket.recv_fds) on this machine");
        Path script = Path.of("src/test/python/attach_client.py").toAbsolutePath();
        File log = File.createTempFile("cuvmm-py-fallback", ".log");
        try (IpcTestSupport.ThreeChunks three = new IpcTestSupport.ThreeChunks();
             SharingServer server = SharingServer.builder(sock).maxProtocolVersion(1).build()) {
            BytePattern.fill(three.buffer, 9);
            server.publish("three", three.buffer);
            Process p = new ProcessBuilder(python, script.toString(), "--socket", sock.toString(), "--name", "three",
                    "--seed", "9", "--protocol", "2").redirectErrorStream(true).redirectOutput(log).start();
            assertTrue(p.waitFor(CHILD_SECONDS, TimeUnit.SECONDS), "python client ends:\n" + IpcTestSupport.read(log));
            String out = IpcTestSupport.read(log);
            assertEquals(0, p.exitValue(), out);
            assertTrue(out.contains("BAD_VERSION to HELLO version 2: saying HELLO in version 1\nHELLO_OK version 1,"), out);
            assertTrue(out.contains("DESCRIPTOR lease ") && out.contains("VERIFIED " + three.buffer.size() + " bytes with seed 9"), out);
            IpcTestSupport.await("lease released", 5, () -> server.leaseCount("three") == 0);
            assertEquals(3, server.stats().fdsSent(), "version 1: one fd per chunk");
        } finally {
            log.delete();
        }
    }

    /** A Python client process driven through its stdin ({@code --commands}). */
    private final class Py implements AutoCloseable {
        final Process process;
        final File log;
        final OutputStream stdin;

        Py(String python, Path script, int version) throws IOException {
            log = File.createTempFile("cuvmm-py-v" + version, ".log");
            process = new ProcessBuilder(python, "-u", script.toString(), "--socket", sock.toString(), "--commands",
                    "--protocol", Integer.toString(version), "--client-name", "python v" + version)
                    .redirectErrorStream(true).redirectOutput(log).start();
            stdin = process.getOutputStream();
        }

        String output() { return IpcTestSupport.read(log); }

        void command(String line) throws IOException {
            stdin.write((line + "\n").getBytes(StandardCharsets.UTF_8));
            stdin.flush();
        }

        /** The {@code k}-th (from 1) output line starting with {@code prefix}; fails if the client exited first. */
        String awaitLine(String prefix, int k) throws InterruptedException {
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(CHILD_SECONDS);
            while (true) {
                boolean alive = process.isAlive();
                String out = output();
                int seen = 0;
                for (String l : out.split("\n")) {
                    if (l.startsWith(prefix) && ++seen == k) return l;
                }
                if (!alive) fail("python client exited (" + process.exitValue() + ") before " + prefix + " #" + k + ":\n" + out);
                if (System.nanoTime() > until) fail("python client: no " + prefix + " #" + k + " within " + CHILD_SECONDS + " s:\n" + out);
                Thread.sleep(10);
            }
        }

        void exit() throws IOException, InterruptedException {
            command("quit");
            stdin.close();
            assertTrue(process.waitFor(30, TimeUnit.SECONDS), "python client exits:\n" + output());
            assertEquals(0, process.exitValue(), output());
        }

        @Override
        public void close() throws InterruptedException {
            if (process.isAlive()) process.destroyForcibly();
            process.waitFor(30, TimeUnit.SECONDS);
            log.delete();
        }
    }
}
