package org.cuvmm.pool;

/**
 * The size classes of a {@link VirtualMemoryPool}: every class is a whole number of
 * granules (one granule is the resource's {@linkplain org.cuvmm.VirtualMemoryResource#granularity()
 * granularity}), and a request of {@code reqSize} bytes is served from the smallest class
 * that holds it.
 *
 * <table class="striped">
 * <caption>Classes, in granules (g = granularity; 2 MiB on GPUs and on the host driver by default)</caption>
 * <tr><th>sizeIdx</th><th>class size</th><th>spacing</th><th>worst case capacity over the request</th></tr>
 * <tr><td>0 to 15</td><td>1g, 2g, ... 16g</td><td>1 granule</td><td>less than one granule (the
 *     rounding the driver does anyway)</td></tr>
 * <tr><td>16 to 19</td><td>20g, 24g, 28g, 32g</td><td>4 granules</td><td rowspan="3">under 25%: four
 *     classes per doubling</td></tr>
 * <tr><td>20 to 23</td><td>40g, 48g, 56g, 64g</td><td>8 granules</td></tr>
 * <tr><td>...</td><td>(4 + m) &times; 2<sup>k-2</sup> g, m = 1..4</td><td>2<sup>k-2</sup> granules</td></tr>
 * </table>
 *
 * <p>The last class is the largest of that form not above 2<sup>62</sup> bytes
 * ({@link #maxClassSize()}), so no computation on a valid request can overflow a
 * {@code long}; with 2 MiB granules there are 164 classes.
 *
 * <p>Lookup is O(1) and allocation-free: {@link #sizeIdx(long)} turns the request into
 * granules (a shift when the granularity is a power of two), then into a class index by bit
 * arithmetic (the position of the highest bit of {@code granules - 1} picks the doubling, the
 * next two bits the class within it); requests up to {@value #LOOKUP_GRANULES} granules are
 * answered from a precomputed table instead. {@link #classSize(int)} reads a precomputed
 * table. The tables are checked against the arithmetic in the tests.
 *
 * <p>Reuse across classes: a request whose own class has no idle buffer may take an idle
 * buffer of a larger class, up to {@link #reuseLimitIdx(int)}: the largest class at most
 * {@value #MAX_REUSE_RATIO} times the request's class size. The bound keeps a burst of small
 * requests from pinning much larger buffers (at worst half of a reused buffer is slack),
 * while still sparing a driver allocation (hundreds of microseconds) whenever an idle buffer
 * close in size exists.
 *
 * <pre>{@code
 * SizeClasses classes = pool.sizeClasses();
 * int sizeIdx = classes.sizeIdx(3 << 20);        // 3 MiB with 2 MiB granules
 * long classSize = classes.classSize(sizeIdx);   // 4 MiB: the buffer's capacity
 * }</pre>
 *
 * <p>Immutable and thread-safe.
 */
public final class SizeClasses {
    /** Classes 1 to 16 granules are spaced one granule apart. */
    static final int LINEAR_CLASSES = 16;
    /** log2 of {@link #LINEAR_CLASSES}: the first doubling above the linear classes starts at 2^4 granules. */
    static final int LOG2_LINEAR_CLASSES = 4;
    /** log2 of the classes per doubling above the linear classes (4 classes: spacing 1/4 of the doubling's base). */
    static final int LOG2_CLASSES_PER_DOUBLING = 2;
    /** No class is larger than this many bytes: sums of a class and a granule stay far below 2^63. */
    static final long SIZE_LIMIT_BYTES = 1L << 62;
    /** Requests of at most this many granules are looked up in a table (2 GiB with 2 MiB granules). */
    static final int LOOKUP_GRANULES = 1024;
    /** A request may reuse an idle buffer of a larger class at most this many times its own class size. */
    public static final int MAX_REUSE_RATIO = 2;

    private final long granularity;
    /** log2(granularity), or -1 when the granularity is not a power of two (divide instead). */
    private final int granularityShift;
    /** sizeIdx -> class size in bytes. */
    private final long[] classSizeTable;
    /** granules - 1 -> sizeIdx, for requests of 1 to LOOKUP_GRANULES granules. */
    private final short[] granulesToSizeIdx;
    /** sizeIdx -> the largest sizeIdx a request of that class may reuse. */
    private final int[] reuseLimitTable;
    private final long maxClassSize;

    private SizeClasses(long granularity) {
        this.granularity = granularity;
        this.granularityShift = Long.bitCount(granularity) == 1 ? Long.numberOfTrailingZeros(granularity) : -1;
        long maxGranules = SIZE_LIMIT_BYTES / granularity;
        int count = 0;
        while (computeClassGranules(count) <= maxGranules) count++;
        classSizeTable = new long[count];
        for (int i = 0; i < count; i++) classSizeTable[i] = computeClassGranules(i) * granularity;
        maxClassSize = classSizeTable[count - 1];
        int lookup = (int) Math.min(LOOKUP_GRANULES, maxGranules);
        granulesToSizeIdx = new short[lookup];
        for (int g = 1; g <= lookup; g++) granulesToSizeIdx[g - 1] = (short) computeSizeIdx(g);
        reuseLimitTable = new int[count];
        for (int i = 0, limit = 0; i < count; i++) {
            long bound = classSizeTable[i] > maxClassSize / MAX_REUSE_RATIO ? maxClassSize
                    : classSizeTable[i] * MAX_REUSE_RATIO;
            while (limit + 1 < count && classSizeTable[limit + 1] <= bound) limit++;
            reuseLimitTable[i] = limit;
        }
    }

    /**
     * The classes for a resource of {@code granularity} bytes.
     *
     * @throws IllegalArgumentException when {@code granularity} is not positive or exceeds 2^62
     */
    public static SizeClasses forGranularity(long granularity) {
        if (granularity <= 0 || granularity > SIZE_LIMIT_BYTES) {
            throw new IllegalArgumentException("granularity: " + granularity + " (expected: 1 to " + SIZE_LIMIT_BYTES
                    + " bytes, the resource's granularity)");
        }
        return new SizeClasses(granularity);
    }

    /** Bytes per granule: every class is a multiple of this. */
    public long granularity() { return granularity; }

    /** Number of classes; valid {@code sizeIdx} values are 0 to {@code count() - 1}. */
    public int count() { return classSizeTable.length; }

    /** The largest class in bytes; a larger request cannot be pooled. */
    public long maxClassSize() { return maxClassSize; }

    /**
     * The index of the smallest class that holds {@code reqSize} bytes. O(1).
     *
     * @throws IllegalArgumentException when {@code reqSize} is not 1 to {@link #maxClassSize()}
     */
    public int sizeIdx(long reqSize) {
        if (reqSize <= 0 || reqSize > maxClassSize) {
            throw new IllegalArgumentException("reqSize: " + reqSize + " (expected: 1 to " + maxClassSize
                    + " bytes, the largest size class)");
        }
        long granules = granularityShift >= 0 ? (reqSize + granularity - 1) >>> granularityShift
                : (reqSize + granularity - 1) / granularity;
        return granules <= granulesToSizeIdx.length ? granulesToSizeIdx[(int) granules - 1] : computeSizeIdx(granules);
    }

    /**
     * The size in bytes of class {@code sizeIdx}: the capacity of every buffer of that class.
     *
     * @throws IndexOutOfBoundsException when {@code sizeIdx} is not 0 to {@code count() - 1}
     */
    public long classSize(int sizeIdx) {
        if (sizeIdx < 0 || sizeIdx >= classSizeTable.length) {
            throw new IndexOutOfBoundsException("sizeIdx: " + sizeIdx + " (expected: 0 to " + (classSizeTable.length - 1)
                    + ")");
        }
        return classSizeTable[sizeIdx];
    }

    /**
     * The largest class whose idle buffers a request of class {@code sizeIdx} may take when its
     * own class has none: the largest class of at most {@value #MAX_REUSE_RATIO} times
     * {@code classSize(sizeIdx)} bytes.
     *
     * @throws IndexOutOfBoundsException when {@code sizeIdx} is not 0 to {@code count() - 1}
     */
    public int reuseLimitIdx(int sizeIdx) {
        if (sizeIdx < 0 || sizeIdx >= reuseLimitTable.length) {
            throw new IndexOutOfBoundsException("sizeIdx: " + sizeIdx + " (expected: 0 to " + (reuseLimitTable.length - 1)
                    + ")");
        }
        return reuseLimitTable[sizeIdx];
    }

    /**
     * The class index for a request of {@code granules} granules (at least 1), by bit
     * arithmetic: 1..16 granules map to 0..15; above, with 2^k &lt; granules &le; 2^(k+1),
     * the class is 2^k + m &times; 2^(k-2) for the smallest m in 1..4 that holds the request.
     */
    static int computeSizeIdx(long granules) {
        if (granules <= LINEAR_CLASSES) return (int) granules - 1;
        int k = 63 - Long.numberOfLeadingZeros(granules - 1); // 2^k < granules <= 2^(k+1), k >= 4
        int spacingShift = k - LOG2_CLASSES_PER_DOUBLING;
        long m = (granules - (1L << k) + (1L << spacingShift) - 1) >>> spacingShift; // 1..4
        return LINEAR_CLASSES + ((k - LOG2_LINEAR_CLASSES) << LOG2_CLASSES_PER_DOUBLING) + (int) m - 1;
    }

    /** The size in granules of class {@code sizeIdx}: the inverse of {@link #computeSizeIdx(long)}. */
    static long computeClassGranules(int sizeIdx) {
        if (sizeIdx < LINEAR_CLASSES) return sizeIdx + 1;
        int above = sizeIdx - LINEAR_CLASSES;
        int k = (above >>> LOG2_CLASSES_PER_DOUBLING) + LOG2_LINEAR_CLASSES;
        long m = (above & ((1 << LOG2_CLASSES_PER_DOUBLING) - 1)) + 1;
        long base = 1L << LOG2_CLASSES_PER_DOUBLING; // the doubling's start, in units of its spacing
        // From a spacing of 2^60 granules on, every class exceeds 2^62 granules (and 8 << 60 overflows).
        if (k - LOG2_CLASSES_PER_DOUBLING >= 60) return Long.MAX_VALUE;
        return (base + m) << (k - LOG2_CLASSES_PER_DOUBLING);
    }

    /** The class table, for tests. */
    long[] classSizeTable() { return classSizeTable.clone(); }

    /** The granules-to-class lookup table, for tests. */
    int lookupGranules() { return granulesToSizeIdx.length; }

    int tableSizeIdx(int granules) { return granulesToSizeIdx[granules - 1]; }

    @Override
    public String toString() {
        return "SizeClasses[" + count() + " classes of " + granularity + "-byte granules, up to " + maxClassSize
                + " bytes]";
    }
}
