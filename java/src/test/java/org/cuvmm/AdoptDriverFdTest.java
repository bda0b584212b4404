package org.cuvmm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;

import org.junit.jupiter.api.Test;

/**
 * {@code adoptFds} takes the fds it is given to close them later: the host driver's own memfd
 * of a live allocation is refused, naming it. Adopting and closing it pulled the memory from
 * under the driver, and once another file took the number the driver's next copy crashed the
 * JVM (SIGBUS; an independent probe).
 */
class AdoptDriverFdTest {
    @Test
    void theHostDriversOwnMemfdIsRefused() throws Exception {
        assumeTrue(TestSupport.onHostDriver(), "the host driver's own fds are known only to the host driver in process");
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
            Map<String, String> before = TestSupport.fdTargets();
            try (VirtualMemoryBuffer b = r.allocate(r.granularity())) {
                int driverFd = -1;
                for (Map.Entry<String, String> e : TestSupport.fdTargets().entrySet()) {
                    if (!before.containsKey(e.getKey()) && e.getValue().contains("cuvmm-host")) {
                        driverFd = Integer.parseInt(e.getKey());
                    }
                }
                assertTrue(driverFd >= 0, "the allocation's memfd is open: " + TestSupport.fdTargets());
                int fd = driverFd;
                IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                        () -> BufferDescriptor.adoptFds(new int[] {fd}, new long[] {b.mappedSize()}, HandleType.POSIX_FD,
                                b.mappedSize()));
                assertTrue(e.getMessage().startsWith("fds[0]: " + fd + " (expected: an fd the caller owns"),
                        e.getMessage());
                assertTrue(Files.exists(Path.of("/proc/self/fd/" + fd)), "the driver's fd stays open");
                b.fill((byte) 7); // the driver still has its memory
                byte[] one = new byte[1];
                b.copyTo(0, one, 0, 1);
                assertEquals(7, one[0]);
                // A duplicate is the caller's: fromFds still takes it.
                try (BufferDescriptor d = BufferDescriptor.fromFds(new int[] {fd}, new long[] {b.mappedSize()},
                        HandleType.POSIX_FD, b.mappedSize())) {
                    assertEquals(1, d.chunkCount());
                }
            }
        }
    }
}
