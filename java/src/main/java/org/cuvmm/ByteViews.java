package org.cuvmm;

import java.nio.ByteBuffer;

import org.bytedeco.javacpp.BytePointer;

/**
 * Direct {@link ByteBuffer} views of native memory that something else owns (a mapped
 * buffer, pinned memory, a staging piece). The view owns nothing: no deallocator is attached,
 * and the caller keeps the memory alive while the view is reachable (cleaner, registration).
 */
final class ByteViews {
    private ByteViews() {}

    /** A view of {@code bytes} bytes at {@code base}. */
    static ByteBuffer of(long base, long bytes) {
        // BytePointer: element size 1, so capacity is in bytes (a plain Pointer counts 8-byte elements).
        BytePointer p = new BytePointer() {
            {
                address = base;
            }
        };
        return p.capacity(bytes).asByteBuffer();
    }
}
