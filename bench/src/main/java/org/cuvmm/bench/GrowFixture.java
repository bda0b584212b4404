package org.cuvmm.bench;

import org.cuvmm.BufferOrigin;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.VirtualMemoryResourceOptions;

/**
 * A one-chunk base buffer that every {@link #run()} grows to two chunks and then closes the
 * grown buffer again (which drops only the new chunk: the base keeps its own).
 *
 * <ul>
 * <li>{@link #inPlace()}: the chunk right after the base is free, so the grow maps the new
 *     chunk there ({@link BufferOrigin#GROWN_IN_PLACE}, same address).</li>
 * <li>{@link #moving()}: a decoy buffer occupies the chunk right after the base, so the grow
 *     reserves a new two-chunk range, re-maps the base chunk and maps a new one
 *     ({@link BufferOrigin#MOVED}, new address).</li>
 * </ul>
 *
 * <p>Placement is made deterministic with address hints: a probe allocation finds a free
 * range of {@link #PROBE_CHUNKS} chunks, is closed, and the base goes at its start (the decoy
 * right after it). Every {@link #run()} checks the outcome and throws
 * {@link IllegalStateException} if it is not the one this fixture measures, so a benchmark
 * can never silently time the other path.
 *
 * <p>Owns its resources and buffers; {@link #close()} releases them. Not thread-safe.
 */
final class GrowFixture implements AutoCloseable {
    /** Size of the probed free range: room for the base, the next chunk and slack above. */
    private static final int PROBE_CHUNKS = 16;

    private final BufferOrigin expected;
    private final VirtualMemoryResource resource;
    private final VirtualMemoryResource decoyResource;
    private final VirtualMemoryBuffer base;
    private final VirtualMemoryBuffer decoy;
    private final long granularity;
    private final long grownSize;

    static GrowFixture inPlace() { return new GrowFixture(BufferOrigin.GROWN_IN_PLACE); }

    static GrowFixture moving() { return new GrowFixture(BufferOrigin.MOVED); }

    private GrowFixture(BufferOrigin expected) {
        this.expected = expected;
        long start;
        long g;
        try (VirtualMemoryResource probe = VirtualMemoryResource.create(0)) {
            g = probe.granularity();
            try (VirtualMemoryBuffer free = probe.allocate(PROBE_CHUNKS * g)) {
                start = free.address();
            }
        }
        this.granularity = g;
        this.grownSize = 2 * g;
        this.resource = VirtualMemoryResource.create(0, hinted(start));
        VirtualMemoryResource dr = null;
        VirtualMemoryBuffer b = null;
        VirtualMemoryBuffer d = null;
        try {
            b = resource.allocate(g);
            if (b.address() != start) {
                throw new IllegalStateException("base buffer landed at 0x" + Long.toHexString(b.address())
                        + ", not at the hinted free address 0x" + Long.toHexString(start)
                        + " (something mapped there in between); rerun the benchmark");
            }
            if (expected == BufferOrigin.MOVED) {
                dr = VirtualMemoryResource.create(0, hinted(start + g));
                d = dr.allocate(g);
                if (d.address() != start + g) {
                    throw new IllegalStateException("decoy buffer landed at 0x" + Long.toHexString(d.address())
                            + ", not right after the base buffer at 0x" + Long.toHexString(start + g));
                }
            }
        } catch (RuntimeException e) {
            if (d != null) d.close();
            if (dr != null) dr.close();
            if (b != null) b.close();
            resource.close();
            throw e;
        }
        this.base = b;
        this.decoy = d;
        this.decoyResource = dr;
        try {
            run();  // fails here, in setup, if the outcome is not the expected one
        } catch (RuntimeException e) {
            close();
            throw e;
        }
    }

    private static VirtualMemoryResourceOptions hinted(long address) {
        return VirtualMemoryResourceOptions.defaults().toBuilder().addressHint(address).build();
    }

    /**
     * Grows the base to two chunks, checks the outcome, closes the grown buffer.
     *
     * @return the grown buffer's address (for the blackhole)
     * @throws IllegalStateException when the grow did not take the path this fixture measures
     */
    long run() {
        VirtualMemoryBuffer grown = resource.modifyAllocation(base, grownSize);
        BufferOrigin origin = grown.origin();
        long address = grown.address();
        grown.close();
        if (origin != expected || (expected == BufferOrigin.GROWN_IN_PLACE) != (address == base.address())) {
            throw new IllegalStateException("grow of " + base + " gave " + origin + " at 0x" + Long.toHexString(address)
                    + "; this benchmark measures " + expected + (expected == BufferOrigin.GROWN_IN_PLACE
                            ? " (the range after the base buffer was taken by someone else)"
                            : " (the decoy no longer blocks the range after the base buffer)"));
        }
        return address;
    }

    long granularity() { return granularity; }

    @Override
    public void close() {
        if (decoy != null) decoy.close();
        if (decoyResource != null) decoyResource.close();
        base.close();
        resource.close();
    }
}
