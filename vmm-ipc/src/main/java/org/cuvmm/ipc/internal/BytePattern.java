package org.cuvmm.ipc.internal;

import java.util.Arrays;
import java.util.Objects;

import org.cuvmm.VirtualMemoryBuffer;

/**
 * Deterministic bytes for filling and checking buffers: cuvmm's one byte-pattern helper, for
 * its own tools ({@code cuvmm serve --seed}, {@code attach --verify}, the demos) and its
 * tests (not the examples: users copy those, and this package is not exported).
 * <b>Not API</b>: public only so that cuvmm's other modules can use it; it may change
 * without notice. Clients implement the pattern from docs/PROTOCOL.md, as the test
 * suite's Python client does.
 *
 * <p>Two patterns, because they serve two checks:
 * <ul>
 * <li><b>seeded</b> ({@link #byteAt}, {@link #fill}, {@link #firstMismatch}, {@link #verify}):
 *     the pattern of docs/PROTOCOL.md section 9, byte {@code i} is
 *     {@code (i * 131 + seed * 7 + (i >>> 11)) & 0xFF}. Cheap to compute in any language, but
 *     it repeats every 512 KiB, so it cannot show a chunk mapped at the wrong offset.
 * <li><b>hashed</b> ({@link #hashAt}, {@link #fillHashed}, {@link #hashMismatch}): splitmix64's
 *     finaliser of the offset, with no period, so a chunk mapped at the wrong offset, a stale
 *     page or a zeroed range all read back wrong (the grow demo's check).
 * </ul>
 * Buffers are filled and read through {@link VirtualMemoryBuffer#copyFrom} /
 * {@link VirtualMemoryBuffer#copyTo} one block (1 MiB) at a time, so this works on any driver.
 */
public final class BytePattern {
    private static final int BLOCK = 1 << 20;
    private static final long HASH_SEED = 0x6375766D6DL; // "cuvmm"

    private BytePattern() {}

    // ---------------------------------------------------------------- seeded (PROTOCOL.md section 9)

    /** Byte {@code index} of the seeded pattern. */
    public static byte byteAt(long index, long seed) {
        if (index < 0) throw new IllegalArgumentException("index: " + index + " (expected: >= 0)");
        return (byte) ((index * 131 + seed * 7 + (index >>> 11)) & 0xFF);
    }

    /** Writes seeded pattern bytes {@code start .. start + dst.length - 1} into {@code dst}. */
    public static void fill(byte[] dst, long start, long seed) {
        Objects.requireNonNull(dst, "dst");
        if (start < 0) throw new IllegalArgumentException("start: " + start + " (expected: >= 0)");
        long s7 = seed * 7;
        for (int j = 0; j < dst.length; j++) {
            long i = start + j;
            dst[j] = (byte) ((i * 131 + s7 + (i >>> 11)) & 0xFF);
        }
    }

    /** Fills all of {@code buffer} (its {@code size()} bytes) with the seeded pattern. */
    public static void fill(VirtualMemoryBuffer buffer, long seed) {
        Objects.requireNonNull(buffer, "buffer");
        fill(buffer, 0, buffer.size(), seed);
    }

    /** Fills bytes {@code offset .. offset + length - 1} of {@code buffer} with seeded pattern bytes of the same indices. */
    public static void fill(VirtualMemoryBuffer buffer, long offset, long length, long seed) {
        write(buffer, offset, length, (dst, start) -> fill(dst, start, seed));
    }

    /** The first offset of {@code buffer} that does not hold the seeded pattern, or -1 when all do. */
    public static long firstMismatch(VirtualMemoryBuffer buffer, long seed) {
        Objects.requireNonNull(buffer, "buffer");
        return firstMismatch(buffer, 0, buffer.size(), seed);
    }

    /** The first offset in {@code offset .. offset + length - 1} that does not hold the seeded pattern, or -1. */
    public static long firstMismatch(VirtualMemoryBuffer buffer, long offset, long length, long seed) {
        return mismatch(buffer, offset, length, (dst, start) -> fill(dst, start, seed));
    }

    /**
     * Checks that all of {@code buffer} holds the seeded pattern.
     *
     * @throws IllegalStateException naming the first offset that differs, what it holds and what was expected
     */
    public static void verify(VirtualMemoryBuffer buffer, long seed) {
        long at = firstMismatch(buffer, seed);
        if (at >= 0) {
            throw new IllegalStateException("pattern (seed " + seed + ") differs at offset " + at + " of " + buffer
                    + ": " + describe(buffer, at, byteAt(at, seed)));
        }
    }

    // ---------------------------------------------------------------- hashed (no period)

    /** Byte {@code index} of the hashed pattern (splitmix64's finaliser). */
    public static byte hashAt(long index) {
        long z = index + HASH_SEED + 0x9E3779B97F4A7C15L;
        z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
        z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
        return (byte) (z ^ (z >>> 31));
    }

    /** Writes the hashed pattern into bytes {@code offset .. offset + length - 1} of {@code buffer}. */
    public static void fillHashed(VirtualMemoryBuffer buffer, long offset, long length) {
        write(buffer, offset, length, BytePattern::hashed);
    }

    /**
     * Reads bytes {@code offset .. offset + length - 1} of {@code buffer} back and compares
     * them with the hashed pattern.
     *
     * @return null when every byte matches, else "byte at offset 0x.. is 0x.. (expected: 0x..)"
     *     for the first that does not
     */
    public static String hashMismatch(VirtualMemoryBuffer buffer, long offset, long length) {
        long at = mismatch(buffer, offset, length, BytePattern::hashed);
        return at < 0 ? null : String.format("byte at offset 0x%x is ", at) + describe(buffer, at, hashAt(at));
    }

    private static void hashed(byte[] dst, long start) {
        for (int j = 0; j < dst.length; j++) dst[j] = hashAt(start + j);
    }

    // ---------------------------------------------------------------- block-wise I/O, shared

    /** Fills {@code dst} with the pattern's bytes from index {@code start}. */
    @FunctionalInterface
    private interface Generator {
        void fill(byte[] dst, long start);
    }

    private static void write(VirtualMemoryBuffer buffer, long offset, long length, Generator g) {
        Objects.requireNonNull(buffer, "buffer");
        checkRange(buffer, offset, length);
        byte[] block = new byte[(int) Math.min(BLOCK, length)];
        for (long done = 0; done < length; ) {
            int n = (int) Math.min(block.length, length - done);
            byte[] b = n == block.length ? block : new byte[n];
            g.fill(b, offset + done);
            buffer.copyFrom(offset + done, b, 0, n);
            done += n;
        }
    }

    private static long mismatch(VirtualMemoryBuffer buffer, long offset, long length, Generator g) {
        Objects.requireNonNull(buffer, "buffer");
        checkRange(buffer, offset, length);
        int size = (int) Math.min(BLOCK, length);
        byte[] got = new byte[size];
        byte[] want = new byte[size];
        for (long done = 0; done < length; ) {
            int n = (int) Math.min(size, length - done);
            byte[] w = n == size ? want : new byte[n];
            buffer.copyTo(offset + done, got, 0, n);
            g.fill(w, offset + done);
            int k = Arrays.mismatch(got, 0, n, w, 0, n);
            if (k >= 0) return offset + done + k;
            done += n;
        }
        return -1;
    }

    private static String describe(VirtualMemoryBuffer buffer, long at, byte want) {
        byte[] b = new byte[1];
        buffer.copyTo(at, b, 0, 1);
        return String.format("0x%02X (expected: 0x%02X)", b[0] & 0xFF, want & 0xFF);
    }

    private static void checkRange(VirtualMemoryBuffer buffer, long offset, long length) {
        if (offset < 0 || length < 0 || offset > buffer.size() - length) {
            throw new IndexOutOfBoundsException("offset " + offset + ", length " + length + " (expected: inside the "
                    + buffer.size() + " bytes of " + buffer + ")");
        }
    }
}
