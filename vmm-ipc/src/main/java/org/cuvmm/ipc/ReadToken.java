package org.cuvmm.ipc;

import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.locks.Condition;
import java.util.concurrent.locks.ReentrantLock;
import java.util.function.LongSupplier;

/**
 * Who reads a {@link SharingClient}'s socket: the <i>read token</i> (leader/follower). One
 * thread at a time holds it and is the only one reading frames; it dispatches every frame it
 * reads, whoever it is for. A caller that sent a request takes the token when it is free and
 * reads until its own reply has arrived (the <i>leader</i>: no thread hands it its reply, so
 * an exchange wakes no second client thread); callers that find it taken wait for their reply
 * (<i>followers</i>: the holder completes their futures) or for the token to come free.
 *
 * <p><b>When the reader thread reads.</b> The token keeps the time of the last caller
 * <i>activity</i>: a request about to be sent ({@link #noteRequest()}) or a caller giving
 * the token back ({@link #release()}; a long lead is activity up to its end, so the reader
 * does not slip in right after a slow reply). The client's reader thread takes the token only
 * when it is free and a whole {@link #readerIdleNanos} period has passed since the last
 * activity, then blocks in {@code recvmsg} for whatever comes (DROP, EVICT, replies nobody
 * waits for). Until then it waits, timed, until the last activity plus one period, whether
 * the token is free or held: a caller never wakes it (no futex wake on a caller's path). A
 * back-to-back series of requests, however many callers make it, finds it waking less and
 * less often: each look that finds the activity moved on doubles its next wait, from one
 * period up to {@link #MAX_BACKOFF_PERIODS} periods (so about 5 wake-ups in the first 16
 * periods, then one per 16 periods), and an unsolicited frame that arrives just after such a
 * series ends is read at most that many periods (plus one) later. Only a <i>long
 * lead</i> changes that: when it looks to find the same caller holding the token for a whole
 * period (timed from when that caller took it, so other callers' requests meanwhile do not
 * make it short), it waits without a timeout (no periodic wake-up during a long lead), and
 * the release that leaves the token free with no caller waiting for it (or the last follower
 * leaving it free) wakes it; it then waits until that release plus one period. So an
 * unsolicited frame that arrives while no caller leads is read one period (plus scheduling)
 * after the last activity of an isolated request, and at most {@link #MAX_BACKOFF_PERIODS}
 * + 1 periods after the last activity of a long series. See docs/PROTOCOL.md section 12,
 * "Threads".
 *
 * <p>The token is held across blocking reads: that is what it is for (one reader at a time,
 * frames dispatched in order). The lock below guards only its state and is never held across
 * any I/O. Package-private.
 */
final class ReadToken {
    /**
     * How long the reader thread stays out of the socket after the last caller activity
     * (default 1 ms; a test seam: tests that count who read a reply set it long so that a slow
     * test thread never lets the reader in between rounds). Read at each wait.
     */
    static volatile long readerIdleNanos = TimeUnit.MILLISECONDS.toNanos(1);

    /**
     * While callers keep the token busy, the reader thread's waits between looks double from
     * one period up to this many periods (16 ms by default). A look that finds the activity
     * moved on is all a wake-up achieves in a series of requests, and on the machine issue 11
     * was measured on (a 2-vCPU guest, both sides on one CPU) a timed wake-up every
     * millisecond cost about 2 µs per cached round of about 27 (bench/RESULTS-sharing-v2.md,
     * Run 19), although it made one context switch per 35 rounds. The price: an unsolicited
     * frame that arrives just after such a series ends is read up to this many periods later
     * (a DROP, an EVICT, a reply nobody waits for; the next caller's request reads it at once).
     */
    static final int MAX_BACKOFF_PERIODS = 16;

    private final ReentrantLock lock = new ReentrantLock();
    /** Followers: a reply completed (maybe theirs) or the token came free. */
    private final Condition callers = lock.newCondition();
    /** The reader thread: the token came free, the end, a drain that must not wait a period. */
    private final Condition readerWake = lock.newCondition();
    /** The clock of the reader's quiet period ({@link System#nanoTime()}; tests inject one). */
    private final LongSupplier clock;
    /**
     * The clock's time of the last caller activity. Written without the lock by {@link
     * #noteRequest()} (one volatile write on a request's path) and under it by a caller's
     * {@link #release()}; two racing writes may leave the earlier time, by nanoseconds.
     */
    private volatile long lastActivity;
    /** The holder, null when free. Guarded by {@link #lock}. */
    private Thread holder;
    /** The clock's time when the holding caller took the token (a lead's start). Guarded by {@link #lock}. */
    private long leadStart;
    private boolean holderIsReader;  // guarded by lock: the reader thread holds it (its release is no activity)
    /**
     * Followers waiting on {@link #callers}. Written under the lock; volatile so that {@link
     * #delivered()} can skip the lock when nobody waits: a follower announces itself here
     * <i>before</i> its last look at its reply, and a delivery completes the reply
     * <i>before</i> reading this, so one of the two always sees the other (issue 11: no lock
     * per reply in a series where each caller reads its own).
     */
    private volatile int waitingCallers;
    private boolean readerParked;    // guarded by lock: the reader waits, untimed, for a long lead's release
    private long readerWaits;        // guarded by lock: waits the reader began (tests count wake-ups)
    private long callerWakes;        // guarded by lock: signals of readerWake made by callers (tests)
    private boolean ended;           // guarded by lock
    private boolean urgent;          // guarded by lock
    /**
     * Guarded by lock: {@link #wakeReader()} asked the reader to look afresh: its backed-off wait
     * floor starts again from none (a waiter needs an unsolicited reply read soon).
     */
    private boolean lookAfresh;
    private long shortestWait = Long.MAX_VALUE; // guarded by lock: the reader's shortest timed wait since wakeReader() (tests)

    ReadToken() { this(System::nanoTime); }

    /** With {@code clock} for the reader's quiet period (tests). Creation counts as activity. */
    ReadToken(LongSupplier clock) {
        this.clock = clock;
        this.lastActivity = clock.getAsLong();
    }

    /**
     * A caller is about to send a request it will wait for: the reader keeps out for a while.
     * Call it right before the send, after any check that may refuse the request (a refused
     * request is no activity: a thread retrying a refused request would keep the reader out).
     */
    void noteRequest() { lastActivity = clock.getAsLong(); }

    /**
     * {@link #noteRequest()} with the clock the caller has just read ({@link System#nanoTime()},
     * the production clock): a request reads the clock once for this and its deadline (issue 11).
     */
    void noteRequest(long nowNanos) { lastActivity = nowNanos; }

    /**
     * A caller waits for {@code reply} or for the token. True: this thread now holds the token
     * and must read (then {@link #release()}); false: {@code reply} is done.
     *
     * @throws TimeoutException when {@code deadlineNanos} ({@link System#nanoTime()}) passed first
     */
    boolean awaitTurn(Future<?> reply, long deadlineNanos) throws InterruptedException, TimeoutException {
        return awaitTurn(reply, deadlineNanos, clock.getAsLong());
    }

    /**
     * As {@link #awaitTurn(Future, long)}, with {@code nowNanos} this token's clock (the
     * caller's {@link System#nanoTime()} for a token made with the default clock) as the
     * caller read it just before: a lead granted at once starts then (no second clock read
     * per request, issue 11); one granted after a wait starts when granted. Either way
     * {@link #leadStart()} then says when, for the holder's own deadline checks.
     */
    boolean awaitTurn(Future<?> reply, long deadlineNanos, long nowNanos) throws InterruptedException, TimeoutException {
        boolean waited = false;
        lock.lock();
        try {
            for (;;) {
                if (reply.isDone()) return false;
                if (holder == null) {
                    holder = Thread.currentThread();
                    holderIsReader = false;
                    leadStart = waited ? clock.getAsLong() : nowNanos;
                    return true;
                }
                waited = true;
                long left = deadlineNanos - System.nanoTime();
                if (left <= 0) throw new TimeoutException();
                waitingCallers++;
                try {
                    // Looked at again after announcing: a delivery that read no follower
                    // (and took no lock) completed the reply before this look.
                    if (reply.isDone()) return false;
                    callers.awaitNanos(left);
                } finally {
                    waitingCallers--;
                }
            }
        } finally {
            // A follower leaving a free token (its reply done, timed out, interrupted): when it
            // was the last one waiting, the release that freed the token did not wake the
            // reader (it left the token to the followers); this does.
            if (holder == null) wakeReaderIfParked();
            lock.unlock();
        }
    }

    /**
     * When the calling thread's lead began (this token's clock): the {@code nowNanos} it
     * passed to {@link #awaitTurn(Future, long, long)} when granted at once, else the clock
     * when granted after a wait. Only the holder calls it, after its {@code awaitTurn}
     * returned true: it reads its own write (no other thread writes it until the release).
     */
    long leadStart() { return leadStart; }

    /**
     * The reader thread waits for its turn: the token free and a whole period since the last
     * caller activity (or a drain asked for). True: the reader holds the token; false: the
     * connection has ended. Waits timed (no caller has to wake it): while the token is free,
     * until the last activity plus one period; while a caller holds it, until its lead is a
     * period old; each wait after a look that found callers busy at least twice as long as the
     * one before (from one period, at most {@link #MAX_BACKOFF_PERIODS} periods). Untimed only
     * during a long lead (one caller holding the token a whole period, whatever requests other
     * callers make meanwhile), until that lead's release.
     */
    boolean readerTurn() throws InterruptedException {
        // The floor of the next timed wait: none for the first look of this turn, then from
        // one period, doubling up to MAX_BACKOFF_PERIODS periods each time a look finds the
        // callers still busy (a series of requests wakes this thread about log2(16) + 1 times,
        // then once per 16 periods, instead of once per period).
        long backoff = 0;
        lock.lock();
        try {
            lookAfresh = false; // a new turn starts with no floor anyway
            for (;;) {
                if (ended) return false;
                long now = clock.getAsLong();
                long period = readerIdleNanos;
                // A floor grown under a longer period (a test shortening readerIdleNanos) is
                // capped by the current one: it waited 60 s under a 1 ms period (review).
                backoff = Math.min(backoff, mostBackoff(period));
                long left = urgent ? 0 : lastActivity + period - now;
                if (holder != null) {
                    long leadLeft = leadStart + period - now;
                    if (!urgent && leadLeft > 0) {
                        // A short lead (or callers handing the token on): check again when this
                        // lead is a period old, or later while callers stay busy; no release
                        // has to signal.
                        backoff = timedWait(leadLeft, backoff, period);
                        continue;
                    }
                    // A long lead: no timeout (no periodic wake-up while it lasts); the
                    // release that leaves the token free wakes this thread.
                    readerParked = true;
                    readerWaits++;
                    try {
                        readerWake.await();
                    } finally {
                        readerParked = false;
                    }
                    backoff = 0; // the lead's release woke it: look again a period after it
                    lookAfresh = false;
                    continue;
                }
                if (left <= 0) {
                    holder = Thread.currentThread();
                    holderIsReader = true;
                    return true;
                }
                backoff = timedWait(left, backoff, period);
            }
        } finally {
            lock.unlock();
        }
    }

    /**
     * Under the lock: the reader's timed wait of {@code left} nanoseconds, or {@code backoff}
     * when longer; returns the floor of the next one ({@link #afterWait}).
     */
    private long timedWait(long left, long backoff, long period) throws InterruptedException {
        readerWaits++;
        long wait = Math.max(left, backoff);
        shortestWait = Math.min(shortestWait, wait);
        readerWake.awaitNanos(wait);
        return afterWait(backoff, period);
    }

    /** Under the lock, after a timed wait: the next floor, or none when {@link #wakeReader()} asked for a fresh look. */
    private long afterWait(long backoff, long period) {
        if (lookAfresh) {
            lookAfresh = false;
            return 0;
        }
        return nextBackoff(backoff, period);
    }

    /** The reader's longest wait floor under {@code period}: MAX_BACKOFF_PERIODS periods, saturated. */
    private static long mostBackoff(long period) {
        return period > Long.MAX_VALUE / MAX_BACKOFF_PERIODS ? Long.MAX_VALUE : period * MAX_BACKOFF_PERIODS;
    }

    /** The reader's next wait floor after a look that found callers busy: one period, then doubled, at most MAX_BACKOFF_PERIODS periods. */
    private static long nextBackoff(long backoff, long period) {
        long most = mostBackoff(period);
        if (backoff < period) return Math.min(period, most);
        return backoff > most / 2 ? most : backoff * 2;
    }

    /**
     * The holder gives the token back; followers wake to lead or find their reply. A caller's
     * release is activity (the reader's period starts again); the reader thread's is not.
     */
    void release() {
        lock.lock();
        try {
            if (!holderIsReader) lastActivity = clock.getAsLong();
            holder = null;
            holderIsReader = false;
            if (waitingCallers > 0) callers.signalAll();
            if (urgent || ended) readerWake.signal();
            else wakeReaderIfParked(); // after a long lead only: a short one leaves the reader to its timed wait
        } finally {
            lock.unlock();
        }
    }

    /**
     * Under the lock, the token free: wakes a reader parked for a release when no follower
     * waits for the token (one that does takes it, and its own release wakes the reader).
     */
    private void wakeReaderIfParked() {
        if (readerParked && waitingCallers == 0) {
            callerWakes++;
            readerWake.signal();
        }
    }

    /**
     * A future of some request was completed (call it after the completion): its follower
     * (if waiting) wakes. No lock when no follower waits.
     */
    void delivered() {
        if (waitingCallers == 0) return;
        lock.lock();
        try {
            if (waitingCallers > 0) callers.signalAll();
        } finally {
            lock.unlock();
        }
    }

    /**
     * True when the calling thread holds the token: it is reading and dispatching, so it must
     * not block writing (whoever reads never writes: a server that is not reading would then
     * never be read again).
     */
    boolean heldByCurrentThread() {
        lock.lock();
        try {
            return holder == Thread.currentThread();
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

    /**
     * The reader thread re-checks now, its backed-off floor dropped: it takes the token one
     * period after the last activity, as after an isolated request. For a thread about to wait
     * for a reply nobody leads for (the FORGOTTEN {@link ImportCache#dropIdle} waits for: the
     * FORGET goes out from the event thread), so that a long series just before does not
     * delay that reply by up to {@link #MAX_BACKOFF_PERIODS} periods; and for tests, after
     * they changed {@link #readerIdleNanos}. Not on a request's path (it signals).
     */
    void wakeReader() {
        lock.lock();
        try {
            lookAfresh = true;
            shortestWait = Long.MAX_VALUE;
            readerWake.signal();
        } finally {
            lock.unlock();
        }
    }

    /** Waits the reader thread began so far, timed or not (tests count its wake-ups). */
    long readerWaits() {
        lock.lock();
        try {
            return readerWaits;
        } finally {
            lock.unlock();
        }
    }

    /** The shortest timed wait the reader thread began since the last {@link #wakeReader()}, as asked, in nanoseconds (tests: its floor, without timing it). */
    long shortestWaitSinceWake() {
        lock.lock();
        try {
            return shortestWait;
        } finally {
            lock.unlock();
        }
    }

    /** Times a caller woke the reader thread (after a long lead; never in a series of short ones). Tests. */
    long callerWakes() {
        lock.lock();
        try {
            return callerWakes;
        } finally {
            lock.unlock();
        }
    }

    /** Callers waiting as followers now (tests). */
    int waitingCallers() {
        lock.lock();
        try {
            return waitingCallers;
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
