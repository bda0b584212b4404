package org.cuvmm;

import java.nio.ByteBuffer;

import org.bytedeco.javacpp.Pointer;
import org.cuvmm.internal.AcquireState;
import org.cuvmm.internal.Checks;
import org.cuvmm.internal.FileMappings;
import org.cuvmm.internal.NativeCalls;
import org.cuvmm.internal.jni.NativeApi;
import org.cuvmm.internal.jni.NativePinnedHandle;
import org.cuvmm.internal.jni.NativeStatus;

/**
 * Page-locked (pinned) host memory, the source or destination of truly asynchronous copies
 * ({@link VirtualMemoryBuffer#copyFromAsync(long, PinnedHostBuffer, long, long, Stream)},
 * {@link VirtualMemoryBuffer#copyToAsync(long, PinnedHostBuffer, long, long, Stream)}): the driver
 * copies it by DMA while the caller goes on. From pageable memory the driver first stages or
 * waits, so the copy is not asynchronous.
 *
 * <table class="striped">
 * <caption>Two kinds</caption>
 * <tr><th>made by</th><th>memory</th><th>{@link #close()}</th></tr>
 * <tr><td>{@link #allocate(long)}</td><td>allocated by the driver ({@code cuMemHostAlloc}, portable)</td>
 *     <td>frees it ({@code cuMemFreeHost}) once no {@link #asByteBuffer()} view is reachable</td></tr>
 * <tr><td>{@link #register(ByteBuffer)}</td><td>the caller's direct buffer, page-locked in place
 *     ({@code cuMemHostRegister})</td><td>unregisters it; the ByteBuffer stays the caller's</td></tr>
 * </table>
 *
 * <p>Lifecycle: every asynchronous copy records its stream on this buffer, and {@link #close()}
 * waits for that work before it frees or unregisters (freeing pinned memory a queued copy still
 * reads is undefined on a GPU). A buffer never closed is reported as a leak
 * ({@link LeakDetection}) and released by the cleaner the same way, after its recorded work; a
 * registered one keeps the caller's ByteBuffer reachable until then. Idempotent; other uses after close throw
 * {@link IllegalStateException}; close while another thread is inside a call on it refuses.
 * The memory is ordinary host memory: writing it while a queued copy reads it is a race the
 * caller must avoid (wait for the stream or an event first). Thread-safe.
 */
public final class PinnedHostBuffer implements AutoCloseable {
    private final NativePinnedHandle handle;
    private final long address;
    private final long size;
    private final ByteBuffer registered; // a slice of the caller's buffer (keeps it reachable) while registered; null when allocated
    private final AcquireState state = new AcquireState();
    private volatile StreamUses uses;
    /** The release, run once: by {@link #close()}, or by the cleaner for a buffer never closed. */
    private final Teardown teardown;
    private final java.lang.ref.Cleaner.Cleanable cleanable;

    private PinnedHostBuffer(NativePinnedHandle handle, ByteBuffer registered) {
        this.handle = handle;
        this.address = handle.address();
        this.size = handle.size();
        this.registered = registered;
        this.teardown = new Teardown(handle, registered, toString());
        this.cleanable = LeakDetection.CLEANER.register(this, teardown);
    }

    /**
     * Frees or unregisters the memory exactly once, holding no reference to the buffer. For a
     * buffer never closed (the cleaner runs it) it first reports the leak and waits for the
     * stream work recorded on it, as a leaked {@link VirtualMemoryBuffer}'s release does; until
     * then it keeps the handle and the caller's registered ByteBuffer reachable. Before, a
     * leaked registered buffer let the JDK free the caller's memory while a copy into it was
     * still queued, and the copy crashed the JVM (SIGSEGV on a driver thread: an independent
     * probe; PinnedLeakTest).
     */
    private static final class Teardown implements Runnable {
        private final NativePinnedHandle handle;
        private final ByteBuffer registered;
        private final String description;
        volatile StreamUses uses;
        volatile boolean explicit;

        Teardown(NativePinnedHandle handle, ByteBuffer registered, String description) {
            this.handle = handle;
            this.registered = registered;
            this.description = description;
        }

        @Override
        public void run() {
            StreamUses u = uses;
            try {
                if (!explicit) {
                    LeakDetection.report(description, null, LeakDetection.NOT_RECORDED_HERE);
                    if (u != null) u.awaitAll(description); // close() waited already
                }
                handle.deallocate();
            } finally {
                if (u != null) u.destroy();
                java.lang.ref.Reference.reachabilityFence(registered); // the caller's memory outlives the work
            }
        }
    }

    /**
     * Allocates {@code size} bytes of pinned host memory ({@code cuMemHostAlloc} with
     * {@code CU_MEMHOSTALLOC_PORTABLE}: pinned for every device's context).
     *
     * @throws IllegalArgumentException when {@code size} is not positive
     * @throws CudaException when the driver refuses (out of pinnable memory)
     */
    public static PinnedHostBuffer allocate(long size) {
        if (size <= 0) throw new IllegalArgumentException("size: " + size + " (expected: > 0 bytes)");
        Driver.get();
        NativePinnedHandle h = new NativePinnedHandle();
        NativeStatus st = NativeCalls.status();
        NativeApi.pinned_allocate(h, size, st);
        if (st.code() != 0) {
            h.deallocate();
            CudaException e = NativeCalls.toException(st);
            throw e.code() != CUDA_ERROR_OUT_OF_MEMORY ? e : e.withDetail("allocate: size " + size + " bytes of "
                    + "page-locked host memory (ask for less, or close PinnedHostBuffers no longer needed)");
        }
        return new PinnedHostBuffer(h, null);
    }

    /**
     * Page-locks the bytes of {@code buffer} from its position to its limit in place
     * ({@code cuMemHostRegister}, portable). The buffer stays the caller's: this object keeps it
     * reachable until {@link #close()}, which unregisters it; offsets of this object count from
     * the buffer's position at this call.
     *
     * <p>A file mapping ({@code FileChannel.map}, or a slice, duplicate or view of one) is
     * refused: the driver would read and write its pages itself, and a truncation of the file
     * (one {@code FileChannel.truncate} call, from any process) while copies are queued would
     * end the process ({@code SIGBUS} in native code, which neither cuvmm nor the JVM can
     * catch). Copy a mapping with {@link VirtualMemoryBuffer#copyFrom(long, ByteBuffer)} and
     * {@link VirtualMemoryBuffer#copyTo(long, ByteBuffer)}, which check every page, or into
     * {@link #allocate(long)} memory.
     *
     * @throws IllegalArgumentException when {@code buffer} is not direct, is a file mapping, or
     *     has no bytes remaining
     * @throws CudaException when the driver refuses (for example the memory is registered already:
     *     {@code CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED}; on the host driver, {@code
     *     CUDA_ERROR_OPERATING_SYSTEM} when it cannot read {@code /proc/self/maps} to check the
     *     memory, which at the fd limit the message says)
     */
    public static PinnedHostBuffer register(ByteBuffer buffer) {
        Checks.notNull("buffer", buffer);
        if (!buffer.isDirect()) {
            throw new IllegalArgumentException("buffer: " + buffer + " (expected: a direct ByteBuffer; a heap buffer "
                    + "can move in memory and cannot be registered, use allocate(size) and copy)");
        }
        if (!buffer.hasRemaining()) {
            throw new IllegalArgumentException("buffer: " + buffer + " (expected: at least one byte between position and limit)");
        }
        Driver.get();
        if (FileMappings.isFileMapping(buffer)) {
            throw new IllegalArgumentException("buffer: " + buffer + " is a file mapping (expected: memory that "
                    + "stays mapped: a truncation of the file while the driver reads its pages would end the process "
                    + "with SIGBUS; copy the mapping with VirtualMemoryBuffer.copyFrom/copyTo, which check every "
                    + "page, or into allocate(size) memory)");
        }
        long base;
        try (Pointer p = new Pointer(buffer)) {
            base = p.address() + buffer.position();
        }
        NativePinnedHandle h = new NativePinnedHandle();
        NativeStatus st = NativeCalls.status();
        NativeApi.pinned_register(h, base, buffer.remaining(), st);
        if (st.code() != 0) {
            h.deallocate();
            CudaException e = NativeCalls.toException(st);
            if (e.code() != CUDA_ERROR_INVALID_VALUE) throw e;
            if (buffer.isReadOnly()) {
                throw e.withDetail("buffer: " + buffer + " is read-only (expected: memory mapped for reading and "
                        + "writing: the driver pins writable pages; copy it into allocate(size) memory)");
            }
            // The driver says only INVALID_VALUE; the two causes a caller can meet (an
            // independent probe registered a host VirtualMemoryBuffer's view and got no hint).
            throw e.withDetail("buffer: " + buffer + " at 0x" + Long.toHexString(base) + " (expected: ordinary host "
                    + "memory mapped for reading and writing; the driver refuses memory it maps itself, such as a "
                    + "VirtualMemoryBuffer's asByteBuffer() view, which needs no registration: copy to and from the "
                    + "VirtualMemoryBuffer directly, or register allocate(size) memory)");
        }
        // The slice keeps the caller's buffer reachable, in its byte order (slice() alone is big-endian).
        return new PinnedHostBuffer(h, buffer.slice().order(buffer.order()));
    }

    private static final int CUDA_ERROR_INVALID_VALUE = 1;
    private static final int CUDA_ERROR_OUT_OF_MEMORY = 2;

    /**
     * The host address of the first byte.
     *
     * @throws IllegalStateException when closed
     */
    public long address() {
        if (state.isClosed()) throw new IllegalStateException(this + " is closed; it cannot be used after close()");
        return address;
    }

    /** Size in bytes. */
    public long size() { return size; }

    /** True for memory made by {@link #register(ByteBuffer)}. */
    public boolean isRegistered() { return registered != null; }

    /**
     * True once a {@link #close()} of this buffer was claimed (not one refused because another
     * thread was inside a call): from then on no new use can start, and the calls that reach
     * the memory throw {@link IllegalStateException}. It does not mean the memory was freed or
     * unregistered: it reads true while {@code close()} still waits for the recorded stream
     * work; after a {@code close()} from a host function, cuvmm's reaper thread
     * ("cuvmm-stream-release") waits and releases later; and allocated memory is freed only
     * once no {@link #asByteBuffer()} view of it is reachable. No call of cuvmm's reports when
     * that has happened.
     */
    public boolean isClosed() { return state.isClosed(); }

    /**
     * A direct {@link ByteBuffer} over this memory (position 0, capacity {@link #size()}), to fill
     * or read it. For {@link #allocate(long) allocated} memory the view holds its own reference:
     * the memory stays allocated until the view is unreachable, even after {@link #close()}, and
     * its byte order is the platform's ({@link java.nio.ByteOrder#nativeOrder()}), as for a
     * {@code VirtualMemoryBuffer}'s view. For {@link #register(ByteBuffer) registered} memory it
     * is a duplicate of the caller's buffer, in that buffer's byte order.
     *
     * @throws IllegalStateException when closed, or when larger than 2 GiB - 1
     */
    public ByteBuffer asByteBuffer() {
        if (size > Integer.MAX_VALUE) {
            throw new IllegalStateException("asByteBuffer: size " + size + " (expected: at most " + Integer.MAX_VALUE
                    + " bytes; a ByteBuffer cannot address more)");
        }
        acquire();
        try {
            if (registered != null) {
                // The registered bytes, position 0, in the caller's byte order: a plain
                // duplicate() is always big-endian, whatever the caller's buffer (an
                // independent probe: every other view here is in native order).
                return registered.duplicate().order(registered.order());
            }
            NativePinnedHandle viewRef = new NativePinnedHandle(handle);
            ByteBuffer view;
            try {
                view = ByteViews.of(address, size);
                LeakDetection.CLEANER.register(view, viewRef::deallocate);
            } catch (RuntimeException | Error e) {
                viewRef.deallocate();
                throw e;
            }
            return view;
        } finally {
            state.release();
        }
    }

    /**
     * Waits for the stream work recorded on this buffer (the asynchronous copies that read or
     * write it), then frees or unregisters the memory. Idempotent. When the memory is really
     * freed: memory from {@link #allocate(long)} is freed ({@code cuMemFreeHost}) only once no
     * {@link #asByteBuffer()} view of it is reachable any more (a view keeps it valid; it is
     * freed when the last view is collected), registered memory is unregistered here (the
     * caller's ByteBuffer stays valid and the caller's). It blocks as long as the recorded work
     * runs (a stream held by a host function that never returns blocks it).
     *
     * <p>Only work recorded on this object is waited for: another {@code PinnedHostBuffer}
     * over the same memory (for example a {@link #register(ByteBuffer)} of a view of it) keeps
     * its own record, and neither close nor cuvmm's synchronous operations wait for work
     * recorded on the other one. Never throws for a failed
     * wait or release (logged). Called from a host function, it never blocks and makes no
     * driver call: the buffer is closed at once and cuvmm's reaper thread
     * ("cuvmm-stream-release") waits for the recorded work and frees it (a wait here for a copy
     * queued behind the host function would never end).
     *
     * @throws IllegalStateException when another thread is inside a call on this buffer; it
     *     stays open and usable
     */
    @Override
    public void close() {
        if (state.tryClose(this, "") != AcquireState.CloseResult.CLOSED_NOW) return;
        teardown.explicit = true;
        StreamUses u = uses;
        if (HostFunctions.insideHostFunction()) {
            // The task keeps this object reachable until it ran: dropped meanwhile, the cleaner
            // would run the teardown (explicit, so without waiting) under the queued work (a
            // reviewer's test: ReviewPinnedHostFnCloseTest).
            StreamOrderedRelease.later(toString(), u == null ? java.util.List.of() : u.events(), () -> {
                cleanable.clean();
                java.lang.ref.Reference.reachabilityFence(this);
            });
            return;
        }
        if (u != null) u.awaitAll(toString());
        cleanable.clean(); // frees or unregisters, then gives the use events back (Teardown)
    }

    // ---- for cuvmm's own classes ----

    void acquire() { state.acquire(this); }

    /** {@link #acquire()} for this buffer passed as another object's argument {@code argument}. */
    void acquireArgument(String argument) { state.acquireArgument(argument, this); }

    void release() { state.release(); }

    NativePinnedHandle nativeHandle() { return handle; }

    /** The uses record, created on first use; the caller holds a use. */
    StreamUses uses() {
        StreamUses u = uses;
        if (u == null) {
            synchronized (this) { // bookkeeping only
                u = uses;
                if (u == null) {
                    uses = u = new StreamUses();
                    teardown.uses = u;
                }
            }
        }
        return u;
    }

    @Override
    public String toString() {
        return "PinnedHostBuffer[0x" + Long.toHexString(address) + ", " + size + " bytes"
                + (registered != null ? ", registered" : "") + (state.isClosed() ? ", closed" : "") + "]";
    }
}
