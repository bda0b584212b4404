package org.cuvmm.bench.streams;

import java.util.concurrent.TimeUnit;

import org.cuvmm.bench.BenchChecks;
import org.openjdk.jmh.annotations.Benchmark;
import org.openjdk.jmh.annotations.BenchmarkMode;
import org.openjdk.jmh.annotations.Level;
import org.openjdk.jmh.annotations.Mode;
import org.openjdk.jmh.annotations.OutputTimeUnit;
import org.openjdk.jmh.annotations.Param;
import org.openjdk.jmh.annotations.Scope;
import org.openjdk.jmh.annotations.Setup;
import org.openjdk.jmh.annotations.State;
import org.openjdk.jmh.annotations.TearDown;

/**
 * Two copies of {@code bytes} from pinned memory into two device buffers, queued by one
 * thread: both on one stream ({@code oneStream}, run one after the other by its worker), or
 * one on each of two streams ({@code twoStreams}, two host-driver workers, so two cores).
 * The ratio oneStream / twoStreams is the overlap (2.0 = perfect on two cores).
 */
@State(Scope.Thread)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
public class OverlapBenchmark {
    @Param({"67108864"})
    public long bytes;

    private CopyFixture f;

    @Setup(Level.Trial)
    public void setup() {
        BenchChecks.expectedDriver();
        f = new CopyFixture(bytes, true);
    }

    @TearDown(Level.Trial)
    public void tearDown() {
        f.checkContents();
        f.close();
        BenchChecks.nothingLeft();
    }

    @Benchmark
    public void oneStream() { f.oneStream(); }

    @Benchmark
    public void twoStreams() { f.twoStreams(); }
}
