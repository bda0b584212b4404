package org.cuvmm;

import java.util.Collections;
import java.util.Objects;
import java.util.Set;
import java.util.TreeSet;

/**
 * Immutable options of a {@link VirtualMemoryResource}: what every physical allocation is
 * created with and who may access its mappings. Built with {@link #builder()}; a combination
 * that is wrong on every device is rejected by {@link Builder#build()} with a message that
 * names the option. What depends on the machine is checked by {@link
 * VirtualMemoryResource#create(int, VirtualMemoryResourceOptions)}: a capability the device
 * lacks is an {@code IllegalArgumentException} naming the option; what only the driver can
 * judge (an allocation type {@code cuMemCreate} does not take, a NUMA node that does not
 * exist) is a {@link CudaException} from the granularity query whose message names the
 * options it was asked with.
 *
 * <table class="striped">
 * <caption>Options and defaults</caption>
 * <tr><th>option</th><th>default</th><th>meaning</th></tr>
 * <tr><td>allocationType</td><td>PINNED</td><td>{@code CUmemAllocationType}</td></tr>
 * <tr><td>locationType / locationId</td><td>DEVICE / 0</td><td>where memory lives; the id is the
 *     NUMA node for HOST_NUMA and ignored otherwise (DEVICE memory lives on the resource's device)</td></tr>
 * <tr><td>handleType</td><td>POSIX_FD</td><td>how allocations can be exported</td></tr>
 * <tr><td>granularity</td><td>RECOMMENDED</td><td>sizes are rounded up to this</td></tr>
 * <tr><td>gpuDirectRdma</td><td>false</td><td>ask for GPUDirect RDMA capable memory</td></tr>
 * <tr><td>addressHint</td><td>0</td><td>where each allocate() and importBuffer() first tries to reserve
 *     (a hint: the first that finds the address free gets it, later ones land elsewhere)</td></tr>
 * <tr><td>addressAlignment</td><td>0 (granularity)</td><td>alignment of reservations</td></tr>
 * <tr><td>peers</td><td>none</td><td>other device ordinals given {@code peerAccess}</td></tr>
 * <tr><td>selfAccess / peerAccess</td><td>READ_WRITE / READ_WRITE</td><td>access of the resource's
 *     device and of the peers</td></tr>
 * </table>
 *
 * <pre>{@code
 * VirtualMemoryResourceOptions options = VirtualMemoryResourceOptions.builder()
 *         .handleType(HandleType.POSIX_FD)
 *         .peers(1)
 *         .peerAccess(AccessMode.READ)
 *         .build();
 * }</pre>
 */
public final class VirtualMemoryResourceOptions {
    private final AllocationType allocationType;
    private final LocationType locationType;
    private final int locationId;
    private final HandleType handleType;
    private final GranularityKind granularity;
    private final boolean gpuDirectRdma;
    private final long addressHint;
    private final long addressAlignment;
    private final Set<Integer> peers;
    private final AccessMode selfAccess;
    private final AccessMode peerAccess;

    private VirtualMemoryResourceOptions(Builder b) {
        this.allocationType = b.allocationType;
        this.locationType = b.locationType;
        this.locationId = b.locationId;
        this.handleType = b.handleType;
        this.granularity = b.granularity;
        this.gpuDirectRdma = b.gpuDirectRdma;
        this.addressHint = b.addressHint;
        this.addressAlignment = b.addressAlignment;
        this.peers = Collections.unmodifiableSet(new TreeSet<>(b.peers));
        this.selfAccess = b.selfAccess;
        this.peerAccess = b.peerAccess;
    }

    /** The defaults: pinned device memory, exportable as POSIX fds, read-write for its device. */
    public static VirtualMemoryResourceOptions defaults() { return builder().build(); }

    public static Builder builder() { return new Builder(); }

    /** A builder starting from these options. */
    public Builder toBuilder() {
        Builder b = new Builder();
        b.allocationType = allocationType;
        b.locationType = locationType;
        b.locationId = locationId;
        b.handleType = handleType;
        b.granularity = granularity;
        b.gpuDirectRdma = gpuDirectRdma;
        b.addressHint = addressHint;
        b.addressAlignment = addressAlignment;
        b.peers.addAll(peers);
        b.selfAccess = selfAccess;
        b.peerAccess = peerAccess;
        return b;
    }

    public AllocationType allocationType() { return allocationType; }
    public LocationType locationType() { return locationType; }
    /** NUMA node for {@link LocationType#HOST_NUMA}; ignored for other locations. */
    public int locationId() { return locationId; }
    public HandleType handleType() { return handleType; }
    public GranularityKind granularity() { return granularity; }
    public boolean gpuDirectRdma() { return gpuDirectRdma; }
    public long addressHint() { return addressHint; }
    public long addressAlignment() { return addressAlignment; }
    /** Peer device ordinals, ascending. */
    public Set<Integer> peers() { return peers; }
    public AccessMode selfAccess() { return selfAccess; }
    public AccessMode peerAccess() { return peerAccess; }

    @Override
    public boolean equals(Object o) {
        if (this == o) return true;
        if (!(o instanceof VirtualMemoryResourceOptions)) return false;
        VirtualMemoryResourceOptions x = (VirtualMemoryResourceOptions) o;
        return allocationType == x.allocationType && locationType == x.locationType
                && significantLocationId() == x.significantLocationId() && handleType == x.handleType
                && granularity == x.granularity && gpuDirectRdma == x.gpuDirectRdma
                && addressHint == x.addressHint && addressAlignment == x.addressAlignment && peers.equals(x.peers)
                && selfAccess == x.selfAccess && peerAccess == x.peerAccess;
    }

    @Override
    public int hashCode() {
        return Objects.hash(allocationType, locationType, significantLocationId(), handleType, granularity, gpuDirectRdma,
                addressHint, addressAlignment, peers, selfAccess, peerAccess);
    }

    /**
     * The location id where it means something (the NUMA node of HOST_NUMA), else 0: the id is
     * ignored for other locations, so two options that differ only there are equal (and a
     * grow with either keeps the resource's allocation spec).
     */
    private int significantLocationId() {
        return locationType == LocationType.HOST_NUMA ? locationId : 0;
    }

    @Override
    public String toString() {
        return "VirtualMemoryResourceOptions[allocationType=" + allocationType + ", locationType=" + locationType
                + (locationType == LocationType.HOST_NUMA ? ", locationId=" + locationId : "")
                + ", handleType=" + handleType + ", granularity=" + granularity + ", gpuDirectRdma=" + gpuDirectRdma
                + ", addressHint=0x" + Long.toHexString(addressHint) + ", addressAlignment=" + addressAlignment
                + ", peers=" + peers + ", selfAccess=" + selfAccess + ", peerAccess=" + peerAccess + "]";
    }

    /** Mutable builder; {@link #build()} validates. Not thread-safe. */
    public static final class Builder {
        private AllocationType allocationType = AllocationType.PINNED;
        private LocationType locationType = LocationType.DEVICE;
        private int locationId = 0;
        private HandleType handleType = HandleType.POSIX_FD;
        private GranularityKind granularity = GranularityKind.RECOMMENDED;
        private boolean gpuDirectRdma = false;
        private long addressHint = 0;
        private long addressAlignment = 0;
        private final Set<Integer> peers = new TreeSet<>();
        private AccessMode selfAccess = AccessMode.READ_WRITE;
        private AccessMode peerAccess = AccessMode.READ_WRITE;

        private Builder() {}

        public Builder allocationType(AllocationType value) { allocationType = require("allocationType", value); return this; }
        public Builder locationType(LocationType value) { locationType = require("locationType", value); return this; }
        /** The NUMA node id used with {@link LocationType#HOST_NUMA}. */
        public Builder locationId(int value) { locationId = value; return this; }
        public Builder handleType(HandleType value) { handleType = require("handleType", value); return this; }
        public Builder granularity(GranularityKind value) { granularity = require("granularity", value); return this; }
        public Builder gpuDirectRdma(boolean value) { gpuDirectRdma = value; return this; }
        /**
         * Address every {@code allocate()} and {@code importBuffer()} first asks the driver for (as
         * cuda.core's {@code addr_hint}). A hint: the driver places the range elsewhere when that
         * address is taken (so only one live buffer can sit there). A grow that moves reserves
         * without it (the old range may sit there).
         */
        public Builder addressHint(long value) { addressHint = value; return this; }
        /** Alignment of reservations in bytes: 0 (the granularity) or a power of two. */
        public Builder addressAlignment(long value) { addressAlignment = value; return this; }
        /** Replaces the peer set: device ordinals given {@link #peerAccess}. */
        public Builder peers(int... ordinals) {
            require("peers", ordinals);
            peers.clear();
            for (int p : ordinals) peers.add(p);
            return this;
        }
        public Builder peers(Set<Integer> ordinals) {
            Set<Integer> checked = new TreeSet<>();
            for (Integer p : require("peers", ordinals)) checked.add(require("peers element", p));
            peers.clear(); // only once every element was accepted: a refused set leaves the builder as it was
            peers.addAll(checked);
            return this;
        }
        public Builder selfAccess(AccessMode value) { selfAccess = require("selfAccess", value); return this; }
        public Builder peerAccess(AccessMode value) { peerAccess = require("peerAccess", value); return this; }

        /**
         * Validates and builds.
         *
         * @throws IllegalArgumentException naming the option, its value and what is expected
         */
        public VirtualMemoryResourceOptions build() {
            if (addressHint < 0) {
                throw invalid("addressHint", "0x" + Long.toHexString(addressHint), "a non-negative address, or 0 for none");
            }
            if (addressAlignment < 0 || (addressAlignment & (addressAlignment - 1)) != 0) {
                throw invalid("addressAlignment", addressAlignment, "0 or a power of two");
            }
            for (int p : peers) {
                if (p < 0) throw invalid("peers", peers, "device ordinals >= 0");
            }
            if (locationType == LocationType.HOST_NUMA && locationId < 0) {
                throw invalid("locationId", locationId, "a NUMA node id >= 0 with locationType HOST_NUMA");
            }
            if (locationType == LocationType.HOST_NUMA_CURRENT) {
                throw invalid("locationType", "HOST_NUMA_CURRENT", "HOST_NUMA with locationId set to the node, or HOST: "
                        + "cuMemCreate refuses HOST_NUMA_CURRENT with CUDA_ERROR_INVALID_VALUE");
            }
            if (locationType == LocationType.HOST && handleType != HandleType.NONE) {
                throw invalid("handleType", handleType + " with locationType HOST",
                        "handleType NONE, or locationType HOST_NUMA to share host memory");
            }
            if (locationType.isHost() && handleType == HandleType.FABRIC) {
                throw invalid("handleType", "FABRIC with locationType " + locationType, "POSIX_FD or NONE for host memory");
            }
            if (locationType.isHost() && gpuDirectRdma) {
                throw invalid("gpuDirectRdma", "true with locationType " + locationType,
                        "false: GPUDirect RDMA applies to device memory");
            }
            if (allocationType == AllocationType.MANAGED && handleType != HandleType.NONE) {
                throw invalid("handleType", handleType + " with allocationType MANAGED",
                        "NONE: managed allocations cannot be exported");
            }
            if (!peers.isEmpty() && peerAccess == AccessMode.NONE) {
                throw invalid("peerAccess", "NONE with peers " + peers, "READ or READ_WRITE, or no peers");
            }
            return new VirtualMemoryResourceOptions(this);
        }

        private static <T> T require(String name, T value) {
            if (value == null) throw new IllegalArgumentException(name + ": null (expected: a value)");
            return value;
        }

        private static IllegalArgumentException invalid(String option, Object value, String expected) {
            return new IllegalArgumentException(option + ": " + value + " (expected: " + expected + ")");
        }
    }
}
