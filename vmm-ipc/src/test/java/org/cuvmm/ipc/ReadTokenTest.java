package org.cuvmm.ipc;

import static org.cuvmm.ipc.IpcTestSupport.await;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicLong;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * {@link ReadToken}'s rules for the reader thread, driven with an injected clock: the reader
 * keeps out for a whole period after the last caller activity, a caller's release included
 * (a long lead is not quiet time); it does not wake periodically during a long lead; a
 * follower that leaves a free token lets a parked reader in; a steady series of short leads
 * never makes a caller wake it, and it wakes about once per period at most meanwhile.
 */
class ReadTokenTest {
    private static final long SECOND = TimeUnit.SECONDS.toNanos(1);

    private final AtomicLong clock = new AtomicLong();
    private long savedIdle;
    private Thread reader;

    @BeforeEach
    void setUp() { savedIdle = ReadToken.readerIdleNanos; }

    @AfterEach
    void tearDown() throws InterruptedException {
        ReadToken.readerIdleNanos = savedIdle;
        if (reader != null) {
            reader.interrupt();
            reader.join(TimeUnit.SECONDS.toMillis(10));
        }
    }

    /** The series tests' period (1 ms) and the injected clock's step per request and per release (10 µs). */
    private static final long PERIOD = TimeUnit.MILLISECONDS.toNanos(1);
    private static final long STEP = TimeUnit.MICROSECONDS.toNanos(10);
    /** What {@link #readerWaitingOnePeriod()}'s reader took the token at (its {@link #startReader} future). */
    private CompletableFuture<Long> tookFuture;

    /**
     * A token on the injected clock with a period of {@link #PERIOD}, its reader started and
     * waiting for its first period ({@link #tookFuture} completes when it takes the token).
     */
    private ReadToken readerWaitingOnePeriod() throws Exception {
        ReadToken.readerIdleNanos = PERIOD;
        ReadToken token = new ReadToken(clock::get);
        tookFuture = startReader(token);
        await("the reader waits for its period", 10, () -> token.readerWaits() >= 1);
        return token;
    }

    /**
     * Back-to-back short leads from this thread while {@code more} says so: each a request
     * ({@code step} on the injected clock), a lead held about 20 µs of real time (so a reader
     * that looks while a caller leads finds one) and a release ({@code step} more). Returns the
     * rounds made.
     */
    private long shortLeads(ReadToken token, long step, java.util.function.BooleanSupplier more) throws Exception {
        CompletableFuture<Void> never = new CompletableFuture<>();
        long rounds = 0;
        while (more.getAsBoolean()) {
            clock.addAndGet(step);
            token.noteRequest();
            assertTrue(token.awaitTurn(never, System.nanoTime() + 10 * SECOND), "the caller leads (round " + rounds
                    + ")");
            long spin = System.nanoTime();
            while (System.nanoTime() - spin < 20_000) Thread.onSpinWait();
            clock.addAndGet(step);
            token.release();
            rounds++;
        }
        return rounds;
    }

    /** The reader thread's stand-in: one turn; completes with the clock's time when it took the token. */
    private CompletableFuture<Long> startReader(ReadToken token) {
        CompletableFuture<Long> took = new CompletableFuture<>();
        reader = new Thread(() -> {
            try {
                if (token.readerTurn()) took.complete(clock.get());
                else took.complete(null);
            } catch (InterruptedException e) {
                took.completeExceptionally(e);
            }
        }, "read-token-test-reader");
        reader.start();
        return took;
    }

    @Test
    void aCallersReleaseStartsTheReadersPeriodAgain() throws Exception {
        // A period of 60 s on the injected clock: the reader's timed waits are long in real
        // time too, so it moves only when this test wakes it (wakeReader) or a release does.
        ReadToken.readerIdleNanos = 60 * SECOND;
        ReadToken token = new ReadToken(clock::get);
        CompletableFuture<Void> never = new CompletableFuture<>();
        token.noteRequest(); // t = 0
        assertTrue(token.awaitTurn(never, System.nanoTime() + 10 * SECOND), "the caller leads");
        CompletableFuture<Long> took = startReader(token);
        await("the reader waits for the caller's release", 10, () -> token.readerWaits() >= 1);
        clock.set(100 * SECOND); // a slow reply: the lead lasted longer than the period
        long before = token.readerWaits();
        token.release(); // t = 100 s: activity
        token.wakeReader();
        await("the reader re-checked after the release", 10,
                () -> token.readerWaits() > before || token.holder() == reader);
        assertNotEquals(reader, token.holder(), "the reader took the token right after a slow reply: the lead "
                + "counted as quiet time");
        assertFalse(took.isDone());
        // A new request 0.5 period after the release finds the token free: this caller leads.
        clock.set(130 * SECOND);
        token.noteRequest();
        assertTrue(token.awaitTurn(never, System.nanoTime() + 10 * SECOND), "the next caller leads");
        token.release(); // t = 130 s
        clock.set(189 * SECOND);
        long before2 = token.readerWaits();
        token.wakeReader();
        await("the reader re-checked", 10, () -> token.readerWaits() > before2 || token.holder() == reader);
        assertNotEquals(reader, token.holder(), "the reader took the token 59 s after the last release");
        clock.set(190 * SECOND); // a whole period after the last release
        token.wakeReader();
        assertEquals(190 * SECOND, took.get(10, TimeUnit.SECONDS));
        assertEquals(reader, token.holder());
        token.end();
    }

    @Test
    void theReaderDoesNotWakeDuringALongLead() throws Exception {
        // A period of 1 ms and a clock that stops 2 ms after the request: a long lead (longer
        // than the period). A reader that re-checks on a timer would wake about once a
        // millisecond while the caller leads.
        ReadToken.readerIdleNanos = TimeUnit.MILLISECONDS.toNanos(1);
        ReadToken token = new ReadToken(clock::get);
        CompletableFuture<Void> never = new CompletableFuture<>();
        token.noteRequest();
        assertTrue(token.awaitTurn(never, System.nanoTime() + 10 * SECOND));
        clock.set(TimeUnit.MILLISECONDS.toNanos(2));
        CompletableFuture<Long> took = startReader(token);
        await("the reader waits for the caller's release", 10, () -> token.readerWaits() >= 1);
        long before = token.readerWaits();
        // Not a synchronization: a window of real time over which wake-ups are counted (about
        // 100 with a 1 ms timer).
        new CountDownLatch(1).await(100, TimeUnit.MILLISECONDS);
        long wakeUps = token.readerWaits() - before;
        assertTrue(wakeUps <= 1, wakeUps + " reader wake-ups in 100 ms during a long lead (expected: none; 1 "
                + "allowed for a spurious wake-up)");
        clock.set(SECOND);
        long beforeRelease = token.readerWaits();
        token.release(); // t = 1 s; wakes it: the token is free and nobody else waits for it
        // The release itself must wake the parked reader (nothing else does here): it then
        // waits timed for its period, which counts a wait.
        await("the lead's release woke the parked reader", 10, () -> token.readerWaits() > beforeRelease);
        clock.set(2 * SECOND);
        token.wakeReader();
        assertEquals(2 * SECOND, took.get(10, TimeUnit.SECONDS));
        token.end();
    }

    /**
     * Other callers' requests during a long lead (each one activity) do not make the lead
     * look short: the reader still parks once for the whole lead (independent review: a lead
     * judged from the last activity woke the reader once per period while followers kept
     * sending).
     */
    @Test
    void followersRequestsDuringALongLeadDoNotWakeTheReaderPeriodically() throws Exception {
        ReadToken.readerIdleNanos = TimeUnit.MILLISECONDS.toNanos(1);
        ReadToken token = new ReadToken(clock::get);
        CompletableFuture<Void> never = new CompletableFuture<>();
        token.noteRequest();
        assertTrue(token.awaitTurn(never, System.nanoTime() + 10 * SECOND), "the leader, from t = 0");
        CompletableFuture<Long> took = startReader(token); // while the lead is short: a timed wait
        await("the reader waits", 10, () -> token.readerWaits() >= 1);
        clock.set(TimeUnit.MILLISECONDS.toNanos(2)); // the lead is now long...
        token.noteRequest();                           // ...and another caller just sent a request
        // The reader's timed wait ends (1 ms): it must see a long lead and park for its release.
        await("the reader re-checked", 10, () -> token.readerWaits() >= 2);
        long before = token.readerWaits();
        // 100 more requests from other callers, 0.5 ms apart on the clock and about 1 ms apart
        // in real time (not a synchronization: the window over which wake-ups are counted).
        // Judged from the last activity, the lead would look short after each one and the
        // reader would wake about once per request.
        for (int i = 0; i < 100; i++) {
            clock.addAndGet(TimeUnit.MICROSECONDS.toNanos(500));
            token.noteRequest();
            new CountDownLatch(1).await(1, TimeUnit.MILLISECONDS);
        }
        long wakeUps = token.readerWaits() - before;
        assertTrue(wakeUps <= 1, wakeUps + " reader wake-ups during one long lead while other callers sent requests "
                + "(expected: none; 1 allowed for a spurious wake-up)");
        assertFalse(took.isDone());
        token.end();
    }

    @Test
    void aFollowerLeavingAFreeTokenWakesAParkedReader() throws Exception {
        ReadToken.readerIdleNanos = 60 * SECOND;
        ReadToken token = new ReadToken(clock::get);
        CompletableFuture<Void> never = new CompletableFuture<>();
        token.noteRequest();
        assertTrue(token.awaitTurn(never, System.nanoTime() + 10 * SECOND), "the leader");
        clock.set(70 * SECOND); // a long lead: the reader parks until its release
        CompletableFuture<Long> took = startReader(token);
        await("the reader waits for the leader's release", 10, () -> token.readerWaits() >= 1);
        CompletableFuture<Void> followerReply = new CompletableFuture<>();
        CompletableFuture<Boolean> follower = CompletableFuture.supplyAsync(() -> {
            try {
                return token.awaitTurn(followerReply, System.nanoTime() + 10 * SECOND);
            } catch (Exception e) {
                throw new IllegalStateException(e);
            }
        });
        await("the follower waits", 10, () -> token.waitingCallers() == 1);
        followerReply.complete(null); // as a holder completing it, without delivered(): it wakes at the release
        long before = token.readerWaits();
        clock.set(100 * SECOND);
        token.release(); // a follower waits: the reader is left parked for it
        assertFalse(follower.get(10, TimeUnit.SECONDS), "the follower found its reply and left the token free");
        // The follower, the last to wait, woke the reader: it now waits for the period.
        await("the reader re-checked", 10, () -> token.readerWaits() > before);
        assertNull(token.holder());
        clock.set(160 * SECOND);
        token.wakeReader();
        assertEquals(160 * SECOND, took.get(10, TimeUnit.SECONDS));
        token.end();
    }

    @Test
    void aSteadySeriesOfShortLeadsNeverMakesACallerWakeTheReader() throws Exception {
        // Back-to-back rounds from one thread, each a short lead (10 µs on the injected clock,
        // which moves only with the caller: the last activity is never older than 10 µs). The
        // reader waits timed, one period of real time a wait (1 ms: lastActivity + period -
        // now): it must never park for a release (which a release then signals, a futex wake on
        // the caller's path) and so wakes at most once per period of real time.
        ReadToken token = readerWaitingOnePeriod();
        CompletableFuture<Long> took = tookFuture;
        long waits0 = token.readerWaits();
        long started = System.nanoTime();
        // Until the reader has waited 30 times more (about 30 ms), bounded.
        long rounds = shortLeads(token, STEP, () -> token.readerWaits() - waits0 < 30
                && System.nanoTime() - started < 10 * SECOND);
        long elapsed = System.nanoTime() - started;
        long waits = token.readerWaits() - waits0;
        assertEquals(0, token.callerWakes(), "callers woke the reader during " + rounds + " back-to-back short leads "
                + "(expected: never; the reader waits timed)");
        // Each timed wait lasts at least the period less one step of real time (never shorter):
        // more waits than that can fit means something woke the reader early.
        long mostWaits = elapsed / (PERIOD - STEP) + 2;
        assertTrue(waits <= mostWaits, waits + " reader waits in " + elapsed / 1000 + " µs of " + rounds
                + " rounds (expected: at most about one per period, " + mostWaits + ")");
        assertFalse(took.isDone(), "the reader took the token during the series");
        token.end();
        assertNull(took.get(10, TimeUnit.SECONDS));
    }

    /**
     * A long series of short leads (issue 11, Run 19: a timed wake-up every period cost about
     * 2 µs per cached round on a one-CPU guest): the reader's waits double from one period up
     * to {@link ReadToken#MAX_BACKOFF_PERIODS} periods, so over the series it looks about
     * log2(16) + 1 times plus once per 16 periods, never woken by a caller; and once the series
     * ends it still takes the token by itself (no caller wakes it), a whole period after the
     * last activity.
     */
    @Test
    void aLongSeriesBacksTheReaderOffAndItStillTakesTheTokenAfterwards() throws Exception {
        ReadToken token = readerWaitingOnePeriod();
        CompletableFuture<Long> took = tookFuture;
        long waits0 = token.readerWaits();
        long started = System.nanoTime();
        // About 200 ms of real time of back-to-back short leads.
        long rounds = shortLeads(token, STEP, () -> System.nanoTime() - started < TimeUnit.MILLISECONDS.toNanos(200));
        long elapsed = System.nanoTime() - started;
        long waits = token.readerWaits() - waits0;
        assertFalse(took.isDone(), "the reader took the token during the series");
        assertEquals(0, token.callerWakes(), "callers woke the reader during the series");
        // Waits of at least 1, 2, 4, 8, then 16 periods each (never shorter: a timed wait
        // ends no earlier than asked): 5 looks in the first 15 periods, one per 16 after.
        // 16: the documented cap (PROTOCOL.md section 12), not the constant (which this checks).
        long mostWaits = 5 + elapsed / (16 * PERIOD) + 2;
        assertTrue(waits <= mostWaits, waits + " reader waits in " + elapsed / 1000 + " µs of " + rounds
                + " rounds (expected: backed off to one per 16 periods, at most "
                + mostWaits + "; a reader looking once per period would have made about " + elapsed / PERIOD + ")");
        // The series ends: two periods pass on the clock with no activity. The reader's
        // backed-off timed wait ends by itself (at most 16 periods of real time) and it takes
        // the token.
        clock.addAndGet(2 * PERIOD);
        long end = clock.get();
        assertEquals(end, took.get(10, TimeUnit.SECONDS), "the reader took the token once the series ended");
        assertEquals(reader, token.holder());
        assertEquals(0, token.callerWakes(), "nobody woke the reader");
        token.end();
    }

    /**
     * A test that shortens the period of a live client and wakes the reader (ClientLeaderTest's
     * interrupted-leader test does, from 60 s to 1 ms) must see the new period apply at once.
     * Before: the wake-up itself counted as a look that found callers busy, so the reader's
     * floor grew to one old period (60 s) and, with the last activity less than a new period
     * ago, it then waited 60 s under a 1 ms period (this test: no take within 10 s).
     */
    @Test
    void aShorterPeriodAppliesAtOnceAfterWakeReader() throws Exception {
        ReadToken.readerIdleNanos = 60 * SECOND;
        ReadToken token = new ReadToken(clock::get); // t = 0: activity
        CompletableFuture<Long> took = startReader(token);
        await("the reader waits for its period", 10, () -> token.readerWaits() >= 1);
        long before = token.readerWaits();
        ReadToken.readerIdleNanos = TimeUnit.MILLISECONDS.toNanos(1);
        token.wakeReader(); // the clock has not moved: the last activity is less than a period ago
        await("the reader looked again under the new period", 10, () -> token.readerWaits() > before);
        clock.set(TimeUnit.MILLISECONDS.toNanos(2)); // a whole new period has passed; nobody wakes it
        assertEquals(TimeUnit.MILLISECONDS.toNanos(2), took.get(10, TimeUnit.SECONDS),
                "the reader took the token a new period after the last activity");
        token.end();
    }

    /**
     * A thread that waits for a reply nobody leads for (ImportCache.dropIdle waiting for the
     * FORGOTTEN of a FORGET the event thread sent, after TOO_MANY_IDS or at the fd limit)
     * wakes the reader first: its backed-off floor is dropped and it looks again one period
     * after the last activity, not up to 16 periods later. Checked on the wait it asks for
     * (the clock frozen just after the series: a period is left), not by timing it. Before:
     * the floor stayed at 16 periods (no wait of one period was ever asked).
     */
    @Test
    void wakeReaderDropsTheBackedOffFloorAfterALongSeries() throws Exception {
        ReadToken token = readerWaitingOnePeriod();
        CompletableFuture<Long> took = tookFuture;
        long waits0 = token.readerWaits();
        // A series until the reader has looked 6 times (1 + 2 + 4 + 8 + 16 periods: backed off
        // to the cap), bounded by 10 s of real time.
        long started = System.nanoTime();
        shortLeads(token, STEP, () -> token.readerWaits() - waits0 < 6 && System.nanoTime() - started < 10 * SECOND);
        assertTrue(token.readerWaits() - waits0 >= 6, "the reader backed off during the series");
        assertFalse(took.isDone(), "the reader took the token during the series");
        // The series ends (the clock stays: a whole period is left); a waiter wakes the reader.
        token.wakeReader();
        await("the reader's next wait is at most one period", 10, () -> token.shortestWaitSinceWake() <= PERIOD);
        clock.addAndGet(2 * PERIOD);
        assertEquals(clock.get(), took.get(10, TimeUnit.SECONDS));
        token.end();
    }

    /**
     * The lead's start the client checks its deadline from (issue 11's single clock read per
     * request): the caller's own reading when the token was free, the clock at the grant when
     * the caller waited as a follower (a stale reading would skip that caller's deadline check
     * and let its first read block a whole slice past it).
     */
    @Test
    void aLeadStartsAtTheCallersReadingOrWhenAWaitingCallerIsGranted() throws Exception {
        ReadToken.readerIdleNanos = 60 * SECOND; // no reader thread here
        ReadToken token = new ReadToken(clock::get);
        CompletableFuture<Void> never = new CompletableFuture<>();
        clock.set(5 * SECOND);
        assertTrue(token.awaitTurn(never, System.nanoTime() + 10 * SECOND, 3 * SECOND), "the free token is taken");
        assertEquals(3 * SECOND, token.leadStart(), "granted at once: the caller's own reading");
        CompletableFuture<Long> follower = new CompletableFuture<>();
        Thread waiting = new Thread(() -> {
            try {
                if (token.awaitTurn(new CompletableFuture<Void>(), System.nanoTime() + 10 * SECOND, 4 * SECOND)) {
                    follower.complete(token.leadStart());
                    token.release();
                } else {
                    follower.complete(null);
                }
            } catch (Exception e) {
                follower.completeExceptionally(e);
            }
        }, "read-token-test-follower");
        waiting.start();
        await("the second caller waits as a follower", 10, () -> token.waitingCallers() == 1);
        clock.set(70 * SECOND);
        token.release();
        assertEquals(70 * SECOND, follower.get(10, TimeUnit.SECONDS), "granted after a wait: the clock at the grant, "
                + "not the reading it passed before waiting");
        waiting.join(TimeUnit.SECONDS.toMillis(10));
        token.end();
    }
}
