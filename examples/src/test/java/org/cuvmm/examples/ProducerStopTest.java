package org.cuvmm.examples;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;

import org.cuvmm.testing.ChildJvm;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * The producer examples in a child JVM, stopped with SIGTERM (what Ctrl-C and {@code kill}
 * do) while serving: the socket file is gone every time. The JVM halts once its shutdown
 * hooks return, so the hook must wait (bounded) for the producer's cleanup; one that only
 * signals the producer lets the JVM exit mid-close and leaves the socket file behind. And the
 * main thread must return once it is done, never call {@code System.exit}: that blocks while
 * the hooks run, so the hook waited out its whole timeout (10 s per stop, seen in
 * PooledProducer, which exits 1 when stopped early) and said so.
 */
class ProducerStopTest {
    private static final int TRIES = 3;

    @ParameterizedTest(name = "{0}")
    @ValueSource(strings = {"SharedProducer", "PooledProducer"})
    void sigtermRemovesTheSocketFileEveryTime(String example) throws Exception {
        Class<?> main = example.equals("SharedProducer") ? SharedProducer.class : PooledProducer.class;
        Path dir = Files.createTempDirectory(Path.of("/tmp"), "cvmm-exstop");
        File log = dir.resolve("producer.log").toFile();
        try {
            for (int i = 0; i < TRIES; i++) {
                Path socket = dir.resolve("s" + i + ".sock");
                // SharedProducer: socket, consumers. PooledProducer: socket, rounds, consumers.
                String[] args = main == SharedProducer.class ? new String[] {socket.toString(), "1"}
                        : new String[] {socket.toString(), "1", "1"};
                Process p = ChildJvm.start(main, log, List.of(), List.of(), args);
                try {
                    long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
                    while (!ChildJvm.read(log).contains("Ctrl-C stops earlier")) {
                        assertTrue(p.isAlive(), example + " ended early:\n" + ChildJvm.read(log));
                        assertTrue(System.nanoTime() < until, example + " did not serve in 60 s:\n" + ChildJvm.read(log));
                        Thread.sleep(20); // another process: its log is all there is to watch
                    }
                    assertTrue(Files.exists(socket), "serving, so the socket file exists");
                    p.destroy(); // SIGTERM
                    assertTrue(p.waitFor(60, TimeUnit.SECONDS), example + " did not exit within 60 s of SIGTERM");
                    assertFalse(Files.exists(socket), "try " + (i + 1) + ": the socket file is left behind:\n"
                            + ChildJvm.read(log));
                    // The hook waited for the main thread, not for its own timeout (a main thread
                    // that calls System.exit while the hooks run blocks until the JVM halts).
                    assertFalse(ChildJvm.read(log).contains("halting anyway"), "try " + (i + 1)
                            + ": the shutdown hook gave up waiting for the producer's cleanup:\n" + ChildJvm.read(log));
                } finally {
                    p.destroyForcibly();
                    Files.deleteIfExists(socket);
                }
            }
        } finally {
            log.delete();
            Files.deleteIfExists(dir);
        }
    }
}
