package org.cuvmm.ipc;

import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;

/**
 * Who reads a {@link SharingClient}'s socket: the <i>read token</i> (leader/follower). One
 * thread at a time holds it and is the only one reading frames; it dispatches every frame it
 * reads, whoever it is for. A caller that sent a request takes the token when it is free and
 * reads until its own reply has arrived (the <i>leader</i>: no thread hands it its reply, so
 * an exchange wakes no second client thread); callers that find it taken wait for their reply
 * (<i>followers</i>: the holder completes their futures) or for the token to come free. The
 * client's reader thread takes the token only when no caller has sent a request for a whole
 * {@link #readerIdleNanos} period, then blocks in {@code recvmsg} for whatever comes (DROP,
 * EVICT, replies nobody waits for); so a back-to-back series of requests never meets it, and
 * an unsolicited frame that arrives while no caller leads is read at most about two periods
 * (plus scheduling) later. See docs/PROTOCOL.md section 12, "Threads".
 *
 * <p>The token is held across blocking reads: that is what it is for (one reader at a time,
 * frames dispatched in order). The lock below guards only its state and is never held across
 * any I/O. Package-private.
 */
final class ReadToken {
    /**
     * How long the reader thread stays out of the socket after a caller's request (default 1
     * ms; a test seam: tests that count who read a reply set it long so that a slow test
     * thread never lets the reader in between rounds). Read at each wait.
     */
    static volatile long readerIdleNanos = TimeUnit.MILLISECONDS.toNanos(1);

    private final ReentrantLock lock = new ReentrantLock();
    /** Followers: a reply completed (maybe theirs) or the token came free. */
    private final Condition callers = lock.newCondition();
    /** The reader thread: the end, or a drain that must not wait a period. */
    private final Condition readerWake = lock.newCondition();
    /** Bumped by each request a caller will wait for; only a change is read (by the reader). */
    private final AtomicInteger activity = new AtomicInteger();
    /** The holder, null when free. Guarded by {@link #lock}. */
    private Thread holder;
    private int waitingCallers;     // guarded by lock
    private int readerSeen = -1;    // guarded by lock: the activity the reader saw at its last check
    private boolean ended;          // guarded by lock
    private boolean urgent;         // guarded by lock

    /** A caller is about to send a request it will wait for: the reader keeps out for a while. */
    void noteRequest() { activity.incrementAndGet(); }

    /**
     * A caller waits for {@code reply} or for the token. True: this thread now holds the token
     * and must read (then {@link #release()}); false: {@code reply} is done.
     *
     * @throws TimeoutException when {@code deadlineNanos} ({@link System#nanoTime()}) passed first
     */
    boolean awaitTurn(Future<?> reply, long deadlineNanos) throws InterruptedException, TimeoutException {
        lock.lock();
        try {
            for (;;) {
                if (reply.isDone()) return false;
                if (holder == null) {
                    holder = Thread.currentThread();
                    return true;
                }
                long left = deadlineNanos - System.nanoTime();
                if (left <= 0) throw new TimeoutException();
                waitingCallers++;
                try {
                    callers.awaitNanos(left);
                } finally {
                    waitingCallers--;
                }
            }
        } finally {
            lock.unlock();
        }
    }

    /**
     * The reader thread waits for its turn: the token free and no caller request during the
     * last period (or a drain asked for). True: the reader holds the token; false: the
     * connection has ended.
     */
    boolean readerTurn() throws InterruptedException {
        lock.lock();
        try {
            for (;;) {
                if (ended) return false;
                int a = activity.get();
                if (holder == null && (a == readerSeen || urgent)) {
                    holder = Thread.currentThread();
                    return true;
                }
                readerSeen = a;
                readerWake.awaitNanos(readerIdleNanos);
            }
        } finally {
            lock.unlock();
        }
    }

    /** The holder gives the token back; followers wake to lead or find their reply. */
    void release() {
        lock.lock();
        try {
            holder = null;
            if (waitingCallers > 0) callers.signalAll();
            if (urgent || ended) readerWake.signal();
        } finally {
            lock.unlock();
        }
    }

    /** A future of some request was completed: its follower (if waiting) wakes. */
    void delivered() {
        lock.lock();
        try {
            if (waitingCallers > 0) callers.signalAll();
        } finally {
            lock.unlock();
        }
    }

    /** The reader must take the token as soon as it is free, whatever callers do (a drain). */
    void urgent() {
        lock.lock();
        try {
            urgent = true;
            readerWake.signal();
        } finally {
            lock.unlock();
        }
    }

    /** The connection has ended: the reader thread stops waiting for its turn; followers recheck. */
    void end() {
        lock.lock();
        try {
            ended = true;
            readerWake.signalAll();
            callers.signalAll();
        } finally {
            lock.unlock();
        }
    }

    /** Tests: the reader thread re-checks now (after a test changed {@link #readerIdleNanos}). */
    void wakeReader() {
        lock.lock();
        try {
            readerWake.signal();
        } finally {
            lock.unlock();
        }
    }

    /** The holder now (tests). */
    Thread holder() {
        lock.lock();
        try {
            return holder;
        } finally {
            lock.unlock();
        }
    }
}
