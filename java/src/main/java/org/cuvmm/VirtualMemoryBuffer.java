package org.cuvmm;

import java.lang.ref.Cleaner;
import java.nio.ByteBuffer;
import java.nio.ReadOnlyBufferException;

import org.bytedeco.javacpp.Pointer;
import org.cuvmm.internal.AcquireState;
import org.cuvmm.internal.ArrayCopies;
import org.cuvmm.internal.BufferAccess;
import org.cuvmm.internal.BufferRecycler;
import org.cuvmm.internal.Checks;
import org.cuvmm.internal.FileMappings;
import org.cuvmm.internal.NativeCalls;
import org.cuvmm.internal.jni.NativeApi;
import org.cuvmm.internal.jni.NativeRangeHandle;
import org.cuvmm.internal.jni.NativeSpecHandle;
import org.cuvmm.internal.jni.NativeStatus;
import org.cuvmm.internal.jni.NativeStreamHandle;

/**
 * A contiguous range of virtual memory with physical allocations mapped into it, owned by
 * one {@link VirtualMemoryResource}. {@link #address()} is a {@code CUdeviceptr}: pass it to
 * kernels or other CUDA bindings.
 *
 * <h2>Lifecycle</h2>
 * A buffer holds one reference to its memory. Aliases made by
 * {@link VirtualMemoryResource#modifyAllocation} hold their own, and so do views made by
 * {@link #share(Runnable)}, so each chunk is unmapped and released exactly when its last
 * holder is closed. Every method that touches memory
 * registers a use for its duration; {@link #close()} while a use is in progress on another
 * thread <em>refuses</em> with {@link IllegalStateException}, the buffer stays usable, and a
 * later close succeeds. Stream work recorded on the buffer (its asynchronous operations,
 * {@link #recordUse(Stream)}) is waited for before the memory is released: {@link #close()}
 * blocks until it completed, {@link #close(Stream)} releases later in stream order without
 * blocking (see "Streams" below). {@code close()} is idempotent; any other use after close throws
 * {@link IllegalStateException} ("... is closed; it cannot be used after close()"), checked
 * before the arguments: a null, out-of-range or closed argument given to a closed buffer still
 * reads "is closed". Only the close methods ({@code close()}, {@code close(Stream)},
 * {@code closeWhenUnused()}) and the plain accessors ({@link #size()}, {@link #origin()},
 * {@link #resource()}, {@link #isClosed()}, {@link #isClosePending()}, {@link #leaseCount()},
 * {@code toString()}) answer after close. A buffer that is never closed is released by a cleaner with
 * a warning ({@link LeakDetection}); a {@linkplain BufferOrigin#POOLED pooled} one is instead
 * taken back by its pool with the same warning (see {@link org.cuvmm.pool.VirtualMemoryPool},
 * "Leaks").
 *
 * <h2>Streams</h2>
 * The {@code *Async} methods queue work on a {@link Stream} and return; the work runs in that
 * stream's order, unordered with other streams unless the caller orders them with events.
 * Each records its stream on this buffer: one event per (buffer, stream), re-recorded after
 * each use. For a kernel launched through another binding on {@link Stream#handle()}, call
 * {@link #recordUse(Stream)} after the launch, or launch inside
 * {@link #withAddress(Stream, java.util.function.LongConsumer)}. Each buffer object (each
 * alias) keeps its own record.
 *
 * <p>The synchronous methods (copies, fill) run on a non-blocking stream of cuvmm's own after
 * waiting ({@code cuStreamWaitEvent}, no host block) for this buffer's recorded stream work, and
 * return when their own work is done; they never synchronize the legacy stream, so work other
 * threads queued there without recording it here is not waited for.
 *
 * <p>Thread-safe.
 */
public final class VirtualMemoryBuffer implements AutoCloseable {
    static {
        BufferAccess.install(new BufferAccess.Bridge() {
            @Override
            public NativeRangeHandle allocateRange(VirtualMemoryResource resource, long size) {
                return resource.allocateRange(size);
            }

            @Override
            public VirtualMemoryBuffer wrap(VirtualMemoryResource resource, NativeRangeHandle range, long size,
                                            BufferRecycler recycler) {
                return new VirtualMemoryBuffer(resource, range, BufferOrigin.POOLED, size, recycler, false);
            }

            @Override
            public Throwable captureSite() {
                return LeakDetection.captureSite();
            }

            @Override
            public void reportLeak(long address, long size, String pool, Throwable site) {
                LeakDetection.report(describe(address, size) + " of " + pool, site, LeakDetection.POOL_SAMPLES);
            }

            @Override
            public Object streamKey(Stream stream) {
                return stream.useKey();
            }

            @Override
            public void afterEvents(String what, java.util.List<Event> events, Runnable action) {
                StreamOrderedRelease.later(what, events, action);
            }

            @Override
            public Object recordedUsesToken(VirtualMemoryBuffer buffer) {
                return buffer.release; // holds the uses once recorded, never the buffer
            }

            @Override
            public void afterRecordedUses(Object token, Runnable action) {
                Release r = (Release) token;
                StreamUses u = r.uses;
                if (u == null || u.isEmpty()) {
                    try {
                        action.run();
                    } finally {
                        if (u != null) u.destroy();
                    }
                    return;
                }
                StreamOrderedRelease.later(r.description(), u.events(), () -> {
                    try {
                        action.run();
                    } finally {
                        u.destroy();
                    }
                });
            }

            @Override
            public boolean awaitReleasesIdle(long millis) throws InterruptedException {
                return StreamOrderedRelease.awaitIdle(millis);
            }

            @Override
            public void seedStreamUse(VirtualMemoryBuffer buffer, Stream stream, Event event) {
                buffer.streamUses().seed(stream, event);
            }
        });
    }

    private final VirtualMemoryResource resource;
    private final NativeRangeHandle range;
    private final BufferOrigin origin;
    private final long address;
    private final long size;
    private final AcquireState state = new AcquireState();
    // Informational: the leases counted in `state`, so a refused close can name them.
    // Created on first lease: most buffers never have one.
    private volatile java.util.Set<BufferLease> leases;
    // Set by closeWhenUnused(): the last release of a use closes the buffer.
    private volatile boolean closePending;
    private final Release release;
    private final Cleaner.Cleanable cleanable; // null when not tracked (pooled buffers: their pool watches them)
    // Non-null when this buffer maps memory of an import made with a whenUnmapped callback:
    // the buffer owns one reference, dropped by its Release after the native unmap.
    private final ImportHold hold;
    // The streams with work queued on this buffer; created on the first stream use.
    private volatile StreamUses streamUses;

    VirtualMemoryBuffer(VirtualMemoryResource resource, NativeRangeHandle range, BufferOrigin origin) {
        this(resource, range, origin, range.size(), null, true);
    }

    /** {@link #VirtualMemoryBuffer(VirtualMemoryResource, NativeRangeHandle, BufferOrigin, long, BufferRecycler, boolean, ImportHold)} with no import hold. */
    VirtualMemoryBuffer(VirtualMemoryResource resource, NativeRangeHandle range, BufferOrigin origin, long size,
                        BufferRecycler recycler, boolean tracked) {
        this(resource, range, origin, size, recycler, tracked, null);
    }

    /**
     * @param size the logical size (at most the range's size; a pooled buffer's range is its
     *     size class)
     * @param recycler receives the range at close instead of dropping it, or null
     * @param tracked whether a cleaner watches for a leak of this buffer
     * @param hold the import this buffer maps memory of, whose reference (already taken)
     *     the buffer now owns, or null
     */
    VirtualMemoryBuffer(VirtualMemoryResource resource, NativeRangeHandle range, BufferOrigin origin, long size,
                        BufferRecycler recycler, boolean tracked, ImportHold hold) {
        this.resource = resource;
        this.range = range;
        this.origin = origin;
        this.address = range.address();
        this.size = size;
        this.hold = hold;
        this.release = new Release(range, address, size, recycler, tracked ? LeakDetection.captureSite() : null, hold);
        // Registered last: if registration failed, the caller still owns `range`.
        this.cleanable = tracked ? LeakDetection.CLEANER.register(this, release) : null;
    }

    /**
     * Drops (or recycles) the native reference exactly once, either from close() (explicit)
     * or from the cleaner thread (a leak). Holds no reference to the buffer.
     */
    private static final class Release implements Runnable {
        private final NativeRangeHandle range;
        private final long address;
        private final long size;
        private final BufferRecycler recycler;
        private final Throwable site;
        private final ImportHold hold;
        volatile boolean explicit;
        // The buffer's stream uses (set when the first is recorded): a leaked buffer's release
        // waits for them; every release gives their events back (EventCache) after the memory is dropped.
        volatile StreamUses uses;
        // Set by close(Stream) of a buffer whose recycler orders the return itself (a pool
        // slot): the recycler gets the range with this stream instead of a plain recycle.
        volatile Stream closeStream;

        Release(NativeRangeHandle range, long address, long size, BufferRecycler recycler, Throwable site,
                ImportHold hold) {
            this.range = range;
            this.address = address;
            this.size = size;
            this.recycler = recycler;
            this.site = site;
            this.hold = hold;
        }

        String description() { return describe(address, size); }

        /** The description, built only when a message needs it (acquire passes this object). */
        @Override
        public String toString() { return description(); }

        @Override
        public void run() {
            StreamUses u = uses;
            try {
                if (!explicit) {
                    try {
                        LeakDetection.report(description(), site);
                    } catch (RuntimeException | Error e) {
                        // The report is for people; the wait below is for the memory: never skipped (a review).
                    }
                }
                if (!explicit && u != null) u.awaitAll(description()); // explicit closes waited already
            } finally {
                try {
                    Stream s = closeStream;
                    if (s != null) ((org.cuvmm.internal.StreamOrderedRecycler) recycler).recycle(range, s);
                    else if (recycler != null) recycler.recycle(range, !explicit);
                    else range.deallocate();
                } catch (RuntimeException | Error e) {
                    // The memory may still be mapped: keep the import's hold (a sharing lease
                    // stays held until the connection ends) rather than hand it back.
                    if (hold != null) {
                        System.getLogger("org.cuvmm").log(System.Logger.Level.WARNING, description()
                                + ": teardown failed (" + e + "); its import stays held (memory may still be mapped)");
                    }
                    throw e;
                } finally {
                    // Also when the teardown threw: the events are not needed for the memory
                    // (the work was waited for, or the pool's own event orders the reuse).
                    if (u != null) u.destroy();
                }
                // Only after a completed unmap: the import's callback runs once nothing maps it.
                if (hold != null) hold.release();
            }
        }
    }

    private static String describe(long address, long size) {
        return "VirtualMemoryBuffer[0x" + Long.toHexString(address) + ", " + size + " bytes]";
    }

    /** The base address, a {@code CUdeviceptr} (0 for an empty buffer). */
    public long address() {
        requireOpen();
        return address;
    }

    /** The size in bytes asked for (the mapped extent may be larger, up to the granularity). */
    public long size() { return size; }

    /** Bytes mapped: the sum of the chunk sizes. */
    public long mappedSize() { return use(() -> range.mapped_size()); }

    /**
     * Number of physical allocations (chunks) mapped into this buffer. An alias smaller than
     * its mapping (a shrink by {@link VirtualMemoryResource#modifyAllocation}) keeps chunks
     * past its size mapped and counts them; {@link #exportedChunkCount()} counts only those
     * that hold its bytes.
     */
    public int chunkCount() { return useInt(range::chunk_count); }

    /**
     * Number of chunks {@link #exportDescriptor()} exports: those that hold a byte of
     * {@code [0, size())}, that is the first {@code exportedChunkCount()} chunks in address
     * order (chunk indices {@code 0} to {@code exportedChunkCount() - 1}, the same indices as
     * {@link #chunkSize(int)} and {@link #allocationIds()}). Equal to {@link #chunkCount()}
     * except for an alias smaller than its mapping, whose trailing chunks stay mapped but hold
     * none of its bytes; 0 for an empty buffer. Makes no driver call.
     *
     * @throws IllegalStateException when the buffer is closed
     */
    public int exportedChunkCount() { return useInt(() -> NativeApi.export_chunk_count(range)); }

    /**
     * Size of chunk {@code index} in address order.
     *
     * @throws IndexOutOfBoundsException when {@code index} is not 0 to {@code chunkCount() - 1}
     * @throws IllegalStateException when the buffer is closed
     */
    public long chunkSize(int index) {
        return use(() -> {
            long s = range.chunk_size(index);
            if (s < 0) throw new IndexOutOfBoundsException("index: " + index + chunkRange(range.chunk_count()));
            return s;
        });
    }

    /**
     * The "(expected: ...)" of a chunk index out of range. An empty buffer has no chunks: it
     * says so, as exportChunks does, instead of "expected: 0 to -1" (a javadoc audit: the
     * message must say what to do).
     */
    private String chunkRange(int chunks) {
        return chunks == 0 ? " (expected: no index; " + this + " is empty and has no chunks)"
                : " (expected: 0 to " + (chunks - 1) + ", the chunks of " + this + ")";
    }

    /**
     * The access {@code device} has to every byte of this buffer: the weakest of
     * {@link #access(int, int)} over the chunks that hold its bytes ({@code [0, size())}; an
     * alias smaller than its mapping ignores chunks past its end). {@link AccessMode#READ_WRITE}
     * means the device may read and write the whole buffer, {@link AccessMode#READ} that it may
     * read all of it but not write all of it, {@link AccessMode#NONE} that some chunk is closed
     * to it. An empty buffer has no memory: {@code NONE}. One driver query per chunk.
     *
     * <p>A grown buffer can mix accesses: every chunk keeps the access it was mapped with,
     * and only the chunk a grow adds gets that grow's options (see
     * {@link VirtualMemoryResource#modifyAllocation(VirtualMemoryBuffer, long, VirtualMemoryResourceOptions)}).
     *
     * @throws IllegalArgumentException when {@code device} is not a device of the driver
     * @throws IllegalStateException when the buffer is closed (checked first, whatever {@code device})
     * @throws CudaException when the driver refuses the query
     */
    public AccessMode access(int device) {
        acquire();  // closed first: a closed buffer says so whatever the device
        try {
            checkDevice(device);
            AccessMode weakest = size == 0 ? AccessMode.NONE : AccessMode.READ_WRITE;
            long covered = 0;
            for (int i = 0, n = range.chunk_count(); i < n && covered < size; i++) {
                AccessMode a = chunkAccess(device, i);
                if (a.cuValue < weakest.cuValue) weakest = a;
                covered += range.chunk_size(i);
            }
            return weakest;
        } finally {
            releaseUse();
        }
    }

    /**
     * The access {@code device} has to chunk {@code chunk} (address order, as
     * {@link #chunkSize(int)}), as the driver reports it ({@code cuMemGetAccess} at the
     * chunk's address).
     *
     * @throws IllegalArgumentException when {@code device} is not a device of the driver
     * @throws IndexOutOfBoundsException when {@code chunk} is not a chunk of this buffer
     * @throws IllegalStateException when the buffer is closed (checked first, whatever the arguments)
     * @throws CudaException when the driver refuses the query
     */
    public AccessMode access(int device, int chunk) {
        acquire();  // closed first, as access(int)
        try {
            checkDevice(device);
            int n = range.chunk_count();
            if (chunk < 0 || chunk >= n) {
                throw new IndexOutOfBoundsException("chunk: " + chunk + chunkRange(n));
            }
            return chunkAccess(device, chunk);
        } finally {
            releaseUse();
        }
    }

    private static void checkDevice(int device) {
        int count = Driver.get().deviceCount();
        if (device < 0 || device >= count) {
            throw new IllegalArgumentException("device: " + device + " (expected: 0 to " + (count - 1) + ", the devices of the "
                    + Driver.get().kind() + " driver)");
        }
    }

    /** One cuMemGetAccess; the caller holds a use. */
    private AccessMode chunkAccess(int device, int chunk) {
        NativeStatus st = NativeCalls.status();
        int flags = NativeApi.chunk_access(range, chunk, device, st);
        NativeCalls.check(st);
        for (AccessMode m : AccessMode.values()) {
            if (m.cuValue == flags) return m;
        }
        throw new IllegalStateException("cuMemGetAccess returned flags " + flags + " for device " + device + ", chunk " + chunk
                + " (expected: 0, 1 or 3)");
    }

    /** True when any chunk was imported from another process (such memory cannot be exported again). */
    public boolean isImported() { return use(() -> range.any_imported() ? 1L : 0L) != 0; }

    public BufferOrigin origin() { return origin; }

    public VirtualMemoryResource resource() { return resource; }

    /**
     * True once a close of this buffer was claimed: by {@link #close()} or {@link #close(Stream)}
     * (not one refused because a call or lease held the buffer), or by
     * {@link #closeWhenUnused()} once nothing held it any more. From then on no new use can
     * start: the calls that reach the memory throw {@link IllegalStateException}.
     *
     * <p>It does not mean the memory was released. It reads true as soon as the close is
     * claimed, before anything is unmapped: while {@code close()} still waits for the recorded
     * stream work; after {@code close(Stream)}, after a {@code closeWhenUnused()} with recorded
     * stream work pending, and after a {@code close()} from a host function, the release runs
     * later on cuvmm's reaper thread ("cuvmm-stream-release"). Even then the memory is unmapped
     * and released only once its last holder is gone (see {@link #close()}: aliases, grown
     * buffers, {@link #asByteBuffer() ByteBuffer views} and {@linkplain #share shared views}
     * hold it too), and a pooled buffer's memory goes back to its pool instead.
     * Where it can be learned that memory was really released: a
     * {@linkplain Driver#addAllocationReleaseListener release listener} hears each
     * {@linkplain #allocationIds() allocation id} once its {@code cuMemRelease} ran, and an
     * import's {@code whenUnmapped}
     * ({@link VirtualMemoryResource#importBuffer(BufferDescriptor, Runnable)}) runs once
     * nothing in this process maps it any more.
     */
    public boolean isClosed() { return state.isClosed(); }

    /** Copies all of {@code src} to the start of this buffer. */
    public void copyFrom(byte[] src) {
        requireOpen(); // closed first, whatever the arguments (the class javadoc's rule)
        Checks.notNull("src", src);
        copyFrom(0, src, 0, src.length);
    }

    /**
     * Copies {@code length} bytes of {@code src} from {@code srcOffset} into this buffer at {@code offset}.
     * Returns when the data is in the buffer.
     *
     * <p>Arrays and heap {@link ByteBuffer}s are never pinned: the bytes go through a native
     * staging buffer in pieces of at most 1 MiB, one driver call each, so garbage collection
     * and other threads' allocations proceed during a large copy. If the driver fails part of
     * the way, the pieces before the failing one have been copied.
     *
     * @throws IndexOutOfBoundsException when either window is out of bounds
     * @throws CudaException when the driver refuses the copy (for example, this resource's
     *     device has no write access to the memory)
     */
    public void copyFrom(long offset, byte[] src, int srcOffset, int length) {
        requireOpen(); // closed first, whatever the arguments (as access)
        Checks.notNull("src", src);
        Checks.arrayWindow("src", srcOffset, length, src.length);
        Checks.window("copyFrom", offset, length, size);
        onOwnStream(null, length, s -> ArrayCopies.write(range, s, offset, src, srcOffset, length));
    }

    /** Copies the start of this buffer into all of {@code dst}. */
    public void copyTo(byte[] dst) {
        requireOpen(); // closed first, whatever the arguments (the class javadoc's rule)
        Checks.notNull("dst", dst);
        copyTo(0, dst, 0, dst.length);
    }

    /**
     * Copies {@code length} bytes at {@code offset} into {@code dst} from {@code dstOffset}, in
     * pieces like {@link #copyFrom(long, byte[], int, int)} (never pinning {@code dst}).
     */
    public void copyTo(long offset, byte[] dst, int dstOffset, int length) {
        requireOpen(); // closed first, whatever the arguments (as access)
        Checks.notNull("dst", dst);
        Checks.arrayWindow("dst", dstOffset, length, dst.length);
        Checks.window("copyTo", offset, length, size);
        onOwnStream(null, length, s -> ArrayCopies.read(range, s, offset, dst, dstOffset, length));
    }

    /**
     * Copies {@code src.remaining()} bytes into this buffer at {@code offset}; advances
     * {@code src}'s position. Works with direct and heap buffers.
     *
     * <p>A direct buffer's address goes to the driver in one call. A file mapping
     * ({@code FileChannel.map}, or a slice or view of one) is staged like an array instead, 1 MiB
     * at a time, each piece read by a copy that reports a lost page: a file truncated under the
     * mapping then fails the copy with an {@link IllegalStateException} naming {@code src} (the
     * pieces before the lost page's are copied, and {@code src}'s position does not move), where
     * a native read of the lost pages would end the JVM ({@code SIGBUS}).
     *
     * @throws IllegalStateException when {@code src} is a file mapping that lost pages
     */
    public void copyFrom(long offset, ByteBuffer src) {
        requireOpen(); // closed first, whatever the arguments (as access)
        Checks.notNull("src", src);
        int length = src.remaining();
        Checks.window("copyFrom", offset, length, size);
        if (FileMappings.isFileMapping(src)) {
            int from = src.position();
            FileMappings.copying("src", src,
                    () -> onOwnStream(null, length, s -> ArrayCopies.writeFromMapping(range, s, offset, src, from, length)));
        } else if (src.isDirect()) {
            long from = directAddress(src);
            onOwnStream(null, length, s -> check(st -> NativeApi.write_address_on(range, offset, from, length, s, st)));
        } else { // heap, read-only or not: staged like an array
            int from = src.position();
            onOwnStream(null, length, s -> ArrayCopies.write(range, s, offset, src, from, length));
        }
        src.position(src.position() + length);
    }

    /**
     * Fills {@code dst.remaining()} bytes from this buffer at {@code offset}; advances its
     * position. A file mapping is written 1 MiB at a time by a copy that reports a lost page, as
     * {@link #copyFrom(long, ByteBuffer)} reads one.
     *
     * @throws IllegalStateException when {@code dst} is a file mapping that lost pages, or
     *     this buffer is closed (said first, whatever the arguments)
     * @throws java.nio.ReadOnlyBufferException when {@code dst} is read-only (its message names it)
     */
    public void copyTo(long offset, ByteBuffer dst) {
        requireOpen(); // closed first, whatever the arguments (as access)
        Checks.notNull("dst", dst);
        if (dst.isReadOnly()) throw new ReadOnlyDestination(dst);
        int length = dst.remaining();
        Checks.window("copyTo", offset, length, size);
        if (dst.hasArray()) {
            copyTo(offset, dst.array(), dst.arrayOffset() + dst.position(), length);
        } else if (FileMappings.isFileMapping(dst)) {
            int to = dst.position();
            FileMappings.copying("dst", dst,
                    () -> onOwnStream(null, length, s -> ArrayCopies.readIntoMapping(range, s, offset, dst, to, length)));
        } else {
            long to = directAddress(dst);
            onOwnStream(null, length, s -> check(st -> NativeApi.read_address_on(range, offset, to, length, s, st)));
        }
        dst.position(dst.position() + length);
    }

    private static long directAddress(ByteBuffer buffer) {
        try (Pointer p = new Pointer(buffer)) {
            return p.address() + buffer.position();
        }
    }

    /**
     * Copies {@code length} bytes from {@code src} at {@code srcOffset} into this buffer at
     * {@code offset}.
     *
     * @throws IndexOutOfBoundsException for a window outside either buffer (as every copy)
     * @throws IllegalArgumentException for windows that share memory (the same buffer, an alias
     *     or a view of it, at overlapping offsets: an overlapping copy is undefined on the driver)
     * @throws IllegalStateException when this buffer or {@code src} is closed
     */
    public void copyFrom(long offset, VirtualMemoryBuffer src, long srcOffset, long length) {
        requireOpen(); // closed first, whatever the arguments (as access)
        Checks.notNull("src", src);
        Checks.window("copyFrom", offset, length, size);
        Checks.window("src", srcOffset, length, src.size);
        src.acquireArgument("src");
        try {
            // Before any stream work (borrowing a stream, waiting for recorded uses): a refusal
            // makes no driver call.
            acquire();
            try {
                checkApart("copyFrom", offset, src, srcOffset, length);
            } finally {
                releaseUse();
            }
            onOwnStream(src, length, s -> check(st -> NativeApi.copy_range_on(range, offset, src.range, srcOffset, length, s, st)));
        } finally {
            src.releaseUse();
        }
    }

    /**
     * Refuses a copy between windows of this buffer and {@code src} that share memory (the
     * same buffer, an alias or a view: one allocation at overlapping offsets): the driver's
     * copies leave that undefined. Both buffers are held by the caller. No driver call.
     */
    void checkApart(String call, long offset, VirtualMemoryBuffer src, long srcOffset, long length) {
        if (length > 0 && NativeApi.windows_overlap(range, offset, src.range, srcOffset, length) != 0) {
            throw new IllegalArgumentException(call + ": offset " + offset + " and srcOffset " + srcOffset + ", length "
                    + length + ": the destination and source windows share memory (" + (src == this ? "the same buffer"
                    : "src maps the same allocation") + " at overlapping offsets), and an overlapping copy is undefined "
                    + "on the driver (expected: windows apart; copy through a temporary buffer)");
        }
    }

    /** Sets every byte to {@code value}. */
    public void fill(byte value) { fill(0, size, value); }

    /** Sets {@code length} bytes from {@code offset} to {@code value}. */
    public void fill(long offset, long length, byte value) {
        requireOpen(); // closed first, whatever the arguments (as access)
        Checks.window("fill", offset, length, size);
        onOwnStream(null, length, s -> check(st -> NativeApi.fill_on(range, offset, length, value, s, st)));
    }

    // ---- stream-ordered operations (AsyncCopies does the work) ----

    /**
     * Queues a copy of {@code length} bytes from pinned host memory {@code src} at
     * {@code srcOffset} into this buffer at {@code offset} on {@code stream}
     * ({@code cuMemcpyHtoDAsync}) and returns. The copy runs on {@code stream}'s device, which
     * needs write access to this buffer. Records {@code stream} on this buffer and on {@code src}:
     * neither is released before the copy completed. {@code src} must not be written until then
     * (wait for the stream or an event).
     *
     * @throws IndexOutOfBoundsException when either window is out of bounds
     * @throws IllegalStateException when this buffer, {@code src} or {@code stream} is closed,
     *     or when called from a host function
     * @throws CudaException when the driver (or cuvmm's access check) refuses
     */
    public void copyFromAsync(long offset, PinnedHostBuffer src, long srcOffset, long length, Stream stream) {
        requireOpen(); // closed first, whatever the arguments (the class javadoc's rule)
        AsyncCopies.fromPinned(this, offset, Checks.notNull("src", src), srcOffset, length, Checks.notNull("stream", stream));
    }

    /**
     * Queues a copy of {@code length} bytes of this buffer at {@code offset} into pinned host
     * memory {@code dst} at {@code dstOffset} on {@code stream} ({@code cuMemcpyDtoHAsync}) and
     * returns; the bytes are in {@code dst} once the stream has passed this point. Records
     * {@code stream} on both. Throws as {@link #copyFromAsync(long, PinnedHostBuffer, long, long, Stream)}.
     */
    public void copyToAsync(long offset, PinnedHostBuffer dst, long dstOffset, long length, Stream stream) {
        requireOpen(); // closed first, whatever the arguments (the class javadoc's rule)
        AsyncCopies.toPinned(this, offset, Checks.notNull("dst", dst), dstOffset, length, Checks.notNull("stream", stream));
    }

    /**
     * Queues a copy of {@code length} bytes of buffer {@code src} at {@code srcOffset} into this
     * buffer at {@code offset} on {@code stream} ({@code cuMemcpyDtoDAsync}) and returns. The
     * stream's device needs read access to {@code src} and write access to this buffer; the
     * windows may not overlap within one memory (refused with {@link IllegalArgumentException}
     * when they share an allocation at overlapping offsets, as {@link
     * #copyFrom(long, VirtualMemoryBuffer, long, long)} does). Records {@code stream} on both
     * buffers. Throws as {@link #copyFromAsync(long, PinnedHostBuffer, long, long, Stream)}.
     */
    public void copyFromAsync(long offset, VirtualMemoryBuffer src, long srcOffset, long length, Stream stream) {
        requireOpen(); // closed first, whatever the arguments (the class javadoc's rule)
        AsyncCopies.fromBuffer(this, offset, Checks.notNull("src", src), srcOffset, length, Checks.notNull("stream", stream));
    }

    /**
     * Queues a copy of {@code src[srcOffset, srcOffset + length)} into this buffer at
     * {@code offset} on {@code stream} and returns; {@code src} may be changed or reused as soon
     * as this returns. The bytes go through pinned staging owned by cuvmm (1 MiB pieces, filled
     * by this call without pinning the array; they return to cuvmm's pool when the stream has
     * passed the copy). Records {@code stream} on this buffer. Throws as
     * {@link #copyFromAsync(long, PinnedHostBuffer, long, long, Stream)}.
     */
    public void copyFromAsync(long offset, byte[] src, int srcOffset, int length, Stream stream) {
        requireOpen(); // closed first, whatever the arguments (the class javadoc's rule)
        AsyncCopies.fromArray(this, offset, Checks.notNull("src", src), srcOffset, length, Checks.notNull("stream", stream));
    }

    /**
     * Queues a fill of {@code length} bytes from {@code offset} with {@code value} on
     * {@code stream} ({@code cuMemsetD8Async}) and returns. Records {@code stream} on this buffer.
     * Throws as {@link #copyFromAsync(long, PinnedHostBuffer, long, long, Stream)}.
     */
    public void fillAsync(long offset, long length, byte value, Stream stream) {
        requireOpen(); // closed first, whatever the arguments (the class javadoc's rule)
        AsyncCopies.fill(this, offset, length, value, Checks.notNull("stream", stream));
    }

    /**
     * Records that work queued on {@code stream} so far (a kernel launched through another
     * binding on {@link Stream#handle()}) uses this buffer: {@link #close()} waits for it,
     * {@link #close(Stream)} orders after it, and the synchronous operations wait for it. One
     * {@code cuEventRecord} (plus one {@code cuEventCreate} the first time for this stream).
     *
     * @throws IllegalStateException when this buffer or {@code stream} is closed, or when called
     *     from a host function
     * @throws CudaException when the driver refuses; the work queued on {@code stream} so far is
     *     then waited for before this throws (as after an asynchronous operation's failed
     *     record), so a close after the failure releases nothing under it
     */
    public void recordUse(Stream stream) {
        requireOpen(); // closed first, whatever the arguments (the class javadoc's rule)
        AsyncCopies.recordUse(this, Checks.notNull("stream", stream));
    }

    /**
     * Runs {@code action} with this buffer's address while holding a use (as
     * {@link #withAddress(java.util.function.LongConsumer)}), then records {@code stream} on
     * this buffer ({@link #recordUse(Stream)}), also when {@code action} throws: launch the
     * kernel on {@code stream} inside {@code action}, and close waits for it. If that record
     * fails, the stream is waited for before the failure is thrown (or, when {@code action}
     * threw, added to its exception as suppressed), so close still releases nothing early.
     *
     * @throws IllegalStateException when this buffer or {@code stream} is closed, or when called
     *     from a host function (the record is a driver call; {@code action} does not run)
     * @throws CudaException when the driver refuses the record, after waiting for the stream
     */
    public void withAddress(Stream stream, java.util.function.LongConsumer action) {
        requireOpen(); // closed first, whatever the arguments (the class javadoc's rule)
        AsyncCopies.withAddress(this, address, Checks.notNull("stream", stream), Checks.notNull("action", action));
    }

    /**
     * Closes this reference in {@code stream}'s order, without blocking: {@code stream} is made
     * to wait for the work recorded on this buffer from other streams, an event is recorded on
     * it, and the memory is released (unmapped when this was its last holder; an import's
     * {@code whenUnmapped} runs then) by cuvmm's reaper thread ("cuvmm-stream-release") once
     * that event completed. Work queued on {@code stream} before this call may use the memory;
     * work queued after may not. Like {@link #close()}: idempotent (on a closed buffer it
     * returns, whatever {@code stream} is, null included), refuses while calls or
     * leases hold the buffer, and any use after it throws. If the stream cannot be ordered (a
     * driver error), or the reaper thread cannot be started (for example
     * {@code OutOfMemoryError}: "unable to create native thread"), it falls back to waiting
     * here and releasing on this thread (late, never early), and logs why; a later release
     * tries to start the thread again.
     *
     * @throws IllegalStateException when another thread is inside a call on this buffer, or a
     *     lease holds it (nothing is released), or when {@code stream} is closed, or when called
     *     from a host function (it calls the driver; nothing is released: use {@link #close()})
     * @throws NullPointerException when {@code stream} is null and this buffer is open
     */
    public void close(Stream stream) {
        // Idempotent, as close(): whatever the stream (null included: an independent probe got
        // a NullPointerException from a closed buffer) or the thread.
        if (state.isClosed()) return;
        Checks.notNull("stream", stream);
        // Before the state closes: a refusal half way (NativeCalls.status) would leak the range.
        HostFunctions.refuseInsideHostFunction("VirtualMemoryBuffer.close(Stream)");
        stream.acquireArgument();
        try {
            if (state.tryClose(release, holders()) == AcquireState.CloseResult.CLOSED_NOW) {
                if (release.recycler instanceof org.cuvmm.internal.StreamOrderedRecycler) closeIntoPool(stream);
                else StreamOrderedRelease.closeOn(this, stream, streamUses);
            }
        } finally {
            stream.release();
        }
    }

    /**
     * close(stream) of a pooled buffer: {@code stream} waits for the uses recorded on other
     * streams, then the pool takes the range back in {@code stream}'s order (it records its own
     * event there; see {@link org.cuvmm.pool.VirtualMemoryPool}, "Streams"). Never blocks, except
     * when the driver refuses the waits: then it waits here for the recorded uses (late, never
     * early) and the pool takes the memory back as after close(), and why is logged.
     */
    private void closeIntoPool(Stream stream) {
        StreamUses u = streamUses;
        if (u != null && !u.isEmpty()) {
            try {
                u.makeWait(stream, true); // the pool orders the stream after the slot's own event
            } catch (RuntimeException | Error e) {
                System.getLogger("org.cuvmm").log(System.Logger.Level.WARNING, "close(" + stream + ") of " + this
                        + " could not order the stream after the buffer's other streams (" + e.getMessage()
                        + "); waiting for them here instead", e);
                u.awaitAll(release.description());
                NativeApi.stream_synchronize(stream.nativeHandle(), NativeCalls.status()); // best effort, as closeOn
                finishClose();
                return;
            }
        }
        release.closeStream = stream;
        finishClose();
    }

    /** The native range; the caller holds a use. */
    NativeRangeHandle nativeRange() { return range; }

    /** Registers a use (pair with {@link #endUse()}). */
    void acquireUse() { acquire(); }

    /** {@link #acquireUse()} for this buffer passed as another object's argument {@code argument}. */
    void acquireArgument(String argument) { state.acquireArgument(argument, release); }

    /** Ends a use registered by {@link #acquireUse()}. */
    void endUse() { releaseUse(); }

    /** This buffer's stream uses, created on the first; the caller holds a use. */
    StreamUses streamUses() {
        StreamUses u = streamUses;
        if (u == null) {
            synchronized (this) { // bookkeeping only, no driver call
                u = streamUses;
                if (u == null) {
                    streamUses = u = new StreamUses();
                    release.uses = u;
                }
            }
        }
        return u;
    }

    /** This buffer's stream uses, or null when none was ever recorded. */
    StreamUses streamUsesIfAny() { return streamUses; }

    /** Called by StreamOrderedRelease: the release of a closed buffer, once its stream work completed. */
    void releaseAfterStreamWork() { finishClose(); }

    /**
     * A synchronous operation of {@code length} bytes on cuvmm's own stream, holding a use of this
     * buffer ({@code other}'s use, when not null, is the caller's); a zero length makes no driver call.
     */
    private void onOwnStream(VirtualMemoryBuffer other, long length, java.util.function.Consumer<NativeStreamHandle> op) {
        acquire();
        try {
            if (length == 0) return;
            AsyncCopies.synchronous(resource.device(), this, other, op);
        } finally {
            releaseUse();
        }
    }

    private static void check(java.util.function.Consumer<NativeStatus> call) {
        NativeStatus st = NativeCalls.status();
        call.accept(st);
        NativeCalls.check(st);
    }

    /**
     * A direct {@link ByteBuffer} over this buffer's memory, for host-located memory only
     * ({@link VirtualMemoryResource#isHostAccessible()}). The view holds its own reference
     * to the memory: it stays valid, and the memory stays mapped, until the view (and every
     * slice or duplicate of it) is unreachable, even after this buffer is closed. For memory
     * imported with a {@code whenUnmapped} callback, the view counts as a mapping: the
     * callback waits until the view's cleaner has run.
     *
     * @throws UnsupportedOperationException when the memory is not host-accessible
     * @throws IllegalStateException when the buffer is larger than 2 GiB - 1 (use a smaller
     *     buffer) or closed
     */
    public ByteBuffer asByteBuffer() {
        requireOpen(); // closed first: a closed buffer says so whatever its location
        if (!resource.isHostAccessible()) {
            throw new UnsupportedOperationException("asByteBuffer: the memory of " + this + " is on device "
                    + resource.device() + " (expected: a resource with a host location type, HOST or HOST_NUMA; "
                    + "copy with copyTo/copyFrom instead)");
        }
        if (size > Integer.MAX_VALUE) {
            throw new IllegalStateException("asByteBuffer: size " + size + " (expected: at most " + Integer.MAX_VALUE
                    + " bytes; a ByteBuffer cannot address more)");
        }
        if (size == 0) {
            requireOpen();
            return ByteBuffer.allocateDirect(0);
        }
        acquire();
        try {
            NativeRangeHandle viewRange = new NativeRangeHandle(range);
            ImportHold viewHold = hold == null ? null : hold.retain();
            Runnable dropView = viewHold == null ? viewRange::deallocate : () -> {
                try {
                    viewRange.deallocate();
                } finally {
                    viewHold.release();
                }
            };
            ByteBuffer view;
            try {
                view = ByteViews.of(address, size);
                LeakDetection.CLEANER.register(view, dropView);
            } catch (RuntimeException | Error e) {
                dropView.run(); // no view escaped: give its references back now
                throw e;
            }
            return view;
        } finally {
            releaseUse();
        }
    }

    /**
     * Exports this buffer for another process: one fd per physical allocation that covers
     * it, in address order: the first {@link #exportedChunkCount()} chunks, which for an alias
     * smaller than its mapping is fewer than {@link #chunkCount()} (fd {@code i} is the
     * allocation of {@code allocationIds()[i]}; the trailing ids have no fd). Exports on every call (nothing is cached; this buffer holds no
     * fds); the returned descriptor owns the fds. To export only some chunks (those a
     * consumer does not hold yet), use {@link #exportChunks(int...)}.
     *
     * @throws IllegalStateException when the resource is not IPC-enabled (handle type not
     *     POSIX_FD), when the buffer covers memory imported from another process (which
     *     cannot be exported again), or when the buffer is closed
     * @throws CudaException when the driver fails (at the fd limit the message says so);
     *     no fd stays open
     */
    public BufferDescriptor exportDescriptor() {
        // Closed first (the class javadoc's rule): a closed buffer of a NONE resource said it
        // was allocated without POSIX_FD (an independent probe).
        requireOpen();
        requireIpcEnabled("exportDescriptor");
        acquire();
        try {
            int chunks = NativeApi.export_chunk_count(range);
            for (int i = 0; i < chunks; i++) {
                if (range.chunk_imported(i)) {
                    throw new IllegalStateException(org.cuvmm.internal.ErrorMessages.importedCannotBeExported(
                            "exportDescriptor: " + release.description(), " (chunk " + (i + 1) + " of " + chunks + ")"));
                }
            }
            int[] fds = new int[chunks];
            long[] sizes = new long[chunks];
            NativeStatus st = NativeCalls.status();
            int n = NativeApi.export_fds(range, fds, sizes, chunks, st);
            NativeCalls.check(st);
            if (n != chunks) throw new IllegalStateException("export returned " + n + " fds for " + chunks + " chunks");
            return new BufferDescriptor(fds, sizes, size, HandleType.POSIX_FD);
        } finally {
            releaseUse();
        }
    }

    // ---- steady-state sharing support (issue 11): allocation identity, partial export, shared views ----

    /**
     * The identity of each physical allocation behind this buffer, one per chunk in address
     * order (index {@code i} is the chunk of {@link #chunkSize(int) chunkSize(i)}). An id is
     * non-zero, unique in this process and never reused; it is assigned when the allocation
     * is made ({@code cuMemCreate}) or imported ({@code cuMemImportFromShareableHandle}) and
     * stays with it for as long as it lives: the same id in every buffer that maps it (aliases,
     * grown and moved buffers, {@linkplain #share shared views}) and across a pool's reuse.
     * The id is gone when the allocation is released, which a
     * {@linkplain Driver#addAllocationReleaseListener release listener} hears. Ids name
     * allocations of this process only: an imported chunk has an id of its own, unrelated to
     * the exporter's. Makes no driver call.
     *
     * <p>The array covers every mapped chunk, also those of an alias smaller than its mapping
     * that hold none of its bytes, so it may be longer than what {@link #exportDescriptor()}
     * exports: that descriptor's fd {@code i} is the allocation of id {@code i} for {@code i}
     * below {@link #exportedChunkCount()}, and the ids from there on have no fd. To pair ids
     * with fds, pair the first {@code exportedChunkCount()} ids, or name chunks explicitly
     * with {@link #exportChunks(int...)}.
     *
     * @return a new array of {@link #chunkCount()} ids (empty for an empty buffer)
     * @throws IllegalStateException when the buffer is closed
     */
    public long[] allocationIds() {
        acquire();
        try {
            int chunks = range.chunk_count();
            long[] ids = new long[chunks];
            if (chunks == 0) return ids;
            int n = NativeApi.allocation_ids(range, ids, chunks);
            if (n != chunks) throw new IllegalStateException("allocation_ids returned " + n + " ids for " + chunks + " chunks");
            return ids;
        } finally {
            releaseUse();
        }
    }

    /**
     * Exports only the chunks named, so a producer whose consumer already holds the others
     * makes no driver call for those: exactly one {@code cuMemExportToShareableHandle} per
     * index, none for any other chunk, none at all for an empty array. The descriptor lists
     * the named chunks in the order named (fd and size of each; {@link BufferDescriptor#size()}
     * is the sum of their sizes, so importing it maps exactly those chunks, contiguously) and
     * owns the fds as {@link #exportDescriptor()}'s does: close it, or use {@link
     * BufferDescriptor#useFds} / {@link BufferDescriptor#takeFds()}; a leaked one is closed by
     * a cleaner. Indices are those of {@link #chunkSize(int)} and {@link #allocationIds()}.
     *
     * @param chunkIndices distinct chunk indices, 0 to {@code chunkCount() - 1}
     * @throws IllegalStateException when the resource is not IPC-enabled, when a named chunk
     *     was imported from another process (it cannot be exported again), or when the buffer
     *     is closed; no driver call was made
     * @throws IndexOutOfBoundsException when an index is not a chunk of this buffer;
     *     IllegalArgumentException when one is named twice; no driver call was made
     * @throws CudaException when the driver fails (at the fd limit the message says so); no
     *     fd stays open
     */
    public BufferDescriptor exportChunks(int... chunkIndices) {
        requireOpen(); // closed first, whatever the arguments (the class javadoc's rule)
        Checks.notNull("chunkIndices", chunkIndices);
        int[] chunks = chunkIndices.clone(); // checked and exported: the same array
        requireIpcEnabled("exportChunks");
        acquire();
        try {
            int n = range.chunk_count();
            boolean[] named = new boolean[n];
            for (int k = 0; k < chunks.length; k++) {
                int c = chunks[k];
                if (c < 0 || c >= n) {
                    throw new IndexOutOfBoundsException("chunkIndices[" + k + "]: " + c + (n == 0
                            ? " (expected: no index; " + this + " is empty and has no chunks)"
                            : " (expected: 0 to " + (n - 1) + ", the chunks of " + this + ")"));
                }
                if (named[c]) {
                    throw new IllegalArgumentException("chunkIndices: " + java.util.Arrays.toString(chunks)
                            + " (expected: distinct indices; chunk " + c + " is named twice)");
                }
                named[c] = true;
                if (range.chunk_imported(c)) {
                    throw new IllegalStateException(org.cuvmm.internal.ErrorMessages.importedCannotBeExported(
                            "exportChunks: " + release.description(), " (chunk " + c + ")"));
                }
            }
            int[] fds = new int[chunks.length];
            long[] sizes = new long[chunks.length];
            NativeStatus st = NativeCalls.status();
            int exported = NativeApi.export_chunk_fds(range, chunks, chunks.length, fds, sizes, st);
            NativeCalls.check(st);
            if (exported != chunks.length) {
                throw new IllegalStateException("export returned " + exported + " fds for " + chunks.length + " chunks");
            }
            long total = 0;
            for (long s : sizes) total += s;
            return new BufferDescriptor(fds, sizes, total, HandleType.POSIX_FD);
        } finally {
            releaseUse();
        }
    }

    private void requireIpcEnabled(String operation) {
        if (!resource.isIpcEnabled()) {
            throw new IllegalStateException(operation + ": " + release.description() + " was allocated with handle type "
                    + resource.options().handleType() + " (expected: POSIX_FD; create the resource with "
                    + "VirtualMemoryResourceOptions.builder().handleType(HandleType.POSIX_FD))");
        }
    }

    /**
     * A view of this buffer: a new {@code VirtualMemoryBuffer} ({@link BufferOrigin#SHARED_VIEW})
     * over the same mapped memory, same address and size, with a lifecycle of its own. Makes
     * no driver call (no reserve, map or access call): the view holds one more reference to
     * the native mappings. Use it to hand one mapping to several users, each closing its own
     * view, while an owner keeps the memory mapped (a consumer's import cache).
     *
     * <p>Lifecycle: the view is a buffer like any other. Its close refuses while a call or
     * lease holds it, waits for the stream work recorded on the view (not for work recorded
     * on this buffer or on other views: each keeps its own record), and drops only the view's
     * reference: the memory stays mapped while this buffer or any other holder maps it.
     * Closing this buffer while views live likewise leaves the memory mapped until the last
     * holder goes; for an import made with {@code whenUnmapped}, that callback runs only once
     * every view (and everything derived from one) is gone too. A view of a
     * {@linkplain BufferOrigin#POOLED pooled} buffer keeps its pool from reusing the memory:
     * the pool releases it instead (as for an alias).
     *
     * <p>{@code whenGone} runs exactly once, when the view and everything derived from it
     * ({@link VirtualMemoryResource#modifyAllocation} results and their derivations,
     * {@link #asByteBuffer()} views and their slices) are closed or, if leaked, released by
     * the cleaner; that is, after the view's last native reference was dropped. It runs on
     * the thread that dropped it (the closing thread, the cleaner thread, or cuvmm's
     * stream-release thread after {@link #close(Stream)}), holding no lock, and must not
     * block; a RuntimeException it throws is logged (logger {@code org.cuvmm}) and
     * swallowed. It never runs if this method throws. A view may be shared again: each view
     * has its own {@code whenGone}, and an outer view's runs only after its inner views are gone.
     *
     * @param whenGone what to run once nothing of the view remains
     * @throws IllegalStateException when this buffer is closed
     */
    public VirtualMemoryBuffer share(Runnable whenGone) {
        requireOpen(); // closed first, whatever the arguments (the class javadoc's rule)
        Checks.notNull("whenGone", whenGone);
        acquire();
        try {
            // Named lazily ("the shared view of " + the Release's description, built only when
            // a message needs it): sharing is the import cache's per-attach path (issue 11: no
            // string, and no name object, per round). The Release, not this buffer: a view's
            // hold (reachable from its Cleaner) must not keep a dropped parent reachable.
            ImportHold parent = hold == null ? null : hold.retain();
            ImportHold viewHold;
            try {
                viewHold = new ImportHold(whenGone, release, true, parent); // owns `parent` from here on
            } catch (RuntimeException | Error e) {
                if (parent != null) parent.release(); // never zero: this buffer still holds one
                throw e;
            }
            NativeRangeHandle viewRange;
            try {
                // Not JavaCPP's copy constructor: no call back into Java and no global
                // deallocator entry per view (the import cache makes one per attach). The
                // view's Release deletes it, as any range (NativeRangeHandle.deallocate).
                viewRange = NativeRangeHandle.newReference(range);
            } catch (RuntimeException | Error e) {
                viewHold.releaseUnfired(); // drops the parent's reference too
                throw e;
            }
            try {
                return new VirtualMemoryBuffer(resource, viewRange, BufferOrigin.SHARED_VIEW, size, null, true, viewHold);
            } catch (RuntimeException | Error e) {
                viewRange.deallocate();
                viewHold.releaseUnfired();
                throw e;
            }
        } finally {
            releaseUse();
        }
    }

    /**
     * Runs {@code action} with this buffer's address while holding a use: until it returns,
     * {@link #close()} from any thread refuses and the memory stays mapped. Use it around
     * work that reads the raw address, such as a kernel launch through another binding.
     *
     * @throws IllegalStateException when the buffer is closed
     */
    public void withAddress(java.util.function.LongConsumer action) {
        requireOpen(); // closed first, whatever the arguments (the class javadoc's rule)
        Checks.notNull("action", action);
        acquire();
        try {
            action.accept(address);
        } finally {
            releaseUse();
        }
    }

    /** Calls in progress on this buffer right now, from any thread, leases included. */
    int activeUses() { return state.activeUses(); }

    /**
     * Registers a lease for {@code holder} (for example "consumer pid 4242 on
     * /run/app.sock"): until the lease is closed, {@link #close()} refuses and names it.
     * Registering is atomic with close: either the lease is registered and close refuses, or
     * close won and this throws.
     *
     * @throws IllegalStateException when the buffer is closed
     */
    public BufferLease lease(String holder) {
        requireOpen(); // closed first, whatever the arguments (the class javadoc's rule)
        Checks.notNull("holder", holder);
        return newLease(holder);
    }

    /**
     * As {@link #lease(String)}, with the holder's description made by {@code holder} only
     * when something needs it: {@link BufferLease#holder()}, {@link BufferLease#toString()},
     * and the message of each {@link #close()} refused while the lease is held (each such call
     * calls it again). For a lease taken per request on a hot path (a sharing server's
     * per-attach lease, issue 11: no string built per round). {@code holder} must not block
     * and should return the same text each time; it may be called from any thread, any number
     * of times. A supplier that throws or returns null never breaks those calls: the holder
     * then reads "(holder description unavailable: ...)" or "(no holder description)".
     * (A name of its own, not an overload of {@code lease}: {@code lease(null)} stays a call
     * of {@link #lease(String)}, refused with a message naming the argument.)
     *
     * @throws NullPointerException when {@code holder} is null (the message names it)
     * @throws IllegalStateException when the buffer is closed
     */
    public BufferLease leaseDescribedBy(java.util.function.Supplier<String> holder) {
        requireOpen(); // closed first, whatever the arguments (the class javadoc's rule)
        Checks.notNull("holder", holder);
        return newLease(holder);
    }

    /** {@code holder}: a String or a Supplier of one. */
    private BufferLease newLease(Object holder) {
        acquire();
        try {
            BufferLease lease = new BufferLease(this, holder);
            leaseSet().add(lease);
            return lease;
        } catch (RuntimeException | Error e) {
            releaseUse(); // registered but never handed out: undo, or close would refuse forever
            throw e;
        }
    }

    private java.util.Set<BufferLease> leaseSet() {
        java.util.Set<BufferLease> set = leases;
        if (set == null) {
            synchronized (this) {
                set = leases;
                if (set == null) leases = set = java.util.concurrent.ConcurrentHashMap.newKeySet();
            }
        }
        return set;
    }

    /**
     * Leases held right now. Once it reads 0 (on any thread), every lease counted before has
     * given back its use: a {@link #close()} after that reading is not refused for a lease
     * (only for calls in progress, or a lease taken since).
     */
    public int leaseCount() {
        java.util.Set<BufferLease> set = leases;
        return set == null ? 0 : set.size();
    }

    /**
     * Called once per lease (its close is claimed by a compare-and-set). The use goes back
     * before the lease leaves the count: once {@link #leaseCount()} reads 0, no lease holds a
     * use, so an owner closing on that reading is not refused "in use" (the other order left
     * that window open). The opposite window is harmless: a close that runs while the ended
     * lease is still counted, but no longer holds its use, simply succeeds.
     */
    void endLease(BufferLease lease) {
        java.util.function.Consumer<BufferLease> seam = beforeEndLeaseForTest;
        if (seam != null) seam.accept(lease);
        try {
            releaseUse();
        } finally { // a deferred close's teardown may throw: the lease is over all the same
            leaseSet().remove(lease);
        }
    }

    /** Test seam: run by {@link #endLease} on the closing thread, before the lease gives its use back. Null: nothing. */
    static volatile java.util.function.Consumer<BufferLease> beforeEndLeaseForTest;

    private String holders() {
        java.util.Set<BufferLease> set = leases;
        if (set == null || set.isEmpty()) return "";
        StringBuilder sb = new StringBuilder();
        int n = 0;
        for (BufferLease l : set) {
            sb.append(n == 0 ? "; leases: " : ", ").append(l.holder());
            if (++n == 8) {
                sb.append(", ...");
                break;
            }
        }
        return sb.toString();
    }

    /**
     * Closes this reference. The memory is unmapped and released when its last holder
     * (this buffer, its aliases, grown buffers, ByteBuffer views, {@linkplain #share shared
     * views} and everything derived from those: their aliases, grown buffers, ByteBuffer views
     * and views of views) is closed or, if leaked, released by the cleaner.
     *
     * <p>The rule (issue 9, which replaces the brief's "refuses while an async operation is in
     * flight"): close refuses while another thread is inside a call on this buffer or a lease
     * holds it, and otherwise <em>waits</em> for the stream work recorded on this buffer
     * ({@code cuEventSynchronize} per stream; see "Streams"): cuvmm's asynchronous operations
     * record automatically, other work through {@link #recordUse(Stream)} or
     * {@link #withAddress(Stream, java.util.function.LongConsumer)}. Work not recorded is not
     * waited for, and each alias keeps its own record: neither this close nor the synchronous
     * operations of one alias wait for work recorded on another alias over the same memory.
     * So close() can block as long as the recorded work runs: a stream held by a
     * host function that never returns blocks it for ever. To release without blocking, use
     * {@link #close(Stream)}. Called from a host function ({@link Stream#launchHostFunction}),
     * it never blocks and makes no driver call: cuvmm's reaper thread waits and releases.
     * Idempotent.
     *
     * @throws IllegalStateException when another thread is inside a call on this buffer;
     *     nothing is released and the buffer stays usable
     */
    @Override
    public void close() {
        if (state.tryClose(release, holders()) == AcquireState.CloseResult.CLOSED_NOW) {
            StreamUses u = streamUses;
            if (HostFunctions.insideHostFunction()) {
                // No driver call (unmap, event wait) from a host function: CUDA forbids it, and
                // waiting for work queued behind this host function would never end.
                StreamOrderedRelease.later(release.description(), u == null ? java.util.List.of() : u.events(),
                        this::finishClose);
                return;
            }
            if (u != null) u.awaitAll(release.description()); // closed: no new use can be recorded
            finishClose();
        }
    }

    private void finishClose() {
        release.explicit = true;
        if (cleanable != null) cleanable.clean();
        else release.run();
        // Reachable until the release ran: a pool's weak watch on this buffer (untracked
        // pooled buffers) must not report a leak while the buffer is being closed.
        java.lang.ref.Reference.reachabilityFence(this);
    }

    /**
     * Closes now if nothing holds the buffer; otherwise closes it when the last call in
     * progress or lease ends (a consumer releasing, a connection closing). Either way the
     * caller gives the buffer up: it must not use it afterwards. Never blocks: with recorded
     * stream work pending, cuvmm's reaper thread releases once it completed (only when that
     * thread cannot be started does the closing thread wait for the work and release, and
     * logs why). It throws only
     * when it closes at once and the teardown fails (the failure of {@link #close()}); a close
     * run later, by the end of a lease or of a call in progress, throws from that
     * {@link BufferLease#close()} or call instead.
     * For a pooled buffer this is how a producer hands back memory that consumers still map:
     * it returns to the pool only once every lease is gone.
     *
     * <p>Until the close runs the buffer is open ({@link #isClosePending()} says true): new
     * leases can still be taken on it (a consumer attaching to a published buffer, say), and
     * each one puts the close off until it ends. To stop new leases, stop handing the buffer
     * out first (withdraw its publication), then call this.
     */
    public void closeWhenUnused() {
        closePending = true;
        tryDeferredClose();
    }

    /** True once {@link #closeWhenUnused()} was called and the buffer is not yet closed. */
    public boolean isClosePending() { return closePending && !state.isClosed(); }

    private void tryDeferredClose() {
        if (!state.tryCloseIfIdle()) return;
        StreamUses u = streamUses;
        // Never blocks: with stream work pending, the reaper releases once it completed. From a
        // host function (a lease closed there), no driver call either: the reaper releases.
        if ((u == null || u.isEmpty()) && !HostFunctions.insideHostFunction()) finishClose();
        else if (u == null) StreamOrderedRelease.later(release.description(), java.util.List.of(), this::finishClose);
        else StreamOrderedRelease.later(release.description(), u.events(), this::finishClose);
    }

    /** Ends one use; the last one closes a buffer whose close is pending. */
    private void releaseUse() {
        state.release();
        if (closePending) tryDeferredClose();
    }

    /** {@code alignment}: the addressAlignment of the options {@code spec} was built from (for messages). */
    VirtualMemoryBuffer grow(NativeSpecHandle spec, long newSize, long alignment) {
        // modifyAllocation's argument: closed after its check, it is named as that argument too.
        acquireArgument("buffer");
        try {
            NativeRangeHandle out = new NativeRangeHandle();
            NativeStatus st = NativeCalls.status();
            int outcome = NativeApi.grow(out, range, spec, newSize, st);
            if (st.code() != 0) {
                CudaException e = NativeCalls.toException(st);
                out.close();
                throw resource.namingTheRequest(e, "modifyAllocation: newSize", newSize, alignment);
            }
            BufferOrigin o;
            switch (outcome) {
                case 0: o = BufferOrigin.ALIAS; break;
                case 1: o = BufferOrigin.GROWN_IN_PLACE; break;
                case 2: o = BufferOrigin.MOVED; break;
                default: o = BufferOrigin.ALLOCATED; break;
            }
            // Every outcome maps this buffer's chunks again (a grow may add local ones): the
            // new buffer holds the import too, and passes it on to what is derived from it.
            ImportHold h = hold == null ? null : hold.retain();
            try {
                return adopt(resource, out, o, h);
            } catch (RuntimeException | Error e) {
                if (h != null) h.release(); // `out` was deallocated by adopt
                throw e;
            }
        } finally {
            releaseUse();
        }
    }

    private void acquire() { state.acquire(release); }

    /** A buffer owning {@code range}; if building it fails, the range is released at once. */
    static VirtualMemoryBuffer adopt(VirtualMemoryResource resource, NativeRangeHandle range, BufferOrigin origin) {
        return adopt(resource, range, origin, null);
    }

    /**
     * A buffer owning {@code range} and the reference on {@code hold} (or null) the caller
     * took for it; if building it fails, the range is released at once and the caller keeps
     * (and must drop) the hold's reference.
     */
    static VirtualMemoryBuffer adopt(VirtualMemoryResource resource, NativeRangeHandle range, BufferOrigin origin,
                                     ImportHold hold) {
        try {
            return new VirtualMemoryBuffer(resource, range, origin, range.size(), null, true, hold);
        } catch (RuntimeException | Error e) {
            range.deallocate();
            throw e;
        }
    }

    /**
     * A read-only {@code copyTo} destination, named ({@link ReadOnlyBufferException} has no
     * message of its own). Static and holding only the text: an exception kept by a logger must
     * not keep the buffer reachable, and it must serialize (a review).
     */
    private static final class ReadOnlyDestination extends ReadOnlyBufferException {
        private static final long serialVersionUID = 1L;
        private final String message;

        ReadOnlyDestination(ByteBuffer dst) {
            message = "dst: " + dst + " is read-only (expected: a writable ByteBuffer to copy into)";
        }

        @Override
        public String getMessage() { return message; }
    }

    /** Throws when closed: said first, whatever the arguments (the class javadoc's rule). */
    void requireOpen() {
        if (state.isClosed()) {
            throw new IllegalStateException(release.description() + " is closed; it cannot be used after close()");
        }
    }

    private long use(java.util.function.LongSupplier body) {
        acquire();
        try {
            return body.getAsLong();
        } finally {
            releaseUse();
        }
    }

    private int useInt(java.util.function.IntSupplier body) {
        acquire();
        try {
            return body.getAsInt();
        } finally {
            releaseUse();
        }
    }

    @Override
    public String toString() {
        return describe(address, size) + (state.isClosed() ? " (closed)" : "");
    }
}
