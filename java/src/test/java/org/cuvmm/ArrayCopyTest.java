package org.cuvmm;

import static org.cuvmm.TestSupport.MiB;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.cuvmm.internal.ArrayCopies;
import org.cuvmm.testing.ChildJvm;
import org.cuvmm.testing.TestData;
import org.junit.jupiter.api.Test;

/**
 * Array and heap-buffer copies are staged in pieces of {@link ArrayCopies#PIECE_BYTES}: windows
 * that start, end and span piece boundaries at odd offsets arrive intact, in both directions,
 * and a refused piece throws the driver's error; offsets past 2 GiB work; concurrent copies
 * each get their own staging piece, and many of them need no direct-buffer memory.
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
            byte[] back = new byte[PIECE + 1];
            b.copyTo(0, back, 0, back.length); // reading is allowed
            assumeTrue(TestSupport.onHostDriver(), "a write into memory the device may only read is a device fault on a "
                    + "GPU (CUDA_ERROR_ILLEGAL_ADDRESS, sticky: it poisons the context for the rest of the run); only "
                    + "the host driver refuses it cleanly");
            CudaException e = assertThrows(CudaException.class, () -> b.copyFrom(new byte[PIECE + 1]));
            assertEquals("cuMemcpyHtoDAsync", e.call()); // synchronous copies run on cuvmm's own stream
            assertEquals("CUDA_ERROR_INVALID_VALUE", e.resultName());
        }
    }

    /**
     * Offsets past 2 GiB (past {@code int}): a window just below, one across and one above the
     * 2^31 boundary of a 3 GiB buffer (sparse on the host driver: only the touched pages exist).
     */
    @Test
    void offsetsPastTwoGiBRoundTrip() {
        long size = 3L << 30;
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer b = r.allocate(size)) {
            byte[] data = TestData.pattern(PIECE + 4321, 23);
            long two = 1L << 31;
            for (long offset : new long[] {two - data.length, two - PIECE / 2 - 3, two + 12345, size - data.length}) {
                b.copyFrom(offset, data, 0, data.length);
                byte[] back = new byte[data.length];
                b.copyTo(offset, back, 0, back.length);
                assertArrayEquals(data, back, "window at offset " + offset);
            }
        }
    }

    /**
     * Eight threads copy distinct data through the staging pool at once, round after round,
     * each in its own window: every piece a copy takes is its own, so every read-back equals
     * what that thread wrote (a piece shared by two copies would mix their bytes).
     */
    @Test
    void concurrentCopiesThroughTheStagingPoolKeepTheirData() throws Exception {
        int threads = 8;
        int window = 2 * PIECE + 4096;
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer b = r.allocate((long) threads * window)) {
            ExecutorService pool = Executors.newFixedThreadPool(threads);
            try {
                CountDownLatch start = new CountDownLatch(1);
                List<Future<?>> done = new ArrayList<>();
                for (int t = 0; t < threads; t++) {
                    int id = t;
                    done.add(pool.submit(() -> {
                        start.await();
                        for (int round = 0; round < 20; round++) {
                            // Lengths vary so that small (< 1 MiB) and multi-piece copies mix.
                            int length = round % 2 == 0 ? 2 * PIECE + 7 * id + round : 1000 + 97 * id + round;
                            byte[] data = TestData.pattern(length, 100 * id + round);
                            long offset = (long) id * window;
                            b.copyFrom(offset, data, 0, length);
                            byte[] back = new byte[length];
                            b.copyTo(offset, back, 0, length);
                            assertArrayEquals(data, back, "thread " + id + " round " + round);
                        }
                        return null;
                    }));
                }
                start.countDown();
                for (Future<?> f : done) f.get(120, TimeUnit.SECONDS);
            } finally {
                pool.shutdownNow();
            }
        }
    }

    /**
     * Child: 32 threads copy byte[] in and out at once, more copies in flight than pooled
     * staging pieces. Prints DONE, or FAILED and the error.
     */
    public static final class ManyCopiesChild {
        public static void main(String[] args) throws Exception {
            int threads = 32;
            int length = 2 * PIECE + 100;
            try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
                 VirtualMemoryBuffer b = r.allocate((long) threads * 3 * PIECE)) {
                ExecutorService pool = Executors.newFixedThreadPool(threads);
                CountDownLatch start = new CountDownLatch(1);
                List<Future<?>> done = new ArrayList<>();
                for (int t = 0; t < threads; t++) {
                    int id = t;
                    done.add(pool.submit(() -> {
                        start.await();
                        byte[] data = TestData.pattern(length, id);
                        byte[] back = new byte[length];
                        for (int round = 0; round < 10; round++) {
                            b.copyFrom((long) id * 3 * PIECE, data, 0, length);
                            b.copyTo((long) id * 3 * PIECE, back, 0, length);
                            if (!Arrays.equals(data, back)) throw new AssertionError("thread " + id + " read back other bytes");
                        }
                        return null;
                    }));
                }
                start.countDown();
                try {
                    for (Future<?> f : done) f.get(120, TimeUnit.SECONDS);
                    System.out.println("DONE");
                } catch (Exception e) {
                    System.out.println("FAILED " + e);
                } finally {
                    pool.shutdownNow();
                }
            }
        }
    }

    /**
     * More copies in flight than pooled pieces must not need direct-buffer memory: with a
     * 4 MiB direct limit and explicit GC disabled, 32 concurrent copies used to fail with
     * "Cannot reserve ... bytes of direct buffer memory" (each extra copy allocated a 1 MiB
     * direct buffer and dropped it for the GC). Staging is malloc'ed and freed explicitly now.
     */
    @Test
    void manyConcurrentCopiesNeedNoDirectBufferMemory() throws Exception {
        ChildJvm.Result r = TestSupport.runChild(ManyCopiesChild.class,
                List.of("-XX:MaxDirectMemorySize=4m", "-XX:+DisableExplicitGC", "-Dcuvmm.host.devices=1"), Map.of());
        assertEquals(0, r.exitCode(), r.toString());
        assertTrue(r.output().contains("DONE"), r.toString());
    }

    private static byte readByte(VirtualMemoryBuffer b, long offset) {
        byte[] one = new byte[1];
        b.copyTo(offset, one, 0, 1);
        return one[0];
    }
}
