package org.cuvmm;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;

/**
 * What the two ports of cuda.core's VMM tests ({@link CudaCoreVmmPortTest}, {@link
 * CudaCoreVmmPortMoreTest}) share: cuda.core's fixtures and helpers in Java (the resource its
 * tests build, {@code _reserve_at}, a free address region, byte patterns). Test-only.
 */
final class CudaCorePort {
    private CudaCorePort() {}

    /** cuda.core's IPC-enabled resource: handle type POSIX_FD on {@code device}. */
    static VirtualMemoryResource resource(int device) {
        return VirtualMemoryResource.create(device, VirtualMemoryResourceOptions.builder().handleType(HandleType.POSIX_FD).build());
    }

    static VirtualMemoryResource resource(int device, VirtualMemoryResourceOptions.Builder b) {
        return VirtualMemoryResource.create(device, b.build());
    }

    static DriverCounters counters() { return Driver.get().counters(); }

    static byte[] read(VirtualMemoryBuffer b, long offset, int size) {
        byte[] out = new byte[size];
        b.copyTo(offset, out, 0, size);
        return out;
    }

    static byte[] bytes(int value, int n) {
        byte[] b = new byte[n];
        Arrays.fill(b, (byte) value);
        return b;
    }

    /**
     * cuda.core's {@code _reserve_at}: something occupying {@code size} bytes at {@code addr}, or
     * null when the driver placed it elsewhere. Here a buffer of a resource hinted at addr.
     */
    static VirtualMemoryBuffer reserveAt(long addr, long size) {
        try (VirtualMemoryResource r = resource(0, VirtualMemoryResourceOptions.builder().addressHint(addr))) {
            VirtualMemoryBuffer b = r.allocate(size);
            if (b.address() != addr) {
                b.close();
                return null;
            }
            return b;
        }
    }

    /** A free, granularity-aligned address with {@code bytes} free after it (a probe, released). */
    static long freeRegion(long bytes) {
        try (VirtualMemoryResource probe = resource(0); VirtualMemoryBuffer b = probe.allocate(bytes)) {
            return b.address();
        }
    }

    /**
     * The inode behind fd {@code fd} of this process, or null once it is closed (tells a reused
     * fd number from the same file).
     */
    static Object fdInode(int fd) {
        try {
            return Files.getAttribute(Path.of("/proc/self/fd/" + fd), "unix:ino");
        } catch (IOException | UnsupportedOperationException gone) {
            return null;
        }
    }
}
