package org.cuvmm;

import static org.cuvmm.TestSupport.MiB;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.management.GarbageCollectorMXBean;
import java.lang.management.ManagementFactory;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.cuvmm.testing.ChildJvm;
import org.junit.jupiter.params.ParameterizedTest;
import org.junit.jupiter.params.provider.ValueSource;

/**
 * A large array copy must not hold off garbage collection: while one thread copies a 256 MiB
 * array into (and out of) a buffer, another thread allocates garbage, and young collections
 * must complete <em>during</em> the copy.
 *
 * <p>How it can fail: if the array were pinned for the whole copy (a JNI critical region
 * across the driver call, as before issue 8), the GC locker holds every collection until the
 * copy ends; the allocating thread stalls (G1) or spills into the old generation (Serial),
 * and about one collection (the one the GC locker runs when the region ends) completes inside
 * each copy call, plus the few that fit in the Java code around the region. With bounded
 * pieces, collections run between pieces, so each copy sees as many as the allocating thread
 * can trigger while it runs. The test counts collections
 * ({@link GarbageCollectorMXBean#getCollectionCount}) around each of {@link #ROUNDS} warm
 * copies and asks for at least {@link #MIN_GCS_PER_COPY} per copy on average. It asserts no
 * wall-clock time, but it is not timing-free: a count depends on how much CPU the allocating
 * thread gets while the copies run (one round in which it got none does not fail it, since
 * the bound is on the total). The margin: measured on a loaded 2-core machine (load 5-7),
 * 10 copies, 8 MiB young generation, pinned copies completed 9 to 23 collections in all (at
 * most 6 in one copy) and staged copies 123 to 1,385; the bound, 60 in all, is 2.6 times the
 * most pinned copies reached and half the fewest staged copies reached. A machine so loaded
 * that the allocator gets under half its lowest observed share could fail it spuriously.
 *
 * <p>Runs in a child JVM with a small, fixed young generation, once with each collector that
 * uses the GC locker on JDK 17 (Serial, G1).
 */
class CopyGcTest {
    static final int MIN_GCS_PER_COPY = 6;
    static final int ROUNDS = 10;
    static final int COPY_BYTES = (int) (256 * MiB);

    /**
     * Child: copies with the main thread while a second thread allocates; prints per direction
     * "RESULT direction total max rounds: n n ...", the collections completed during each copy.
     */
    public static final class Child {
        static volatile Object sink;
        static volatile boolean stop;

        public static void main(String[] args) throws Exception {
            byte[] big = new byte[COPY_BYTES];
            for (int i = 0; i < big.length; i += 4096) big[i] = (byte) (i >>> 12);
            CountDownLatch allocating = new CountDownLatch(1);
            Thread allocator = new Thread(() -> {
                long n = 0;
                while (!stop) {
                    sink = new byte[64 * 1024];
                    if (++n == 64) allocating.countDown();
                }
            }, "allocator");
            allocator.setDaemon(true);
            allocator.start();
            if (!allocating.await(60, TimeUnit.SECONDS)) throw new AssertionError("allocator thread did not start");
            try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
                 VirtualMemoryBuffer b = r.allocate(COPY_BYTES)) {
                // Warm-up, not counted: the first calls run interpreted, link call sites and
                // touch the buffer's pages for the first time, all outside any critical region.
                b.copyFrom(big);
                b.copyTo(big);
                for (String direction : new String[] {"copyFrom", "copyTo"}) {
                    long best = 0;
                    long sum = 0;
                    StringBuilder perRound = new StringBuilder();
                    for (int round = 0; round < ROUNDS; round++) {
                        long before = gcCount();
                        if (direction.equals("copyFrom")) b.copyFrom(big);
                        else b.copyTo(big);
                        long during = gcCount() - before;
                        perRound.append(' ').append(during);
                        best = Math.max(best, during);
                        sum += during;
                    }
                    System.out.println("RESULT " + direction + " " + sum + " " + best + " rounds:" + perRound);
                }
                // The data made the round trip intact.
                for (int i = 0; i < big.length; i += 4096) {
                    if (big[i] != (byte) (i >>> 12)) throw new AssertionError("byte " + i + " changed: " + big[i]);
                }
            } finally {
                stop = true;
                allocator.join(TimeUnit.SECONDS.toMillis(30));
            }
            System.out.println("DONE");
        }

        // Looked up once: the count itself must not allocate much, or it adds collections of its own.
        static final List<GarbageCollectorMXBean> COLLECTORS = ManagementFactory.getGarbageCollectorMXBeans();

        static long gcCount() {
            long total = 0;
            for (GarbageCollectorMXBean gc : COLLECTORS) {
                total += Math.max(0, gc.getCollectionCount());
            }
            return total;
        }
    }

    @ParameterizedTest
    @ValueSource(strings = {"-XX:+UseSerialGC", "-XX:+UseG1GC"})
    void youngCollectionsCompleteWhileALargeArrayIsCopied(String collector) throws Exception {
        ChildJvm.Result r = TestSupport.runChild(Child.class,
                List.of(collector, "-Xmx768m", "-Xmn8m", "-Dcuvmm.host.devices=1"), Map.of());
        assertEquals(0, r.exitCode(), r.toString());
        assertTrue(r.output().contains("DONE"), r.toString());
        for (String direction : new String[] {"copyFrom", "copyTo"}) {
            String line = r.output().lines().filter(l -> l.startsWith("RESULT " + direction + " ")).findFirst()
                    .orElseThrow(() -> new AssertionError("no result for " + direction + ": " + r));
            long total = Long.parseLong(line.split(" ")[2]);
            assertTrue(total >= (long) MIN_GCS_PER_COPY * ROUNDS, collector + ": " + total + " collections completed during "
                    + ROUNDS + " calls of " + direction + "(byte[" + COPY_BYTES + "]) (expected: >= " + MIN_GCS_PER_COPY * ROUNDS
                    + "; the copy holds off the GC): " + line);
        }
    }
}
