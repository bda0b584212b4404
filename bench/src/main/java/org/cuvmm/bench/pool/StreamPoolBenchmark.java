package org.cuvmm.bench.pool;

import java.util.LinkedHashMap;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import org.cuvmm.Driver;
import org.cuvmm.Event;
import org.cuvmm.Stream;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.bench.BenchChecks;
import org.cuvmm.pool.VirtualMemoryPool;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;

/**
 * Stream-ordered pool allocate+free of 2 MiB (issue 9 item 4), beside the host-ordered pool
 * op of {@link PoolBenchmark} in the same run:
 * <ul>
 * <li>{@code hostOrdered}: {@code pool.allocate(size).close()} (no stream; no driver call).</li>
 * <li>{@code oneStream}: {@code pool.allocate(size, a).close(a)}: same-stream reuse, one
 *     {@code cuEventRecord} per op (the free).</li>
 * <li>{@code twoStreamsTakingTurns}: op i allocates and frees on stream a or b in turn, so
 *     every op reuses memory the other stream freed: one {@code cuStreamWaitEvent} (allocate)
 *     and one {@code cuEventRecord} (free).</li>
 * <li>{@code allocateOnAFreeOnB}: {@code pool.allocate(size, a).close(b)} (producer/consumer):
 *     the same two calls.</li>
 * </ul>
 * Streams are non-blocking. Nothing else is queued on them, so the records and waits are the
 * streams' only work. {@link #main} counts the driver calls of each op (no timing).
 */
@State(Scope.Thread)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
public class StreamPoolBenchmark {
    static final long SIZE = 2L << 20;

    private VirtualMemoryResource resource;
    private VirtualMemoryPool pool;
    private Stream a;
    private Stream b;
    private Event event;
    private boolean turn;

    @Setup(Level.Trial)
    public void setup() {
        BenchChecks.expectedDriver();
        resource = VirtualMemoryResource.create(0);
        pool = VirtualMemoryPool.builder().resource(resource).name("bench-stream-pool").build();
        a = Stream.builder(0).nonBlocking(true).build();
        b = Stream.builder(0).nonBlocking(true).build();
        event = Event.builder(0).timing(false).build();
    }

    @TearDown(Level.Trial)
    public void tearDown() {
        a.synchronize();
        b.synchronize();
        pool.close(); // the frees' events have completed: released now, not deferred
        event.close();
        a.close();
        b.close();
        resource.close();
        BenchChecks.nothingLeft();
    }

    @Benchmark
    public long hostOrdered() {
        VirtualMemoryBuffer buf = pool.allocate(SIZE);
        long address = buf.address();
        buf.close();
        return address;
    }

    /** The driver call a stream-ordered free needs, alone: one cuEventRecord of a reused event on stream a. */
    @Benchmark
    public void eventRecordOnly() {
        event.record(a);
    }

    /** The driver call a cross-stream reuse adds, alone: stream b waits for the event. */
    @Benchmark
    public void streamWaitOnly() {
        b.waitFor(event);
    }

    @Benchmark
    public long oneStream() {
        VirtualMemoryBuffer buf = pool.allocate(SIZE, a);
        long address = buf.address();
        buf.close(a);
        return address;
    }

    @Benchmark
    public long twoStreamsTakingTurns() {
        Stream s = (turn = !turn) ? a : b;
        VirtualMemoryBuffer buf = pool.allocate(SIZE, s);
        long address = buf.address();
        buf.close(s);
        return address;
    }

    @Benchmark
    public long allocateOnAFreeOnB() {
        VirtualMemoryBuffer buf = pool.allocate(SIZE, a);
        long address = buf.address();
        buf.close(b);
        return address;
    }

    /**
     * Counts the driver calls per op of each benchmark: 100 warm ops, then 1000 counted ones
     * ({@code Driver.get().counters()}), printed as a markdown table. No timing.
     */
    public static void main(String[] args) {
        StreamPoolBenchmark bench = new StreamPoolBenchmark();
        bench.setup();
        try {
            Map<String, Runnable> ops = new LinkedHashMap<>();
            ops.put("hostOrdered", bench::hostOrdered);
            ops.put("eventRecordOnly", bench::eventRecordOnly);
            ops.put("streamWaitOnly", bench::streamWaitOnly);
            ops.put("oneStream", bench::oneStream);
            ops.put("twoStreamsTakingTurns", bench::twoStreamsTakingTurns);
            ops.put("allocateOnAFreeOnB", bench::allocateOnAFreeOnB);
            // Not a JMH benchmark: what a use recorded on the buffer adds (the buffer's own use
            // event, org.cuvmm.StreamUses, is per buffer object, so per op).
            ops.put("oneStream + fillAsync(4 KiB)", () -> {
                VirtualMemoryBuffer buf = bench.pool.allocate(SIZE, bench.a);
                buf.fillAsync(0, 4096, (byte) 1, bench.a);
                buf.close(bench.a);
            });
            System.out.println("| op | driver calls per op (1000 ops counted) |");
            System.out.println("|---|---|");
            for (var op : ops.entrySet()) {
                for (int i = 0; i < 100; i++) op.getValue().run();
                Map<String, Long> before = Driver.get().counters().calls();
                final int n = 1000;
                for (int i = 0; i < n; i++) op.getValue().run();
                Map<String, Long> after = Driver.get().counters().calls();
                StringBuilder sb = new StringBuilder();
                long total = 0;
                for (var e : after.entrySet()) {
                    long d = e.getValue() - before.getOrDefault(e.getKey(), 0L);
                    if (d == 0) continue;
                    total += d;
                    sb.append(sb.length() == 0 ? "" : ", ").append(e.getKey()).append(' ').append((double) d / n);
                }
                System.out.println("| " + op.getKey() + " | " + (double) total / n + (sb.length() == 0 ? "" : ": " + sb)
                        + " |");
            }
        } finally {
            bench.tearDown();
        }
    }
}
