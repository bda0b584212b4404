package org.cuvmm.internal;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.internal.jni.NativeRangeHandle;

/**
 * The door through which cuvmm's own packages (the pool) reach package-private parts of
 * {@code org.cuvmm} without making them public API: the JDK's "shared secrets" pattern.
 * Installed by {@link VirtualMemoryBuffer}'s static initializer.
 */
public final class BufferAccess {
    /** What the core offers to its own other packages. */
    public interface Bridge {
        /** A new range of at least {@code size} bytes from {@code resource} (driver calls). */
        NativeRangeHandle allocateRange(VirtualMemoryResource resource, long size);

        /**
         * A buffer of logical {@code size} over {@code range}; closing it hands {@code range}
         * to {@code recycler}. {@code tracked}: whether a cleaner watches for its leak.
         */
        VirtualMemoryBuffer wrap(VirtualMemoryResource resource, NativeRangeHandle range, long size,
                                 BufferRecycler recycler, boolean tracked);
    }

    private static volatile Bridge bridge;

    private BufferAccess() {}

    public static void install(Bridge b) { bridge = b; }

    public static Bridge get() {
        Bridge b = bridge;
        if (b == null) {
            try {
                Class.forName(VirtualMemoryBuffer.class.getName(), true, BufferAccess.class.getClassLoader());
            } catch (ClassNotFoundException e) {
                throw new IllegalStateException(e);
            }
            b = bridge;
        }
        return b;
    }
}
