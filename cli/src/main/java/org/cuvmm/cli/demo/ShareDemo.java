package org.cuvmm.cli.demo;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.TimeUnit;

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
        Path dir = null;
        try {
            dir = Files.createTempDirectory("cuvmm-demo");
            share(run, dir.resolve("demo.sock"));
        } catch (IOException | CudaException | IllegalStateException | IllegalArgumentException e) {
            run.fail("the sharing part stopped: " + e.getMessage());
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            run.fail("interrupted");
        } finally {
            if (dir != null) {
                try {
                    Files.deleteIfExists(dir.resolve("demo.sock"));
                    Files.deleteIfExists(dir);
                } catch (IOException ignored) {
                    // a temp directory left behind is harmless
                }
            }
        }
    }

    private void share(DemoRun run, Path socket) throws IOException, InterruptedException {
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
            Process child = new ProcessBuilder(cmd).redirectErrorStream(true).start();
            String childOut = new String(child.getInputStream().readAllBytes(), StandardCharsets.UTF_8);
            boolean finished = child.waitFor(60, TimeUnit.SECONDS);
            long childNanos = System.nanoTime() - t0;
            if (!finished) child.destroyForcibly();
            boolean childOk = finished && child.exitValue() == 0;
            run.step(DemoStep.withoutBuffer("second JVM attaches", childOk ? "IMPORTED" : "FAILED", childNanos,
                    childOk ? "it verified every byte and wrote pattern seed " + WRITE_SEED
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
