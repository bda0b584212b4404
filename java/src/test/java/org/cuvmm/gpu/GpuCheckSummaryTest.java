package org.cuvmm.gpu;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.List;
import java.util.Map;

import org.junit.jupiter.api.Test;

/** The gpu-check summary names a GPU only when the NVIDIA driver ran (issue 10, item 5), and counts per module. */
class GpuCheckSummaryTest {

    @Test
    void theHostLibraryIsNeverCalledTheRealDriver() {
        Map<String, List<String>> facts = Map.of("driver", List.of("CUDA"), "version", List.of("13.0"),
                "hostLibrary", List.of("true"), "reason", List.of("/x/libcuda.so.1 loaded, CUDA driver 13.0, 2 device(s): "
                        + "cuda driver API over the host library (no GPU)"));
        String line = GpuCheckSummary.driverLine(facts);
        assertTrue(line.contains("over the host library (no GPU)"), line);
        assertFalse(line.contains("real"), line);
        assertEquals("the cuda driver API over the host library (no GPU)", GpuCheckSummary.where(facts));
    }

    @Test
    void theNvidiaDriverAndTheHostDriverKeepTheirLabels() {
        Map<String, List<String>> cuda = Map.of("driver", List.of("CUDA"), "version", List.of("13.0"),
                "hostLibrary", List.of("false"), "reason", List.of("libcuda.so.1 loaded, CUDA driver 13.0, 1 device(s)"));
        assertEquals("CUDA (real NVIDIA driver, 13.0)", GpuCheckSummary.driverLine(cuda));
        assertEquals("the real NVIDIA driver (cuda 13.0)", GpuCheckSummary.where(cuda));
        Map<String, List<String>> host = Map.of("driver", List.of("HOST"), "hostLibrary", List.of("false"));
        assertTrue(GpuCheckSummary.driverLine(host).contains("NO GPU involved"), GpuCheckSummary.driverLine(host));
    }

    @Test
    void launcherStatusesAreOneNumberOrOnePerModuleInRunOrder() {
        assertEquals(Map.of("", 1), GpuCheckSummary.launcherStatuses(" 1\n"));
        Map<String, Integer> two = GpuCheckSummary.launcherStatuses("java=0,vmm-ipc=1");
        assertEquals(List.of("java", "vmm-ipc"), List.copyOf(two.keySet()));
        assertEquals(List.of(0, 1), List.copyOf(two.values()));
    }

    @Test
    void aModuleLineCountsWhatRanFailedAndSkipped() {
        String line = GpuCheckSummary.moduleLine("vmm-ipc", List.of("passed", "passed gpu", "failed", "skipped gpu"), 1);
        assertEquals("vmm-ipc  ran 3 test(s) (1 gpu-tagged): 2 passed, 1 failed, 1 skipped; launcher exit 1", line);
        assertTrue(GpuCheckSummary.moduleLine("java", List.of(), 2).endsWith("(NO RESULTS)"));
    }
}
