package org.cuvmm.testing;

/** Deterministic test bytes. */
public final class TestData {
    private TestData() {}

    /** {@code length} bytes of an xorshift sequence: different seeds, different bytes everywhere. */
    public static byte[] pattern(int length, int seed) {
        byte[] b = new byte[length];
        int x = seed * 0x9E3779B9 + 1;
        for (int i = 0; i < length; i++) {
            x ^= x << 13;
            x ^= x >>> 17;
            x ^= x << 5;
            b[i] = (byte) x;
        }
        return b;
    }
}
