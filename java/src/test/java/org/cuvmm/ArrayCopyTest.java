package org.cuvmm;

import static org.cuvmm.TestSupport.MiB;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.nio.ByteBuffer;
import java.util.Arrays;

import org.cuvmm.internal.ArrayCopies;
import org.cuvmm.testing.TestData;
import org.junit.jupiter.api.Test;

/**
 * Array and heap-buffer copies are staged in pieces of {@link ArrayCopies#PIECE_BYTES}: windows
 * that start, end and span piece boundaries at odd offsets arrive intact, in both directions,
 * and a refused piece throws the driver's error.
 */
class ArrayCopyTest {
    private static final int PIECE = ArrayCopies.PIECE_BYTES;

    @Test
    void windowsAcrossPieceBoundariesRoundTrip() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer b = r.allocate(4 * MiB)) {
            byte[] data = TestData.pattern(2 * PIECE + 12345, 21);
            int[][] windows = {{0, 1}, {3, PIECE}, {7, PIECE + 1}, {PIECE - 1, PIECE + 2}, {11, 2 * PIECE + 100}};
            for (int[] w : windows) {
                int srcOffset = w[0] % 97;
                int length = Math.min(w[1], data.length - srcOffset);
                long offset = w[0];
                b.fill((byte) 0);
                b.copyFrom(offset, data, srcOffset, length);
                byte[] back = new byte[length + 9];
                b.copyTo(offset, back, 9, length);
                assertArrayEquals(Arrays.copyOfRange(data, srcOffset, srcOffset + length), Arrays.copyOfRange(back, 9, back.length),
                        "window " + Arrays.toString(w));
                // Bytes just outside the window were not written.
                if (offset > 0) assertEquals(0, readByte(b, offset - 1), "byte before window " + Arrays.toString(w));
                if (offset + length < b.size()) assertEquals(0, readByte(b, offset + length), "byte after window " + Arrays.toString(w));
            }
        }
    }

    @Test
    void heapByteBuffersOfEveryKindAreStagedFromTheirPosition() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer b = r.allocate(4 * MiB)) {
            byte[] data = TestData.pattern(PIECE + 777, 22);
            ByteBuffer backing = ByteBuffer.allocate(data.length + 50);
            backing.position(50);
            ByteBuffer sliced = backing.slice(); // arrayOffset 50
            sliced.put(data).flip();
            sliced.position(5);
            ByteBuffer readOnly = sliced.asReadOnlyBuffer(); // its array is hidden
            b.copyFrom(3, readOnly);
            assertEquals(readOnly.limit(), readOnly.position(), "the source is consumed");
            b.copyFrom(PIECE * 2L + 1, sliced);
            assertEquals(sliced.limit(), sliced.position());

            ByteBuffer dst = ByteBuffer.allocate(data.length - 5 + 20);
            dst.position(20);
            b.copyTo(3, dst);
            assertEquals(dst.limit(), dst.position(), "the destination is filled");
            assertArrayEquals(Arrays.copyOfRange(data, 5, data.length), Arrays.copyOfRange(dst.array(), 20, dst.capacity()));
            byte[] second = new byte[data.length - 5];
            b.copyTo(PIECE * 2L + 1, second, 0, second.length);
            assertArrayEquals(Arrays.copyOfRange(data, 5, data.length), second);
        }
    }

    @Test
    void aRefusedCopyThrowsTheDriverError() {
        // Its own device may only read this memory: the first piece of a write is refused.
        VirtualMemoryResourceOptions readOnly = VirtualMemoryResourceOptions.builder().selfAccess(AccessMode.READ).build();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0, readOnly);
             VirtualMemoryBuffer b = r.allocate(4 * MiB)) {
            CudaException e = assertThrows(CudaException.class, () -> b.copyFrom(new byte[PIECE + 1]));
            assertEquals("cuMemcpyHtoD", e.call());
            assertEquals("CUDA_ERROR_INVALID_VALUE", e.resultName());
            byte[] back = new byte[PIECE + 1];
            b.copyTo(0, back, 0, back.length); // reading is allowed
        }
    }

    private static byte readByte(VirtualMemoryBuffer b, long offset) {
        byte[] one = new byte[1];
        b.copyTo(offset, one, 0, 1);
        return one[0];
    }
}
