package org.cuvmm.examples;

import java.util.Arrays;

import org.cuvmm.VirtualMemoryBuffer;

/**
 * The test pattern of docs/PROTOCOL.md section 9, for the sharing examples: byte {@code i} of
 * a buffer filled with seed {@code s} is {@code (i * 131 + s * 7 + (i >>> 11)) & 0xFF}. The
 * producers fill with it, the consumers check it.
 *
 * <p>Part of the examples on purpose: cuvmm's own helper for this pattern lives in a package
 * its module does not export (not API), so an example that used it would not compile or run
 * on the module path. Copy this class along with the examples that use it.
 *
 * <p>Bytes go through {@link VirtualMemoryBuffer#copyFrom} / {@link VirtualMemoryBuffer#copyTo}
 * one block (1 MiB) at a time, so this works on any driver.
 */
public final class SeededPattern {
    private static final int BLOCK = 1 << 20;

    private SeededPattern() {}

    /** Fills all of {@code buffer} (its {@code size()} bytes) with the pattern of {@code seed}. */
    public static void fill(VirtualMemoryBuffer buffer, long seed) {
        long size = buffer.size();
        byte[] block = new byte[(int) Math.min(BLOCK, size)];
        for (long done = 0; done < size; done += block.length) {
            int n = (int) Math.min(block.length, size - done);
            generate(block, done, seed);
            buffer.copyFrom(done, block, 0, n);
        }
    }

    /** The first offset of {@code buffer} that does not hold the pattern of {@code seed}, or -1 when all do. */
    public static long firstMismatch(VirtualMemoryBuffer buffer, long seed) {
        long size = buffer.size();
        int blockSize = (int) Math.min(BLOCK, size);
        byte[] got = new byte[blockSize];
        byte[] want = new byte[blockSize];
        for (long done = 0; done < size; done += blockSize) {
            int n = (int) Math.min(blockSize, size - done);
            buffer.copyTo(done, got, 0, n);
            generate(want, done, seed);
            int k = Arrays.mismatch(got, 0, n, want, 0, n);
            if (k >= 0) return done + k;
        }
        return -1;
    }

    /** Pattern bytes {@code start .. start + dst.length - 1}. */
    private static void generate(byte[] dst, long start, long seed) {
        for (int j = 0; j < dst.length; j++) {
            long i = start + j;
            dst[j] = (byte) ((i * 131 + seed * 7 + (i >>> 11)) & 0xFF);
        }
    }
}
