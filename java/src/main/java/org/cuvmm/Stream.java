package org.cuvmm;

import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.atomic.AtomicReferenceArray;

import org.cuvmm.internal.AcquireState;
import org.cuvmm.internal.Checks;
import org.cuvmm.internal.NativeCalls;
import org.cuvmm.internal.jni.NativeApi;
import org.cuvmm.internal.jni.NativeStreamHandle;
import org.cuvmm.internal.jni.NativeStatus;

/**
 * A CUDA stream of one device: a queue of work (copies, fills, kernels, host functions, event
 * records) that the device runs in the order it was queued.
 *
 * <table class="striped">
 * <caption>Kinds of stream</caption>
 * <tr><th>made by</th><th>orders with the legacy stream</th><th>{@link #close()}</th></tr>
 * <tr><td>{@link #create(int)}, {@link #builder(int)} (blocking, the default)</td><td>yes: work on it waits for
 *     work queued earlier on the legacy stream, and the reverse</td><td>destroys it</td></tr>
 * <tr><td>{@code builder(device).nonBlocking(true)}</td><td>no</td><td>destroys it</td></tr>
 * <tr><td>{@link #legacy(int)}</td><td>is it</td><td>no-op (the driver's)</td></tr>
 * <tr><td>{@link #perThread(int)}</td><td>yes (a blocking stream per thread)</td><td>no-op (the driver's)</td></tr>
 * </table>
 *
 * <h2>Ordering</h2>
 * Work on one stream runs in queue order. Work on two streams is unordered unless one
 * {@linkplain #waitFor(Event) waits for an event} recorded on the other (or, for blocking
 * streams, through the legacy stream). cuvmm's asynchronous buffer operations
 * ({@link VirtualMemoryBuffer#copyFromAsync(long, PinnedHostBuffer, long, long, Stream)} and the
 * others) record themselves on the buffer, so that {@link VirtualMemoryBuffer#close()} waits for
 * them; for a kernel launched on {@link #handle()} through another binding, call
 * {@link VirtualMemoryBuffer#recordUse(Stream)}.
 *
 * <h2>Ownership</h2>
 * A created stream is owned by this object: {@link #close()} destroys it
 * ({@code cuStreamDestroy}); work already queued still runs to completion (the driver
 * guarantees it), so closing with work queued is safe. {@code close()} is idempotent; any other
 * use after close throws {@link IllegalStateException}; {@code close()} while another thread is
 * inside a call on this stream (for example {@link #synchronize()}) refuses with
 * {@link IllegalStateException} and the stream stays usable. The two default streams belong to
 * the driver; their objects are shared per device and never close.
 *
 * <h2>Host functions</h2>
 * {@link #launchHostFunction(Runnable)} runs Java code in stream order. An exception it throws
 * is logged (logger {@code org.cuvmm}) and thrown, wrapped in {@link HostFunctionException},
 * by the next {@link #synchronize()} of this stream object.
 *
 * <p>Thread-safe. No lock is held across a driver call.
 */
public final class Stream implements AutoCloseable {
    private static final int OWNED = 0;
    private static final int LEGACY = 1;
    private static final int PER_THREAD = 2;
    // One shared object per device for each default stream; 64 covers any machine (the native
    // layer accepts at most 64 device ordinals).
    private static final AtomicReferenceArray<Stream> LEGACY_STREAMS = new AtomicReferenceArray<>(64);
    private static final AtomicReferenceArray<Stream> PER_THREAD_STREAMS = new AtomicReferenceArray<>(64);

    private final NativeStreamHandle handle;
    private final int device;
    private final int kind;
    private final boolean nonBlocking;
    private final int priority;
    private final long raw;
    private final AcquireState state = new AcquireState();
    /**
     * Failures of host functions, kept for a {@link #synchronize()} to throw. One queue per
     * stream object; for the per-thread stream one per thread (an independent probe: one
     * thread's synchronize() threw other threads' failures and missed its own), which goes
     * with the thread: a failure its thread never synchronizes for is only logged.
     */
    static final class HostFailures extends ConcurrentLinkedQueue<Throwable> {
        private static final long serialVersionUID = 1L;
    }

    private final HostFailures hostFailures;
    private final ThreadLocal<HostFailures> perThreadFailures;
    // The per-thread stream is a different driver stream on every thread: buffers record its
    // uses per thread (useKey), else one thread's record would hide another's work. Not the
    // failure queue: buffers and pool slots keep keys long after the thread.
    private final ThreadLocal<ThreadKey> perThreadKey;

    /**
     * The key of one thread's per-thread stream ({@link #useKey()}): it names its thread only
     * weakly, so that a buffer can tell when no use can be recorded under it any more
     * ({@link #useKeyRetired}).
     */
    private static final class ThreadKey {
        private final java.lang.ref.WeakReference<Thread> thread = new java.lang.ref.WeakReference<>(Thread.currentThread());

        boolean threadEnded() {
            Thread t = thread.get();
            return t == null || !t.isAlive();
        }
    }

    private Stream(NativeStreamHandle handle, int device, int kind, boolean nonBlocking, int priority) {
        this.handle = handle;
        this.device = device;
        this.kind = kind;
        this.nonBlocking = nonBlocking;
        this.priority = priority;
        this.raw = handle.handle();
        this.perThreadKey = kind == PER_THREAD ? ThreadLocal.withInitial(ThreadKey::new) : null;
        this.perThreadFailures = kind == PER_THREAD ? ThreadLocal.withInitial(HostFailures::new) : null;
        this.hostFailures = kind == PER_THREAD ? null : new HostFailures();
    }

    /**
     * A new blocking stream on {@code device} with the default priority: {@code builder(device).build()}.
     *
     * @throws IllegalArgumentException when {@code device} is not a device of the driver
     * @throws CudaException when the driver cannot create the stream
     */
    public static Stream create(int device) { return builder(device).build(); }

    /**
     * A builder of a stream on {@code device}.
     *
     * @throws IllegalArgumentException when {@code device} is not a device of the driver
     */
    public static Builder builder(int device) {
        Driver.get().device(device);
        return new Builder(device);
    }

    /**
     * The legacy default stream of {@code device} ({@code CU_STREAM_LEGACY}): it waits for all
     * earlier work on the device's blocking streams, and they wait for it. One object per
     * device; {@link #close()} is a no-op. No driver call.
     *
     * @throws IllegalArgumentException when {@code device} is not a device of the driver
     */
    public static Stream legacy(int device) { return shared(LEGACY_STREAMS, device, LEGACY); }

    /**
     * The per-thread default stream of {@code device} ({@code CU_STREAM_PER_THREAD}): each
     * thread that queues work with this object queues it on a blocking stream of its own, as
     * CUDA's per-thread default stream does; {@link #synchronize()} waits for the calling
     * thread's, and throws the failures of the host functions that thread launched (not other
     * threads'). One object per device; {@link #close()} is a no-op. No driver call.
     *
     * @throws IllegalArgumentException when {@code device} is not a device of the driver
     */
    public static Stream perThread(int device) { return shared(PER_THREAD_STREAMS, device, PER_THREAD); }

    private static Stream shared(AtomicReferenceArray<Stream> table, int device, int kind) {
        Driver.get().device(device);
        Stream s = table.get(device);
        if (s != null) return s;
        NativeStreamHandle h = new NativeStreamHandle();
        NativeStatus st = NativeCalls.status();
        NativeApi.stream_default(h, device, kind == LEGACY ? 0 : 1, st);
        if (st.code() != 0) {
            h.deallocate();
            throw NativeCalls.toException(st);
        }
        Stream made = new Stream(h, device, kind, false, 0);
        if (table.compareAndSet(device, null, made)) return made;
        h.deallocate(); // a borrowed default: no driver call
        return table.get(device);
    }

    /** Options of a new stream. Not thread-safe; {@link #build()} may be called more than once. */
    public static final class Builder {
        private final int device;
        private boolean nonBlocking;
        private int priority;

        private Builder(int device) { this.device = device; }

        /**
         * {@code true}: {@code CU_STREAM_NON_BLOCKING}, no implicit ordering with the legacy
         * stream. {@code false} (default): a blocking stream ({@code CU_STREAM_DEFAULT}).
         */
        public Builder nonBlocking(boolean value) {
            this.nonBlocking = value;
            return this;
        }

        /**
         * Scheduling priority: lower numbers are higher priority, 0 is the default. The driver
         * clamps a value outside its range (on a GPU usually 0 to -5; {@link Stream#priorityRange(int)}).
         */
        public Builder priority(int value) {
            this.priority = value;
            return this;
        }

        /**
         * Creates the stream ({@code cuStreamCreateWithPriority}).
         *
         * @throws CudaException when the driver refuses
         */
        public Stream build() {
            NativeStreamHandle h = new NativeStreamHandle();
            NativeStatus st = NativeCalls.status();
            NativeApi.stream_create(h, device, nonBlocking ? 1 : 0, priority, st);
            if (st.code() != 0) {
                h.deallocate();
                throw NativeCalls.toException(st);
            }
            return new Stream(h, device, OWNED, nonBlocking, priority);
        }
    }

    /**
     * The priorities streams of {@code device} may have ({@code cuCtxGetStreamPriorityRange}):
     * {@code [least, greatest]}, for example {@code [0, -5]}.
     *
     * @throws IllegalArgumentException when {@code device} is not a device of the driver
     * @throws CudaException when the driver refuses the query
     */
    public static int[] priorityRange(int device) {
        Driver.get().device(device);
        int[] out = new int[2];
        NativeStatus st = NativeCalls.status();
        NativeApi.stream_priority_range(device, out, st);
        NativeCalls.check(st);
        return out;
    }

    /** The device ordinal this stream belongs to. */
    public int device() { return device; }

    /**
     * The raw {@code CUstream}, for launching kernels through other bindings (the JavaCPP CUDA
     * presets). The legacy stream is {@code CU_STREAM_LEGACY} (1), the per-thread stream
     * {@code CU_STREAM_PER_THREAD} (2). Valid until {@link #close()}; work queued with it
     * elsewhere is not known to cuvmm: record it on the buffers it uses
     * ({@link VirtualMemoryBuffer#recordUse(Stream)}).
     *
     * @throws IllegalStateException when closed
     */
    public long handle() {
        requireOpen();
        return raw;
    }

    /** True for a {@code CU_STREAM_NON_BLOCKING} stream. */
    public boolean isNonBlocking() { return nonBlocking; }

    /** The priority this stream was built with (before the driver's clamping). */
    public int priority() { return priority; }

    /** True for {@link #legacy(int)} and {@link #perThread(int)}, which belong to the driver. */
    public boolean isDefault() { return kind != OWNED; }

    /**
     * True once {@link #close()} has closed an owned stream (never for a default stream): no
     * new use can start. It does not mean the stream's work has completed (work queued before
     * the close still runs), nor, after a {@code close()} from a host function, that the
     * stream was destroyed yet: cuvmm's reaper thread ("cuvmm-stream-release") destroys it.
     */
    public boolean isClosed() { return state.isClosed(); }

    /**
     * Waits until every op queued on this stream so far has completed
     * ({@code cuStreamSynchronize}), then reports host functions that threw.
     *
     * @throws HostFunctionException when a host function launched on this stream object threw
     *     since the last synchronize (cause: its exception; later ones are suppressed)
     * @throws CudaException when the driver reports an error (for example a fault of earlier work)
     * @throws IllegalStateException when closed, or when called from a host function (the
     *     stream waits for the host function: it would never return)
     */
    public void synchronize() {
        HostFunctions.refuseInsideHostFunction("Stream.synchronize");
        acquire();
        try {
            NativeStatus st = NativeCalls.status();
            NativeApi.stream_synchronize(handle, st);
            NativeCalls.check(st);
        } finally {
            release();
        }
        throwHostFailures();
    }

    /**
     * True when every op queued so far has completed ({@code cuStreamQuery}). Does not report
     * host-function exceptions (see {@link #synchronize()}).
     *
     * @throws CudaException when the driver reports an error
     * @throws IllegalStateException when closed
     */
    public boolean isDone() {
        acquire();
        try {
            NativeStatus st = NativeCalls.status();
            int done = NativeApi.stream_query(handle, st);
            NativeCalls.check(st);
            return done == 1;
        } finally {
            release();
        }
    }

    /**
     * Records {@code event} on this stream ({@code cuEventRecord}): the event completes when the
     * work queued so far has. The event must belong to this stream's device.
     *
     * @throws IllegalArgumentException when the event is of another device
     * @throws IllegalStateException when this stream or the event is closed (a closed event is
     *     named as the argument {@code event})
     * @throws CudaException when the driver refuses
     */
    public void record(Event event) {
        Checks.notNull("event", event);
        // Not event.record(this): there the stream is the argument, so a closed receiver read
        // "stream: ... (expected: ... pass one that is open)" and a closed event named no
        // argument (an independent probe of the "closed arguments are named" rule).
        event.recordAsArgumentOf(this);
    }

    /**
     * A new event (timing disabled) recorded on this stream now; the caller owns it and closes it.
     *
     * @throws IllegalStateException when closed
     * @throws CudaException when the driver refuses
     */
    public Event recordEvent() {
        requireOpen();
        Event e = Event.builder(device).timing(false).build();
        try {
            e.record(this);
            return e;
        } catch (RuntimeException | Error x) {
            e.close();
            throw x;
        }
    }

    /**
     * Makes work queued on this stream from now on wait for {@code event}'s last record as it is
     * at this call ({@code cuStreamWaitEvent}); an event never recorded adds no wait. Does not
     * block the caller. The event may belong to another device.
     *
     * @throws IllegalStateException when this stream or the event is closed
     * @throws CudaException when the driver refuses
     */
    public void waitFor(Event event) {
        Checks.notNull("event", event);
        acquire();
        try {
            event.makeWait(this);
        } finally {
            release();
        }
    }

    /**
     * Queues {@code action} to run on a Java thread when the work queued before it has completed
     * ({@code cuLaunchHostFunc}); work queued after it waits until it returns. It must not make
     * CUDA calls (cuvmm refuses its own from inside a host function with
     * {@link IllegalStateException}, except {@code close()} of buffers, pinned buffers, events,
     * streams and pools, which hands the release to a thread of cuvmm's; a pool's
     * {@code stats()} and its beans' reads work there too, handing over any release they
     * cause), and it must not wait for work that is not ordered before it: cuda.h says
     * host functions of independent streams may be serialized, so waiting for another stream's
     * host function, or for anything that waits for one, may deadlock. An exception it throws is
     * logged and thrown by the next {@link #synchronize()} of this stream object
     * ({@link HostFunctionException}); for the {@link #perThread per-thread} stream, by the next
     * {@code synchronize()} on the thread that launched it (a thread that never calls it again
     * leaves the failure logged only).
     *
     * @throws IllegalStateException when closed
     * @throws CudaException when the driver refuses
     */
    public void launchHostFunction(Runnable action) {
        Checks.notNull("action", action);
        acquire();
        try {
            HostFunctions.launch(this, action);
        } finally {
            release();
        }
    }

    /**
     * Destroys an owned stream ({@code cuStreamDestroy}); work already queued still completes.
     * Idempotent; a no-op for the default streams. A host-function exception not yet reported
     * by {@link #synchronize()} is dropped (it was logged when it happened).
     *
     * Called from a host function, it makes no driver call: the stream is closed at once and
     * cuvmm's reaper thread ("cuvmm-stream-release") destroys it.
     *
     * @throws IllegalStateException when another thread is inside a call on this stream;
     *     the stream stays open and usable
     */
    @Override
    public void close() {
        if (kind != OWNED) return;
        if (state.tryClose(this, "") != AcquireState.CloseResult.CLOSED_NOW) return;
        // No driver call from a host function (cuda.h, cuLaunchHostFunc): the reaper destroys it.
        if (HostFunctions.insideHostFunction()) StreamOrderedRelease.later(toString(), List.of(), handle::deallocate);
        else handle.deallocate();
    }

    // ---- for cuvmm's own classes ----

    /** Registers one use; pair with {@link #release()}. */
    void acquire() { state.acquire(this); }

    /** {@link #acquire()} for this stream passed as another object's argument {@code stream}. */
    void acquireArgument() { state.acquireArgument("stream", this); }

    void release() { state.release(); }

    /** The native handle; the caller holds a use. */
    NativeStreamHandle nativeHandle() { return handle; }

    /** What a buffer keys this stream's uses by: the stream, or the thread's for the per-thread stream. */
    Object useKey() { return perThreadKey == null ? this : perThreadKey.get(); }

    /**
     * True when no use can be recorded under {@code key} (a {@link #useKey()} of this stream) any
     * more: this stream is closed, or {@code key} is the per-thread stream of a thread that has
     * ended (only that thread could record under it). Its recorded work still runs: a buffer
     * forgets such a use only once its event completed.
     */
    boolean useKeyRetired(Object key) {
        return isClosed() || key instanceof ThreadKey k && k.threadEnded();
    }

    /**
     * Where the failures of host functions the calling thread launches now are kept for a
     * {@link #synchronize()}: this object's queue, or the calling thread's for the per-thread
     * stream. Taken at launch, on the launching thread.
     */
    HostFailures hostFailuresOfCaller() { return perThreadFailures == null ? hostFailures : perThreadFailures.get(); }

    /** Whose {@link #synchronize()} reports a failure of a host function launched now, for the log. */
    String failureReporter() {
        return perThreadFailures == null ? "Stream.synchronize() will throw it"
                : "the synchronize() of the thread that launched it will throw it (if that thread calls it again)";
    }

    private void throwHostFailures() {
        HostFailures failures = hostFailuresOfCaller();
        Throwable first = failures.poll();
        if (first == null) return;
        List<Throwable> more = new ArrayList<>();
        for (Throwable t; (t = failures.poll()) != null; ) more.add(t);
        HostFunctionException e = new HostFunctionException(this + ": a host function threw "
                + HostFunctions.describe(first) + (more.isEmpty() ? "" : " (and " + more.size() + " more, suppressed)"),
                first);
        for (Throwable t : more) e.addSuppressed(t);
        throw e;
    }

    private void requireOpen() {
        if (state.isClosed()) throw new IllegalStateException(this + " is closed; it cannot be used after close()");
    }

    @Override
    public String toString() {
        String what = kind == LEGACY ? "legacy" : kind == PER_THREAD ? "per-thread" : nonBlocking ? "non-blocking" : "blocking";
        return "Stream[" + what + ", device " + device + ", 0x" + Long.toHexString(raw) + "]";
    }
}
