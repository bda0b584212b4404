package org.cuvmm.internal;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;

/**
 * One state word for an object that native code uses: 0 open and idle, a positive count of
 * calls in progress, {@code CLOSED} (-1) closed. The shape of the JDK's FFM sessions.
 *
 * <p>{@link #acquire()} is a CAS loop that fails once closed; {@link #release()} a CAS
 * decrement; {@link #tryClose()} a single compare-and-exchange from 0 to CLOSED, so the
 * check that refuses a close and the registration of a new use are one atomic step: a close
 * cannot pass its check while a use is being registered, and a use cannot start after the
 * close won. Nothing here blocks.
 */
public final class AcquireState {
    private static final int OPEN = 0;
    private static final int CLOSED = -1;
    private static final VarHandle STATE;

    static {
        try {
            STATE = MethodHandles.lookup().findVarHandle(AcquireState.class, "state", int.class);
        } catch (ReflectiveOperationException e) {
            throw new ExceptionInInitializerError(e);
        }
    }

    // Starts at 0, OPEN, by default: an explicit "= OPEN" would be a volatile store, and the
    // JIT follows each with a full fence, on every buffer creation.
    @SuppressWarnings("unused") // accessed through STATE
    private volatile int state;

    /** Outcome of {@link #tryClose()}. */
    public enum CloseResult { CLOSED_NOW, ALREADY_CLOSED }

    /**
     * Registers one use. Pair with {@link #release()} in a finally block.
     *
     * @param what describes the object for the error message ("buffer 0x7f.. (4096 bytes)")
     * @throws IllegalStateException when closed
     */
    public void acquire(Object what) {
        acquire(what, null);
    }

    /**
     * {@link #acquire(Object)} for an object passed to another object's method as its argument
     * {@code argument} ("stream", "src"): a closed one is refused with a message naming that
     * argument and what to pass instead.
     */
    public void acquireArgument(String argument, Object what) {
        acquire(what, argument);
    }

    private void acquire(Object what, String argument) {
        for (;;) {
            int s = (int) STATE.getVolatile(this);
            if (s == CLOSED) {
                throw new IllegalStateException(argument == null ? what + " is closed; it cannot be used after close()"
                        : argument + ": " + what + " is closed (expected: an open one; it cannot be used after close(): "
                                + "pass one that is open)");
            }
            if (s == Integer.MAX_VALUE) throw new IllegalStateException(what + ": too many concurrent uses");
            if (STATE.compareAndSet(this, s, s + 1)) return;
        }
    }

    /** Ends one use registered by {@link #acquire(Object)}. */
    public void release() {
        for (;;) {
            int s = (int) STATE.getVolatile(this);
            if (s <= 0) throw new IllegalStateException("release without a matching acquire (state " + s + ")");
            if (STATE.compareAndSet(this, s, s - 1)) return;
        }
    }

    /**
     * Closes if idle. Idempotent: a second close reports {@link CloseResult#ALREADY_CLOSED}.
     *
     * @param what describes the object for the error message
     * @param holders names the leases among the uses ("; leases: consumer pid 7"), may be empty
     * @throws IllegalStateException when uses are in progress; the object stays fully usable
     */
    public CloseResult tryClose(Object what, String holders) {
        int witness = (int) STATE.compareAndExchange(this, OPEN, CLOSED);
        if (witness == OPEN) return CloseResult.CLOSED_NOW;
        if (witness == CLOSED) return CloseResult.ALREADY_CLOSED;
        throw new IllegalStateException(what + " is in use by " + witness + " holder" + (witness == 1 ? "" : "s")
                + " (calls in progress" + (holders.isEmpty() ? "" : " or leases") + ")" + holders
                + "; it stays open and usable: close it again after "
                + (witness == 1 ? "it is released" : "they are released"));
    }

    /** Closes if idle and not yet closed; returns true only for the call that closed it. */
    public boolean tryCloseIfIdle() {
        return (int) STATE.compareAndExchange(this, OPEN, CLOSED) == OPEN;
    }

    public boolean isClosed() { return (int) STATE.getVolatile(this) == CLOSED; }

    /** Calls in progress right now (0 when idle or closed). */
    public int activeUses() {
        int s = (int) STATE.getVolatile(this);
        return Math.max(s, 0);
    }
}
