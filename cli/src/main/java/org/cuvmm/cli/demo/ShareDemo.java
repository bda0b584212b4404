package org.cuvmm.cli.demo;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Comparator;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.stream.Stream;

import org.cuvmm.CudaException;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.ipc.SharingServer;
import org.cuvmm.ipc.internal.BytePattern;

/**
 * The cross-process half of the demo: this process serves a 3-chunk buffer filled with the
 * pattern of seed 7; a second JVM ({@code cuvmm attach}) imports it over a Unix socket,
 * verifies every byte, and overwrites it with the pattern of seed 9; this process then
 * verifies that write in its own mapping: one physical memory, two processes, no copy.
 */
public final class ShareDemo implements DemoPart {
    private static final long MiB = 1L << 20;
    private static final long SEED = 7;
    private static final long WRITE_SEED = 9;

    private final int device;

    public ShareDemo(int device) {
        this.device = device;
    }

    @Override
    public String title() {
        return "share with a second process over a Unix socket (device " + device + ")";
    }

    @Override
    public void run(DemoRun run) {
        // Ctrl-C (SIGINT) or SIGTERM runs the shutdown hooks and then halts the JVM: the finally
        // below would not run, and the temporary directory (with demo.sock) and the attach
        // process were left behind (found by an independent probe). The hook stops the child,
        // which ends this thread's wait for it, waits (bounded) for this thread's cleanup, and
        // deletes what is still there itself.
        Cleanup cleanup = new Cleanup();
        Thread hook = new Thread(cleanup::onSignal, "cuvmm-demo-cleanup");
        Runtime.getRuntime().addShutdownHook(hook);
        try {
            Path dir = cleanup.createDirectory();
            share(run, dir.resolve("demo.sock"), cleanup);
        } catch (IOException | CudaException | IllegalStateException | IllegalArgumentException e) {
            run.fail("the sharing part stopped: " + e.getMessage());
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            run.fail("interrupted");
        } finally {
            cleanup.deleteDirectory();
            try {
                Runtime.getRuntime().removeShutdownHook(hook);
            } catch (IllegalStateException shuttingDown) {
                // a signal: the hook is waiting for the cleanup just done
            }
        }
    }

    /**
     * What this part leaves to undo: its temporary directory and the attach process. A signal
     * ({@link #onSignal}, the shutdown hook) stops the child and keeps a new one from starting.
     */
    private static final class Cleanup {
        /** How long the hook waits for the demo's own cleanup before deleting the directory itself. */
        private static final long WAIT_SECONDS = 10;

        private final CountDownLatch done = new CountDownLatch(1);
        private Path dir;
        private Process child;
        private boolean stopping;

        synchronized Path createDirectory() throws IOException {
            if (stopping) throw new IllegalStateException("stopped by a signal");
            dir = Files.createTempDirectory("cuvmm-demo");
            return dir;
        }

        /** Starts the child, unless a signal came first. */
        synchronized Process start(ProcessBuilder builder) throws IOException {
            if (stopping) throw new IllegalStateException("stopped by a signal");
            child = builder.start();
            return child;
        }

        synchronized boolean stopping() { return stopping; }

        /** The shutdown hook: stop the child, wait for the demo's cleanup, then make sure of it. */
        void onSignal() {
            Process c;
            synchronized (this) {
                stopping = true;
                c = child;
            }
            try {
                if (c != null) {
                    c.destroy(); // SIGTERM; the demo's thread then sees it end in its bounded wait
                    if (!c.waitFor(5, TimeUnit.SECONDS)) c.destroyForcibly();
                }
                done.await(WAIT_SECONDS, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            deleteDirectory();
        }

        /** Deletes the directory and whatever is in it (the socket file; a bind's private directory; the attach output). */
        void deleteDirectory() {
            Path d;
            synchronized (this) {
                d = dir;
            }
            try {
                if (d != null && Files.exists(d)) {
                    try (Stream<Path> all = Files.walk(d)) {
                        for (Path p : all.sorted(Comparator.reverseOrder()).toList()) Files.deleteIfExists(p);
                    }
                }
            } catch (IOException | UncheckedIOException ignored) {
                // a temporary directory left behind is harmless
            } finally {
                done.countDown();
            }
        }
    }

    private void share(DemoRun run, Path socket, Cleanup cleanup) throws IOException, InterruptedException {
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(device);
             VirtualMemoryBuffer first = resource.allocate(2 * MiB);
             VirtualMemoryBuffer second = resource.modifyAllocation(first, 4 * MiB);
             VirtualMemoryBuffer buffer = resource.modifyAllocation(second, 6 * MiB);
             SharingServer server = SharingServer.builder(socket).build()) {
            BytePattern.fill(buffer, SEED);
            server.publish("demo", buffer);
            run.step(DemoStep.of("serve 6 MiB on a socket", "PUBLISHED", buffer, -1,
                    buffer.chunkCount() + " chunks filled with pattern seed " + SEED, true));

            long t0 = System.nanoTime();
            List<String> cmd = new ArrayList<>();
            cmd.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
            cmd.add("-cp");
            cmd.add(System.getProperty("java.class.path"));
            cmd.add("org.cuvmm.cli.Main");
            cmd.addAll(List.of("attach", "--socket", socket.toString(), "--name", "demo", "--verify", "--seed",
                    String.valueOf(SEED), "--write-seed", String.valueOf(WRITE_SEED)));
            // Its output to a file in the demo's directory (removed with it), so that the wait
            // below is bounded: reading a pipe to its end first waited as long as the child lived.
            Path childLog = socket.resolveSibling("attach.out");
            Process child = cleanup.start(new ProcessBuilder(cmd).redirectErrorStream(true)
                    .redirectOutput(childLog.toFile()));
            boolean finished = child.waitFor(60, TimeUnit.SECONDS);
            long childNanos = System.nanoTime() - t0;
            if (!finished) {
                child.destroyForcibly();
                child.waitFor(5, TimeUnit.SECONDS);
            }
            String childOut = Files.exists(childLog) ? new String(Files.readAllBytes(childLog), StandardCharsets.UTF_8)
                    : "(no output)";
            if (!finished) childOut = "no result within 60 s (stopped); its output: " + childOut;
            boolean childOk = finished && child.exitValue() == 0;
            run.step(DemoStep.withoutBuffer("second JVM attaches", childOk ? "IMPORTED" : "FAILED", childNanos,
                    childOk ? "it verified every byte and wrote pattern seed " + WRITE_SEED
                            : cleanup.stopping() ? "stopped by a signal"
                            : "attach process failed: " + childOut.strip().replace('\n', ' '), childOk));
            if (!childOk) return;

            long t1 = System.nanoTime();
            long mismatch = BytePattern.firstMismatch(buffer, WRITE_SEED);
            long verifyNanos = System.nanoTime() - t1;
            run.step(DemoStep.of("verify the other's write", mismatch < 0 ? "SAME MEMORY" : "MISMATCH", buffer,
                    verifyNanos, mismatch < 0 ? "every byte now has pattern seed " + WRITE_SEED + ": no copy"
                            : "byte " + mismatch + " differs", mismatch < 0));
            run.note("the attach time includes starting a second JVM.");
            server.unpublish("demo");
        }
    }
}
