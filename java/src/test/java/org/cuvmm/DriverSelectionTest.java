package org.cuvmm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;

import org.junit.jupiter.api.Test;
import org.cuvmm.testing.ChildJvm;

/** Driver selection and the reasons it reports; child JVMs get a fresh selection each. */
class DriverSelectionTest {
    /** Child entry point: selects per its configuration and prints the outcome. */
    public static final class Probe {
        public static void main(String[] args) {
            try {
                Driver d = Driver.get();
                System.out.println("KIND=" + d.kind());
                System.out.println("REASON=" + d.reason());
                System.out.println("DEVICES=" + d.deviceCount());
                System.out.println("HOST_LIBRARY=" + d.isHostLibrary());
                System.out.println("DESCRIBE=" + d.describe());
            } catch (CudaException e) {
                System.out.println("CUDA_EXCEPTION=" + e.resultName() + " | " + e.getMessage());
                System.exit(3);
            }
        }
    }

    /**
     * Whether dlopen("libcuda.so.1") could succeed: installed, or in a folder of
     * LD_LIBRARY_PATH (the cuda pass puts the host library there).
     */
    private static boolean libcudaPresent() {
        List<String> dirs = new java.util.ArrayList<>(List.of("/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib"));
        String path = System.getenv("LD_LIBRARY_PATH");
        if (path != null) for (String dir : path.split(":")) if (!dir.isBlank()) dirs.add(dir);
        return dirs.stream().anyMatch(dir -> Files.exists(Path.of(dir, "libcuda.so.1")));
    }

    /**
     * The cuda driver forced at the host library (native/hostcuda): it loads, presents the
     * devices of CUVMM_HOST_DEVICES, and says it is no GPU, once: the reason, isHostLibrary()
     * and describe().
     */
    @Test
    void theCudaDriverOverTheHostLibrarySaysItIsNoGpu() throws Exception {
        String library = System.getProperty("cuvmm.test.hostLibrary");
        assumeTrue(library != null && Files.exists(Path.of(library)),
                () -> "the host library is not built: cuvmm.test.hostLibrary=" + library);
        ChildJvm.Result r = TestSupport.runChild(Probe.class,
                List.of("-Dcuvmm.driver=cuda", "-Dcuvmm.cuda.library=" + library), Map.of("CUVMM_HOST_DEVICES", "2"));
        assertEquals(0, r.exitCode(), r.toString());
        assertTrue(r.output().contains("KIND=CUDA\n"), r.toString());
        assertTrue(r.output().contains("DEVICES=2\n"), r.toString());
        assertTrue(r.output().contains("HOST_LIBRARY=true\n"), r.toString());
        assertTrue(r.output().contains("DESCRIBE=cuda driver API over the host library (no GPU)\n"), r.toString());
        String reason = r.output().lines().filter(l -> l.startsWith("REASON=")).findFirst().orElseThrow();
        assertTrue(reason.contains(library + " loaded") && reason.contains(": cuda driver API over the host library (no GPU)"),
                reason);
        assertEquals(reason.indexOf("no GPU"), reason.lastIndexOf("no GPU"), "said once: " + reason);
    }

    @Test
    void theRunningDriverSaysWhatItIs() {
        Driver d = Driver.get();
        boolean label = d.reason().contains("cuda driver API over the host library (no GPU)");
        assertEquals(label, d.isHostLibrary(), d.toString());
        if (d.kind() == DriverKind.HOST) {
            assertEquals(false, d.isHostLibrary());
            assertEquals("host driver (memfd/mmap simulation, no GPU)", d.describe());
        } else {
            assertEquals(d.isHostLibrary() ? "cuda driver API over the host library (no GPU)" : "NVIDIA driver (cuda)",
                    d.describe());
        }
    }

    @Test
    void autoFallsBackToHostAndSaysWhyWhenLibcudaIsAbsent() throws Exception {
        assumeTrue(!libcudaPresent(), "libcuda.so.1 can be loaded here (installed, or on LD_LIBRARY_PATH as in the "
                + "cuda pass); the fallback reason cannot be observed");
        ChildJvm.Result r = TestSupport.runChild(Probe.class, List.of(), Map.of("CUVMM_DRIVER", "auto"));
        assertEquals(0, r.exitCode(), r.toString());
        assertTrue(r.output().contains("KIND=HOST"), r.toString());
        assertTrue(r.output().contains("dlopen(libcuda.so.1) failed"), r.toString());
    }

    @Test
    void forcedCudaWithoutTheDriverFailsWithTheReason() throws Exception {
        assumeTrue(!libcudaPresent(), "libcuda.so.1 can be loaded here (installed, or on LD_LIBRARY_PATH as in the "
                + "cuda pass)");
        ChildJvm.Result r = TestSupport.runChild(Probe.class, List.of("-Dcuvmm.driver=cuda"), Map.of());
        assertEquals(3, r.exitCode(), r.toString());
        assertTrue(r.output().contains("CUDA_EXCEPTION=CUDA_ERROR_NO_DEVICE"), r.toString());
        assertTrue(r.output().contains("libcuda.so.1"), r.toString());
        assertTrue(r.output().contains("fall back to the host driver"), r.toString());
    }

    @Test
    void aLibraryWithoutCuGetProcAddressIsReportedAsSuch() throws Exception {
        Path libc = List.of(Path.of("/lib/x86_64-linux-gnu/libm.so.6"), Path.of("/usr/lib/x86_64-linux-gnu/libm.so.6"))
                .stream().filter(Files::exists).findFirst().orElse(null);
        assumeTrue(libc != null, "no libm.so.6 at a known path to stand in for a wrong library");
        ChildJvm.Result r = TestSupport.runChild(Probe.class,
                List.of("-Dcuvmm.cuda.library=" + libc), Map.of());
        assertEquals(0, r.exitCode(), r.toString());
        assertTrue(r.output().contains("KIND=HOST"), r.toString());
        assertTrue(r.output().contains("has no cuGetProcAddress"), r.toString());
    }

    @Test
    void hostDevicesComeFromTheConfiguration() throws Exception {
        ChildJvm.Result r = TestSupport.runChild(Probe.class,
                List.of("-Dcuvmm.driver=host", "-Dcuvmm.host.devices=3"), Map.of());
        assertEquals(0, r.exitCode(), r.toString());
        assertTrue(r.output().contains("DEVICES=3"), r.toString());
        ChildJvm.Result bad = TestSupport.runChild(Probe.class,
                List.of("-Dcuvmm.driver=host", "-Dcuvmm.host.devices=9"), Map.of());
        assertNotEquals(0, bad.exitCode());
        assertTrue(bad.output().contains("cuvmm.host.devices / CUVMM_HOST_DEVICES: 9 (expected: 1 to 8)"), bad.toString());
    }

    @Test
    void unknownModeAndConflictingSelectionAreRejected() {
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> Driver.select("gpu"));
        assertTrue(e.getMessage().startsWith("driver mode: gpu"), e.getMessage());
        Driver d = Driver.get();
        assertEquals(d.kind(), Driver.select(d.kind().name()).kind(), "re-selecting the running kind is allowed");
        String other = d.kind() == DriverKind.HOST ? "cuda" : "host";
        CudaException conflict = assertThrows(CudaException.class, () -> Driver.select(other));
        assertTrue(conflict.getMessage().contains("already in use"), conflict.getMessage());
    }

    @Test
    void reasonAndDevicesAreReported() {
        Driver d = Driver.get();
        assertTrue(!d.reason().isBlank());
        assertTrue(d.deviceCount() >= 1);
        assertTrue(d.device(0).supportsVirtualMemoryManagement());
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> d.device(99));
        assertTrue(e.getMessage().startsWith("device: 99"), e.getMessage());
    }
}
