package org.cuvmm.bench.pool;

import java.util.concurrent.TimeUnit;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.bench.BenchChecks;
import org.cuvmm.pool.VirtualMemoryPool;
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
 * Pool allocate+close ({@code pool.allocate(size).close()}: after the first op, an idle
 * buffer of the class is reused) against the resource's own allocate+close (reserve, create,
 * map, set access; unmap, release, free), at 2 and 64 MiB. The pool has the default settings
 * (unbounded retention, no MBeans; every buffer watched for leaks, one in 64 recording its
 * allocation site only when {@code -Dcuvmm.leakDetection.captureStack=true}, so none here).
 */
@State(Scope.Thread)
@BenchmarkMode(Mode.AverageTime)
@OutputTimeUnit(TimeUnit.NANOSECONDS)
public class PoolBenchmark {
    @Param({"2", "64"})
    public int sizeMiB;

    private VirtualMemoryResource resource;
    private VirtualMemoryPool pool;
    private long size;

    @Setup(Level.Trial)
    public void setup() {
        BenchChecks.expectedDriver();
        resource = VirtualMemoryResource.create(0);
        pool = VirtualMemoryPool.builder().resource(resource).name("bench-pool").build();
        size = (long) sizeMiB << 20;
    }

    @TearDown(Level.Trial)
    public void tearDown() {
        pool.close();
        resource.close();
        BenchChecks.nothingLeft();
    }

    @Benchmark
    public long pool() {
        return useOnce(pool.allocate(size));
    }

    @Benchmark
    public long direct() {
        return useOnce(resource.allocate(size));
    }

    /** The op every pool benchmark times after its allocate: read the address (kept by JMH), close. */
    static long useOnce(VirtualMemoryBuffer b) {
        long a = b.address();
        b.close();
        return a;
    }
}
