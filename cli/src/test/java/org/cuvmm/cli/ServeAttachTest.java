package org.cuvmm.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.Test;

/** {@code cuvmm serve} and {@code cuvmm attach} against each other, in one JVM. */
class ServeAttachTest {
    @Test
    void attachVerifiesThePatternAndWritesBack() throws Exception {
        Path dir = Files.createTempDirectory("cuvmm-cli");
        Path socket = dir.resolve("s.sock");
        CountDownLatch stop = new CountDownLatch(1);
        ByteArrayOutputStream serveOut = new ByteArrayOutputStream();
        ExecutorService pool = Executors.newSingleThreadExecutor();
        try {
            PrintStream out = new PrintStream(serveOut, true, StandardCharsets.UTF_8);
            Future<Integer> serving = pool.submit(() -> new ServeCommand(stop).run(
                    List.of("--socket", socket.toString(), "--name", "t", "--size", "5M", "--seed", "3"), out, out));
            long deadline = System.nanoTime() + 30_000_000_000L;
            while (!serveOut.toString(StandardCharsets.UTF_8).contains("serving 't'") && System.nanoTime() < deadline) {
                Thread.sleep(20);
            }
            ByteArrayOutputStream attachOut = new ByteArrayOutputStream();
            PrintStream a = new PrintStream(attachOut, true, StandardCharsets.UTF_8);
            int rc = new AttachCommand().run(List.of("--socket", socket.toString(), "--name", "t", "--verify", "--seed",
                    "3", "--write-seed", "4"), a, a);
            String text = attachOut.toString(StandardCharsets.UTF_8);
            assertEquals(0, rc, text);
            assertTrue(text.contains("verify: OK"), text);
            int wrong = new AttachCommand().run(List.of("--socket", socket.toString(), "--name", "t", "--verify",
                    "--seed", "3"), a, a);
            assertEquals(1, wrong, "the buffer now holds seed 4, so seed 3 must fail: " + attachOut);
            int right = new AttachCommand().run(List.of("--socket", socket.toString(), "--name", "t", "--verify",
                    "--seed", "4"), a, a);
            assertEquals(0, right, attachOut.toString(StandardCharsets.UTF_8));
            stop.countDown();
            assertEquals(0, serving.get(30, TimeUnit.SECONDS));
            String served = serveOut.toString(StandardCharsets.UTF_8);
            assertTrue(served.contains("ATTACHED 't'"), served);
            assertTrue(served.contains("RELEASED 't'"), served);
        } finally {
            stop.countDown();
            pool.shutdownNow();
            Files.deleteIfExists(socket);
            Files.deleteIfExists(dir);
        }
    }
}
