package org.cuvmm;

import static org.cuvmm.BufferContractTest.assertNames;
import static org.cuvmm.TestSupport.MiB;
import static org.junit.jupiter.api.Assertions.*;

import java.nio.ByteBuffer;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicReference;

import org.cuvmm.testing.LiveObjects;
import org.junit.jupiter.api.Test;

/** Probe: Stream, Event, PinnedHostBuffer and the async operations. */
class StreamContractTest {
    @Test
    void deviceArgumentsAreChecked() {
        assertNames(assertThrows(IllegalArgumentException.class, () -> Stream.create(-1)), "device", "-1");
        assertNames(assertThrows(IllegalArgumentException.class, () -> Stream.builder(2)), "device", "2");
        assertNames(assertThrows(IllegalArgumentException.class, () -> Stream.legacy(99)), "device", "99");
        assertNames(assertThrows(IllegalArgumentException.class, () -> Stream.perThread(Integer.MIN_VALUE)), "device");
        assertNames(assertThrows(IllegalArgumentException.class, () -> Stream.priorityRange(7)), "device", "7");
        assertNames(assertThrows(IllegalArgumentException.class, () -> Event.create(5)), "device", "5");
        assertNames(assertThrows(IllegalArgumentException.class, () -> Event.builder(-3)), "device", "-3");
    }

    @Test
    void streamLifecycle() {
        Stream s = Stream.builder(0).nonBlocking(true).priority(-100).build();
        assertTrue(s.isNonBlocking());
        assertEquals(-100, s.priority());
        assertFalse(s.isDefault());
        s.synchronize();
        assertTrue(s.isDone());
        s.close();
        s.close();
        assertTrue(s.isClosed());
        try (Event e = Event.create(0)) {
            org.junit.jupiter.api.function.Executable[] uses = {s::handle, s::synchronize, s::isDone, () -> s.record(e),
                s::recordEvent, () -> s.waitFor(e), () -> s.launchHostFunction(() -> { }), () -> e.record(s)};
            for (int i = 0; i < uses.length; i++) {
                Throwable t = assertThrows(Throwable.class, uses[i], "use #" + i);
                assertTrue(t instanceof IllegalStateException, "use #" + i + ": " + t);
                assertNames(t, "closed");
            }
        }
        Stream legacy = Stream.legacy(0);
        assertSame(legacy, Stream.legacy(0));
        legacy.close();
        assertFalse(legacy.isClosed());
        assertEquals(1, legacy.handle());
        assertEquals(2, Stream.perThread(0).handle());
        assertNames(assertThrows(NullPointerException.class, () -> legacy.record(null)), "event");
        assertNames(assertThrows(NullPointerException.class, () -> legacy.waitFor(null)), "event");
        assertNames(assertThrows(NullPointerException.class, () -> legacy.launchHostFunction(null)), "action");
    }

    @Test
    void eventContract() {
        try (Stream s0 = Stream.create(0); Stream s1 = Stream.create(1); Event e = Event.builder(0).timing(false).build();
             Event t1 = Event.builder(0).timing(true).build(); Event t2 = Event.builder(0).timing(true).build()) {
            assertTrue(e.isDone(), "never recorded: done");
            e.synchronize();
            assertNames(assertThrows(IllegalArgumentException.class, () -> e.record(s1)), "stream");
            assertNames(assertThrows(NullPointerException.class, () -> e.record(null)), "stream");
            assertNames(assertThrows(IllegalArgumentException.class, () -> e.elapsedMillis(t1)), "timing");
            assertNames(assertThrows(IllegalArgumentException.class, () -> t1.elapsedMillis(e)), "timing");
            assertNames(assertThrows(NullPointerException.class, () -> t1.elapsedMillis(null)), "start");
            assertThrows(CudaException.class, () -> t2.elapsedMillis(t1), "never recorded");
            t1.record(s0);
            t2.record(s0);
            t2.synchronize();
            assertTrue(t2.elapsedMillis(t1) >= 0);
            assertFalse(t2.elapsedSince(t1).isNegative());
            s1.waitFor(e); // cross-device wait is allowed
            Event r0 = s0.recordEvent();
            assertFalse(r0.hasTiming());
            r0.close();
            Event r = Event.create(0);
            r.close();
            r.close();
            assertThrows(IllegalStateException.class, r::handle);
            assertThrows(IllegalStateException.class, r::isDone);
            assertThrows(IllegalStateException.class, () -> t1.elapsedMillis(r));
            assertThrows(IllegalStateException.class, () -> s0.waitFor(r));
        }
    }

    @Test
    void pinnedContract() throws Exception {
        assertNames(assertThrows(IllegalArgumentException.class, () -> PinnedHostBuffer.allocate(0)), "size", "0");
        assertNames(assertThrows(IllegalArgumentException.class, () -> PinnedHostBuffer.allocate(-5)), "size", "-5");
        assertNames(assertThrows(NullPointerException.class, () -> PinnedHostBuffer.register(null)), "buffer");
        assertNames(assertThrows(IllegalArgumentException.class, () -> PinnedHostBuffer.register(ByteBuffer.allocate(10))), "buffer");
        assertNames(assertThrows(IllegalArgumentException.class, () -> PinnedHostBuffer.register(ByteBuffer.allocateDirect(0))), "buffer");
        PinnedHostBuffer p = PinnedHostBuffer.allocate(4096);
        assertFalse(p.isRegistered());
        ByteBuffer v = p.asByteBuffer();
        assertEquals(0, v.position());
        assertEquals(4096, v.capacity());
        v.put(4095, (byte) 8);
        p.close();
        p.close();
        assertTrue(p.isClosed());
        assertEquals(8, v.get(4095), "a view keeps allocated memory valid after close");
        assertThrows(IllegalStateException.class, p::address);
        assertThrows(IllegalStateException.class, p::asByteBuffer);
        assertEquals(4096, p.size());
        ByteBuffer mine = ByteBuffer.allocateDirect(8192);
        mine.position(100);
        PinnedHostBuffer reg = PinnedHostBuffer.register(mine);
        assertTrue(reg.isRegistered());
        assertEquals(8092, reg.size());
        ByteBuffer rv = reg.asByteBuffer();
        assertEquals(0, rv.position());
        assertEquals(8092, rv.capacity());
        CudaException twice = assertThrows(CudaException.class, () -> PinnedHostBuffer.register(mine));
        assertNotNull(twice.resultName());
        reg.close();
        mine.put(0, (byte) 1); // still the caller's
        PinnedHostBuffer again = PinnedHostBuffer.register(mine);
        again.close();
    }

    @Test
    void asyncWindowsAndArgumentsAreChecked() throws Exception {
        Map<String, Long> before = LiveObjects.now();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer b = r.allocate(MiB);
             VirtualMemoryBuffer c = r.allocate(MiB); PinnedHostBuffer p = PinnedHostBuffer.allocate(4096);
             Stream s = Stream.create(0)) {
            assertThrows(IndexOutOfBoundsException.class, () -> b.copyFromAsync(0, p, 0, 4097, s));
            assertThrows(IndexOutOfBoundsException.class, () -> b.copyFromAsync(0, p, Long.MAX_VALUE, 2, s));
            assertThrows(IndexOutOfBoundsException.class, () -> b.copyToAsync(MiB, p, 0, 1, s));
            assertThrows(IndexOutOfBoundsException.class, () -> b.copyToAsync(0, p, -1, 1, s));
            assertThrows(IndexOutOfBoundsException.class, () -> b.copyFromAsync(0, c, 1, MiB, s));
            assertThrows(IndexOutOfBoundsException.class, () -> b.copyFromAsync(0, new byte[3], 1, 3, s));
            assertThrows(IndexOutOfBoundsException.class, () -> b.fillAsync(Long.MAX_VALUE, 1, (byte) 0, s));
            assertNames(assertThrows(NullPointerException.class, () -> b.copyFromAsync(0, (PinnedHostBuffer) null, 0, 1, s)), "src");
            assertNames(assertThrows(NullPointerException.class, () -> b.copyToAsync(0, null, 0, 1, s)), "dst");
            assertNames(assertThrows(NullPointerException.class, () -> b.copyFromAsync(0, (VirtualMemoryBuffer) null, 0, 1, s)), "src");
            assertNames(assertThrows(NullPointerException.class, () -> b.copyFromAsync(0, (byte[]) null, 0, 1, s)), "src");
            assertNames(assertThrows(NullPointerException.class, () -> b.fillAsync(0, 1, (byte) 0, null)), "stream");
            assertNames(assertThrows(NullPointerException.class, () -> b.withAddress(null, a -> { })), "stream");
            assertNames(assertThrows(NullPointerException.class, () -> b.withAddress(s, null)), "action");
            // overlap within one allocation is refused, apart is fine
            assertNames(assertThrows(IllegalArgumentException.class, () -> b.copyFromAsync(0, b, 10, 20, s)), "share memory");
            assertNames(assertThrows(IllegalArgumentException.class, () -> b.copyFrom(0, b, 10, 20)), "share memory");
            VirtualMemoryBuffer alias = r.modifyAllocation(b, MiB);
            assertNames(assertThrows(IllegalArgumentException.class, () -> b.copyFrom(0, alias, 0, 1)), "share memory");
            b.copyFrom(0, alias, 100, 100);
            alias.close();
            // closed pinned/stream named as arguments
            PinnedHostBuffer closedP = PinnedHostBuffer.allocate(16);
            closedP.close();
            assertNames(assertThrows(IllegalStateException.class, () -> b.copyFromAsync(0, closedP, 0, 1, s)), "src");
            assertNames(assertThrows(IllegalStateException.class, () -> b.copyToAsync(0, closedP, 0, 1, s)), "dst");
            Stream closedS = Stream.create(0);
            closedS.close();
            assertNames(assertThrows(IllegalStateException.class, () -> b.fillAsync(0, 1, (byte) 0, closedS)), "stream");
            assertNames(assertThrows(IllegalStateException.class, () -> b.close(closedS)), "stream");
            assertFalse(b.isClosed(), "close(closed stream) released nothing");
            // round trip
            p.asByteBuffer().put(0, (byte) 42);
            b.copyFromAsync(0, p, 0, 1, s);
            b.copyToAsync(0, p, 1, 1, s);
            s.synchronize();
            byte[] x = new byte[2];
            b.copyTo(x);
            assertEquals(42, x[0]);
            assertEquals(42, p.asByteBuffer().get(1));
        }
        LiveObjects.assertBack(before, "after async probes");
    }

    @Test
    void crossDeviceStreamWithoutAccessIsRefusedNotCrashing() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer b = r.allocate(MiB);
             PinnedHostBuffer p = PinnedHostBuffer.allocate(4096); Stream s1 = Stream.create(1)) {
            assertThrows(CudaException.class, () -> b.copyFromAsync(0, p, 0, 1, s1));
            assertThrows(CudaException.class, () -> b.fillAsync(0, 1, (byte) 0, s1));
            b.close(); // still closes fine
        }
    }

    @Test
    void hostFunctionRefusalsAndCloseInside() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); Stream s = Stream.create(0)) {
            VirtualMemoryBuffer b = r.allocate(MiB);
            AtomicReference<Throwable> seen = new AtomicReference<>();
            CountDownLatch done = new CountDownLatch(1);
            s.launchHostFunction(() -> {
                try {
                    try {
                        s.synchronize();
                        seen.set(new AssertionError("synchronize inside a host function returned"));
                    } catch (IllegalStateException expected) { }
                    try {
                        b.fillAsync(0, 1, (byte) 1, s);
                        seen.set(new AssertionError("fillAsync inside a host function returned"));
                    } catch (IllegalStateException expected) { }
                    try {
                        b.close(s);
                        seen.set(new AssertionError("close(stream) inside a host function returned"));
                    } catch (IllegalStateException expected) { }
                    b.close(); // allowed: handed to the reaper
                } catch (Throwable t) {
                    seen.set(t);
                } finally {
                    done.countDown();
                }
            });
            s.synchronize();
            assertTrue(done.await(10, java.util.concurrent.TimeUnit.SECONDS));
            if (seen.get() != null) throw new AssertionError(seen.get());
            assertTrue(b.isClosed());
            // a throwing host function surfaces at synchronize, once
            s.launchHostFunction(() -> { throw new ArithmeticException("boom"); });
            HostFunctionException e = assertThrows(HostFunctionException.class, s::synchronize);
            assertTrue(e.getCause() instanceof ArithmeticException);
            s.synchronize();
        }
    }
}
