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
import org.junit.jupiter.api.Timeout;

/**
 * The server options of {@code cuvmm serve}: checked with clear messages, and applied. Every
 * wait is bounded; the class timeout interrupts a test thread stuck anyway (serve's wait for
 * its stop latch ends on interrupt), so a broken option fails the test, never hangs the build.
 */
@Timeout(value = 3, unit = TimeUnit.MINUTES)
class ServeOptionsTest {
    /**
     * Runs serve with options that must be refused. Its stop latch is already released: an
     * option wrongly accepted makes serve start and stop at once (status OK, "stopped"), so
     * the assertion fails instead of the test thread serving until killed (it did, when
     * --max-protocol was not checked). The socket is in a fresh directory, never a shared path.
     */
    private static String usageError(String... extra) throws Exception {
        Path dir = Files.createTempDirectory(Path.of("/tmp"), "cvmm-usage");
        try {
            ByteArrayOutputStream err = new ByteArrayOutputStream();
            List<String> args = new ArrayList<>(List.of("--socket", dir.resolve("never.sock").toString(), "--name", "t",
                    "--size", "1M"));
            args.addAll(List.of(extra));
            PrintStream e = new PrintStream(err, true, StandardCharsets.UTF_8);
            int status = new ServeCommand(new CountDownLatch(0)).run(args, e, e);
            assertEquals(Command.USAGE, status, err.toString(StandardCharsets.UTF_8));
            return err.toString(StandardCharsets.UTF_8);
        } finally {
            Files.deleteIfExists(dir.resolve("never.sock"));
            Files.deleteIfExists(dir);
        }
    }

    /**
     * A relative --socket that is short but over 107 bytes once made absolute (as the server
     * binds it): a usage error naming --socket (it was exit 1 at the bind, naming "path").
     */
    @Test
    void aRelativeSocketTooLongOnceAbsoluteIsAUsageError() {
        String relative = "r".repeat(107);
        ByteArrayOutputStream err = new ByteArrayOutputStream();
        PrintStream e = new PrintStream(err, true, StandardCharsets.UTF_8);
        int status = new ServeCommand(new CountDownLatch(0)).run(List.of("--socket", relative, "--name", "t", "--size",
                "1M"), e, e);
        String printed = err.toString(StandardCharsets.UTF_8);
        assertEquals(Command.USAGE, status, printed);
        assertTrue(printed.contains("cuvmm serve: --socket: \"" + relative + "\" is "
                + Path.of(relative).toAbsolutePath().toString().length() + " bytes as an absolute path"), printed);
        assertFalse(Files.exists(Path.of(relative)), "nothing bound");
    }

    @Test
    void badOptionsAreRefusedNamingTheValue() throws Exception {
        // Named by the option only: "--socket-mode: socketFileMode: 0755" leaked the builder method's name.
        assertTrue(usageError("--socket-mode", "0755").contains("cuvmm serve: --socket-mode: 0755 (expected: 0600, "
                + "0660, 0606 or 0666"));
        assertTrue(usageError("--socket-mode", "0640").contains("cuvmm serve: --socket-mode: 0640 (expected: 0600, "));
        // A group the mode gives no access, or no such group: usage errors naming the options
        // (they were exit 1, found at bind; an independent probe).
        assertTrue(usageError("--socket-group", "root").contains("--socket-mode: 0600 with --socket-group root gives the "
                + "group no access"));
        assertTrue(usageError("--socket-mode", "0660", "--socket-group", "no-such-group-cvmm")
                .contains("--socket-group: 'no-such-group-cvmm' (expected: an existing group name"));
        assertTrue(usageError("--socket-mode", "rw").contains("--socket-mode: rw (expected: an octal file mode"));
        assertTrue(usageError("--backlog", "0").contains("--backlog: 0 (expected: a whole number >= 1)"));
        assertTrue(usageError("--max-connections", "x").contains("--max-connections: x (expected: a whole number >= 1)"));
        assertTrue(usageError("--max-leases", "0").contains("--max-leases: 0 (expected: a whole number >= 1)"));
        assertTrue(usageError("--max-ids", "0").contains("--max-ids: 0 (expected: a whole number >= 1)"));
        assertTrue(usageError("--max-protocol", "3").contains("--max-protocol: 3 (expected: 1 to 2)"));
        assertTrue(usageError("--max-protocol", "0").contains("--max-protocol: 0 (expected: a whole number >= 1)"));
        assertTrue(usageError("--idle-timeout", "-1").contains("--idle-timeout: -1 (expected: whole seconds"));
        assertTrue(usageError("--handshake-timeout", "1.5").contains("--handshake-timeout: 1.5 (expected: whole seconds"));
        assertTrue(usageError("--allow-uid", "-1").contains("--allow-uid: -1 (expected: uids >= 0 separated by commas"));
        assertTrue(usageError("--allow-uid", "1001,").contains("--allow-uid: 1001, (expected: uids >= 0"));
        assertTrue(usageError("--allow-uid", "bob").contains("--allow-uid: bob (expected: uids >= 0"));
        assertTrue(usageError("--jmx", "yes").contains("unexpected argument 'yes'"), "--jmx takes no value");
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
                    "--handshake-timeout", "30", "--idle-timeout", "0", "--allow-uid", "65534,4242", "--jmx"), out, out));
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (!serveOut.toString(StandardCharsets.UTF_8).contains("serving 't'")) {
                assertTrue(System.nanoTime() < until, serveOut.toString(StandardCharsets.UTF_8));
                Thread.sleep(20);
            }
            // --allow-uid admits those uids besides this process's own (an independent review: serve
            // had no way to, so --socket-mode 0660/0666 opened the file to users the server refused),
            // and --jmx registers the bean; the serving line names both.
            int me = (Integer) Files.getAttribute(dir, "unix:uid", LinkOption.NOFOLLOW_LINKS);
            String printed = serveOut.toString(StandardCharsets.UTF_8);
            java.util.Set<Integer> admitted = new java.util.TreeSet<>(List.of(me, 4242, 65534));
            assertTrue(printed.contains(" to uids " + admitted + "; JMX bean org.cuvmm:type=SharingServer,name="), printed);
            assertTrue(java.lang.management.ManagementFactory.getPlatformMBeanServer().isRegistered(
                    new javax.management.ObjectName("org.cuvmm:type=SharingServer,name=" + javax.management.ObjectName
                            .quote(socket.toString()))), printed);
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
            // Even when an assertion failed: the server is closed before the next test (bounded).
            pool.awaitTermination(60, TimeUnit.SECONDS);
            Files.deleteIfExists(socket);
            Files.deleteIfExists(dir);
        }
    }
}
