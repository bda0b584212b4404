package org.cuvmm.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.LinkOption;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.cuvmm.ipc.ErrorCode;
import org.cuvmm.ipc.SharingClient;
import org.cuvmm.ipc.SharingException;
import org.junit.jupiter.api.Test;

/** The server options of {@code cuvmm serve}: checked with clear messages, and applied. */
class ServeOptionsTest {
    private static String usageError(String... extra) {
        ByteArrayOutputStream err = new ByteArrayOutputStream();
        List<String> args = new ArrayList<>(List.of("--socket", "/tmp/never.sock", "--name", "t", "--size", "1M"));
        args.addAll(List.of(extra));
        PrintStream e = new PrintStream(err, true, StandardCharsets.UTF_8);
        assertEquals(Command.USAGE, new ServeCommand().run(args, e, e), err.toString(StandardCharsets.UTF_8));
        return err.toString(StandardCharsets.UTF_8);
    }

    @Test
    void badOptionsAreRefusedNamingTheValue() {
        assertTrue(usageError("--socket-mode", "0755").contains("socketFileMode: 0755 (expected: 0600, 0660, 0606 or 0666"));
        assertTrue(usageError("--socket-mode", "rw").contains("--socket-mode: rw (expected: an octal file mode"));
        assertTrue(usageError("--backlog", "0").contains("--backlog: 0 (expected: a whole number >= 1)"));
        assertTrue(usageError("--max-connections", "x").contains("--max-connections: x (expected: a whole number >= 1)"));
        assertTrue(usageError("--max-leases", "0").contains("--max-leases: 0 (expected: a whole number >= 1)"));
        assertTrue(usageError("--max-ids", "0").contains("--max-ids: 0 (expected: a whole number >= 1)"));
        assertTrue(usageError("--max-protocol", "3").contains("--max-protocol: 3 (expected: 1 to 2)"));
        assertTrue(usageError("--max-protocol", "0").contains("--max-protocol: 0 (expected: a whole number >= 1)"));
        assertTrue(usageError("--idle-timeout", "-1").contains("--idle-timeout: -1 (expected: whole seconds"));
        assertTrue(usageError("--handshake-timeout", "1.5").contains("--handshake-timeout: 1.5 (expected: whole seconds"));
    }

    @Test
    void theOptionsReachTheServer() throws Exception {
        Path dir = Files.createTempDirectory(Path.of("/tmp"), "cvmm-opts");
        Path socket = dir.resolve("s.sock");
        CountDownLatch stop = new CountDownLatch(1);
        ByteArrayOutputStream serveOut = new ByteArrayOutputStream();
        PrintStream out = new PrintStream(serveOut, true, StandardCharsets.UTF_8);
        ExecutorService pool = Executors.newSingleThreadExecutor();
        try {
            Future<Integer> serving = pool.submit(() -> new ServeCommand(stop).run(List.of("--socket", socket.toString(),
                    "--name", "t", "--size", "1M", "--socket-mode", "0660", "--max-connections", "1",
                    "--max-leases", "1", "--max-ids", "2", "--max-protocol", "1", "--backlog", "16",
                    "--handshake-timeout", "30", "--idle-timeout", "0"), out, out));
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (!serveOut.toString(StandardCharsets.UTF_8).contains("serving 't'")) {
                assertTrue(System.nanoTime() < until, serveOut.toString(StandardCharsets.UTF_8));
                Thread.sleep(20);
            }
            int mode = (Integer) Files.getAttribute(socket, "unix:mode", LinkOption.NOFOLLOW_LINKS);
            assertEquals("660", Integer.toOctalString(mode & 07777));
            try (SharingClient first = SharingClient.connect(socket, "first")) {
                SharingException e = org.junit.jupiter.api.Assertions.assertThrows(SharingException.class,
                        () -> SharingClient.connect(socket, "second").close());
                assertEquals(ErrorCode.TOO_MANY_CONNECTIONS, e.code(), e.getMessage());
                // --max-protocol 1: the client's version-2 HELLO is refused and it falls back to version 1.
                assertEquals(org.cuvmm.ipc.Protocol.VERSION, first.serverVersion());
            }
            stop.countDown();
            assertEquals(0, serving.get(60, TimeUnit.SECONDS), serveOut.toString(StandardCharsets.UTF_8));
            assertFalse(Files.exists(socket));
        } finally {
            stop.countDown();
            pool.shutdownNow();
            Files.deleteIfExists(socket);
            Files.deleteIfExists(dir);
        }
    }
}
