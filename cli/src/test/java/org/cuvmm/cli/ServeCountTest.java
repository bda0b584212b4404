package org.cuvmm.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.ipc.Attachment;
import org.cuvmm.ipc.SharingClient;
import org.junit.jupiter.api.Test;

/**
 * The "leases now N" lines of {@code cuvmm serve} under concurrent attaches and releases:
 * after every burst, the last line printed holds the true count.
 */
class ServeCountTest {
    private static final int CLIENTS = 6;
    private static final int ROUNDS = 8;

    @Test
    void theLastLinePrintedHoldsTheTrueCount() throws Exception {
        Path dir = Files.createTempDirectory(Path.of("/tmp"), "cvmm-count");
        Path socket = dir.resolve("s.sock");
        CountDownLatch stop = new CountDownLatch(1);
        ByteArrayOutputStream serveOut = new ByteArrayOutputStream();
        PrintStream out = new PrintStream(serveOut, true, StandardCharsets.UTF_8);
        ExecutorService pool = Executors.newFixedThreadPool(CLIENTS + 1);
        List<SharingClient> clients = new ArrayList<>();
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0)) {
            Future<Integer> serving = pool.submit(() -> new ServeCommand(stop).run(
                    List.of("--socket", socket.toString(), "--name", "t", "--size", "1M"), out, out));
            awaitOutput(serveOut, "one 'serving' line", s -> s.contains("serving 't'"));
            for (int i = 0; i < CLIENTS; i++) clients.add(SharingClient.connect(socket, "c" + i));
            CyclicBarrier together = new CyclicBarrier(CLIENTS);
            int events = 0;
            for (int round = 0; round < ROUNDS; round++) {
                // All clients attach at once: the count goes 0 -> CLIENTS.
                List<Future<Attachment>> attached = new ArrayList<>();
                for (SharingClient c : clients) {
                    attached.add(pool.submit(() -> {
                        together.await(30, TimeUnit.SECONDS);
                        return c.attach("t", resource);
                    }));
                }
                List<Attachment> held = new ArrayList<>();
                for (Future<Attachment> f : attached) held.add(f.get(60, TimeUnit.SECONDS));
                events += CLIENTS;
                assertLastCount(serveOut, events, CLIENTS);
                // All release at once: CLIENTS -> 0.
                List<Future<?>> released = new ArrayList<>();
                for (Attachment a : held) {
                    released.add(pool.submit(() -> {
                        together.await(30, TimeUnit.SECONDS);
                        a.close();
                        return null;
                    }));
                }
                for (Future<?> f : released) f.get(60, TimeUnit.SECONDS);
                events += CLIENTS;
                assertLastCount(serveOut, events, 0);
            }
            for (SharingClient c : clients) c.close();
            stop.countDown();
            assertEquals(0, serving.get(60, TimeUnit.SECONDS), serveOut.toString(StandardCharsets.UTF_8));
        } finally {
            stop.countDown();
            for (SharingClient c : clients) c.close();
            pool.shutdownNow();
            Files.deleteIfExists(socket);
            Files.deleteIfExists(dir);
        }
    }

    private static List<String> countLines(ByteArrayOutputStream out) {
        return Arrays.stream(out.toString(StandardCharsets.UTF_8).split("\n")).filter(l -> l.contains(", leases now "))
                .toList();
    }

    /** Waits (bounded) until {@code events} lines are printed; the last must say {@code expected}. */
    private static void assertLastCount(ByteArrayOutputStream out, int events, int expected) throws Exception {
        awaitOutput(out, events + " attach/release lines", s -> countLines(out).size() >= events);
        List<String> lines = countLines(out);
        assertEquals(events, lines.size(), "one line per event:\n" + String.join("\n", lines));
        String last = lines.get(lines.size() - 1);
        assertTrue(last.endsWith(", leases now " + expected), "the last line printed holds the true count "
                + expected + ": " + last + "\n(last lines:\n" + String.join("\n",
                lines.subList(Math.max(0, lines.size() - 2 * CLIENTS), lines.size())) + ")");
    }

    private static void awaitOutput(ByteArrayOutputStream out, String what, java.util.function.Predicate<String> done)
            throws InterruptedException {
        long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
        while (!done.test(out.toString(StandardCharsets.UTF_8))) {
            assertTrue(System.nanoTime() < until, "timed out after 60 s waiting for " + what + ":\n"
                    + out.toString(StandardCharsets.UTF_8));
            Thread.sleep(10);
        }
    }
}
