package org.cuvmm.examples;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.concurrent.TimeUnit;

import org.cuvmm.Driver;
import org.cuvmm.DriverKind;
import org.cuvmm.Stream;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.io.TempDir;

/**
 * Proves the kernel example behaves as documented: without the NVIDIA driver it says why in
 * one line and exits {@value KernelOnBuffer#EXIT_CANNOT_RUN_HERE} without loading any class of
 * the CUDA presets; with it (the gpu-tagged tests) the kernel computes the right values.
 */
class KernelOnBufferTest {

    /** Without a GPU (the host driver, or the cuda driver over the host library): one line, no presets call. */
    @Test
    void onTheHostDriverItSaysWhyTheKernelCannotRunAndLeavesNothingBehind() throws Exception {
        Driver driver = Driver.get();
        Assumptions.assumeTrue(driver.kind() == DriverKind.HOST || driver.isHostLibrary(), () -> "shows the no-GPU "
                + "outcome; this JVM runs the NVIDIA driver (the gpu-hardware tests cover it; the child-JVM test forces host)");
        String what = driver.isHostLibrary() ? "cuda driver over the host library" : "host driver";
        Leaks.Snapshot baseline = Leaks.baselineAfter(() -> KernelOnBuffer.run(new Leaks.Output().stream));

        Leaks.Output out = new Leaks.Output();
        int status = KernelOnBuffer.run(out.stream);
        String text = out.text();

        assertEquals(KernelOnBuffer.EXIT_CANNOT_RUN_HERE, status, text);
        assertEquals("driver: " + driver.kind().name().toLowerCase(Locale.ROOT) + " " + driver.versionString() + " ("
                + driver.reason() + ")\n"
                + "kernel part cannot run here: cuvmm runs the " + what + " (" + driver.reason()
                + "), and a CUDA kernel needs the NVIDIA driver (cuda)\n", text);
        baseline.assertBack("after KernelOnBuffer on the host driver");
    }

    /**
     * main() in a fresh JVM forced to the host driver: the exit status, the line, and the
     * class-loading log showing that no org.bytedeco.cuda class was loaded (their JNI
     * library would throw UnsatisfiedLinkError without libcuda.so.1).
     */
    @Test
    void mainExitsWithItsStatusAndNeverLoadsThePresetsOnTheHostDriver(@TempDir Path dir) throws Exception {
        Path classLog = dir.resolve("classes.log");
        File output = dir.resolve("output.txt").toFile();
        List<String> cmd = new ArrayList<>();
        cmd.add(Path.of(System.getProperty("java.home"), "bin", "java").toString());
        cmd.add("-Xlog:class+load=info:file=" + classLog);
        cmd.add("-Dcuvmm.driver=host");
        cmd.add("-cp");
        cmd.add(System.getProperty("java.class.path"));
        cmd.add(KernelOnBuffer.class.getName());
        Process child = new ProcessBuilder(cmd).redirectErrorStream(true).redirectOutput(output).start();
        assertTrue(child.waitFor(60, TimeUnit.SECONDS), "the example finished");
        String text = Files.readString(output.toPath(), StandardCharsets.UTF_8);

        assertEquals(KernelOnBuffer.EXIT_CANNOT_RUN_HERE, child.exitValue(), text);
        assertTrue(text.matches("driver: host \\S+ \\(.*\\)\nkernel part cannot run here: cuvmm runs the host driver "
                + "\\(.*\\), and a CUDA kernel needs the NVIDIA driver \\(cuda\\)\n"), text);
        List<String> loaded = Files.readAllLines(classLog);
        assertTrue(loaded.stream().anyMatch(l -> l.contains(" " + KernelOnBuffer.class.getName() + " ")),
                "the log records the example's own class, so it is the right log");
        assertTrue(loaded.stream().anyMatch(l -> l.contains(" org.cuvmm.Driver ")), "and cuvmm's classes");
        List<String> presets = loaded.stream().filter(l -> l.contains("org.bytedeco.cuda.")).toList();
        assertTrue(presets.isEmpty(), "CUDA presets classes loaded on the host driver: " + presets);
    }

    @Test
    @Tag("gpu")
    @Tag("gpu-hardware")
    void onTheCudaDriverTheKernelRunsAndEveryElementIsRight() throws Exception {
        assumeCuda();
        Leaks.Snapshot baseline = Leaks.baselineAfter(() -> KernelOnBuffer.run(new Leaks.Output().stream));

        Leaks.Output out = new Leaks.Output();
        int status = KernelOnBuffer.run(out.stream);
        String text = out.text();

        // EXIT_CANNOT_RUN_HERE on the cuda driver means the presets did not load: a failure here.
        assertEquals(KernelOnBuffer.EXIT_OK, status, text);
        assertTrue(text.matches("(?s)driver: cuda .*\ncompiled saxpy with NVRTC \\d+\\.\\d+ for compute_\\d+: \\d+ "
                + "bytes of PTX\nlaunched saxpy on 1048576 elements on .*: x at 0x\\p{XDigit}+, y at 0x\\p{XDigit}+ .*"), text);
        assertTrue(text.endsWith("y = 3.0 * x + y checked on all 1048576 elements: all right\nOK\n"), text);
        baseline.assertBack("after KernelOnBuffer on the cuda driver");
    }

    /**
     * The launch on values this test computes itself, with n not a multiple of the block size
     * and y not at the start of the buffer: every y[i] below n is a*x[i] + y[i], the float
     * after y[n-1] and x are untouched.
     */
    @Test
    @Tag("gpu")
    @Tag("gpu-hardware")
    void theKernelWritesExactlyYAndComputesAxPlusY() {
        assumeCuda();
        int n = 1000 * 3 + 7;
        float a = -2.5f;
        long yOffset = 4L * (n + 5);
        float[] x = new float[n];
        float[] y = new float[n + 1];
        for (int i = 0; i < n; i++) {
            x[i] = i % 97 - 40;
            y[i] = 7 - i % 13;
        }
        y[n] = 12345f; // guard: the kernel must stop at n
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer buffer = resource.allocate(yOffset + 4L * (n + 1))) {
            write(buffer, 0, x);
            write(buffer, yOffset, y);
            try (KernelOnBuffer.Saxpy saxpy = KernelOnBuffer.Saxpy.compile(0)) {
                try (Stream stream = Stream.create(0)) {
                    saxpy.launch(buffer, a, 0, yOffset, n, stream);
                }   // closing the stream with the kernel queued is allowed; nobody waited yet
                // The synchronous reads wait for the work recorded on the buffer (the kernel),
                // with no stream synchronize here: that is the rule under test.
                float[] expected = y.clone();
                for (int i = 0; i < n; i++) expected[i] = a * x[i] + y[i];
                assertArrayEquals(expected, read(buffer, yOffset, n + 1), "y after the kernel, guard element last");
                assertArrayEquals(x, read(buffer, 0, n), "x is only read");
            }
        }
    }

    /**
     * The NVIDIA driver, or the calling test skips: checked before any presets call (over the
     * host library, cuModuleLoadData is not exported and the first call would end the JVM).
     */
    private static void assumeCuda() {
        Driver d = Driver.get();
        Assumptions.assumeTrue(d.kind() == DriverKind.CUDA, () -> "needs the NVIDIA driver (cuda); this JVM runs the "
                + d.kind().name().toLowerCase(Locale.ROOT) + " driver: " + d.reason());
        Assumptions.assumeFalse(d.isHostLibrary(), () -> "needs a GPU (an NVRTC kernel); this JVM runs the "
                + d.describe() + ", which has no modules or kernels: " + d.reason());
    }

    private static void write(VirtualMemoryBuffer b, long offset, float[] values) {
        ByteBuffer bytes = ByteBuffer.allocate(4 * values.length).order(ByteOrder.nativeOrder());
        bytes.asFloatBuffer().put(values);
        b.copyFrom(offset, bytes);
    }

    private static float[] read(VirtualMemoryBuffer b, long offset, int count) {
        ByteBuffer bytes = ByteBuffer.allocate(4 * count).order(ByteOrder.nativeOrder());
        b.copyTo(offset, bytes);
        float[] values = new float[count];
        bytes.flip();
        bytes.asFloatBuffer().get(values);
        return values;
    }
}
