package org.cuvmm.bench;

import java.util.concurrent.TimeUnit;

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
 * {@code modifyAllocation(base, 2 chunks)} of a one-chunk buffer, then {@code close()} of the
 * grown buffer, on both paths of a grow (see {@link GrowFixture}). Each op checks its
 * outcome, and the fixture checks it once in setup, so a run that would time the wrong path
 * fails instead. The C++ baseline's {@code grow_in_place} and {@code move} make the same
 * driver calls.
 */
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
public class GrowBenchmark {

    /** The range after the base is free: {@code GROWN_IN_PLACE}. */
    @State(Scope.Thread)
    public static class InPlace {
        GrowFixture fixture;

        @Setup(Level.Trial)
        public void setup() {
            BenchChecks.expectedDriver();
            fixture = GrowFixture.inPlace();
        }

        @TearDown(Level.Trial)
        public void tearDown() {
            fixture.close();
            BenchChecks.nothingLeft();
        }
    }

    /** A decoy occupies the range after the base: {@code MOVED}. */
    @State(Scope.Thread)
    public static class Moving {
        GrowFixture fixture;

        @Setup(Level.Trial)
        public void setup() {
            BenchChecks.expectedDriver();
            fixture = GrowFixture.moving();
        }

        @TearDown(Level.Trial)
        public void tearDown() {
            fixture.close();
            BenchChecks.nothingLeft();
        }
    }

    @Benchmark
    public long growInPlace(InPlace state) {
        return state.fixture.run();
    }

    @Benchmark
    public long move(Moving state) {
        return state.fixture.run();
    }
}
