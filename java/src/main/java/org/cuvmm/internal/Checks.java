package org.cuvmm.internal;

/** Argument checks with uniform messages: "name: value (expected: ...)". */
public final class Checks {
    private Checks() {}

    public static long nonNegative(String name, long value) {
        if (value < 0) throw new IllegalArgumentException(name + ": " + value + " (expected: >= 0)");
        return value;
    }

    /** Checks that [offset, offset + length) lies within a buffer of {@code size} bytes. */
    public static void window(String what, long offset, long length, long size) {
        if (offset < 0 || length < 0 || offset > size || length > size - offset) {
            throw new IndexOutOfBoundsException(what + ": offset " + offset + ", length " + length
                    + " (expected: 0 <= offset, 0 <= length, offset + length <= " + size + ", the buffer size)");
        }
    }

    /** Checks that [offset, offset + length) lies within an array of {@code arrayLength}. */
    public static void arrayWindow(String what, int offset, int length, int arrayLength) {
        if (offset < 0 || length < 0 || offset > arrayLength || length > arrayLength - offset) {
            throw new IndexOutOfBoundsException(what + ": offset " + offset + ", length " + length
                    + " (expected: within the array of " + arrayLength + " elements)");
        }
    }

    public static <T> T notNull(String name, T value) {
        if (value == null) throw new NullPointerException(name + ": null (expected: a value)");
        return value;
    }
}
