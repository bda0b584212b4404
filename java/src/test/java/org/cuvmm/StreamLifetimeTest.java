package org.cuvmm;

import static org.cuvmm.StreamTestSupport.gate;
import static org.cuvmm.TestSupport.MiB;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.cuvmm.testing.TestData;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * Stream-ordered lifetimes on the host driver: close() waits for recorded stream work,
 * close(stream) releases later without unmapping early (live counters), an imported buffer's
 * whenUnmapped runs only after its stream work, asynchronous copies from heap arrays, the
 * synchronous copies on cuvmm's own stream, and eight threads with their own streams.
 */
class StreamLifetimeTest {
    private StreamTestSupport.Fixture fixture;
    private VirtualMemoryResource resource;

    @BeforeEach
    void open() {
        fixture = StreamTestSupport.Fixture.open();
        resource = fixture.resource;
    }

    @AfterEach
    void close() {
        fixture.close();
    }

    @Test
    void closeWaitsForRecordedStreamWork() {
        assumeTrue(TestSupport.onHostDriver(), "the host driver's delay makes the pending work observable");
        StreamTestSupport.delay(20_000); // 20 ms per op: an early unmap would fault the queued fill
        try (Stream s = Stream.create(0); PinnedHostBuffer out = PinnedHostBuffer.allocate(MiB)) {
            VirtualMemoryBuffer b = resource.allocate(MiB);
            AtomicInteger ranBeforeClose = new AtomicInteger();
            b.fillAsync(0, MiB, (byte) 0x11, s);
            b.copyToAsync(0, out, 0, MiB, s);
            s.launchHostFunction(ranBeforeClose::incrementAndGet);
            b.recordUse(s); // the host function stands for a kernel launched elsewhere
            long mapped = TestSupport.counters().hostMappings();
            b.close();
            assertEquals(1, ranBeforeClose.get(), "close() returned only after the recorded work");
            assertEquals(mapped - 1, TestSupport.counters().hostMappings(), "unmapped by close()");
            StreamTestSupport.assertAll(out.asByteBuffer(), (int) MiB, 0x11, "the queued copy completed before the unmap");
            s.synchronize(); // no fault: nothing ran on unmapped memory
        }
    }

    @Test
    void withAddressOnAStreamRecordsWhatTheActionLaunched() {
        assumeTrue(TestSupport.onHostDriver(), "the host driver's delay makes the pending work observable");
        StreamTestSupport.delay(20_000);
        try (Stream s = Stream.create(0)) {
            VirtualMemoryBuffer b = resource.allocate(MiB);
            AtomicInteger kernelDone = new AtomicInteger();
            long[] seen = new long[1];
            b.withAddress(s, address -> {
                seen[0] = address;
                s.launchHostFunction(kernelDone::incrementAndGet); // stands for a kernel launched on s.handle()
            });
            assertEquals(b.address(), seen[0]);
            b.close();
            assertEquals(1, kernelDone.get(), "close() waited for what withAddress(stream, ...) launched");
        }
    }

    @Test
    void aBufferClosedInAHostFunctionIsReleasedByTheReaper() {
        long failures = TestSupport.counters().cleanupFailures();
        try (Stream s = Stream.create(0)) {
            VirtualMemoryBuffer b = resource.allocate(MiB);
            long mappedWithB = TestSupport.counters().liveMappings();
            b.fillAsync(0, MiB, (byte) 4, s);
            CountDownLatch hold = gate(s);
            s.launchHostFunction(b::close); // CUDA forbids driver calls here
            b.recordUse(s);                  // recorded behind the host function: waiting for it there would never end
            CountDownLatch passed = new CountDownLatch(1);
            s.launchHostFunction(passed::countDown);
            hold.countDown();
            StreamTestSupport.await(passed, "the stream past the host function that closed the buffer");
            s.synchronize();
            assertTrue(b.isClosed());
            StreamTestSupport.reaperDrained();
            assertEquals(mappedWithB - 1, TestSupport.counters().liveMappings());
            assertEquals(failures, TestSupport.counters().cleanupFailures(), "no teardown call failed");
        }
    }

    @Test
    void aBufferUsedWithManyShortLivedStreamsKeepsABoundedRecord() {
        DriverCounters k = TestSupport.counters();
        try (VirtualMemoryBuffer b = resource.allocate(MiB)) {
            long created = k.calls("cuEventCreate");
            long destroyed = k.calls("cuEventDestroy");
            for (int i = 0; i < 50; i++) {
                try (Stream s = Stream.create(0)) {
                    b.fillAsync(0, 16, (byte) i, s);
                    s.synchronize();
                }
            }
            assertEquals(1, b.streamUsesIfAny().size(), "the uses of closed, finished streams are forgotten");
            // Events come from EventCache (idle ones of earlier tests are reused, pruned ones destroyed):
            // the net count may drop below 1, it must not grow with the streams.
            long net = (k.calls("cuEventCreate") - created) - (k.calls("cuEventDestroy") - destroyed);
            assertTrue(net <= 1, "at most one event alive for the last stream, not one per stream: " + net);
            long waits = k.calls("cuStreamWaitEvent");
            byte[] back = new byte[16];
            b.copyTo(0, back, 0, back.length);
            assertEquals(49, back[0]);
            assertEquals(1, k.calls("cuStreamWaitEvent") - waits, "a synchronous copy waits for one recorded stream");
        }
    }

    @Test
    void closeOnAStreamReleasesLaterAndNeverEarly() {
        try (Stream s = Stream.create(0)) {
            VirtualMemoryBuffer b = resource.allocate(MiB);
            long mappedWithB = TestSupport.counters().liveMappings();
            long hostMappedWithB = TestSupport.counters().hostMappings();
            CountDownLatch hold = gate(s);
            try {
                b.fillAsync(0, MiB, (byte) 1, s);
                b.close(s); // returns although the stream is held: it never blocks
                assertTrue(b.isClosed());
                b.close(s); // idempotent
                b.close();
                assertThrows(IllegalStateException.class, () -> b.fill((byte) 3));
                assertEquals(mappedWithB, TestSupport.counters().liveMappings(), "nothing unmapped before the stream got there");
                // The host driver's own count, where it is the driver (on cuda it stays 0: the
                // library's copy of the host driver keeps its own); cuvmm's count above holds on both.
                if (TestSupport.onHostDriver()) assertEquals(hostMappedWithB, TestSupport.counters().hostMappings());
                assertTrue(StreamOrderedRelease.pending() >= 1, "the release waits on the reaper");
            } finally {
                hold.countDown();
            }
            s.synchronize(); // an unmap before the fill ran would fault it (CUDA_ERROR_ILLEGAL_ADDRESS) here
            StreamTestSupport.reaperDrained();
            assertEquals(mappedWithB - 1, TestSupport.counters().liveMappings(), "released once the stream passed");
            if (TestSupport.onHostDriver()) {
                assertEquals(hostMappedWithB - 1, TestSupport.counters().hostMappings(), "the host driver unmapped it");
            }
        }
    }

    @Test
    void closeOnAStreamWaitsForTheOtherStreamsOfTheBuffer() {
        try (Stream s = Stream.builder(0).nonBlocking(true).build(); Stream other = Stream.builder(0).nonBlocking(true).build()) {
            VirtualMemoryBuffer b = resource.allocate(2 * MiB);
            long mappedWithB = TestSupport.counters().liveMappings();
            CountDownLatch holdOther = gate(other);
            try {
                b.fillAsync(0, MiB, (byte) 1, s);
                b.fillAsync(MiB, MiB, (byte) 2, other);
                b.close(s); // never blocks
                assertTrue(b.isClosed());
                CountDownLatch sPassed = new CountDownLatch(1);
                s.launchHostFunction(sPassed::countDown);
                assertFalse(s.isDone(), "s waits for the buffer's work on the held stream");
                assertEquals(mappedWithB, TestSupport.counters().liveMappings(), "not unmapped while `other` is held");
            } finally {
                holdOther.countDown();
            }
            s.synchronize();
            StreamTestSupport.reaperDrained();
            assertEquals(fixture.live.get("mappings"), TestSupport.counters().liveMappings(), "unmapped after both streams passed");
        }
    }

    @Test
    void anImportsWhenUnmappedRunsOnlyAfterItsStreamWork() {
        AtomicInteger unmapped = new AtomicInteger();
        try (Stream s = Stream.create(0); VirtualMemoryBuffer owner = resource.allocate(2 * MiB);
             BufferDescriptor d = owner.exportDescriptor()) {
            VirtualMemoryBuffer imported = resource.importBuffer(d, unmapped::incrementAndGet);
            long mappedWithImport = TestSupport.counters().liveMappings();
            CountDownLatch hold = gate(s);
            try {
                imported.fillAsync(0, 2 * MiB, (byte) 0x42, s); // the consumer's stream work on the memory
                imported.close(s);
                assertEquals(0, unmapped.get(), "the lease stays held while the stream work is pending");
                assertEquals(mappedWithImport, TestSupport.counters().liveMappings());
            } finally {
                hold.countDown();
            }
            s.synchronize();
            StreamTestSupport.reaperDrained();
            assertEquals(1, unmapped.get(), "whenUnmapped after the range was dropped");
            assertEquals(mappedWithImport - 1, TestSupport.counters().liveMappings());
            byte[] back = new byte[16];
            owner.copyTo(0, back, 0, back.length);
            assertAll(back, 0x42, "the consumer's fill reached the owner's memory");

            // close() with pending work: waits, then runs whenUnmapped on the closing thread.
            VirtualMemoryBuffer again = resource.importBuffer(d, unmapped::incrementAndGet);
            CountDownLatch hold2 = gate(s);
            again.fillAsync(0, MiB, (byte) 0x43, s);
            // The opener opens the gate only once close() has begun (the buffer reads closed
            // before close() waits), so close() always meets the fill still pending.
            Thread opener = new Thread(() -> {
                long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(StreamTestSupport.WAIT_SECONDS);
                while (!again.isClosed() && System.nanoTime() < deadline) {
                    java.util.concurrent.locks.LockSupport.parkNanos(100_000); // bounded poll of a flag: no latch exists inside close()
                }
                hold2.countDown();
            });
            assertFalse(s.isDone(), "the fill is pending when close() starts");
            opener.start();
            again.close();
            assertEquals(2, unmapped.get(), "close() returned after the work and the unmap");
            owner.copyTo(0, back, 0, back.length);
            assertAll(back, 0x43, "the pending fill ran before the unmap");
        }
    }

    @Test
    void aDeferredCloseWithPendingStreamWorkNeverBlocks() {
        try (Stream s = Stream.create(0)) {
            VirtualMemoryBuffer b = resource.allocate(MiB);
            long mappedWithB = TestSupport.counters().liveMappings();
            BufferLease lease = b.lease("test consumer");
            CountDownLatch hold = gate(s);
            try {
                b.fillAsync(0, MiB, (byte) 5, s);
                b.closeWhenUnused();
                lease.close(); // the last use: closes, and hands the release to the reaper (never blocks)
                assertTrue(b.isClosed());
                assertEquals(mappedWithB, TestSupport.counters().liveMappings());
            } finally {
                hold.countDown();
            }
            s.synchronize();
            StreamTestSupport.reaperDrained();
            assertEquals(mappedWithB - 1, TestSupport.counters().liveMappings());
        }
    }

    @Test
    void anAsyncCopyFromAHeapArrayMayReuseTheArrayAtOnce() {
        byte[] data = TestData.pattern(3 * (int) MiB + 5, 11); // four staging pieces
        byte[] expected = data.clone();
        try (Stream s = Stream.create(0); VirtualMemoryBuffer b = resource.allocate(4 * MiB)) {
            CountDownLatch hold = gate(s);
            try {
                b.copyFromAsync(7, data, 0, data.length, s);
                Arrays.fill(data, (byte) 0); // the copy has not run (the stream is held)
            } finally {
                hold.countDown();
            }
            s.synchronize();
            byte[] back = new byte[expected.length];
            b.copyTo(7, back, 0, back.length);
            assertArrayEquals(expected, back, "the array as it was at the call");
        }
    }

    @Test
    void synchronousCopiesDoNotWaitForTheLegacyStream() throws Exception {
        assumeTrue(TestSupport.onHostDriver(), "holding the legacy stream of a GPU would hold other work too");
        Stream legacy = Stream.legacy(0);
        try (VirtualMemoryBuffer b = resource.allocate(MiB)) {
            CountDownLatch hold = gate(legacy);
            ExecutorService pool = Executors.newSingleThreadExecutor();
            try {
                byte[] data = TestData.pattern(4096, 2);
                Future<byte[]> copy = pool.submit(() -> {
                    b.copyFrom(data);
                    b.fill(4096, 16, (byte) 1);
                    byte[] back = new byte[4096];
                    b.copyTo(0, back, 0, back.length);
                    return back;
                });
                assertArrayEquals(data, copy.get(StreamTestSupport.WAIT_SECONDS, TimeUnit.SECONDS),
                        "the copies ran while the legacy stream was held");
            } finally {
                hold.countDown();
                pool.shutdown();
            }
            legacy.synchronize();
        }
    }

    @Test
    void synchronousCopiesWaitForTheBuffersRecordedStreamWork() {
        assumeTrue(TestSupport.onHostDriver(), "the host driver's delay makes a missing wait visible");
        StreamTestSupport.delay(20_000);
        try (Stream s = Stream.builder(0).nonBlocking(true).build(); VirtualMemoryBuffer b = resource.allocate(MiB);
             VirtualMemoryBuffer scratch = resource.allocate(MiB)) {
            for (int i = 0; i < 3; i++) scratch.fillAsync(0, 16, (byte) i, s); // 60 ms of work ahead of the fill
            b.fillAsync(0, MiB, (byte) 0x77, s);
            byte[] back = new byte[4096];
            b.copyTo(0, back, 0, back.length); // on cuvmm's own stream, after b's recorded work
            assertAll(back, 0x77, "the synchronous read waited for the fill on s");
        }
    }

    @Test
    void eightThreadsWithTheirOwnStreamsShareBuffers() throws Exception {
        int threads = 8;
        int slice = (int) (MiB / 4);
        int rounds = 20;
        byte[] source = TestData.pattern(slice, 5);
        try (VirtualMemoryBuffer shared = resource.allocate(threads * (long) slice);
             VirtualMemoryBuffer common = resource.allocate(slice)) {
            common.copyFrom(source);
            ExecutorService pool = Executors.newFixedThreadPool(threads);
            try {
                List<Future<?>> futures = new ArrayList<>();
                for (int t = 0; t < threads; t++) {
                    int me = t;
                    futures.add(pool.submit(() -> {
                        try (Stream s = Stream.builder(0).nonBlocking(me % 2 == 0).build();
                             PinnedHostBuffer out = PinnedHostBuffer.allocate(slice)) {
                            long at = (long) me * slice;
                            for (int r = 0; r < rounds; r++) {
                                shared.fillAsync(at, slice, (byte) (me + r), s);
                                shared.copyToAsync(at, out, 0, slice, s);
                                s.synchronize();
                                StreamTestSupport.assertAll(out.asByteBuffer(), slice, me + r, "thread " + me + ", round " + r);
                                shared.copyFromAsync(at, common, 0, slice, s); // every thread reads the common buffer
                                shared.copyToAsync(at, out, 0, slice, s);
                                s.synchronize();
                                byte[] got = new byte[slice];
                                out.asByteBuffer().get(got);
                                assertArrayEquals(source, got, "thread " + me + ", round " + r);
                            }
                        }
                        return null;
                    }));
                }
                for (Future<?> f : futures) f.get(120, TimeUnit.SECONDS);
            } finally {
                pool.shutdown();
            }
        }
    }

    private static void assertAll(byte[] bytes, int value, String what) {
        StreamTestSupport.assertAll(bytes, value, what);
    }
}
