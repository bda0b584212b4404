package org.cuvmm;

import static org.cuvmm.TestSupport.MiB;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

/**
 * Audit A4: a copy or fill the buffer's device may not do (a write into READ-only memory, a
 * read of memory it has no access to) is refused by cuvmm before any driver copy call, because
 * on a GPU it would fault the context. The refusal names the buffer, the device and its access.
 */
class AccessCheckedCopyTest {
    @Test
    void aWriteIntoReadOnlyMemoryNeverReachesTheDriver() {
        VirtualMemoryResourceOptions readOnly = VirtualMemoryResourceOptions.builder().selfAccess(AccessMode.READ).build();
        DriverCounters k = Driver.get().counters();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0, readOnly);
             VirtualMemoryBuffer b = r.allocate(MiB)) {
            long htod = k.calls("cuMemcpyHtoDAsync"), memset = k.calls("cuMemsetD8Async");
            CudaException e = assertThrows(CudaException.class, () -> b.copyFrom(new byte[16]));
            assertEquals(htod, k.calls("cuMemcpyHtoDAsync"), "no cuMemcpyHtoDAsync for a refused copy");
            assertEquals("CUDA_ERROR_INVALID_VALUE", e.resultName());
            assertTrue(e.getMessage().contains("device 0 has READ access to the destination " + b), e.getMessage());
            assertTrue(e.getMessage().contains("needs READ_WRITE"), e.getMessage());
            // The advice for the buffer's own device: selfAccess, never peers of itself (which
            // create refuses: a review).
            assertTrue(e.getMessage().contains("allocate with selfAccess READ_WRITE (device 0 is the buffer's own "
                    + "device)"), e.getMessage());
            assertFalse(e.getMessage().contains("peers("), e.getMessage());
            CudaException f = assertThrows(CudaException.class, () -> b.fill((byte) 1));
            assertEquals(memset, k.calls("cuMemsetD8Async"), "no cuMemsetD8Async for a refused fill");
            assertTrue(f.getMessage().contains("device 0 has READ access"), f.getMessage());
            b.copyTo(0, new byte[16], 0, 16); // reading is allowed
        }
    }

    @Test
    void aReadOfMemoryWithoutAccessNeverReachesTheDriver() {
        VirtualMemoryResourceOptions noAccess = VirtualMemoryResourceOptions.builder().selfAccess(AccessMode.NONE).build();
        DriverCounters k = Driver.get().counters();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0, noAccess);
             VirtualMemoryBuffer b = r.allocate(MiB)) {
            long dtoh = k.calls("cuMemcpyDtoHAsync");
            CudaException e = assertThrows(CudaException.class, () -> b.copyTo(0, new byte[16], 0, 16));
            assertEquals(dtoh, k.calls("cuMemcpyDtoHAsync"), "no cuMemcpyDtoHAsync for a refused copy");
            assertTrue(e.getMessage().contains("device 0 has no access to the source " + b), e.getMessage());
            assertTrue(e.getMessage().contains("allocate with selfAccess READ or READ_WRITE (device 0 is the buffer's "
                    + "own device)"), e.getMessage());
        }
    }
}
