package org.cuvmm.gpu;

import static org.cuvmm.testing.TestData.pattern;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.cuvmm.gpu.PresetsDriver.check;
import static org.cuvmm.gpu.PresetsDriver.name;

import java.util.Map;

import org.bytedeco.cuda.cudart.CUmemLocation_v1;
import org.bytedeco.cuda.global.cudart;
import org.bytedeco.javacpp.BytePointer;
import org.bytedeco.javacpp.LongPointer;
import org.bytedeco.javacpp.SizeTPointer;
import org.cuvmm.AccessMode;
import org.cuvmm.BufferOrigin;
import org.cuvmm.Driver;
import org.cuvmm.HandleType;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.VirtualMemoryResourceOptions;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.cuvmm.testing.LiveObjects;

/**
 * Cross-checks cuvmm's mappings with an independent binding of the NVIDIA driver, the
 * JavaCPP CUDA presets ({@code org.bytedeco:cuda}): for every chunk of our buffers the
 * driver itself must report the mapping we think we made ({@code cuMemGetAddressRange} and
 * {@code CU_POINTER_ATTRIBUTE_RANGE_START_ADDR/SIZE}: a range that holds the chunk, since the
 * driver may report the mapping or the whole reservation, audit A7, recorded for the gpu-check
 * summary; the other {@code cuPointerGetAttribute}s exactly), the access we set ({@code cuMemGetAccess}), and the bytes
 * we wrote ({@code cuMemcpyDtoH}, {@code cuMemsetD8} through the other binding). Both
 * bindings reach the same {@code libcuda.so.1} in this process and share device 0's primary
 * context.
 *
 * <p>Skipped, with the driver's reason, where the selected driver is not cuda. Where it is
 * cuda but the presets cannot load (their JNI library needs {@code libcudart.so.13} beside
 * {@code libcuda.so.1}), the tests fail: the cross-check did not happen.
 */
@Tag("gpu")
class CudaCrossCheckTest {
    private Driver driver;
    private VirtualMemoryResource resource;
    private long g;
    private Map<String, Long> liveBefore;
    private boolean contextRetained;

    @BeforeEach
    void open() {
        driver = GpuSupport.assumeCuda();
        PresetsDriver.retainPrimaryContext("so the cross-check did not run");
        contextRetained = true;
        liveBefore = LiveObjects.now();
        resource = VirtualMemoryResource.create(0);
        g = resource.granularity();
    }

    @AfterEach
    void close() {
        GpuSupport.closeAndCheckNothingLeft(resource, liveBefore);
        if (contextRetained) PresetsDriver.releasePrimaryContext();
    }

    @Test
    void ourAddressIsADevicePointerTheOtherBindingReadsAndWrites() {
        long size = 3 * g + 7;
        try (VirtualMemoryBuffer b = resource.allocate(size)) {
            byte[] data = pattern((int) size, 31);
            b.copyFrom(data);
            assertArrayEquals(data, Cu.read(b.address(), (int) size), "bytes written by cuvmm, read by the presets");
            check(cudart.cuMemsetD8(b.address() + g - 3, (byte) 0x6B, 6), "cuMemsetD8");
            check(cudart.cuCtxSynchronize(), "cuCtxSynchronize");
            byte[] window = new byte[8];
            b.copyTo(g - 4, window, 0, 8);
            assertEquals(data[(int) g - 4], window[0]);
            for (int i = 1; i <= 6; i++) assertEquals(0x6B, window[i], "byte set by the presets, read by cuvmm");
            assertEquals(data[(int) g + 3], window[7]);
        }
    }

    @Test
    void theDriverSeesEachChunkOfAnInPlaceGrowthAsItsOwnMapping() {
        long hint = GpuSupport.freeRegion(32 * g);
        try (VirtualMemoryResource r = GpuSupport.resourceAt(hint); VirtualMemoryBuffer a = r.allocate(g);
             VirtualMemoryBuffer b = r.modifyAllocation(a, 4 * g)) {
            assertEquals(BufferOrigin.GROWN_IN_PLACE, b.origin());
            assertEquals(2, b.chunkCount());
            checkEveryChunk(b, 0, cudart.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, cudart.CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
            byte[] data = pattern((int) (4 * g), 32);
            b.copyFrom(data);
            assertArrayEquals(data, Cu.read(b.address(), (int) (4 * g)));
        }
    }

    @Test
    void theDriverSeesEveryChunkOfAMovedBufferAtItsNewAddress() {
        long hint = GpuSupport.freeRegion(32 * g);
        try (VirtualMemoryResource r = GpuSupport.resourceAt(hint); VirtualMemoryBuffer a = r.allocate(2 * g);
             VirtualMemoryResource decoyResource = GpuSupport.resourceAt(hint + 2 * g);
             VirtualMemoryBuffer decoy = decoyResource.allocate(g)) {
            assertEquals(hint + 2 * g, decoy.address(), "the decoy sits right after the buffer");
            byte[] data = pattern((int) (2 * g), 33);
            a.copyFrom(data);
            try (VirtualMemoryBuffer b = r.modifyAllocation(a, 5 * g)) {
                assertEquals(BufferOrigin.MOVED, b.origin());
                assertEquals(2, b.chunkCount());
                checkEveryChunk(b, 0, cudart.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                        cudart.CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
                checkEveryChunk(a, 0, cudart.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                        cudart.CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
                assertArrayEquals(data, Cu.read(b.address(), (int) (2 * g)), "moved, not copied: same bytes");
                check(cudart.cuMemsetD8(b.address(), (byte) 0x42, 16), "cuMemsetD8");
                check(cudart.cuCtxSynchronize(), "cuCtxSynchronize");
                assertEquals(0x42, Cu.read(a.address(), 16)[15], "one physical allocation behind both addresses");
            }
        }
    }

    @Test
    void accessAndHandleTypesFollowTheOptions() {
        VirtualMemoryResourceOptions readOnlyNoExport = VirtualMemoryResourceOptions.builder()
                .selfAccess(AccessMode.READ).handleType(HandleType.NONE).build();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0, readOnlyNoExport);
             VirtualMemoryBuffer b = r.allocate(g)) {
            // Only queried: a device write to a read-only mapping would fault the context.
            checkEveryChunk(b, 0, 0, cudart.CU_MEM_ACCESS_FLAGS_PROT_READ);
        }
    }

    @Test
    void closedMemoryIsUnmappedForTheDriverExactlyWhenItsLastHolderGoes() {
        long hint = GpuSupport.freeRegion(32 * g);
        long first;
        try (VirtualMemoryResource r = GpuSupport.resourceAt(hint)) {
            VirtualMemoryBuffer a = r.allocate(g);
            VirtualMemoryBuffer b = r.modifyAllocation(a, 2 * g);
            assertEquals(BufferOrigin.GROWN_IN_PLACE, b.origin());
            first = a.address();
            a.close();
            assertTrue(Cu.mapped(first), "chunk 1 is still mapped: b holds it");
            assertTrue(Cu.mapped(first + g), "chunk 2 is mapped");
            b.close();
        }
        assertFalse(Cu.mapped(first), "chunk 1 unmapped after its last holder closed");
        assertFalse(Cu.mapped(first + g), "chunk 2 unmapped after its last holder closed");
    }

    @Test
    void peerAccessIsWhatTheOptionsAskFor() {
        GpuSupport.assumePeers(driver, 0, 1);
        VirtualMemoryResourceOptions readPeer = VirtualMemoryResourceOptions.builder()
                .peers(1).peerAccess(AccessMode.READ).build();
        try (VirtualMemoryResource withPeer = VirtualMemoryResource.create(0, readPeer);
             VirtualMemoryBuffer a = withPeer.allocate(g);
             VirtualMemoryBuffer grown = withPeer.modifyAllocation(a, 3 * g);
             VirtualMemoryBuffer alone = resource.allocate(g)) {
            checkEveryChunk(grown, 1, cudart.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, cudart.CU_MEM_ACCESS_FLAGS_PROT_READ);
            checkEveryChunk(grown, 0, cudart.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                    cudart.CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
            assertEquals(cudart.CU_MEM_ACCESS_FLAGS_PROT_NONE, Cu.access(alone.address(), 1),
                    "no peers asked: device 1 has no access");
        }
    }

    /**
     * For every chunk of {@code b}: the driver's view of the mapping (bounds, mapped,
     * device, memory type, handle types, enclosing range) and the access of {@code device}.
     */
    private void checkEveryChunk(VirtualMemoryBuffer b, int device, int handleTypes, int access) {
        long base = b.address();
        long end = base + b.mappedSize();
        long offset = 0;
        for (int i = 0; i < b.chunkCount(); i++) {
            long chunk = base + offset;
            long size = b.chunkSize(i);
            String what = "chunk " + (i + 1) + " of " + b.chunkCount() + " of " + b + " at 0x" + Long.toHexString(chunk);
            // A7: the driver may report the mapping (the chunk) or the reservation holding it;
            // cuvmm relies on neither, only on a range that holds the chunk. What it reported
            // goes to the gpu-check summary ("What the driver did").
            for (long probe : new long[] {chunk, chunk + size / 2, chunk + size - 1}) {
                long[] range = Cu.addressRange(probe);
                assertTrue(range[0] <= chunk && chunk + size <= range[0] + range[1], "cuMemGetAddressRange(0x"
                        + Long.toHexString(probe) + ") = [0x" + Long.toHexString(range[0]) + ", +" + range[1]
                        + ") holds " + what);
                if (probe == chunk) {
                    DriverObservationLog.record("A7", "CudaCrossCheckTest: cuMemGetAddressRange(" + what + "): "
                            + rangeKind(range[0], range[1], chunk, size, base, end));
                }
            }
            assertTrue(Cu.mapped(chunk), "CU_POINTER_ATTRIBUTE_MAPPED, " + what);
            assertEquals(0, Cu.intAttribute(cudart.CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, chunk),
                    "CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, " + what);
            assertEquals(cudart.CU_MEMORYTYPE_DEVICE, Cu.intAttribute(cudart.CU_POINTER_ATTRIBUTE_MEMORY_TYPE, chunk),
                    "CU_POINTER_ATTRIBUTE_MEMORY_TYPE, " + what);
            assertEquals(handleTypes, Cu.intAttribute(cudart.CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, chunk),
                    "CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, " + what);
            long rangeStart = Cu.longAttribute(cudart.CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, chunk);
            long rangeSize = Cu.longAttribute(cudart.CU_POINTER_ATTRIBUTE_RANGE_SIZE, chunk);
            assertTrue(rangeStart <= chunk && chunk + size <= rangeStart + rangeSize,
                    "the driver's range [0x" + Long.toHexString(rangeStart) + ", +" + rangeSize + ") holds " + what);
            DriverObservationLog.record("A7", "CudaCrossCheckTest: CU_POINTER_ATTRIBUTE_RANGE_START_ADDR/SIZE(" + what
                    + "): " + rangeKind(rangeStart, rangeSize, chunk, size, base, end));
            assertTrue(base <= rangeStart && rangeStart + rangeSize <= end, "the driver's range [0x"
                    + Long.toHexString(rangeStart) + ", +" + rangeSize + ") lies inside the buffer's reservation(s) [0x"
                    + Long.toHexString(base) + ", +" + b.mappedSize() + ")");
            assertEquals(access, Cu.access(chunk, device), "cuMemGetAccess for device " + device + ", " + what);
            offset += size;
        }
        assertEquals(b.mappedSize(), offset);
        assertNotEquals(0, base);
    }

    /** What a driver-reported range is: the chunk, the buffer's whole range, or something else. */
    private static String rangeKind(long start, long size, long chunk, long chunkSize, long base, long end) {
        String kind = start == chunk && size == chunkSize ? "the mapping (chunk)"
                : start == base && start + size == end ? "the buffer's whole range (reservation)" : "a range holding the chunk";
        return kind + " [0x" + Long.toHexString(start) + ", +" + size + ")";
    }

    /** The presets, touched only once the cuda driver is known to run. */
    private static final class Cu {
        private Cu() {}

        static byte[] read(long address, int n) {
            try (BytePointer host = new BytePointer(n)) {
                check(cudart.cuMemcpyDtoH(host, address, n), "cuMemcpyDtoH");
                byte[] out = new byte[n];
                host.get(out);
                return out;
            }
        }

        /** {base, size} of the allocation mapped at {@code address}. */
        static long[] addressRange(long address) {
            try (LongPointer base = new LongPointer(1); SizeTPointer size = new SizeTPointer(1)) {
                check(cudart.cuMemGetAddressRange(base, size, address), "cuMemGetAddressRange(0x" + Long.toHexString(address) + ")");
                return new long[] {base.get(), size.get()};
            }
        }

        /** CU_POINTER_ATTRIBUTE_MAPPED; false also when the driver no longer knows the address at all. */
        static boolean mapped(long address) {
            try (BytePointer out = new BytePointer(8)) {
                out.zero();
                int rc = cudart.cuPointerGetAttribute(out, cudart.CU_POINTER_ATTRIBUTE_MAPPED, address);
                return rc == cudart.CUDA_SUCCESS && out.get(0) != 0;
            }
        }

        /** A 32-bit attribute, read from a zeroed 8-byte slot (little-endian). */
        static int intAttribute(int attribute, long address) {
            try (BytePointer out = new BytePointer(8)) {
                out.zero();
                check(cudart.cuPointerGetAttribute(out, attribute, address), "cuPointerGetAttribute(" + attribute + ")");
                return out.getInt(0);
            }
        }

        static long longAttribute(int attribute, long address) {
            try (BytePointer out = new BytePointer(8)) {
                out.zero();
                check(cudart.cuPointerGetAttribute(out, attribute, address), "cuPointerGetAttribute(" + attribute + ")");
                return out.getLong(0);
            }
        }

        static long access(long address, int device) {
            try (CUmemLocation_v1 location = new CUmemLocation_v1()) {
                location.type(cudart.CU_MEM_LOCATION_TYPE_DEVICE).id(device);
                long[] flags = new long[1];
                check(cudart.cuMemGetAccess(flags, location, address), "cuMemGetAccess(device " + device + ")");
                return flags[0];
            }
        }
    }
}
