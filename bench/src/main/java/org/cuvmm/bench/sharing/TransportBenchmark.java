package org.cuvmm.bench.sharing;

import java.io.IOException;
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
 * Descriptor transport round trip (issue 3 item 8): export, send frame + fds over a Unix
 * socket, receive, adopt, import, close, ack (see {@link TransportFixture}). Compared with
 * {@code cuvmm-transport-baseline --chunks N} in the same run by {@link SharingPoolReport}.
 */
@State(Scope.Thread)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
public class TransportBenchmark {
    /** Chunks of the exported buffer: 1 (2 MiB) or 3 (3 x 2 MiB). */
    @Param({"1", "3"})
    public int chunks;

    private TransportFixture fixture;

    @Setup(Level.Trial)
    public void setup() throws IOException {
        BenchChecks.expectedDriver();
        fixture = new TransportFixture(chunks);
    }

    @TearDown(Level.Trial)
    public void tearDown() {
        fixture.close();
        BenchChecks.nothingLeft();
    }

    @Benchmark
    public long roundTrip() throws IOException {
        return fixture.round();
    }
}
