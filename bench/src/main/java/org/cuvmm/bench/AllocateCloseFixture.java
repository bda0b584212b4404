package org.cuvmm.bench;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;

/**
 * One {@code allocate(size)} then {@code close()} per {@link #run()}, on a resource with the
 * default options (what {@code VirtualMemoryResource.create(0)} gives). Used by the JMH
 * benchmark and, outside JMH, by {@link RatioReport} to count the driver calls of one op.
 *
 * <p>Owns its resource; {@link #close()} closes it. Not thread-safe.
 */
final class AllocateCloseFixture implements AutoCloseable {
    private final VirtualMemoryResource resource;
    private final long size;

    /**
     * @throws IllegalArgumentException when {@code size} is not a positive multiple of the
     *     granularity (the benchmark would then measure rounding, not the size it names)
     */
    AllocateCloseFixture(long size) {
        this.resource = VirtualMemoryResource.create(0);
        this.size = size;
        if (size <= 0 || size % resource.granularity() != 0) {
            resource.close();
            throw new IllegalArgumentException("size: " + size + " (expected: a positive multiple of the granularity "
                    + resource.granularity() + ")");
        }
    }

    /** Allocates and closes one buffer; returns its address (for the blackhole). */
    long run() {
        VirtualMemoryBuffer buffer = resource.allocate(size);
        long address = buffer.address();
        buffer.close();
        return address;
    }

    @Override
    public void close() {
        resource.close();
    }
}
