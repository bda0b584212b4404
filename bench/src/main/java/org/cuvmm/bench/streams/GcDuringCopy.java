package org.cuvmm.bench.streams;

import java.lang.management.GarbageCollectorMXBean;
import java.lang.management.ManagementFactory;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.cuvmm.PinnedHostBuffer;
import org.cuvmm.Stream;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;

/**
 * Does a large asynchronous copy hold off the garbage collector? Run by StreamsReport in a
 * child JVM with a small young generation ({@code -Xmn8m}) while a second thread allocates
 * 64 KiB arrays without pause: counts the collections that complete
 * ({@link GarbageCollectorMXBean#getCollectionCount}) during each of {@code rounds} copies of
 * a 256 MiB heap array ({@code copyFromAsync(byte[])}: the call, which fills pinned staging,
 * and the {@code synchronize()} after it, counted apart), during each of as many copies from a
 * 256 MiB {@link PinnedHostBuffer}, and, for scale, during an equally long window with no
 * copy at all. As in java's CopyGcTest, but reported (the report prints the counts), not
 * asserted: a copy that pinned the array (a JNI critical region) would let about one
 * collection complete per copy, however long it ran.
 *
 * <p>Prints one line per measurement: "RESULT name rounds=N gcs=a,b,... ms=x,y,...".
 */
public final class GcDuringCopy {
    static final int COPY_BYTES = 256 << 20;
    static volatile Object sink;
    static volatile boolean stop;

    private GcDuringCopy() {}

    // Looked up once: the count itself must not allocate much.
    static final List<GarbageCollectorMXBean> COLLECTORS = ManagementFactory.getGarbageCollectorMXBeans();

    static long gcs() {
        long n = 0;
        for (GarbageCollectorMXBean gc : COLLECTORS) n += Math.max(0, gc.getCollectionCount());
        return n;
    }

    public static void main(String[] args) throws Exception {
        int rounds = args.length > 0 ? Integer.parseInt(args[0]) : 5;
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
        if (!allocating.await(60, TimeUnit.SECONDS)) throw new IllegalStateException("the allocator thread did not start");
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer b = r.allocate(COPY_BYTES);
             PinnedHostBuffer pinned = PinnedHostBuffer.allocate(COPY_BYTES);
             Stream s = Stream.create(0)) {
            // Warm-up, not counted: first calls, first touch of the pages.
            b.copyFromAsync(0, big, 0, big.length, s);
            s.synchronize();
            b.copyFromAsync(0, pinned, 0, COPY_BYTES, s);
            s.synchronize();
            long[] callGcs = new long[rounds], syncGcs = new long[rounds], callMs = new long[rounds],
                    syncMs = new long[rounds], pinnedGcs = new long[rounds], pinnedMs = new long[rounds];
            long totalNs = 0;
            for (int i = 0; i < rounds; i++) {
                long g0 = gcs();
                long t0 = System.nanoTime();
                b.copyFromAsync(0, big, 0, big.length, s);
                long g1 = gcs();
                long t1 = System.nanoTime();
                s.synchronize();
                long g2 = gcs();
                long t2 = System.nanoTime();
                callGcs[i] = g1 - g0;
                syncGcs[i] = g2 - g1;
                callMs[i] = (t1 - t0) / 1_000_000;
                syncMs[i] = (t2 - t1) / 1_000_000;
                totalNs += t2 - t0;
            }
            for (int i = 0; i < rounds; i++) {
                long g0 = gcs();
                long t0 = System.nanoTime();
                b.copyFromAsync(0, pinned, 0, COPY_BYTES, s);
                s.synchronize();
                pinnedGcs[i] = gcs() - g0;
                pinnedMs[i] = (System.nanoTime() - t0) / 1_000_000;
            }
            // For scale: the collections in a window as long as the average array copy, no copy running.
            long window = totalNs / rounds;
            long[] idleGcs = new long[rounds], idleMs = new long[rounds];
            for (int i = 0; i < rounds; i++) {
                long g0 = gcs();
                long t0 = System.nanoTime();
                long until = t0 + window;
                while (System.nanoTime() < until) Thread.onSpinWait();
                idleGcs[i] = gcs() - g0;
                idleMs[i] = (System.nanoTime() - t0) / 1_000_000;
            }
            print("array_call", callGcs, callMs);
            print("array_synchronize", syncGcs, syncMs);
            print("pinned_copy", pinnedGcs, pinnedMs);
            print("no_copy", idleGcs, idleMs);
            for (int i = 0; i < big.length; i += 4096) {
                if (big[i] != (byte) (i >>> 12)) throw new IllegalStateException("byte " + i + " of the array changed");
            }
        } finally {
            stop = true;
            allocator.join(TimeUnit.SECONDS.toMillis(30));
        }
        System.out.println("DONE");
    }

    private static void print(String name, long[] gcs, long[] ms) {
        StringBuilder g = new StringBuilder(), m = new StringBuilder();
        for (int i = 0; i < gcs.length; i++) {
            g.append(i == 0 ? "" : ",").append(gcs[i]);
            m.append(i == 0 ? "" : ",").append(ms[i]);
        }
        System.out.println("RESULT " + name + " rounds=" + gcs.length + " gcs=" + g + " ms=" + m);
    }
}
