package org.cuvmm.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Optional;
import java.util.concurrent.TimeUnit;
import java.util.function.Supplier;
import java.util.stream.Stream;

import org.cuvmm.testing.ChildJvm;
import org.junit.jupiter.api.Test;

/**
 * {@code cuvmm demo} in a child JVM, stopped with SIGTERM (what {@code kill} does; Ctrl-C's
 * SIGINT runs the same shutdown hooks) during its sharing part: its temporary directory
 * (cuvmm-demo..., with demo.sock) is gone, and so is its attach process. An independent probe
 * found both left behind: demo had no shutdown hook, only a finally that a signal skips.
 */
class DemoStopTest {
    @Test
    void sigtermWhileServingRemovesTheTemporaryDirectory() throws Exception {
        stopDemo("serving (demo.sock bound)", (p, tmp) -> Files.exists(tmp.resolve(only(tmp)).resolve("demo.sock")));
    }

    @Test
    void sigtermWhileTheAttachProcessRunsStopsItAndRemovesTheTemporaryDirectory() throws Exception {
        stopDemo("the attach process running", (p, tmp) -> p.descendants().findAny().isPresent());
    }

    private interface Moment {
        boolean reached(ProcessHandle demo, Path tmp) throws Exception;
    }

    /** The one entry of {@code tmp} (the demo's directory), or a name that does not exist. */
    private static String only(Path tmp) throws Exception {
        try (Stream<Path> s = Files.list(tmp)) {
            return s.map(p -> p.getFileName().toString()).filter(n -> n.startsWith("cuvmm-demo")).findFirst()
                    .orElse("(none yet)");
        }
    }

    private static void stopDemo(String when, Moment moment) throws Exception {
        Path tmp = Files.createTempDirectory(Path.of("/tmp"), "cvmm-demostop");
        File log = File.createTempFile("cuvmm-demo", ".log");
        Process p = ChildJvm.start(Main.class, log, List.of(), List.of("-Djava.io.tmpdir=" + tmp), "demo");
        Optional<ProcessHandle> attach = Optional.empty();
        try {
            Supplier<String> output = () -> ChildJvm.read(log);
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            while (!moment.reached(p.toHandle(), tmp)) {
                assertTrue(p.isAlive(), "cuvmm demo ended before " + when + ":\n" + output.get());
                assertTrue(System.nanoTime() < until, "cuvmm demo did not reach " + when + " in 60 s:\n" + output.get());
                Thread.sleep(5);
            }
            attach = p.descendants().findAny();
            p.destroy(); // SIGTERM
            assertTrue(p.waitFor(60, TimeUnit.SECONDS), "cuvmm demo did not exit within 60 s of SIGTERM");
            assertFalse(output.get().contains("result: OK"), "the demo ended before the signal:\n" + output.get());
            assertEquals("(none yet)", only(tmp), "its temporary directory is left behind:\n" + output.get());
            if (attach.isPresent()) {
                ProcessHandle child = attach.get();
                assertTrue(child.onExit().get(10, TimeUnit.SECONDS) != null && !child.isAlive(),
                        "the attach process outlived the demo");
            }
        } finally {
            p.destroyForcibly();
            attach.ifPresent(ProcessHandle::destroyForcibly);
            try (Stream<Path> s = Files.walk(tmp)) {
                s.sorted(java.util.Comparator.reverseOrder()).forEach(f -> f.toFile().delete());
            }
            log.delete();
        }
    }
}
