package org.cuvmm;

import java.time.Duration;

import org.cuvmm.internal.AcquireState;
import org.cuvmm.internal.Checks;
import org.cuvmm.internal.NativeCalls;
import org.cuvmm.internal.jni.NativeApi;
import org.cuvmm.internal.jni.NativeEventHandle;
import org.cuvmm.internal.jni.NativeStatus;

/**
 * A CUDA event of one device: a marker {@linkplain #record(Stream) recorded} on a stream that
 * completes when the work queued before it has. Other streams can
 * {@linkplain Stream#waitFor(Event) wait for it} without blocking the caller; the host can
 * {@linkplain #synchronize() wait} or {@linkplain #isDone() poll}.
 *
 * <p>An event holds only its last record: recording again replaces what waits and queries see
 * from then on ({@code cuStreamWaitEvent} captures the record current at its call). An event
 * never recorded counts as complete.
 *
 * <p>Ownership: this object owns the event; {@link #close()} destroys it
 * ({@code cuEventDestroy}); a record still pending completes first, as the driver documents.
 * {@code close()} is idempotent; other uses after close throw {@link IllegalStateException};
 * {@code close()} while another thread is inside a call on it refuses. Thread-safe; no lock is
 * held across a driver call.
 */
public final class Event implements AutoCloseable {
    private final NativeEventHandle handle;
    private final int device;
    private final boolean timing;
    private final long raw;
    private final AcquireState state = new AcquireState();

    private Event(NativeEventHandle handle, int device, boolean timing) {
        this.handle = handle;
        this.device = device;
        this.timing = timing;
        this.raw = handle.handle();
    }

    /**
     * A new event on {@code device} with timing enabled: {@code builder(device).build()}.
     *
     * @throws IllegalArgumentException when {@code device} is not a device of the driver
     * @throws CudaException when the driver refuses
     */
    public static Event create(int device) { return builder(device).build(); }

    /**
     * A builder of an event on {@code device}.
     *
     * @throws IllegalArgumentException when {@code device} is not a device of the driver
     */
    public static Builder builder(int device) {
        Driver.get().device(device);
        return new Builder(device);
    }

    /** Options of a new event. Not thread-safe. */
    public static final class Builder {
        private final int device;
        private boolean timing = true;

        private Builder(int device) { this.device = device; }

        /**
         * {@code true} (default): the event stamps a time, for {@link Event#elapsedMillis(Event)}.
         * {@code false}: {@code CU_EVENT_DISABLE_TIMING}, cheaper to record and wait for.
         */
        public Builder timing(boolean value) {
            this.timing = value;
            return this;
        }

        /**
         * Creates the event ({@code cuEventCreate}).
         *
         * @throws CudaException when the driver refuses
         */
        public Event build() {
            NativeEventHandle h = new NativeEventHandle();
            NativeStatus st = NativeCalls.status();
            NativeApi.event_create(h, device, timing ? 1 : 0, st);
            if (st.code() != 0) {
                h.deallocate();
                throw NativeCalls.toException(st);
            }
            return new Event(h, device, timing);
        }
    }

    /** The device ordinal this event belongs to. */
    public int device() { return device; }

    /** Whether the event records a time. */
    public boolean hasTiming() { return timing; }

    /**
     * The raw {@code CUevent}, for other bindings. Valid until {@link #close()}.
     *
     * @throws IllegalStateException when closed
     */
    public long handle() {
        if (state.isClosed()) throw closed();
        return raw;
    }

    /**
     * True once {@link #close()} has closed this event (not a close refused because another
     * thread was inside a call): no new use can start. After a {@code close()} from a host
     * function the event is destroyed later, by cuvmm's reaper thread
     * ("cuvmm-stream-release").
     */
    public boolean isClosed() { return state.isClosed(); }

    /**
     * Records this event on {@code stream} ({@code cuEventRecord}).
     *
     * @throws IllegalArgumentException when {@code stream} belongs to another device (record on a
     *     stream of the event's device, or make that stream wait for an event of its own)
     * @throws IllegalStateException when this event or the stream is closed
     * @throws CudaException when the driver refuses
     */
    public void record(Stream stream) {
        Checks.notNull("stream", stream);
        if (stream.device() != device) {
            throw new IllegalArgumentException("stream: " + stream + " (expected: a stream of device " + device
                    + ", this event's; an event is recorded on a stream of its own device)");
        }
        acquire();
        try {
            stream.acquireArgument();
            try {
                recordHeld(stream);
            } finally {
                stream.release();
            }
        } finally {
            state.release();
        }
    }

    /**
     * {@link Stream#record(Event)}: the same record, with {@code stream} the receiver (a closed
     * one says so in its own words, checked first) and this event the argument {@code event}.
     */
    void recordAsArgumentOf(Stream stream) {
        stream.acquire();
        try {
            state.acquireArgument("event", this);
            try {
                if (stream.device() != device) {
                    throw new IllegalArgumentException("event: " + this + " (expected: an event of device "
                            + stream.device() + ", this stream's device; record an event of that device, or make this "
                            + "stream wait for the event with waitFor)");
                }
                recordHeld(stream);
            } finally {
                state.release();
            }
        } finally {
            stream.release();
        }
    }

    /** The {@code cuEventRecord} of both record methods; the caller holds uses of this event and {@code stream}. */
    private void recordHeld(Stream stream) {
        NativeStatus st = NativeCalls.status();
        NativeApi.event_record(handle, stream.nativeHandle(), st);
        NativeCalls.check(st);
    }

    /**
     * Waits until the last record has completed ({@code cuEventSynchronize}); returns at once
     * when never recorded.
     *
     * @throws IllegalStateException when closed, or when called from a host function
     * @throws CudaException when the driver reports an error
     */
    public void synchronize() {
        HostFunctions.refuseInsideHostFunction("Event.synchronize");
        acquire();
        try {
            NativeStatus st = NativeCalls.status();
            NativeApi.event_synchronize(handle, st);
            NativeCalls.check(st);
        } finally {
            state.release();
        }
    }

    /**
     * True when the last record has completed, or there was none ({@code cuEventQuery}).
     *
     * @throws IllegalStateException when closed
     * @throws CudaException when the driver reports an error
     */
    public boolean isDone() {
        acquire();
        try {
            NativeStatus st = NativeCalls.status();
            int done = NativeApi.event_query(handle, st);
            NativeCalls.check(st);
            return done == 1;
        } finally {
            state.release();
        }
    }

    /**
     * Milliseconds from {@code start}'s record to this event's ({@code cuEventElapsedTime}; the
     * driver's resolution is about half a microsecond).
     *
     * @throws IllegalArgumentException when either event was built with {@code timing(false)}
     * @throws IllegalStateException when either event is closed
     * @throws CudaException when either was never recorded ({@code CUDA_ERROR_INVALID_HANDLE}) or
     *     has not completed ({@code CUDA_ERROR_NOT_READY})
     */
    public float elapsedMillis(Event start) {
        Checks.notNull("start", start);
        if (!timing || !start.timing) {
            throw new IllegalArgumentException("elapsedMillis: " + (timing ? "start " + start : "this event " + this)
                    + " has timing disabled (expected: both events built with timing(true))");
        }
        acquire();
        try {
            start.state.acquireArgument("start", start);
            try {
                NativeStatus st = NativeCalls.status();
                float ms = NativeApi.event_elapsed(start.handle, handle, st);
                NativeCalls.check(st);
                return ms;
            } finally {
                start.state.release();
            }
        } finally {
            state.release();
        }
    }

    /** {@link #elapsedMillis(Event)} as a {@link Duration} (nanosecond precision). */
    public Duration elapsedSince(Event start) {
        return Duration.ofNanos(Math.round(elapsedMillis(start) * 1_000_000.0));
    }

    /**
     * Destroys the event; a pending record completes first. Idempotent. Called from a host
     * function, it makes no driver call: the event is closed at once and cuvmm's reaper thread
     * ("cuvmm-stream-release") destroys it.
     *
     * @throws IllegalStateException when another thread is inside a call on this event;
     *     it stays open and usable
     */
    @Override
    public void close() {
        if (state.tryClose(this, "") != AcquireState.CloseResult.CLOSED_NOW) return;
        // No driver call from a host function (cuda.h, cuLaunchHostFunc): the reaper destroys it.
        if (HostFunctions.insideHostFunction()) StreamOrderedRelease.later(toString(), java.util.List.of(), handle::deallocate);
        else handle.deallocate();
    }

    // ---- for cuvmm's own classes ----

    /** An event for cuvmm's own bookkeeping: timing disabled (cheaper). */
    static Event internal(int device) { return new Builder(device).timing(false).build(); }

    /** {@code stream} waits for this event ({@code cuStreamWaitEvent}); the caller holds a use of {@code stream}. */
    void makeWait(Stream stream) {
        state.acquireArgument("event", this); // this event is Stream.waitFor's argument
        try {
            NativeStatus st = NativeCalls.status();
            NativeApi.stream_wait_event(stream.nativeHandle(), handle, st);
            NativeCalls.check(st);
        } finally {
            state.release();
        }
    }

    /**
     * {@link #makeWait} for an event that pruning may have closed meanwhile (it was complete:
     * no wait is needed then).
     */
    void makeWaitUnlessClosed(Stream stream) {
        try {
            makeWait(stream);
        } catch (IllegalStateException e) {
            if (!state.isClosed()) throw e;
        }
    }

    /** {@link #isDone()} for bookkeeping: false when closed or on a driver error (logged at DEBUG). */
    boolean isDoneQuietly() {
        try {
            return isDone();
        } catch (RuntimeException e) {
            System.getLogger("org.cuvmm").log(System.Logger.Level.DEBUG, "querying " + this + " failed: " + e);
            return false;
        }
    }

    /** Closes when no call is using the event; returns false (leaving it open) otherwise. */
    boolean closeIfIdle() {
        if (!state.tryCloseIfIdle()) return false;
        handle.deallocate();
        return true;
    }

    /** {@link #synchronize()} that never throws: a failure is logged, returns false. For close paths. */
    boolean synchronizeQuietly(String what) {
        try {
            acquire();
            try {
                NativeStatus st = NativeCalls.status();
                NativeApi.event_synchronize(handle, st);
                NativeCalls.check(st);
                return true;
            } finally {
                state.release();
            }
        } catch (RuntimeException e) {
            System.getLogger("org.cuvmm").log(System.Logger.Level.WARNING, what + ": waiting for " + this
                    + " failed (" + e.getMessage() + "); going on with the release", e);
            return false;
        }
    }

    /** {@link #close()} that never throws (logs). */
    void closeQuietly() {
        try {
            close();
        } catch (RuntimeException e) {
            System.getLogger("org.cuvmm").log(System.Logger.Level.WARNING, "closing " + this + " failed: " + e, e);
        }
    }

    private void acquire() { state.acquire(this); }

    /**
     * Registers a use (throws {@link IllegalStateException} when closed), for a record made by
     * another native call ({@link AsyncCopies}: the op and its records in one call); pair with
     * {@link #releaseUse()}.
     */
    void acquireUse() { state.acquire(this); }

    void releaseUse() { state.release(); }

    /** The native handle, for a native call made under {@link #acquireUse()}. */
    NativeEventHandle nativeHandle() { return handle; }

    private IllegalStateException closed() {
        return new IllegalStateException(this + " is closed; it cannot be used after close()");
    }

    @Override
    public String toString() {
        return "Event[device " + device + ", 0x" + Long.toHexString(raw) + (timing ? "" : ", no timing") + "]";
    }
}
