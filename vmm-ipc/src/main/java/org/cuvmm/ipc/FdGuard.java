package org.cuvmm.ipc;

import java.util.concurrent.atomic.AtomicInteger;

/**
 * Closes a file descriptor safely while other threads may be inside a call on it.
 *
 * <p>On Linux, {@code close(fd)} does not wake a thread blocked in {@code recvmsg},
 * {@code sendmsg} or {@code accept} on that fd, and once the number is closed it may be
 * reused by an unrelated {@code open}, so a late call would act on the wrong file. Here,
 * every call runs between {@link #enter()} and {@link #exit()}; {@link #close()} first
 * wakes blocked calls ({@code shutdown}), and the number is closed by whoever leaves last.
 * Package-private.
 */
final class FdGuard {
    private static final int CLOSED = Integer.MIN_VALUE;

    /** Sign bit: closed. Low bits: calls in progress. */
    private final AtomicInteger state = new AtomicInteger();
    private final Runnable wake;
    private final Runnable release;

    FdGuard(Runnable wake, Runnable release) {
        this.wake = wake;
        this.release = release;
    }

    /** Registers a call; false when closed (then do not touch the fd). */
    boolean enter() {
        for (;;) {
            int s = state.get();
            if (s < 0) return false;
            if (state.compareAndSet(s, s + 1)) return true;
        }
    }

    void exit() {
        if (state.decrementAndGet() == CLOSED) release.run(); // the last one out closes
    }

    /** Wakes blocked calls and closes the fd once none is in progress. Idempotent. */
    void close() {
        int s;
        do {
            s = state.get();
            if (s < 0) return;
            // Count this call too, so the fd cannot be closed (and its number reused) before
            // wake() has run on it.
        } while (!state.compareAndSet(s, (s + 1) | CLOSED));
        try {
            wake.run();
        } finally {
            exit();
        }
    }

    boolean isClosed() { return state.get() < 0; }
}
