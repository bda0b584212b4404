package org.cuvmm;

import static org.cuvmm.StreamTestSupport.assertAll;
import static org.cuvmm.StreamTestSupport.gate;
import static org.cuvmm.TestSupport.MiB;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CountDownLatch;

import org.cuvmm.testing.TestData;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * Streams and events on the host driver, whose streams really run asynchronously (one worker
 * thread per stream): ordering within a stream, events across streams, the legacy stream's
 * implicit ordering with blocking streams and not with non-blocking ones, host functions and
 * their exceptions, and use after close. Streams are held with gates (a host function waiting
 * for a latch), so what is still pending is known without timing.
 */
class StreamTest {
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
    void workOnOneStreamRunsInQueueOrder() {
        StreamTestSupport.delay(2_000); // each op sleeps first: a reordering would show
        byte[] data = TestData.pattern(3 * (int) MiB, 7);
        try (Stream s = Stream.create(0); VirtualMemoryBuffer b = resource.allocate(4 * MiB);
             PinnedHostBuffer in = PinnedHostBuffer.allocate(data.length);
             PinnedHostBuffer out = PinnedHostBuffer.allocate(data.length)) {
            in.asByteBuffer().put(data);
            List<Integer> order = Collections.synchronizedList(new ArrayList<>());
            b.fillAsync(0, data.length, (byte) 1, s);
            b.copyFromAsync(0, in, 0, data.length, s);
            for (int i = 0; i < 20; i++) {
                int n = i;
                s.launchHostFunction(() -> order.add(n));
            }
            b.copyToAsync(0, out, 0, data.length, s);
            s.synchronize();
            byte[] back = new byte[data.length];
            out.asByteBuffer().get(back);
            assertArrayEquals(data, back, "the fill, then the copy in, then the copy out");
            List<Integer> expected = new ArrayList<>();
            for (int i = 0; i < 20; i++) expected.add(i);
            assertEquals(expected, order);
            assertTrue(s.isDone());
        }
    }

    @Test
    void aStreamWaitsForAnEventOfAnotherStream() {
        try (Stream producer = Stream.builder(0).nonBlocking(true).build();
             Stream consumer = Stream.builder(0).nonBlocking(true).priority(-1).build();
             VirtualMemoryBuffer b = resource.allocate(MiB); PinnedHostBuffer out = PinnedHostBuffer.allocate(MiB);
             Event written = Event.create(0)) {
            CountDownLatch g = gate(producer);
            try {
                b.fillAsync(0, MiB, (byte) 0x5C, producer);
                written.record(producer);
                consumer.waitFor(written);
                b.copyToAsync(0, out, 0, MiB, consumer);
                assertFalse(written.isDone(), "the producer is held before the record");
                assertFalse(consumer.isDone(), "the consumer waits for the producer's event");
            } finally {
                g.countDown();
            }
            consumer.synchronize();
            assertTrue(written.isDone());
            assertAll(out.asByteBuffer(), (int) MiB, 0x5C, "read after the event");
        }
    }

    @Test
    void theLegacyStreamWaitsForBlockingStreamsButNotForNonBlockingOnes() {
        assumeTrue(TestSupport.onHostDriver(), "a gate on the legacy stream's dependencies would also hold other work on a GPU");
        Stream legacy = Stream.legacy(0);
        assertSame(legacy, Stream.legacy(0), "one object per device");
        try (Stream blocking = Stream.create(0); Stream nonBlocking = Stream.builder(0).nonBlocking(true).build()) {
            CountDownLatch held = gate(nonBlocking);
            try {
                CountDownLatch ran = new CountDownLatch(1);
                legacy.launchHostFunction(ran::countDown);
                StreamTestSupport.await(ran, "legacy work while a non-blocking stream is held");
                legacy.synchronize();
            } finally {
                held.countDown();
            }
            CountDownLatch heldBlocking = gate(blocking);
            try {
                legacy.launchHostFunction(() -> { });
                assertFalse(legacy.isDone(), "legacy work waits for earlier work on a blocking stream");
            } finally {
                heldBlocking.countDown();
            }
            legacy.synchronize();
            assertTrue(blocking.isDone());
            nonBlocking.synchronize();
        }
        legacy.close(); // no-op
        legacy.synchronize();
    }

    @Test
    void eventsMeasureTimeAndRefuseWithoutTiming() {
        try (Stream s = Stream.create(0); Event start = Event.create(0); Event end = Event.create(0);
             Event untimed = Event.builder(0).timing(false).build()) {
            start.record(s);
            s.launchHostFunction(() -> { });
            s.record(end);
            end.synchronize();
            assertTrue(end.elapsedMillis(start) >= 0);
            assertFalse(end.elapsedSince(start).isNegative());
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> untimed.elapsedMillis(start));
            assertTrue(e.getMessage().contains("timing disabled"), e.getMessage());
            try (Event recorded = s.recordEvent()) {
                recorded.synchronize();
                assertTrue(recorded.isDone());
                assertNotEquals(0, recorded.handle());
            }
            int[] range = Stream.priorityRange(0);
            assertEquals(2, range.length);
            assertTrue(range[1] <= range[0], "greatest priority is the lower number");
        }
    }

    @Test
    void aHostFunctionExceptionIsThrownByTheNextSynchronize() {
        try (Stream s = Stream.create(0)) {
            CountDownLatch after = new CountDownLatch(1);
            s.launchHostFunction(() -> {
                throw new IllegalStateException("boom in a host function");
            });
            s.launchHostFunction(() -> {
                throw new ArithmeticException("second");
            });
            s.launchHostFunction(after::countDown);
            HostFunctionException e = assertThrows(HostFunctionException.class, s::synchronize);
            assertInstanceOf(IllegalStateException.class, e.getCause());
            assertEquals("boom in a host function", e.getCause().getMessage());
            assertEquals(1, e.getSuppressed().length);
            assertInstanceOf(ArithmeticException.class, e.getSuppressed()[0]);
            assertEquals(0, after.getCount(), "work after the failed host function ran");
            s.synchronize(); // reported once
        }
    }

    /** An independent probe: a failure whose getMessage() throws was lost (the log line was built first). */
    @Test
    void aHostFunctionFailureWhoseMessageThrowsIsStillReported() {
        try (Stream s = Stream.create(0)) {
            RuntimeException odd = new RuntimeException() {
                @Override
                public String getMessage() {
                    throw new IllegalStateException("getMessage bomb");
                }
            };
            s.launchHostFunction(() -> {
                throw odd;
            });
            HostFunctionException e = assertThrows(HostFunctionException.class, s::synchronize);
            assertEquals(odd, e.getCause());
            assertTrue(e.getMessage().contains("its toString() threw java.lang.IllegalStateException"), e.getMessage());
            s.synchronize(); // reported once
        }
    }

    /**
     * The per-thread stream is a different stream on each thread: a thread's synchronize()
     * reports the failures of the host functions it launched, not other threads' (an
     * independent probe: up to 788 of 800 went to the wrong thread or were missed).
     */
    @Test
    void thePerThreadStreamReportsEachThreadsOwnFailures() throws Exception {
        Stream perThread = Stream.perThread(0);
        int threads = 4, rounds = 50;
        java.util.concurrent.atomic.AtomicInteger wrong = new java.util.concurrent.atomic.AtomicInteger();
        java.util.concurrent.atomic.AtomicInteger reported = new java.util.concurrent.atomic.AtomicInteger();
        java.util.List<Thread> started = new java.util.ArrayList<>();
        CountDownLatch go = new CountDownLatch(1);
        for (int t = 0; t < threads; t++) {
            String mine = "thread " + t;
            Thread th = new Thread(() -> {
                try {
                    go.await();
                    for (int i = 0; i < rounds; i++) {
                        perThread.launchHostFunction(() -> {
                            throw new IllegalStateException(mine);
                        });
                        try {
                            perThread.synchronize();
                            wrong.incrementAndGet(); // its own failure not reported
                        } catch (HostFunctionException e) {
                            reported.incrementAndGet();
                            if (!mine.equals(e.getCause().getMessage()) || e.getSuppressed().length != 0) {
                                wrong.incrementAndGet();
                            }
                        }
                    }
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }, "per-thread-failures-" + t);
            started.add(th);
            th.start();
        }
        go.countDown();
        for (Thread th : started) th.join(60_000);
        assertEquals(threads * rounds, reported.get(), "each failure reported once");
        assertEquals(0, wrong.get(), "reported to another thread, or not to its own");
    }

    @Test
    void aHostFunctionMayNotWaitForItsStream() {
        try (Stream s = Stream.create(0)) {
            s.launchHostFunction(s::synchronize);
            HostFunctionException e = assertThrows(HostFunctionException.class, s::synchronize);
            assertInstanceOf(IllegalStateException.class, e.getCause());
            assertTrue(e.getCause().getMessage().contains("called from a host function"), e.getCause().getMessage());
        }
    }

    @Test
    void hostFunctionsRunInStreamOrderBetweenTheWorkAroundThem() {
        // What cuLaunchHostFunc promises: a host function runs after the work queued before it,
        // and the work queued after it waits until it returns. (Not promised, so not tested:
        // that host functions of two streams run at the same time; cuda.h says they may be
        // serialized.)
        try (Stream s = Stream.builder(0).nonBlocking(true).build();
             VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer b = r.allocate(TestSupport.MiB);
             PinnedHostBuffer p = PinnedHostBuffer.allocate(64)) {
            b.fill(0, 64, (byte) 7);
            List<String> order = java.util.Collections.synchronizedList(new ArrayList<>());
            int[] seen = new int[1];
            b.copyToAsync(0, p, 0, 64, s);
            s.launchHostFunction(() -> {
                order.add("first");
                seen[0] = p.asByteBuffer().get(0);      // the copy before it completed
                p.asByteBuffer().put(0, (byte) 9);      // host memory only: no CUDA call
            });
            s.launchHostFunction(() -> order.add("second"));
            b.copyFromAsync(0, p, 0, 64, s);             // must read the host function's write
            s.synchronize();
            assertEquals(List.of("first", "second"), order, "host functions in stream order");
            assertEquals(7, seen[0], "the host function saw the copy queued before it");
            byte[] back = new byte[1];
            b.copyTo(0, back, 0, 1);
            assertEquals(9, back[0], "the copy queued after the host function waited for it");
        }
    }

    @Test
    void closedStreamsAndEventsThrowAndNeverReachNativeCode() {
        Stream s = Stream.create(0);
        Event e = Event.create(0);
        CountDownLatch g = gate(s);
        CountDownLatch ran = new CountDownLatch(1);
        s.launchHostFunction(ran::countDown);
        s.close(); // work queued: the driver completes it
        s.close(); // idempotent
        g.countDown();
        StreamTestSupport.await(ran, "work queued before close");
        e.close();
        e.close();
        try (Stream other = Stream.create(0); VirtualMemoryBuffer b = resource.allocate(MiB);
             PinnedHostBuffer p = PinnedHostBuffer.allocate(16); Event fresh = Event.create(0)) {
            assertClosed(s::synchronize);
            assertClosed(s::isDone);
            assertClosed(s::handle);
            assertClosed(s::recordEvent);
            assertClosed(() -> s.launchHostFunction(() -> { }));
            assertClosed(() -> s.waitFor(fresh));
            assertClosed(() -> b.fillAsync(0, 16, (byte) 1, s));
            assertClosed(() -> b.copyFromAsync(0, p, 0, 16, s));
            assertClosed(() -> b.copyFromAsync(0, new byte[16], 0, 16, s));
            assertClosed(() -> b.recordUse(s));
            assertClosed(() -> b.close(s));
            assertFalse(b.isClosed(), "a refused close(stream) leaves the buffer open");
            assertClosed(e::synchronize);
            assertClosed(e::isDone);
            assertClosed(e::handle);
            assertClosed(() -> e.record(other));
            assertClosed(() -> other.waitFor(e));
            assertClosed(() -> other.record(e));
            p.close();
            assertClosed(() -> b.copyToAsync(0, p, 0, 16, other));
            assertClosed(p::asByteBuffer);
            other.synchronize();
        }
    }

    @Test
    void argumentsAreCheckedWithMessages() {
        try (Stream s = Stream.create(0); VirtualMemoryBuffer b = resource.allocate(MiB);
             PinnedHostBuffer p = PinnedHostBuffer.allocate(64); Event e = Event.create(0)) {
            IndexOutOfBoundsException w = assertThrows(IndexOutOfBoundsException.class,
                    () -> b.copyFromAsync(0, p, 32, 64, s));
            assertTrue(w.getMessage().startsWith("src: offset 32, length 64"), w.getMessage());
            assertThrows(IndexOutOfBoundsException.class, () -> b.fillAsync(MiB - 1, 2, (byte) 0, s));
            assertThrows(NullPointerException.class, () -> b.fillAsync(0, 1, (byte) 0, null));
            IllegalArgumentException d = assertThrows(IllegalArgumentException.class, () -> Stream.create(99));
            assertTrue(d.getMessage().startsWith("device: 99"), d.getMessage());
            IllegalArgumentException size = assertThrows(IllegalArgumentException.class, () -> PinnedHostBuffer.allocate(0));
            assertTrue(size.getMessage().startsWith("size: 0"), size.getMessage());
            IllegalArgumentException heap = assertThrows(IllegalArgumentException.class,
                    () -> PinnedHostBuffer.register(ByteBuffer.allocate(16)));
            assertTrue(heap.getMessage().contains("direct"), heap.getMessage());
            if (Driver.get().deviceCount() > 1) {
                try (Stream s1 = Stream.create(1)) {
                    IllegalArgumentException other = assertThrows(IllegalArgumentException.class, () -> e.record(s1));
                    assertTrue(other.getMessage().contains("a stream of device 0"), other.getMessage());
                }
            }
        }
    }

    @Test
    void registeredHostMemoryIsCopiedAsynchronouslyAndStaysTheCallers() {
        ByteBuffer direct = ByteBuffer.allocateDirect((int) MiB);
        byte[] data = TestData.pattern((int) MiB, 3);
        direct.put(data).flip();
        try (Stream s = Stream.create(0); VirtualMemoryBuffer b = resource.allocate(MiB)) {
            PinnedHostBuffer p = PinnedHostBuffer.register(direct);
            assertTrue(p.isRegistered());
            assertEquals(MiB, p.size());
            b.copyFromAsync(0, p, 0, MiB, s);
            p.close(); // waits for the copy before unregistering
            s.synchronize();
            byte[] back = new byte[data.length];
            b.copyTo(0, back, 0, back.length);
            assertArrayEquals(data, back);
            assertEquals(data[5], direct.get(5), "the caller's buffer is untouched and still usable");
        }
    }

    @Test
    void thePerThreadStreamIsEachThreadsOwn() throws Exception {
        Stream perThread = Stream.perThread(0);
        assertSame(perThread, Stream.perThread(0));
        try (VirtualMemoryBuffer b = resource.allocate(MiB); PinnedHostBuffer p = PinnedHostBuffer.allocate(MiB)) {
            b.fillAsync(0, MiB, (byte) 9, perThread);
            Thread t = new Thread(() -> b.fillAsync(0, 16, (byte) 9, perThread));
            t.start();
            t.join();
            b.copyToAsync(0, p, 0, MiB, perThread);
            perThread.synchronize();
            assertAll(p.asByteBuffer(), (int) MiB, 9, "filled on the per-thread streams");
        }
    }

    private static void assertClosed(org.junit.jupiter.api.function.Executable call) {
        IllegalStateException e = assertThrows(IllegalStateException.class, call);
        assertTrue(e.getMessage().contains("closed"), e.getMessage());
    }
}
