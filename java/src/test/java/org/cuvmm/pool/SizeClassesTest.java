package org.cuvmm.pool;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.SplittableRandom;

import org.junit.jupiter.api.Test;

/** The precomputed tables against the bit arithmetic, smallest fitting class, reuse limits. */
class SizeClassesTest {
    private static final long MiB = 1L << 20;
    /** A GPU's (and the host driver's default) granularity, a small one, one that is not a power of two, 1. */
    private static final long[] GRANULARITIES = {2 * MiB, 4096, 3 * MiB, 1};

    @Test
    void tablesMatchTheArithmetic() {
        for (long g : GRANULARITIES) {
            SizeClasses c = SizeClasses.forGranularity(g);
            long[] table = c.classSizeTable();
            assertEquals(c.count(), table.length);
            for (int idx = 0; idx < table.length; idx++) {
                long granules = SizeClasses.computeClassGranules(idx);
                assertEquals(granules * g, table[idx], "class " + idx + " of granularity " + g);
                assertEquals(idx, SizeClasses.computeSizeIdx(granules), "inverse at class " + idx);
                assertEquals(0, table[idx] % g, "a multiple of the granularity");
                if (idx > 0) assertTrue(table[idx] > table[idx - 1], "strictly increasing at " + idx);
            }
            for (int granules = 1; granules <= c.lookupGranules(); granules++) {
                assertEquals(SizeClasses.computeSizeIdx(granules), c.tableSizeIdx(granules),
                        "lookup table at " + granules + " granules of " + g);
            }
            assertEquals(table[table.length - 1], c.maxClassSize());
            assertTrue(c.maxClassSize() <= SizeClasses.SIZE_LIMIT_BYTES);
            assertTrue(SizeClasses.computeClassGranules(table.length) * (double) g > SizeClasses.SIZE_LIMIT_BYTES,
                    "the table stops at the last class under 2^62 bytes");
        }
    }

    @Test
    void layoutIsLinearThenFourPerDoubling() {
        SizeClasses c = SizeClasses.forGranularity(2 * MiB);
        assertEquals(164, c.count(), "2 MiB granules up to 2^62 bytes");
        for (int idx = 0; idx < 16; idx++) assertEquals((idx + 1) * 2 * MiB, c.classSize(idx));
        long[] expectedGranules = {20, 24, 28, 32, 40, 48, 56, 64, 80};
        for (int i = 0; i < expectedGranules.length; i++) {
            assertEquals(expectedGranules[i] * 2 * MiB, c.classSize(16 + i));
        }
        for (int idx = 16; idx < c.count(); idx++) {
            assertTrue(c.classSize(idx) * 4 <= c.classSize(idx - 1) * 5, "at most 25% between neighbours at " + idx);
        }
    }

    @Test
    void sizeIdxIsTheSmallestFittingClass() {
        SplittableRandom rnd = new SplittableRandom(4);
        for (long g : GRANULARITIES) {
            SizeClasses c = SizeClasses.forGranularity(g);
            for (int idx = 0; idx < c.count(); idx++) {
                long size = c.classSize(idx);
                assertEquals(idx, c.sizeIdx(size), "exactly a class");
                if (idx > 0 && c.classSize(idx - 1) < size - 1) {
                    assertEquals(idx, c.sizeIdx(size - 1), "one byte under a class");
                }
                if (idx > 0) assertEquals(idx, c.sizeIdx(c.classSize(idx - 1) + 1), "one byte over the class below");
            }
            for (int i = 0; i < 100_000; i++) {
                long reqSize = 1 + (rnd.nextBoolean() ? rnd.nextLong(64 * g) : rnd.nextLong(c.maxClassSize()));
                int idx = c.sizeIdx(reqSize);
                assertTrue(c.classSize(idx) >= reqSize, "class holds the request " + reqSize);
                assertTrue(idx == 0 || c.classSize(idx - 1) < reqSize, "no smaller class holds " + reqSize);
            }
        }
    }

    @Test
    void reuseLimitIsTheLargestClassWithinTwice() {
        for (long g : GRANULARITIES) {
            SizeClasses c = SizeClasses.forGranularity(g);
            for (int idx = 0; idx < c.count(); idx++) {
                int limit = c.reuseLimitIdx(idx);
                assertTrue(limit >= idx);
                long bound = c.classSize(idx) > c.maxClassSize() / 2 ? c.maxClassSize() : 2 * c.classSize(idx);
                assertTrue(c.classSize(limit) <= bound, "limit of " + idx + " within twice its class");
                assertTrue(limit + 1 == c.count() || c.classSize(limit + 1) > bound, "limit of " + idx + " is the largest");
            }
            assertEquals(1, c.reuseLimitIdx(0), "one granule may reuse two");
            assertEquals(15, c.reuseLimitIdx(7), "8 granules may reuse 16");
        }
    }

    @Test
    void badInputIsRefusedWithMessages() {
        SizeClasses c = SizeClasses.forGranularity(2 * MiB);
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> c.sizeIdx(0));
        assertTrue(e.getMessage().startsWith("reqSize: 0 (expected: 1 to "), e.getMessage());
        assertThrows(IllegalArgumentException.class, () -> c.sizeIdx(c.maxClassSize() + 1));
        assertThrows(IllegalArgumentException.class, () -> c.sizeIdx(Long.MAX_VALUE));
        assertThrows(IndexOutOfBoundsException.class, () -> c.classSize(c.count()));
        assertThrows(IndexOutOfBoundsException.class, () -> c.reuseLimitIdx(-1));
        e = assertThrows(IllegalArgumentException.class, () -> SizeClasses.forGranularity(0));
        assertTrue(e.getMessage().startsWith("granularity: 0 (expected: "), e.getMessage());
    }
}
