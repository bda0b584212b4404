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
            } catch (CudaException e) {
                System.out.println("CUDA_EXCEPTION=" + e.resultName() + " | " + e.getMessage());
                System.exit(3);
            }
        }
    }

    private static boolean libcudaPresent() {
        return List.of("/usr/lib/x86_64-linux-gnu/libcuda.so.1", "/usr/lib64/libcuda.so.1", "/usr/lib/libcuda.so.1")
                .stream().anyMatch(p -> Files.exists(Path.of(p)));
    }

    @Test
    void autoFallsBackToHostAndSaysWhyWhenLibcudaIsAbsent() throws Exception {
        assumeTrue(!libcudaPresent(), "libcuda.so.1 is installed here; the fallback reason cannot be observed");
        ChildJvm.Result r = TestSupport.runChild(Probe.class, List.of(), Map.of("CUVMM_DRIVER", "auto"));
        assertEquals(0, r.exitCode(), r.toString());
        assertTrue(r.output().contains("KIND=HOST"), r.toString());
        assertTrue(r.output().contains("dlopen(libcuda.so.1) failed"), r.toString());
    }

    @Test
    void forcedCudaWithoutTheDriverFailsWithTheReason() throws Exception {
        assumeTrue(!libcudaPresent(), "libcuda.so.1 is installed here");
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
