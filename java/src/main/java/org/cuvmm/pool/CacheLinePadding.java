package org.cuvmm.pool;

/**
 * 64 bytes of padding that a class with hot, written fields extends (superclass fields are
 * laid out first), so that objects allocated next to each other in the heap (two pool slots,
 * two free lists, a counter and its neighbours) keep their written fields on separate cache
 * lines. Subclasses add the trailing 64 bytes themselves. Without it, two threads working on
 * two different slots of one pool slow each other down by sharing a line.
 */
@SuppressWarnings("unused")
abstract class CacheLinePadding {
    private long p00, p01, p02, p03, p04, p05, p06, p07;
}
