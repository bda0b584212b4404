package org.cuvmm;

import org.cuvmm.internal.AcquireState;
import org.cuvmm.internal.Checks;
import org.cuvmm.internal.NativeCalls;
import org.cuvmm.internal.jni.NativeApi;
import org.cuvmm.internal.jni.NativeRangeHandle;
import org.cuvmm.internal.jni.NativeSpecHandle;
import org.cuvmm.internal.jni.NativeSpecInput;
import org.cuvmm.internal.jni.NativeStatus;

/**
 * Allocates GPU memory with the driver's Virtual Memory Management API: every buffer is a
 * reserved virtual range with physical allocations mapped into it, so it can grow without
 * copying and be shared with other processes.
 *
 * <pre>{@code
 * try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
 *      VirtualMemoryBuffer small = resource.allocate(1 << 20);
 *      VirtualMemoryBuffer large = resource.modifyAllocation(small, 64 << 20)) {
 *     large.copyFrom(0, data, 0, data.length);
 * }
 * }</pre>
 *
 * <p>Thread-safe: any number of threads may allocate and modify concurrently; no lock is
 * held across a driver call. Closing the resource only stops new allocations: buffers it
 * made stay valid until they are closed. A close while another thread is inside a call on
 * the resource (an allocate, grow or import in progress) refuses, as a buffer's does: see
 * {@link #close()}.
 */
public final class VirtualMemoryResource implements AutoCloseable {
    private final Driver driver;
    private final int device;
    private final VirtualMemoryResourceOptions options;
    private final NativeSpecHandle spec;
    private final long granularity;
    private final AcquireState state = new AcquireState();

    private VirtualMemoryResource(Driver driver, int device, VirtualMemoryResourceOptions options,
                                  NativeSpecHandle spec) {
        this.driver = driver;
        this.device = device;
        this.options = options;
        this.spec = spec;
        this.granularity = spec.granularity();
    }

    /**
     * A resource on {@code device} with {@link VirtualMemoryResourceOptions#defaults()}.
     *
     * @throws IllegalArgumentException when the device does not exist or lacks what the
     *     defaults need (virtual memory management, POSIX fd export)
     */
    public static VirtualMemoryResource create(int device) {
        return create(device, VirtualMemoryResourceOptions.defaults());
    }

    /**
     * A resource on {@code device} with {@code options}.
     *
     * @throws IllegalArgumentException when the device does not exist, a peer is not another
     *     existing device, a peer cannot access memory on the device ({@link
     *     Driver#canAccessPeer}; asked for device-located memory with peer access), the device
     *     lacks a capability the options need, or {@code options.addressHint()} is not a multiple
     *     of the larger of the granularity and {@code addressAlignment}
     * @throws CudaException when the driver refuses the options (the granularity query: for
     *     example {@code AllocationType.MANAGED}, which {@code cuMemCreate} does not take, or a
     *     {@code HOST_NUMA} locationId that is not a NUMA node); its message names the options
     */
    public static VirtualMemoryResource create(int device, VirtualMemoryResourceOptions options) {
        Checks.notNull("options", options);
        Driver driver = Driver.get();
        Device dev = driver.device(device);
        checkCapabilities(driver, dev, options);
        NativeSpecHandle spec = buildSpec(device, options);
        long alignment = Math.max(spec.granularity(), options.addressAlignment());
        if (options.addressHint() % alignment != 0) {
            spec.close();
            throw new IllegalArgumentException("addressHint: 0x" + Long.toHexString(options.addressHint())
                    + " (expected: a multiple of " + alignment + ", the larger of the granularity and addressAlignment, "
                    + "or 0 for none)");
        }
        return new VirtualMemoryResource(driver, device, options, spec);
    }

    private static void checkCapabilities(Driver driver, Device dev, VirtualMemoryResourceOptions o) {
        String where = " on device " + dev.ordinal() + " (" + dev.name() + ", " + driver.kind() + " driver)";
        if (!dev.supportsVirtualMemoryManagement()) {
            throw new IllegalArgumentException("device: " + dev.ordinal() + " (expected: a device with virtual memory "
                    + "management support; this one has none" + where + ")");
        }
        if (o.handleType() == HandleType.POSIX_FD && !dev.supportsPosixFileDescriptorHandles()) {
            throw new IllegalArgumentException("handleType: POSIX_FD (expected: NONE: POSIX fd export is not supported"
                    + where + ")");
        }
        if (o.handleType() == HandleType.FABRIC && !dev.supportsFabricHandles()) {
            throw new IllegalArgumentException("handleType: FABRIC (expected: POSIX_FD or NONE: fabric handles are not "
                    + "supported" + where + ")");
        }
        if (o.gpuDirectRdma() && !dev.supportsGpuDirectRdma()) {
            throw new IllegalArgumentException("gpuDirectRdma: true (expected: false: GPUDirect RDMA with VMM is not "
                    + "supported" + where + ")");
        }
        if (o.locationType() == LocationType.HOST && !dev.supportsHostVirtualMemory()) {
            throw new IllegalArgumentException("locationType: HOST (expected: DEVICE: host VMM allocations are not "
                    + "supported" + where + ")");
        }
        if ((o.locationType() == LocationType.HOST_NUMA || o.locationType() == LocationType.HOST_NUMA_CURRENT)
                && !dev.supportsHostNumaVirtualMemory()) {
            throw new IllegalArgumentException("locationType: " + o.locationType() + " (expected: DEVICE: host NUMA "
                    + "VMM allocations are not supported" + where + ")");
        }
        for (int peer : o.peers()) {
            if (peer == dev.ordinal() || peer >= driver.deviceCount()) {
                throw new IllegalArgumentException("peers: " + o.peers() + " (expected: ordinals of other devices, 0 to "
                        + (driver.deviceCount() - 1) + ", not the resource's own device " + dev.ordinal() + ")");
            }
        }
        // Memory on a device is reachable from a peer only where the driver says so; asked
        // here, so that a pair that cannot reach each other is named now and not by the
        // first cuMemSetAccess of some later allocation. Host-located memory needs no peer link.
        if (o.locationType() == LocationType.DEVICE && o.peerAccess() != AccessMode.NONE) {
            for (int peer : o.peers()) {
                if (!driver.canAccessPeer(peer, dev.ordinal())) {
                    throw new IllegalArgumentException("peers: " + o.peers() + " (expected: devices that can access "
                            + "memory on device " + dev.ordinal() + "; cuDeviceCanAccessPeer says device " + peer
                            + " cannot" + where + "; leave it out, or use LocationType.HOST memory, which every "
                            + "device reaches)");
                }
            }
        }
    }

    private static NativeSpecHandle buildSpec(int device, VirtualMemoryResourceOptions o) {
        NativeSpecInput in = new NativeSpecInput();
        try {
            in.allocation_type(o.allocationType().cuValue)
                    .location_type(o.locationType().cuValue)
                    .location_id(o.locationType() == LocationType.DEVICE ? device
                            : o.locationType() == LocationType.HOST_NUMA ? o.locationId() : 0)
                    .handle_types(o.handleType().cuValue)
                    .gpu_direct_rdma(o.gpuDirectRdma() ? 1 : 0)
                    .granularity_option(o.granularity().cuValue)
                    .device(device)
                    .address_hint(o.addressHint())
                    // The option as given (0 = the granularity): native/range.cpp
                    // (reservation_alignment) is the one place that turns it into the explicit
                    // max(option, granularity) every cuMemAddressReserve gets (audit A2).
                    .alignment(o.addressAlignment());
            if (o.selfAccess() != AccessMode.NONE) in.add_access(LocationType.DEVICE.cuValue, device, o.selfAccess().cuValue);
            for (int peer : o.peers()) {
                if (!in.add_access(LocationType.DEVICE.cuValue, peer, o.peerAccess().cuValue)) {
                    throw new IllegalArgumentException("peers: " + o.peers() + " (expected: at most 15 peers)");
                }
            }
            // Host-located memory is what the CPU reads and writes directly: grant the CPU
            // access, at the same kind of location the memory lives at (HOST, or HOST_NUMA
            // with the node id), as cuMemSetAccess expects for host allocations.
            if (o.locationType() == LocationType.HOST) {
                in.add_access(LocationType.HOST.cuValue, 0, AccessMode.READ_WRITE.cuValue);
            } else if (o.locationType() == LocationType.HOST_NUMA) {
                in.add_access(LocationType.HOST_NUMA.cuValue, o.locationId(), AccessMode.READ_WRITE.cuValue);
            }
            NativeSpecHandle spec = new NativeSpecHandle();
            NativeStatus st = NativeCalls.status();
            NativeApi.build_spec(spec, in, st);
            if (st.code() != 0) {
                CudaException e = NativeCalls.toException(st);
                spec.close();
                // Only the granularity query judges the options (the spec's other steps, the
                // context's retain say, fail for other reasons): the driver says only
                // INVALID_VALUE or NOT_SUPPORTED, so name what it was asked (an independent
                // probe: a MANAGED type and a missing NUMA node named nothing).
                if (!"cuMemGetAllocationGranularity".equals(e.call())) throw e;
                String expected = o.allocationType() != AllocationType.PINNED
                        ? "allocationType PINNED: cuMemCreate takes no other"
                        : o.locationType() == LocationType.HOST_NUMA && e.resultName().equals("CUDA_ERROR_INVALID_VALUE")
                                ? "a locationId that is a NUMA node of this machine (/sys/devices/system/node)"
                                : "options this device and driver support";
                throw e.withDetail("the driver refused the options allocationType " + o.allocationType()
                        + ", locationType " + o.locationType() + (o.locationType() == LocationType.HOST_NUMA
                                ? ", locationId " + o.locationId() : "") + ", handleType " + o.handleType()
                        + ", granularity " + o.granularity() + " on device " + device + " (expected: " + expected
                        + ")");
            }
            return spec;
        } finally {
            in.close();
        }
    }

    /**
     * Allocates {@code size} bytes, rounded up to the {@link #granularity()}: reserve, create,
     * map, set access. {@code allocate(0)} returns an empty buffer with no driver call.
     *
     * @throws IllegalArgumentException when {@code size} is negative
     * @throws IllegalStateException when this resource is closed
     * @throws CudaException when the driver fails; nothing stays reserved or mapped
     */
    public VirtualMemoryBuffer allocate(long size) {
        return VirtualMemoryBuffer.adopt(this, allocateRange(size), BufferOrigin.ALLOCATED);
    }

    /** reserve + create + map + set access: a new native range the caller owns. */
    NativeRangeHandle allocateRange(long size) {
        Checks.nonNegative("size", size);
        state.acquire(this);
        try {
            NativeRangeHandle range = new NativeRangeHandle();
            NativeStatus st = NativeCalls.status();
            NativeApi.allocate(range, spec, size, st);
            if (st.code() != 0) {
                CudaException e = NativeCalls.toException(st);
                range.close();
                throw namingTheRequest(e, "allocate: size", size, options.addressAlignment());
            }
            return range;
        } finally {
            state.release();
        }
    }

    /** A process's address space on x86-64 and arm64 Linux (47 bits, 4-level page tables), in bytes. */
    private static final long ADDRESS_SPACE = 1L << 47;

    /** CUresult of the driver's "invalid value" (an import: the fd is not a memory handle it can read). */
    private static final int CUDA_ERROR_INVALID_VALUE = 1;

    /** CUresult of the driver's "out of memory". */
    private static final int CUDA_ERROR_OUT_OF_MEMORY = 2;

    /**
     * {@code e}, and for the driver's OUT_OF_MEMORY (or its INVALID_VALUE from reserving or
     * creating a size larger than the device's memory or the address space) the same with the
     * request named ({@code
     * what}: "allocate: size", "modifyAllocation: newSize"), what ran out and what to do (the
     * driver's message names only the call and the step, for a size as absurd as {@code
     * Long.MAX_VALUE} too; an independent probe). {@code alignment}: the addressAlignment of
     * the options the request used (a grow may pass its own).
     */
    CudaException namingTheRequest(CudaException e, String what, long size, long alignment) {
        if (e.code() == CUDA_ERROR_INVALID_VALUE
                && ("cuMemAddressReserve".equals(e.call()) || "cuMemCreate".equals(e.call()))) {
            // A driver may refuse an absurd size as a bad value rather than as out of memory
            // (not yet seen on a GPU; the host driver says OUT_OF_MEMORY): name the request and
            // what to do when the size is what cannot be (a review of the cuda.core port).
            long total = driver.device(device).totalMemory();
            if (size <= total && size < ADDRESS_SPACE) return e;
            return e.withDetail(what + " " + size + " bytes (device " + device + " has " + total + " bytes of memory "
                    + "and the address space " + ADDRESS_SPACE + " bytes; expected: a size both can hold: ask for less)");
        }
        if (e.code() != CUDA_ERROR_OUT_OF_MEMORY) return e;
        // Out of fds, not memory: the driver's message already says so and what to do; memory
        // advice after it would contradict it (an independent probe at RLIMIT_NOFILE 400).
        if (e.getMessage() != null && e.getMessage().contains("file descriptor limit")) return e;
        long total = driver.device(device).totalMemory();
        long g = spec.granularity();
        if ("cuMemAddressReserve".equals(e.call()) && alignment >= ADDRESS_SPACE && size < ADDRESS_SPACE) {
            // The alignment alone cannot be met (a probe: 2^62 was blamed on a 1-byte size).
            return e.withDetail(what + " " + size + " bytes: no address range is aligned to " + alignment
                    + " bytes (options.addressAlignment; expected: an alignment well below the " + ADDRESS_SPACE
                    + "-byte address space, down to the granularity " + g + ")");
        }
        if ("cuMemAddressReserve".equals(e.call()) && alignment > g) {
            // Address space, not memory, and either the size or the alignment may be what does
            // not fit: name both (a review: a 1 PiB size was blamed on a 4 MiB alignment).
            return e.withDetail(what + " " + size + " bytes: no free address range of that size aligned to "
                    + alignment + " bytes (" + (size > total ? "device " + device + " has " + total
                    + " bytes of memory; " : "") + "expected: a size and an options.addressAlignment the address "
                    + "space can hold: ask for less, or for a smaller addressAlignment, down to the granularity " + g
                    + ")");
        }
        return e.withDetail(what + " " + size + " bytes (device " + device + " has " + total + " bytes of memory; "
                + "ask for less, or close or trim() what holds memory)");
    }

    /** {@link #modifyAllocation(VirtualMemoryBuffer, long, VirtualMemoryResourceOptions)} with this resource's options. */
    public VirtualMemoryBuffer modifyAllocation(VirtualMemoryBuffer buffer, long newSize) {
        return modifyAllocation(buffer, newSize, null);
    }

    /**
     * Returns a <em>new</em> buffer of {@code newSize} bytes whose first bytes are
     * {@code buffer}'s memory; {@code buffer} stays valid and aliases it. Four outcomes
     * ({@link VirtualMemoryBuffer#origin()}):
     * <ul>
     * <li>{@link BufferOrigin#ALLOCATED}: {@code buffer} has no memory mapped (it came from
     *     {@code allocate(0)}) and {@code newSize} is not 0: a new allocation, as {@link
     *     #allocate(long)} makes;</li>
     * <li>{@link BufferOrigin#ALIAS}: {@code newSize} fits in what is already mapped: no driver call;</li>
     * <li>{@link BufferOrigin#GROWN_IN_PLACE}: the range right after the buffer was free: one
     *     new chunk mapped there, same address;</li>
     * <li>{@link BufferOrigin#MOVED}: a new range was reserved and every existing chunk
     *     re-mapped at its offset (no byte copied), then the new chunk; new address.</li>
     * </ul>
     * Access does not depend on the outcome: the chunks {@code buffer} already has keep the
     * access they were mapped with (a move re-maps each with its own), and only the chunk
     * the grow adds gets {@code options}' self and peer access. So a grow with other access
     * options makes a buffer whose chunks differ; {@link VirtualMemoryBuffer#access(int, int)}
     * reports each, {@link VirtualMemoryBuffer#access(int)} the weakest.
     *
     * <p>Address options: {@code options}' {@code addressAlignment} applies to a move only
     * (the new range is reserved with it); an alias or a grow in place keeps the buffer's
     * base, which was aligned as its own resource asked when it was reserved, so a larger
     * alignment asked here does not move it. {@code addressHint} is not used by a grow: a move
     * takes any free range.
     *
     * @param options options for the new chunk, or null for this resource's; they may not
     *     change the handle type, device or location
     * @throws IllegalArgumentException for a negative size, a buffer of another resource, or
     *     options that change the handle type or location
     * @throws IllegalStateException when {@code buffer} or this resource is closed
     * @throws CudaException when the driver fails; nothing new stays reserved or mapped
     */
    public VirtualMemoryBuffer modifyAllocation(VirtualMemoryBuffer buffer, long newSize,
                                                VirtualMemoryResourceOptions options) {
        Checks.notNull("buffer", buffer);
        if (buffer.isClosed()) { // closed first, whatever the size (as the buffer's own methods)
            throw new IllegalStateException("buffer: " + buffer + " is closed (expected: an open buffer; it cannot be "
                    + "grown after close())");
        }
        Checks.nonNegative("newSize", newSize);
        if (buffer.resource() != this) {
            throw new IllegalArgumentException("buffer: " + buffer + " (expected: a buffer of this resource; grow it "
                    + "with the resource that allocated or imported it)");
        }
        if (options != null && options.handleType() != this.options.handleType()) {
            throw new IllegalArgumentException("options.handleType: " + options.handleType() + " (expected: "
                    + this.options.handleType() + ", the buffer's handle type: a grow may not change it)");
        }
        if (options != null && options.locationType() != this.options.locationType()) {
            throw new IllegalArgumentException("options.locationType: " + options.locationType() + " (expected: "
                    + this.options.locationType() + ", the buffer's location: a grow may not move memory elsewhere)");
        }
        // locationId names a NUMA node for HOST_NUMA only ("ignored for other locations").
        if (options != null && this.options.locationType() == LocationType.HOST_NUMA
                && options.locationId() != this.options.locationId()) {
            throw new IllegalArgumentException("options.locationId: " + options.locationId() + " (expected: "
                    + this.options.locationId() + ", the buffer's NUMA node: a grow may not move memory elsewhere)");
        }
        state.acquire(this);
        try {
            NativeSpecHandle growSpec;
            if (options == null || options.equals(this.options)) {
                growSpec = spec;
            } else {
                checkCapabilities(driver, driver.device(device), options);
                growSpec = buildSpec(device, options);
            }
            try {
                return buffer.grow(growSpec, newSize, (options == null ? this.options : options).addressAlignment());
            } finally {
                if (growSpec != spec) growSpec.close();
            }
        } finally {
            state.release();
        }
    }

    /**
     * Maps memory exported by another process (or this one): reserves exactly the
     * descriptor's extent, imports and maps each allocation with this resource's access
     * settings. The descriptor keeps its fds (close it after import); the buffer keeps none of
     * them. On the host driver (and the host library under the cuda driver) each imported
     * allocation holds one fd of its own (a duplicate of the memfd: its reference to the
     * memory, as a real driver keeps one), closed with the buffer.
     * The result is {@link VirtualMemoryBuffer#isImported() imported}: it cannot be exported
     * again, nor can any alias or grow of it.
     *
     * @throws IllegalStateException when this resource is not IPC-enabled, or the descriptor
     *     or resource is closed
     * @throws IllegalArgumentException when the handle type differs, or a size is not a
     *     positive multiple of the granularity
     * @throws CudaException when the driver refuses (an fd that is not a memory handle, memory
     *     on another device); nothing stays reserved or mapped
     */
    public VirtualMemoryBuffer importBuffer(BufferDescriptor descriptor) {
        return doImport(descriptor, null);
    }

    /**
     * {@link #importBuffer(BufferDescriptor)}, and tells when this process has stopped
     * mapping the imported memory: {@code whenUnmapped} runs once, after the last buffer or
     * view that maps any of the imported chunks is gone. That is the imported buffer, every
     * buffer {@link #modifyAllocation} derives from it or from those (alias, grown in place,
     * moved: a grow that adds local chunks still maps the imported ones), every
     * {@link VirtualMemoryBuffer#asByteBuffer() ByteBuffer view} of any of them, and every
     * {@linkplain VirtualMemoryBuffer#share(Runnable) shared view} of any of them together
     * with what derives from that view in turn (its aliases, grown buffers, ByteBuffer views
     * and views of it; the view's own {@code whenGone} runs first). Each is gone when closed,
     * or when the cleaner releases it (a ByteBuffer view: once it and its slices and
     * duplicates are unreachable). A consumer uses it to hand memory back to its producer
     * only when nothing here can read it any more ({@code org.cuvmm.ipc.Attachment} releases
     * its lease this way).
     *
     * @param whenUnmapped runs on whichever thread drops the last mapping, possibly the
     *     cleaner thread, holding no lock: it must not block (hand blocking work to another
     *     thread). A RuntimeException it throws is logged (logger {@code org.cuvmm}) and
     *     swallowed. It never runs if this method throws (it throws what {@link
     *     #importBuffer(BufferDescriptor)} throws, for the same reasons).
     */
    public VirtualMemoryBuffer importBuffer(BufferDescriptor descriptor, Runnable whenUnmapped) {
        Checks.notNull("whenUnmapped", whenUnmapped);
        return doImport(descriptor, whenUnmapped);
    }

    private VirtualMemoryBuffer doImport(BufferDescriptor descriptor, Runnable whenUnmapped) {
        Checks.notNull("descriptor", descriptor);
        if (!isIpcEnabled()) {
            throw new IllegalStateException("importBuffer: this resource has handle type " + options.handleType()
                    + " (expected: POSIX_FD; import with a resource created with handleType(HandleType.POSIX_FD))");
        }
        if (descriptor.handleType() != options.handleType()) {
            throw new IllegalArgumentException("descriptor.handleType: " + descriptor.handleType() + " (expected: "
                    + options.handleType() + ", this resource's handle type)");
        }
        long[] sizes = descriptor.sizes();
        for (int i = 0; i < sizes.length; i++) {
            if (sizes[i] <= 0 || sizes[i] % granularity != 0) {
                throw new IllegalArgumentException("descriptor.sizes[" + i + "]: " + sizes[i] + " (expected: a positive "
                        + "multiple of this resource's granularity " + granularity + ")");
            }
        }
        if (descriptor.size() > descriptor.mappedSize()) {
            throw new IllegalArgumentException("descriptor.size: " + descriptor.size() + " (expected: at most "
                    + descriptor.mappedSize() + ", the sum of its sizes)");
        }
        state.acquire(this);
        try {
            int[] fds = descriptor.beginImport("descriptor");
            try {
                NativeRangeHandle range = new NativeRangeHandle();
                NativeStatus st = NativeCalls.status();
                NativeApi.import_fds(range, spec, fds, sizes, sizes.length, descriptor.size(), st);
                if (st.code() != 0) {
                    CudaException e = NativeCalls.toException(st);
                    range.close();
                    String note = descriptor.duplicatesNote();
                    if (!note.isEmpty()) e = e.withDetail(note);
                    if ("cuMemImportFromShareableHandle".equals(e.call()) && e.code() == CUDA_ERROR_INVALID_VALUE) {
                        // The driver names the fd at best, never the handle type it was asked to
                        // read it as, nor what it wanted (cuda.core adds "handle_type='posix_fd'";
                        // an independent port: a pipe's fd was refused with neither).
                        e = e.withDetail("descriptor.fds " + java.util.Arrays.toString(fds) + " read as handleType "
                                + descriptor.handleType() + " (expected: fds of allocations exported with handle type "
                                + descriptor.handleType() + " by exportDescriptor() in this or another process, passed "
                                + "on unchanged and open read-write; no other file can be imported)");
                    }
                    throw e;
                }
                // On failure adopt releases the range; the hold is dropped unfired.
                ImportHold hold = whenUnmapped == null ? null : new ImportHold(whenUnmapped, "the import of 0x"
                        + Long.toHexString(range.address()) + " (" + descriptor.size() + " bytes)");
                return VirtualMemoryBuffer.adopt(this, range, BufferOrigin.IMPORTED, hold);
            } finally {
                descriptor.endImport();
                java.lang.ref.Reference.reachabilityFence(descriptor); // its fds are ints: it must outlive their use
            }
        } finally {
            state.release();
        }
    }

    public Driver driver() { return driver; }
    public int device() { return device; }
    public VirtualMemoryResourceOptions options() { return options; }

    /** Every size is rounded up to a multiple of this (bytes). */
    public long granularity() { return granularity; }

    /** True when buffers can be exported to other processes (handle type POSIX_FD). */
    public boolean isIpcEnabled() { return options.handleType() == HandleType.POSIX_FD; }

    /** True when the resource's device can access its buffers (self access not NONE). */
    public boolean isDeviceAccessible() { return options.selfAccess() != AccessMode.NONE; }

    /** True when the CPU can read and write its buffers directly (a host location). */
    public boolean isHostAccessible() { return options.locationType().isHost(); }

    /**
     * Stops new allocations. Buffers already made stay valid. Idempotent.
     *
     * @throws IllegalStateException when another thread is inside a call on this resource
     *     (an allocate, grow or import in progress): the resource stays open and usable;
     *     close it again once those calls have returned (the message says how many)
     */
    @Override
    public void close() {
        if (state.tryClose(this, "") == AcquireState.CloseResult.CLOSED_NOW) spec.close();
    }

    /**
     * True once {@link #close()} has closed this resource (not a close refused because a call
     * was in progress): no new {@code allocate}, {@code modifyAllocation} or
     * {@code importBuffer} call can start. It says nothing about buffers already made: they
     * stay valid, and each is released by its own close.
     */
    public boolean isClosed() { return state.isClosed(); }

    @Override
    public String toString() {
        return "VirtualMemoryResource[device " + device + ", " + driver.kind() + " driver, granularity " + granularity
                + ", " + options + "]";
    }
}
