package org.cuvmm.bench.pool;

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

/** The arena-design workloads (a), (b), (c) of {@link ArenaWorkloads}, pooled or direct; ns per round. */
@State(Scope.Thread)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
public class ArenaBenchmark {
    @Param({"pool", "direct"})
    public String source;

    private ArenaWorkloads w;

    @Setup(Level.Trial)
    public void setup() {
        BenchChecks.expectedDriver();
        w = new ArenaWorkloads("pool".equals(source));
    }

    @TearDown(Level.Trial)
    public void tearDown() {
        w.close();
        BenchChecks.nothingLeft();
    }

    @Benchmark
    public long freedBeforeNextRound() { return w.freedBeforeNextRound(); }

    @Benchmark
    public long keptAlive() { return w.keptAlive(); }

    @Benchmark
    public long alternatingSizes() { return w.alternatingSizes(); }
}
