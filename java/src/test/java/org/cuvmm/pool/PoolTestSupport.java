package org.cuvmm.pool;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;

import org.cuvmm.Driver;
import org.cuvmm.DriverCounters;
import org.cuvmm.DriverKind;
import org.cuvmm.VirtualMemoryBuffer;

/** Helpers of the pool tests: counters, a leak, stats checks, tags, this thread's page faults. */
final class PoolTestSupport {
    static final long MiB = 1L << 20;

    private PoolTestSupport() {}

    static DriverCounters counters() { return Driver.get().counters(); }

    /**
     * Leaks one local buffer of {@code pool} (its only live one) and collects garbage until the
     * buffer's leak watch is queued (at most 20 s, then fails): the pool's next slow path takes
     * it back.
     */
    static void leakOneAndAwaitItsWatch(VirtualMemoryPool pool) throws InterruptedException {
        LeakWatch watch = leakAndWatch(pool);
        long deadline = System.nanoTime() + 20_000_000_000L;
        while (!isEnqueued(watch) && System.nanoTime() < deadline) {
            System.gc();
            Thread.sleep(20);
        }
        assertTrue(isEnqueued(watch), "the leaked buffer's watch was enqueued");
    }

    @SuppressWarnings("deprecation") // isEnqueued: the one way to see a watch is queued without taking it
    private static boolean isEnqueued(LeakWatch w) { return w.isEnqueued(); }

    /** Allocates, leaks and returns the watch on the leaked buffer (the buffer is unreachable on return). */
    private static LeakWatch leakAndWatch(VirtualMemoryPool pool) {
        VirtualMemoryBuffer b = pool.allocate(1);
        b.fill((byte) 1);
        List<PoolSlot> live = pool.of(PoolLifetime.LOCAL).liveSlots();
        assertEquals(1, live.size());
        LeakWatch w = live.get(0).watch();
        assertTrue(w.refersTo(b));
        return w;
    }

    /**
     * Holds {@code stream} here until the returned latch is counted down: a host function that
     * waits for it (30 s at most). Deterministic: no timing involved.
     */
    static java.util.concurrent.CountDownLatch gate(org.cuvmm.Stream stream) {
        java.util.concurrent.CountDownLatch gate = new java.util.concurrent.CountDownLatch(1);
        stream.launchHostFunction(() -> {
            try {
                gate.await(30, java.util.concurrent.TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        });
        return gate;
    }

    static boolean onHostDriver() { return Driver.get().kind() == DriverKind.HOST; }

    /** Asserts the four accounting figures of {@code s}, naming the step in the message. */
    static void assertStats(PoolStats s, long liveCount, long liveBytes, long retainedCount, long retainedBytes,
                            String when) {
        String got = "live " + s.liveCount() + " (" + s.liveBytes() + " bytes), retained " + s.retainedCount() + " ("
                + s.retainedBytes() + " bytes)";
        String want = "live " + liveCount + " (" + liveBytes + " bytes), retained " + retainedCount + " ("
                + retainedBytes + " bytes)";
        assertEquals(want, got, s.lifetime().key() + " accounting " + when);
    }

    /** Writes a 16-byte tag (owner, sequence) at the start of {@code b}. */
    static void tag(VirtualMemoryBuffer b, long owner, long seq) {
        byte[] t = new byte[16];
        java.nio.ByteBuffer.wrap(t).putLong(owner).putLong(seq);
        b.copyFrom(0, t, 0, 16);
    }

    /** True when {@code b} still carries the tag written by {@link #tag}. */
    static boolean hasTag(VirtualMemoryBuffer b, long owner, long seq) {
        byte[] t = new byte[16];
        b.copyTo(0, t, 0, 16);
        java.nio.ByteBuffer bb = java.nio.ByteBuffer.wrap(t);
        return bb.getLong() == owner && bb.getLong() == seq;
    }

    /**
     * Minor page faults of the whole process (/proc/self/stat, field 10): a fill runs on a
     * stream of the driver (on the host driver, a stream's worker thread), not on the calling
     * thread, so the faults a fill takes are not the caller's.
     */
    static long minorFaultsOfThisProcess() throws IOException {
        String stat = Files.readString(Path.of("/proc/self/stat"));
        String[] fields = stat.substring(stat.lastIndexOf(')') + 2).split(" ");
        return Long.parseLong(fields[10 - 3]); // fields[0] is field 3 (state)
    }
}
