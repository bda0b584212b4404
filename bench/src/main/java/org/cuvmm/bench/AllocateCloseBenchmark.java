package org.cuvmm.bench;

import java.util.concurrent.TimeUnit;

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
 * {@code VirtualMemoryResource.allocate(size)} then {@code VirtualMemoryBuffer.close()}:
 * reserve, create, map, set access, then unmap, release, free. The C++ baseline's
 * {@code allocate_close_2MiB} / {@code allocate_close_64MiB} make the same driver calls.
 */
@State(Scope.Thread)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
public class AllocateCloseBenchmark {
    /** Buffer size in MiB: one 2 MiB chunk, or one 64 MiB chunk. */
    @Param({"2", "64"})
    public int sizeMiB;

    private AllocateCloseFixture fixture;

    @Setup(Level.Trial)
    public void setup() {
        BenchChecks.expectedDriver();
        fixture = new AllocateCloseFixture((long) sizeMiB << 20);
    }

    @TearDown(Level.Trial)
    public void tearDown() {
        fixture.close();
        BenchChecks.nothingLeft();
    }

    @Benchmark
    public long allocateClose() {
        return fixture.run();
    }
}
