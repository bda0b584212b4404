package org.cuvmm.pool;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.lang.reflect.Field;
import java.lang.reflect.Modifier;
import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;

import sun.misc.Unsafe;

/**
 * The objects the pool's threads write on every allocate and release (free-list stripes,
 * counter cells, slots) keep their written fields at least 128 bytes from both ends of the
 * object, as this JVM lays them out; and the stripe lock that replaced the monitor excludes.
 * The layout is the JVM's choice: if a JVM or a refactoring moves a hot field outside the
 * padding, two threads on one pool slow each other down again (bench/RESULTS-sharing-pool.md)
 * and this test says which field moved.
 */
class HotFieldLayoutTest {
    private static final long PAD = 128;

    @Test
    void freeListStripeFieldsAreInsideThePadding() {
        assertInsidePadding(FreeListStripe.class, Set.of("newest", "oldest", "count", "oldestFreedAtNanos", "locked"));
    }

    @Test
    void accountingCellCountersAreInsideThePadding() {
        assertInsidePadding(AccountingCell.class,
                Set.of("liveBytes", "liveCount", "liveRequestedBytes", "hits", "largerClassHits"));
    }

    @Test
    void poolSlotFieldsAreInsideThePadding() {
        assertInsidePadding(PoolSlot.class, Set.of("reqSize", "newer", "older", "freedAtNanos", "state"));
    }

    @Test
    void stripeLockExcludes() throws Exception {
        FreeListStripe stripe = new FreeListStripe();
        int threads = 4;
        int rounds = 50_000;
        long[] counter = new long[1]; // plain, not atomic: only the lock keeps the increments whole
        CountDownLatch start = new CountDownLatch(1);
        ExecutorService pool = Executors.newFixedThreadPool(threads);
        try {
            List<Future<?>> done = new ArrayList<>();
            for (int t = 0; t < threads; t++) {
                done.add(pool.submit(() -> {
                    start.await();
                    for (int i = 0; i < rounds; i++) {
                        stripe.lock();
                        try {
                            long v = counter[0];
                            if ((i & 1023) == 0) Thread.yield(); // widen the window a lost update needs
                            counter[0] = v + 1;
                        } finally {
                            stripe.unlock();
                        }
                    }
                    return null;
                }));
            }
            start.countDown();
            for (Future<?> f : done) f.get(60, TimeUnit.SECONDS);
        } finally {
            pool.shutdownNow();
        }
        stripe.lock();
        try {
            assertEquals((long) threads * rounds, counter[0], "increments lost: the stripe lock let two holders in");
        } finally {
            stripe.unlock();
        }
    }

    /**
     * Every field that is not padding ({@code pNN}, {@code qNN}, {@code gapFiller}) lies at
     * least PAD bytes after the object's first field and before its last field's end; and
     * {@code hot}, the fields the hot path is known to write, are among them (so a renamed
     * field cannot silently drop out of the check).
     */
    private static void assertInsidePadding(Class<?> type, Set<String> hot) {
        Unsafe unsafe = unsafeOrSkip();
        long referenceSize = unsafe.arrayIndexScale(Object[].class); // 4 with compressed oops, else 8
        long objectEnd = 0;
        long firstField = Long.MAX_VALUE;
        List<Field> fields = new ArrayList<>();
        for (Class<?> k = type; k != Object.class; k = k.getSuperclass()) {
            for (Field f : k.getDeclaredFields()) {
                if (Modifier.isStatic(f.getModifiers())) continue;
                long offset = unsafe.objectFieldOffset(f);
                objectEnd = Math.max(objectEnd, offset + size(f.getType(), referenceSize));
                firstField = Math.min(firstField, offset);
                if (!f.getName().matches("[pq]\\d\\d|gapFiller")) fields.add(f);
            }
        }
        Set<String> names = new java.util.TreeSet<>();
        for (Field f : fields) names.add(f.getName());
        assertTrue(names.containsAll(hot), type.getSimpleName() + ": expected fields " + hot + " among " + names);
        for (Field f : fields) {
            long offset = unsafe.objectFieldOffset(f);
            assertTrue(offset - firstField >= PAD, type.getSimpleName() + "." + f.getName() + " at offset " + offset
                    + " is within " + PAD + " bytes of the object's start (fields start at " + firstField + ")");
            assertTrue(objectEnd - (offset + size(f.getType(), referenceSize)) >= PAD, type.getSimpleName() + "."
                    + f.getName() + " at offset " + offset + " is within " + PAD + " bytes of the object's end ("
                    + objectEnd + ")");
        }
    }

    private static long size(Class<?> t, long referenceSize) {
        if (t == long.class || t == double.class) return 8;
        if (t == int.class || t == float.class) return 4;
        if (t == short.class || t == char.class) return 2;
        if (t == byte.class || t == boolean.class) return 1;
        return referenceSize;
    }

    /**
     * sun.misc.Unsafe, the one way to read field offsets; skips the test (with the reason) on a
     * JVM that denies it (JDK 23+ with --sun-misc-unsafe-memory-access=deny).
     */
    private static Unsafe unsafeOrSkip() {
        try {
            Field f = Unsafe.class.getDeclaredField("theUnsafe");
            f.setAccessible(true);
            Unsafe u = (Unsafe) f.get(null);
            u.objectFieldOffset(HotFieldLayoutTest.class.getDeclaredField("probe"));
            return u;
        } catch (ReflectiveOperationException | UnsupportedOperationException | SecurityException e) {
            Assumptions.abort("this JVM does not let tests read field offsets through sun.misc.Unsafe: " + e);
            throw new AssertionError(e); // not reached
        }
    }

    @SuppressWarnings("unused") // its offset is read once, to see whether Unsafe answers
    private int probe;
}
