package org.cuvmm.cli.demo;

import org.cuvmm.VirtualMemoryBuffer;

/**
 * The demo's data: byte {@code i} of a buffer is a hash of {@code i}, so a chunk mapped at the
 * wrong offset, a stale page or a zeroed range all read back wrong (a short repeating pattern
 * would hide a chunk shifted by a multiple of its period).
 */
final class BytePattern {
    private static final int BLOCK = 1 << 20;
    private static final long SEED = 0x6375766D6DL; // "cuvmm"

    private BytePattern() {}

    /** The expected value of the byte at {@code offset} (splitmix64's finaliser). */
    static byte at(long offset) {
        long z = offset + SEED + 0x9E3779B97F4A7C15L;
        z = (z ^ (z >>> 30)) * 0xBF58476D1CE4E5B9L;
        z = (z ^ (z >>> 27)) * 0x94D049BB133111EBL;
        return (byte) (z ^ (z >>> 31));
    }

    /** Writes the pattern into {@code [from, to)} of {@code buffer}. */
    static void write(VirtualMemoryBuffer buffer, long from, long to) {
        byte[] block = new byte[(int) Math.min(BLOCK, Math.max(0, to - from))];
        for (long at = from; at < to; at += block.length) {
            int n = (int) Math.min(block.length, to - at);
            for (int i = 0; i < n; i++) block[i] = at(at + i);
            buffer.copyFrom(at, block, 0, n);
        }
    }

    /**
     * Reads {@code [from, to)} of {@code buffer} back and compares it with the pattern.
     *
     * @return null when every byte matches, else a description of the first that does not
     */
    static String verify(VirtualMemoryBuffer buffer, long from, long to) {
        byte[] block = new byte[(int) Math.min(BLOCK, Math.max(0, to - from))];
        for (long at = from; at < to; at += block.length) {
            int n = (int) Math.min(block.length, to - at);
            buffer.copyTo(at, block, 0, n);
            for (int i = 0; i < n; i++) {
                byte want = at(at + i);
                if (block[i] != want) {
                    return String.format("byte at offset 0x%x is 0x%02x, expected 0x%02x", at + i,
                            block[i] & 0xFF, want & 0xFF);
                }
            }
        }
        return null;
    }
}
