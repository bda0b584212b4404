package org.cuvmm.pool;

/**
 * The leading 128 bytes of a class with hot, written fields. Superclass fields are laid out
 * first, so a class that extends this one and adds its trailing padding (16
 * longs, after its hot fields, usually in a subclass of the class that declares them) keeps
 * those fields away from whatever the heap puts next to the object: two pool slots, two free
 * lists, two counter cells, which the garbage collector may copy side by side.
 *
 * <p>Why 128 bytes and not one 64-byte line: x86 cores prefetch the adjacent line of a pair
 * (the JDK's {@code @Contended} pads 128 bytes for the same reason). The object header is not
 * covered: nothing may write it on the hot path, which is why the free lists do not lock their
 * own monitor ({@link FreeListStripe}). {@code HotFieldLayoutTest} checks the layout this JVM
 * actually chose.
 *
 * <p>{@link #gapFiller} takes the 4 bytes after a compressed object header. Without it the
 * JVM (15 and later) puts a subclass's {@code int} or reference field there, in the line of
 * the header, outside the padding.
 */
@SuppressWarnings("unused")
abstract class CacheLinePadding {
    private int gapFiller;
    private long p00, p01, p02, p03, p04, p05, p06, p07, p08, p09, p10, p11, p12, p13, p14, p15;
}
