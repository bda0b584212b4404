package org.cuvmm.pool;

import static org.junit.jupiter.api.Assertions.*;

import org.junit.jupiter.api.Test;

/** SizeClasses' javadoc, read as a user would: the promises no other test checks. */
class SizeClassesJavadocContractTest {
    private static final long MiB = 1L << 20;

    /** "with 2 MiB granules there are 164 classes"; the last is the largest not above 2^62 bytes. */
    @Test
    void twoMiBGranulesMake164Classes() {
        SizeClasses c = SizeClasses.forGranularity(2 * MiB);
        assertEquals(164, c.count());
        assertEquals(c.classSize(c.count() - 1), c.maxClassSize());
        assertTrue(c.maxClassSize() <= 1L << 62);
        assertEquals(2 * MiB, c.granularity());
    }

    /** The class table of the javadoc: 1g..16g, then 20g, 24g, 28g, 32g, then 40g, 48g, 56g, 64g. */
    @Test
    void theDocumentedTable() {
        long g = 2 * MiB;
        SizeClasses c = SizeClasses.forGranularity(g);
        for (int i = 0; i < 16; i++) assertEquals((i + 1) * g, c.classSize(i));
        long[] next = {20, 24, 28, 32, 40, 48, 56, 64};
        for (int i = 0; i < next.length; i++) assertEquals(next[i] * g, c.classSize(16 + i));
        // The example: 3 MiB with 2 MiB granules is class 1, 4 MiB.
        int idx = c.sizeIdx(3 << 20);
        assertEquals(4 * MiB, c.classSize(idx));
        // "the smallest class that holds reqSize"
        assertEquals(0, c.sizeIdx(1));
        assertEquals(0, c.sizeIdx(g));
        assertEquals(1, c.sizeIdx(g + 1));
        assertEquals(16, c.sizeIdx(17 * g));
        assertEquals(16, c.sizeIdx(20 * g));
        assertEquals(17, c.sizeIdx(20 * g + 1));
        assertEquals(c.count() - 1, c.sizeIdx(c.maxClassSize()));
    }

    /** reuseLimitIdx: the largest class of at most 2x classSize(sizeIdx). */
    @Test
    void reuseLimitIsTheLargestClassWithinTwice() {
        SizeClasses c = SizeClasses.forGranularity(2 * MiB);
        for (int i = 0; i < c.count(); i++) {
            int limit = c.reuseLimitIdx(i);
            assertTrue(limit >= i);
            long bound = c.classSize(i) > c.maxClassSize() / 2 ? Long.MAX_VALUE : 2 * c.classSize(i);
            assertTrue(c.classSize(limit) <= bound, "class " + i);
            if (limit + 1 < c.count()) assertTrue(c.classSize(limit + 1) > bound, "class " + i);
        }
        assertEquals(1, c.reuseLimitIdx(0));
        assertEquals(c.count() - 1, c.reuseLimitIdx(c.count() - 1));
    }

    /** The refusals: IAE for sizes and granularities, IOOBE for class indexes, each naming the value. */
    @Test
    void refusalsNameTheValue() {
        SizeClasses c = SizeClasses.forGranularity(2 * MiB);
        assertTrue(assertThrows(IllegalArgumentException.class, () -> c.sizeIdx(0)).getMessage().contains("reqSize: 0"));
        assertTrue(assertThrows(IllegalArgumentException.class, () -> c.sizeIdx(-1)).getMessage().contains("-1"));
        assertThrows(IllegalArgumentException.class, () -> c.sizeIdx(c.maxClassSize() + 1));
        assertTrue(assertThrows(IndexOutOfBoundsException.class, () -> c.classSize(c.count())).getMessage()
                .contains(String.valueOf(c.count())));
        assertThrows(IndexOutOfBoundsException.class, () -> c.classSize(-1));
        assertThrows(IndexOutOfBoundsException.class, () -> c.reuseLimitIdx(c.count()));
        assertThrows(IndexOutOfBoundsException.class, () -> c.reuseLimitIdx(-1));
        assertTrue(assertThrows(IllegalArgumentException.class, () -> SizeClasses.forGranularity(0)).getMessage()
                .contains("granularity: 0"));
        assertThrows(IllegalArgumentException.class, () -> SizeClasses.forGranularity(-4096));
        assertThrows(IllegalArgumentException.class, () -> SizeClasses.forGranularity((1L << 62) + 1));
    }

    /** Edge granularities: 2^62 (one class) and a granularity that is not a power of two. */
    @Test
    void edgeGranularities() {
        SizeClasses one = SizeClasses.forGranularity(1L << 62);
        assertEquals(1, one.count());
        assertEquals(1L << 62, one.maxClassSize());
        assertEquals(0, one.sizeIdx(1));
        assertEquals(0, one.sizeIdx(1L << 62));
        assertEquals(0, one.reuseLimitIdx(0));
        SizeClasses odd = SizeClasses.forGranularity(3000);
        assertEquals(3000, odd.classSize(odd.sizeIdx(1)));
        assertEquals(6000, odd.classSize(odd.sizeIdx(3001)));
        assertTrue(odd.maxClassSize() <= 1L << 62);
        for (long req : new long[] {1, 2999, 3000, 3001, 48_000, 48_001, 1L << 40, odd.maxClassSize()}) {
            long size = odd.classSize(odd.sizeIdx(req));
            assertTrue(size >= req && size % 3000 == 0, req + " -> " + size);
            int idx = odd.sizeIdx(req);
            if (idx > 0) assertTrue(odd.classSize(idx - 1) < req, "smallest class holding " + req);
        }
        SizeClasses unit = SizeClasses.forGranularity(1);
        assertEquals(1, unit.classSize(unit.sizeIdx(1)));
        assertEquals(unit.count() - 1, unit.sizeIdx(unit.maxClassSize()));
    }
}
