package org.cuvmm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.HashMap;
import java.util.Map;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.junit.jupiter.api.Test;

/**
 * The values the option enums hand to the native side ({@code cuValue}, put into
 * {@code CUmemAllocationProp} and {@code CUmemAccessDesc} by {@code build_spec}) are
 * {@code cuda.h}'s enumerators. Read from a real {@code cuda.h} when one is found
 * ({@code CUDA_HOME}, else {@code /usr/local/cuda}), else from CUDA 13.0's values copied here,
 * so the test always runs. A wrong value would pass the host driver's checks whenever it
 * names another valid enumerator (HOST for HOST_NUMA, READ for READ_WRITE), so nothing else
 * pins them.
 */
class CudaEnumValuesTest {
    /** CUDA 13.0's values of the enumerators the options name. */
    private static final Map<String, Long> CUDA_13_0 = Map.ofEntries(
            Map.entry("CU_MEM_ALLOCATION_TYPE_PINNED", 0x1L), Map.entry("CU_MEM_ALLOCATION_TYPE_MANAGED", 0x2L),
            Map.entry("CU_MEM_LOCATION_TYPE_DEVICE", 0x1L), Map.entry("CU_MEM_LOCATION_TYPE_HOST", 0x2L),
            Map.entry("CU_MEM_LOCATION_TYPE_HOST_NUMA", 0x3L), Map.entry("CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT", 0x4L),
            Map.entry("CU_MEM_HANDLE_TYPE_NONE", 0x0L), Map.entry("CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR", 0x1L),
            Map.entry("CU_MEM_HANDLE_TYPE_FABRIC", 0x8L),
            Map.entry("CU_MEM_ACCESS_FLAGS_PROT_NONE", 0x0L), Map.entry("CU_MEM_ACCESS_FLAGS_PROT_READ", 0x1L),
            Map.entry("CU_MEM_ACCESS_FLAGS_PROT_READWRITE", 0x3L),
            Map.entry("CU_MEM_ALLOC_GRANULARITY_MINIMUM", 0x0L), Map.entry("CU_MEM_ALLOC_GRANULARITY_RECOMMENDED", 0x1L));

    /** Every "NAME = value" enumerator of a cuda.h (decimal or hex), or the copied values. */
    private static Map<String, Long> headerValues() throws IOException {
        // The build's cuda.home first (the header the native checks compare with), then
        // CUDA_HOME, then the standard prefix (a review: with -Dcuda.home=... and another
        // toolkit in /usr/local/cuda, the two checks read different headers).
        String home = System.getProperty("cuvmm.cudaHome");
        if (home == null || home.isEmpty()) home = System.getenv("CUDA_HOME");
        Path header = Path.of(home != null && !home.isEmpty() ? home : "/usr/local/cuda", "include", "cuda.h");
        if (!Files.isRegularFile(header)) return CUDA_13_0;
        Map<String, Long> values = new HashMap<>();
        Matcher m = Pattern.compile("^\\s*(CU_[A-Z0-9_]+)\\s*=\\s*(0x[0-9A-Fa-f]+|[0-9]+)\\s*,?", Pattern.MULTILINE)
                .matcher(Files.readString(header));
        while (m.find()) {
            String v = m.group(2);
            values.putIfAbsent(m.group(1), v.startsWith("0x") ? Long.parseLong(v.substring(2), 16) : Long.parseLong(v));
        }
        for (String name : CUDA_13_0.keySet()) {
            assertTrue(values.containsKey(name), header + " has no " + name + " (expected: a cuda.h of CUDA 13.0 or "
                    + "later, as native/test/cuda_api_check.cpp requires; point -Dcuda.home or CUDA_HOME at one)");
        }
        return values;
    }

    @Test
    void optionEnumsCarryCudaHValues() throws IOException {
        Map<String, Long> h = headerValues();
        for (AllocationType t : AllocationType.values()) {
            assertEquals(h.get("CU_MEM_ALLOCATION_TYPE_" + t.name()), (long) t.cuValue, "AllocationType." + t);
        }
        for (LocationType t : LocationType.values()) {
            assertEquals(h.get("CU_MEM_LOCATION_TYPE_" + t.name()), (long) t.cuValue, "LocationType." + t);
        }
        for (HandleType t : HandleType.values()) {
            String name = t == HandleType.POSIX_FD ? "POSIX_FILE_DESCRIPTOR" : t.name();
            assertEquals(h.get("CU_MEM_HANDLE_TYPE_" + name), (long) t.cuValue, "HandleType." + t);
        }
        for (AccessMode t : AccessMode.values()) {
            String name = t == AccessMode.READ_WRITE ? "READWRITE" : t.name();
            assertEquals(h.get("CU_MEM_ACCESS_FLAGS_PROT_" + name), (long) t.cuValue, "AccessMode." + t);
        }
        for (GranularityKind t : GranularityKind.values()) {
            assertEquals(h.get("CU_MEM_ALLOC_GRANULARITY_" + t.name()), (long) t.cuValue, "GranularityKind." + t);
        }
    }
}
