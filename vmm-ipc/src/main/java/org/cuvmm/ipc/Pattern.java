package org.cuvmm.ipc;

import java.util.Objects;

import org.cuvmm.VirtualMemoryBuffer;

/**
 * The deterministic test pattern of {@code cuvmm serve --seed N} (docs/PROTOCOL.md section
 * 9): byte {@code i} of a buffer is {@code (i * 131 + seed * 7 + (i >>> 11)) & 0xFF}.
 * Buffers are filled and checked through {@link VirtualMemoryBuffer#copyFrom} / {@link
 * VirtualMemoryBuffer#copyTo} one chunk (1 MiB) at a time, so it works on any driver.
 */
public final class Pattern {
    private static final int CHUNK = 1 << 20;

    private Pattern() {}

    /** Byte {@code index} of the pattern with {@code seed}. */
    public static byte byteAt(long index, long seed) {
        if (index < 0) throw new IllegalArgumentException("index: " + index + " (expected: >= 0)");
        return (byte) ((index * 131 + seed * 7 + (index >>> 11)) & 0xFF);
    }

    /** Writes pattern bytes {@code start .. start + dst.length - 1} into {@code dst}. */
    public static void fill(byte[] dst, long start, long seed) {
        Objects.requireNonNull(dst, "dst");
        if (start < 0) throw new IllegalArgumentException("start: " + start + " (expected: >= 0)");
        long s7 = seed * 7;
        for (int j = 0; j < dst.length; j++) {
            long i = start + j;
            dst[j] = (byte) ((i * 131 + s7 + (i >>> 11)) & 0xFF);
        }
    }

    /** Fills all of {@code buffer} (its {@code size()} bytes) with the pattern. */
    public static void fill(VirtualMemoryBuffer buffer, long seed) {
        Objects.requireNonNull(buffer, "buffer");
        fill(buffer, 0, buffer.size(), seed);
    }

    /** Fills bytes {@code offset .. offset + length - 1} of {@code buffer} with pattern bytes of the same indices. */
    public static void fill(VirtualMemoryBuffer buffer, long offset, long length, long seed) {
        Objects.requireNonNull(buffer, "buffer");
        checkRange(buffer, offset, length);
        byte[] tmp = new byte[(int) Math.min(CHUNK, length)];
        for (long done = 0; done < length; ) {
            int n = (int) Math.min(tmp.length, length - done);
            byte[] b = n == tmp.length ? tmp : new byte[n];
            fill(b, offset + done, seed);
            buffer.copyFrom(offset + done, b, 0, n);
            done += n;
        }
    }

    /** The first offset of {@code buffer} that does not hold the pattern, or -1 when all do. */
    public static long firstMismatch(VirtualMemoryBuffer buffer, long seed) {
        Objects.requireNonNull(buffer, "buffer");
        return firstMismatch(buffer, 0, buffer.size(), seed);
    }

    /** The first offset in {@code offset .. offset + length - 1} that does not hold the pattern, or -1. */
    public static long firstMismatch(VirtualMemoryBuffer buffer, long offset, long length, long seed) {
        Objects.requireNonNull(buffer, "buffer");
        checkRange(buffer, offset, length);
        int size = (int) Math.min(CHUNK, length);
        byte[] got = new byte[size];
        byte[] want = new byte[size];
        for (long done = 0; done < length; ) {
            int n = (int) Math.min(size, length - done);
            buffer.copyTo(offset + done, got, 0, n);
            fill(want, offset + done, seed);
            int k = java.util.Arrays.mismatch(got, 0, n, want, 0, n);
            if (k >= 0) return offset + done + k;
            done += n;
        }
        return -1;
    }

    /**
     * Checks that all of {@code buffer} holds the pattern.
     *
     * @throws IllegalStateException naming the first offset that differs, what it holds and what was expected
     */
    public static void verify(VirtualMemoryBuffer buffer, long seed) {
        long at = firstMismatch(buffer, seed);
        if (at >= 0) {
            byte[] b = new byte[1];
            buffer.copyTo(at, b, 0, 1);
            throw new IllegalStateException(String.format("pattern (seed %d) differs at offset %d of %s: 0x%02X "
                    + "(expected: 0x%02X)", seed, at, buffer, b[0] & 0xFF, byteAt(at, seed) & 0xFF));
        }
    }

    private static void checkRange(VirtualMemoryBuffer buffer, long offset, long length) {
        if (offset < 0 || length < 0 || offset > buffer.size() - length) {
            throw new IndexOutOfBoundsException("offset " + offset + ", length " + length + " (expected: inside the "
                    + buffer.size() + " bytes of " + buffer + ")");
        }
    }
}
