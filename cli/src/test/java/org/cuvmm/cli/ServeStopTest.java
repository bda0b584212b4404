package org.cuvmm.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.File;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.ipc.Attachment;
import org.cuvmm.ipc.SharingClient;
import org.cuvmm.testing.ChildJvm;
import org.junit.jupiter.api.Test;

/**
 * {@code cuvmm serve} in a child JVM, stopped with SIGTERM: its socket file is gone every
 * time, and it stops in order ("stopped") while a client holds a lease, which gets its DROP
 * before the end of the stream.
 */
class ServeStopTest {
    private static final int TRIES = 5;

    @Test
    void sigtermRemovesTheSocketFileEveryTime() throws Exception {
        Path dir = Files.createTempDirectory(Path.of("/tmp"), "cvmm-stop");
        File log = File.createTempFile("cuvmm-serve", ".log");
        try {
            for (int i = 0; i < TRIES; i++) {
                Path socket = dir.resolve("s" + i + ".sock");
                SharingClient holder = null;
                VirtualMemoryResource holderResource = null;
                Attachment held = null;
                Process p = ChildJvm.start(Main.class, log, List.of(), List.of(), "serve", "--socket", socket.toString(),
                        "--name", "t", "--size", "1M");
                try {
                    long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
                    while (!ChildJvm.read(log).contains("serving 't'")) {
                        assertTrue(p.isAlive(), "cuvmm serve ended early:\n" + ChildJvm.read(log));
                        assertTrue(System.nanoTime() < until, "cuvmm serve did not start in 60 s:\n" + ChildJvm.read(log));
                        Thread.sleep(20); // another process: its log is all there is to watch
                    }
                    assertTrue(Files.exists(socket), "serving, so the socket file exists");
                    // A client holds a lease when SIGTERM arrives. The hook's close and the
                    // serving thread's close must not race (the buffer's close would refuse
                    // while the lease is still held), and the buffer is withdrawn before the
                    // server closes: the holder gets its DROP before the end of the stream (a
                    // hook that closed the server at once sometimes won that race, and until
                    // SharingServer.close() let each sender thread send what was queued, the
                    // close right after the withdrawal closed the socket under the DROP).
                    holder = SharingClient.connect(socket, "holder");
                    CountDownLatch dropped = new CountDownLatch(1);
                    holder.addDropListener(notice -> dropped.countDown());
                    holderResource = VirtualMemoryResource.create(0);
                    held = holder.attach("t", holderResource);
                    p.destroy(); // SIGTERM
                    assertTrue(p.waitFor(60, TimeUnit.SECONDS), "cuvmm serve did not exit within 60 s of SIGTERM");
                    String out = ChildJvm.read(log);
                    assertFalse(Files.exists(socket), "try " + (i + 1) + ": the socket file is left behind:\n" + out);
                    assertTrue(out.contains("stopped"), "try " + (i + 1) + ": closed in order:\n" + out);
                    assertEquals(143, p.exitValue(), "try " + (i + 1) + ": the status serve's help gives:\n" + out);
                    assertTrue(dropped.await(10, TimeUnit.SECONDS), "try " + (i + 1) + ": the lease holder got no DROP "
                            + "before the server went:\n" + out);
                } finally {
                    p.destroyForcibly();
                    Files.deleteIfExists(socket);
                    if (held != null) held.close();
                    if (holder != null) holder.closeNow();
                    if (holderResource != null) holderResource.close();
                }
            }
        } finally {
            log.delete();
            Files.deleteIfExists(dir);
        }
    }

    /**
     * A stop that comes before serving begins (here: before the fill) still prints "stopped"
     * only once the server is closed: the socket file is gone when the line appears (it was
     * printed before the close, from inside the try that closes the server).
     */
    @Test
    void stoppedIsPrintedOnlyOnceTheSocketFileIsGone() throws Exception {
        Path dir = Files.createTempDirectory(Path.of("/tmp"), "cvmm-stop");
        Path socket = dir.resolve("early.sock");
        List<Boolean> socketFileAtStopped = new ArrayList<>();
        ByteArrayOutputStream text = new ByteArrayOutputStream();
        PrintStream out = new PrintStream(text, true, StandardCharsets.UTF_8) {
            @Override
            public void println(String line) {
                if ("stopped".equals(line)) socketFileAtStopped.add(Files.exists(socket));
                super.println(line);
            }
        };
        try {
            // Stopped from the start: the server is built (the socket file bound), then the
            // stop is seen before the first fill step.
            int status = new ServeCommand(new CountDownLatch(0)).run(List.of("--socket", socket.toString(), "--name",
                    "t", "--size", "1M"), out, out);
            String printed = text.toString(StandardCharsets.UTF_8);
            assertEquals(Command.OK, status, printed);
            assertEquals(List.of(false), socketFileAtStopped, "one 'stopped' line, printed after the socket file "
                    + "went:\n" + printed);
        } finally {
            Files.deleteIfExists(socket);
            Files.deleteIfExists(dir);
        }
    }
}
