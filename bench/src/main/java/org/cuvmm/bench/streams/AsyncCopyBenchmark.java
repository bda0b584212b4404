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
 * One copy of {@code bytes} between host memory of each kind and a device buffer, waited for
 * (see {@link CopyFixture} for what each op calls). Average time per op; StreamsReport turns
 * it into GB/s and divides by the C++ baseline's {@code memcpy} and driver-call loops.
 */
@State(Scope.Thread)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
public class AsyncCopyBenchmark {
    @Param({"65536", "2097152", "67108864"})
    public long bytes;

    private CopyFixture f;

    @Setup(Level.Trial)
    public void setup() {
        BenchChecks.expectedDriver();
        f = new CopyFixture(bytes, false);
    }

    @TearDown(Level.Trial)
    public void tearDown() {
        f.checkContents();
        f.close();
        BenchChecks.nothingLeft();
    }

    @Benchmark
    public void htodPinned() { f.htodPinned(); }

    /** 32 copies of {@code bytes / 32} from pinned memory, one synchronize (the report runs it at 2 MiB: 32 x 64 KiB). */
    @Benchmark
    public void htodPinnedBatch32() { f.htodPinnedBatch32(); }

    @Benchmark
    public void htodArray() { f.htodArray(); }

    @Benchmark
    public void htodPageable() { f.htodPageable(); }

    @Benchmark
    public void dtohPinned() { f.dtohPinned(); }

    @Benchmark
    public void dtohArray() { f.dtohArray(); }

    @Benchmark
    public void dtohPageable() { f.dtohPageable(); }
}
