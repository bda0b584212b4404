package org.cuvmm;

import static org.cuvmm.TestSupport.MiB;
import static org.cuvmm.testing.TestData.pattern;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.util.Map;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;
import org.cuvmm.testing.LiveObjects;

class AllocationTest {
    private VirtualMemoryResource resource;
    private Map<String, Long> liveBefore;

    @BeforeEach
    void open() {
        resource = VirtualMemoryResource.create(0);
        liveBefore = LiveObjects.now();
    }

    @AfterEach
    void closeAndCheckNothingLeft() {
        resource.close();
        LiveObjects.assertBack(liveBefore, "after the test closed its buffers");
    }

    @Test
    void allocateZeroIsEmptyAndMakesNoDriverCall() {
        long calls = TestSupport.counters().totalCalls();
        try (VirtualMemoryBuffer b = resource.allocate(0)) {
            assertEquals(0, b.size());
            assertEquals(0, b.address());
            assertEquals(0, b.chunkCount());
            b.copyFrom(new byte[0]);
            b.fill((byte) 1);
        }
        assertEquals(calls, TestSupport.counters().totalCalls(), "allocate(0) must not call the driver");
    }

    @ParameterizedTest
    @ValueSource(longs = {1, 4096, 2 * MiB - 1, 2 * MiB, 2 * MiB + 1, 7 * MiB})
    void sizesRoundUpToTheGranularityAndKeepData(long size) {
        long g = resource.granularity();
        try (VirtualMemoryBuffer b = resource.allocate(size)) {
            assertEquals(size, b.size());
            assertEquals((size + g - 1) / g * g, b.mappedSize());
            assertEquals(1, b.chunkCount());
            assertNotEquals(0, b.address());
            assertEquals(0, b.address() % g, "base is granularity-aligned");
            int n = (int) Math.min(size, 3 * MiB);
            byte[] data = pattern(n, (int) size);
            b.copyFrom(size - n, data, 0, n);
            byte[] back = new byte[n];
            b.copyTo(size - n, back, 0, n);
            assertArrayEquals(data, back);
        }
    }

    @Test
    void eachAllocationMakesTheDocumentedDriverCalls() {
        DriverCounters c = TestSupport.counters();
        long create = c.calls("cuMemCreate"), reserve = c.calls("cuMemAddressReserve"), map = c.calls("cuMemMap"),
                access = c.calls("cuMemSetAccess"), unmap = c.calls("cuMemUnmap"), release = c.calls("cuMemRelease"),
                free = c.calls("cuMemAddressFree");
        resource.allocate(3 * MiB).close();
        assertEquals(1, c.calls("cuMemCreate") - create);
        assertEquals(1, c.calls("cuMemAddressReserve") - reserve);
        assertEquals(1, c.calls("cuMemMap") - map);
        assertEquals(1, c.calls("cuMemSetAccess") - access);
        assertEquals(1, c.calls("cuMemUnmap") - unmap);
        assertEquals(1, c.calls("cuMemRelease") - release);
        assertEquals(1, c.calls("cuMemAddressFree") - free);
    }

    @Test
    void byteBufferCopiesDirectHeapAndReadOnly() {
        try (VirtualMemoryBuffer b = resource.allocate(MiB)) {
            byte[] data = pattern(1000, 7);
            ByteBuffer direct = ByteBuffer.allocateDirect(1100);
            direct.position(100);
            direct.put(data);
            direct.position(100);
            b.copyFrom(10, direct);
            assertEquals(1100, direct.position(), "source position advanced");
            ByteBuffer heap = ByteBuffer.allocate(1000);
            b.copyTo(10, heap);
            assertArrayEquals(data, heap.array());
            b.copyFrom(5000, ByteBuffer.wrap(data).asReadOnlyBuffer());
            ByteBuffer directOut = ByteBuffer.allocateDirect(1000);
            b.copyTo(5000, directOut);
            directOut.flip();
            byte[] back = new byte[1000];
            directOut.get(back);
            assertArrayEquals(data, back);
            assertThrows(java.nio.ReadOnlyBufferException.class, () -> b.copyTo(0, ByteBuffer.allocate(4).asReadOnlyBuffer()));
        }
    }

    @Test
    void bufferToBufferCopyAndFill() {
        try (VirtualMemoryBuffer a = resource.allocate(MiB); VirtualMemoryBuffer b = resource.allocate(3 * MiB)) {
            byte[] data = pattern(4096, 3);
            a.copyFrom(100, data, 0, data.length);
            b.fill((byte) 0x5A);
            b.copyFrom(2 * MiB, a, 100, data.length);
            byte[] back = new byte[data.length + 2];
            b.copyTo(2 * MiB - 1, back, 0, back.length);
            assertEquals(0x5A, back[0]);
            assertEquals(0x5A, back[back.length - 1]);
            byte[] mid = java.util.Arrays.copyOfRange(back, 1, back.length - 1);
            assertArrayEquals(data, mid);
            b.fill(10, 5, (byte) 1);
            byte[] f = new byte[7];
            b.copyTo(9, f, 0, 7);
            assertArrayEquals(new byte[] {0x5A, 1, 1, 1, 1, 1, 0x5A}, f);
        }
    }

    @Test
    void badWindowsAreRejectedBeforeNativeCode() {
        try (VirtualMemoryBuffer b = resource.allocate(4096)) {
            byte[] small = new byte[16];
            IndexOutOfBoundsException e = assertThrows(IndexOutOfBoundsException.class, () -> b.copyTo(0, small, 0, 17));
            assertTrue(e.getMessage().contains("dst"), e.getMessage());
            assertThrows(IndexOutOfBoundsException.class, () -> b.copyFrom(4090, small, 0, 16));
            assertThrows(IndexOutOfBoundsException.class, () -> b.copyFrom(-1, small, 0, 1));
            assertThrows(IndexOutOfBoundsException.class, () -> b.copyFrom(0, small, -1, 1));
            assertThrows(IndexOutOfBoundsException.class, () -> b.copyTo(Long.MAX_VALUE, small, 0, 2));
            assertThrows(IndexOutOfBoundsException.class, () -> b.fill(4000, 97, (byte) 0));
            assertThrows(NullPointerException.class, () -> b.copyFrom((byte[]) null));
            IllegalArgumentException neg = assertThrows(IllegalArgumentException.class, () -> resource.allocate(-5));
            assertEquals("size: -5 (expected: >= 0)", neg.getMessage());
        }
    }

    @Test
    void deviceMemoryHasNoByteBufferView() {
        try (VirtualMemoryBuffer b = resource.allocate(4096)) {
            UnsupportedOperationException e = assertThrows(UnsupportedOperationException.class, b::asByteBuffer);
            assertTrue(e.getMessage().contains("copyTo"), e.getMessage());
        }
    }

    @Test
    void managedAllocationTypeIsRefusedWithTheDriverCode() {
        if (!TestSupport.onHostDriver()) return; // the real driver's answer is covered by the gpu suite
        VirtualMemoryResourceOptions managed = VirtualMemoryResourceOptions.builder()
                .allocationType(AllocationType.MANAGED).handleType(HandleType.NONE).build();
        CudaException e = assertThrows(CudaException.class, () -> VirtualMemoryResource.create(0, managed));
        assertEquals("CUDA_ERROR_NOT_SUPPORTED", e.resultName());
        assertEquals("cuMemGetAllocationGranularity", e.call());
        assertTrue(e.getMessage().contains("CUDA_ERROR_NOT_SUPPORTED"), e.getMessage());
    }

    @Test
    void resourceCloseStopsAllocationButKeepsBuffers() {
        VirtualMemoryResource r = VirtualMemoryResource.create(0);
        VirtualMemoryBuffer b = r.allocate(MiB);
        r.close();
        r.close();
        assertTrue(r.isClosed());
        IllegalStateException e = assertThrows(IllegalStateException.class, () -> r.allocate(1));
        assertTrue(e.getMessage().contains("closed"), e.getMessage());
        b.fill((byte) 2);
        b.close();
    }
}
