package org.cuvmm.ipc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.util.Map;

import jnr.ffi.LibraryLoader;

import org.cuvmm.BufferDescriptor;
import org.cuvmm.CudaException;
import org.cuvmm.HandleType;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.testing.LiveObjects;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * A peer can send any fd. One named like a host-driver memfd but sealed differently from
 * what the exporter sets (a write seal makes the memory read-only) must be refused at
 * import with INVALID_VALUE and a message naming the seals, not accepted and then fail
 * later in cuMemSetAccess. The forged memfd is made here with libc's memfd_create and
 * fcntl(F_ADD_SEALS) through jnr-ffi (JDK 17 has no memfd_create).
 */
class ForgedMemfdImportTest {
    private static final long MiB = 1L << 20;
    private static final int MFD_CLOEXEC = 0x1;
    private static final int MFD_ALLOW_SEALING = 0x2;
    private static final int F_ADD_SEALS = 1024 + 9;
    private static final int F_SEAL_SEAL = 0x1;
    private static final int F_SEAL_SHRINK = 0x2;
    private static final int F_SEAL_GROW = 0x4;
    private static final int F_SEAL_WRITE = 0x8;
    private static final int F_SEAL_FUTURE_WRITE = 0x10;

    /** The libc calls that forge the memfd. */
    public interface LibC {
        int memfd_create(String name, int flags);

        int ftruncate(int fd, long length);

        int fcntl(int fd, int cmd, int arg);

        int close(int fd);
    }

    @ParameterizedTest(name = "extra seal 0x{0}")
    @ValueSource(ints = {F_SEAL_WRITE, F_SEAL_FUTURE_WRITE})
    void aWriteSealedMemfdNamedLikeTheHostDriversIsRefusedAtImport(int writeSeal) throws Exception {
        assumeTrue(IpcTestSupport.onHostDriver(), "skipped: only the host driver's fds are memfds");
        LibC libc = LibraryLoader.create(LibC.class).load("c");
        Map<String, Integer> fds = IpcTestSupport.fdSnapshot();
        Map<String, Long> live = LiveObjects.now();
        // Device 0, POSIX_FD requested, DEVICE location: the name a real export of device 0 has.
        int fd = libc.memfd_create("cuvmm-host:d0:h1:l1:n0", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        assertTrue(fd >= 0, "memfd_create");
        try {
            assertEquals(0, libc.ftruncate(fd, 2 * MiB), "ftruncate");
            assertEquals(0, libc.fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | writeSeal | F_SEAL_SEAL),
                    "fcntl(F_ADD_SEALS)");
            try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
                 BufferDescriptor forged = BufferDescriptor.fromFds(new int[] {fd}, new long[] {2 * MiB},
                         HandleType.POSIX_FD, 2 * MiB)) {
                CudaException e = assertThrows(CudaException.class, () -> r.importBuffer(forged).close());
                assertEquals("CUDA_ERROR_INVALID_VALUE", e.resultName(), e.getMessage());
                assertEquals("cuMemImportFromShareableHandle", e.call(), e.getMessage());
                String seal = writeSeal == F_SEAL_WRITE ? "F_SEAL_WRITE" : "F_SEAL_FUTURE_WRITE";
                assertTrue(e.getMessage().contains(seal) && e.getMessage().contains("read-only"), e.getMessage());
                LiveObjects.assertBack(live, "after the refused import");
            }
        } finally {
            libc.close(fd);
        }
        IpcTestSupport.assertFdsBack(fds, "after the test");
    }
}
