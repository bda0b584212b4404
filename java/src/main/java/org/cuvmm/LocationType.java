package org.cuvmm;

/** {@code CUmemLocationType}: where the physical memory lives. */
public enum LocationType {
    /** On the resource's device. */
    DEVICE(1),
    /** In host memory (needs {@link Device#supportsHostVirtualMemory()}); cannot be exported. */
    HOST(2),
    /** In host memory on a NUMA node (id from the options); can be exported. */
    HOST_NUMA(3),
    /**
     * In host memory on the calling thread's NUMA node. Listed for completeness of the
     * driver's enum: cuMemCreate refuses it, so options with it do not build.
     */
    HOST_NUMA_CURRENT(4);

    final int cuValue;

    LocationType(int cuValue) { this.cuValue = cuValue; }

    /** True for the host-memory locations, whose buffers the CPU can read and write directly. */
    public boolean isHost() { return this != DEVICE; }
}
