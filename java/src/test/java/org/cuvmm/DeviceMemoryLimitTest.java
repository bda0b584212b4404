package org.cuvmm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import org.junit.jupiter.api.Test;

/**
 * The device's memory bounds what can be created, as on a GPU, where {@code cuMemCreate}
 * commits the memory whole and returns {@code CUDA_ERROR_OUT_OF_MEMORY} past it. The host
 * driver's memfds are sparse and would take any size: it counts what this process created at
 * each location against the memory {@code cuDeviceTotalMem} reports (a port of cuda.core's
 * tests found allocations of twice the device's memory succeeding). Nothing is left behind by
 * a refusal.
 */
class DeviceMemoryLimitTest {
    @Test
    void anAllocationLargerThanTheDeviceIsRefusedAndLeavesNothing() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
            long total = r.driver().device(0).totalMemory();
            assumeTrue(total > 0, "the driver reports no device memory");
            long g = r.granularity();
            long tooMuch = (total / g + 1) * g;
            DriverCounters c = Driver.get().counters();
            long allocations = c.liveAllocations(), reservations = c.liveReservations(), mappings = c.liveMappings();
            CudaException e = assertThrows(CudaException.class, () -> r.allocate(tooMuch));
            assertEquals("CUDA_ERROR_OUT_OF_MEMORY", e.resultName(), e.getMessage());
            assertEquals("cuMemCreate", e.call(), e.getMessage());
            assertTrue(e.getMessage().contains("; allocate: size " + tooMuch + " bytes (device 0 has " + total
                    + " bytes of memory; ask for less"), e.getMessage());
            // Absurd sizes fail as early (reserving the range) and name the request the same way.
            CudaException huge = assertThrows(CudaException.class, () -> r.allocate(Long.MAX_VALUE));
            assertEquals("CUDA_ERROR_OUT_OF_MEMORY", huge.resultName(), huge.getMessage());
            assertTrue(huge.getMessage().contains("; allocate: size " + Long.MAX_VALUE + " bytes"), huge.getMessage());
            // A grow names its request the same way.
            try (VirtualMemoryBuffer small = r.allocate(g)) {
                CudaException grow = assertThrows(CudaException.class, () -> r.modifyAllocation(small, Long.MAX_VALUE));
                assertEquals("CUDA_ERROR_OUT_OF_MEMORY", grow.resultName(), grow.getMessage());
                assertTrue(grow.getMessage().contains("; modifyAllocation: newSize " + Long.MAX_VALUE + " bytes (device 0 "
                        + "has "), grow.getMessage());
                assertEquals(g, small.size(), "the buffer is untouched");
            }
            assertEquals(allocations, c.liveAllocations(), "no allocation left");
            assertEquals(reservations, c.liveReservations(), "the range reserved first was freed");
            assertEquals(mappings, c.liveMappings(), "no mapping left");
            try (VirtualMemoryBuffer b = r.allocate(g)) {
                assertEquals(g, b.mappedSize(), "the device still allocates");
            }
        }
    }

    /**
     * What counts is what is live: two allocations of 60% each do not fit together; once the
     * first is released the second does. Host-backed drivers only (on a GPU this would commit
     * 60% of its memory).
     */
    @Test
    void liveAllocationsTogetherMayNotExceedTheDevice() {
        assumeTrue(TestSupport.onHostDriver() || Driver.get().isHostLibrary(), "host-backed driver only");
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
            long total = r.driver().device(0).totalMemory();
            long g = r.granularity();
            long share = (total * 6 / 10) / g * g;
            VirtualMemoryBuffer first = r.allocate(share);
            try {
                CudaException e = assertThrows(CudaException.class, () -> r.allocate(share).close());
                assertEquals("CUDA_ERROR_OUT_OF_MEMORY", e.resultName(), e.getMessage());
            } finally {
                first.close();
            }
            try (VirtualMemoryBuffer second = r.allocate(share)) {
                assertTrue(second.mappedSize() >= share, "fits once the first is released");
            }
        }
    }

    /** An import is not created memory: importing what this process already counts does not count it twice. */
    @Test
    void importedMemoryIsNotCountedAgain() {
        assumeTrue(TestSupport.onHostDriver() || Driver.get().isHostLibrary(), "host-backed driver only");
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
            long total = r.driver().device(0).totalMemory();
            long g = r.granularity();
            long share = (total * 6 / 10) / g * g;
            try (VirtualMemoryBuffer b = r.allocate(share);
                 BufferDescriptor d = b.exportDescriptor();
                 VirtualMemoryBuffer imported = r.importBuffer(d)) {
                assertEquals(share, imported.size());
            }
        }
    }
}
