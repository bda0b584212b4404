package org.cuvmm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.cuvmm.testing.ChildJvm;
import org.junit.jupiter.api.Test;

/**
 * A {@link PinnedHostBuffer} dropped without close while an asynchronous copy into it is still
 * queued: the cleaner reports the leak and waits for the copy before it unregisters, and the
 * caller's direct ByteBuffer stays reachable until then. Before, nothing waited: the JDK freed
 * the ByteBuffer's memory and the queued copy wrote into unmapped memory, a SIGSEGV on a driver
 * thread that killed the JVM (an independent probe). Runs in a child JVM, since the failure is
 * a crash.
 */
class PinnedLeakTest {
    static final int SIZE = 8 << 20;

    /** Child: queues a copy into a leaked registered buffer behind a held stream, collects, opens the stream. */
    public static final class Child {
        public static void main(String[] args) throws Exception {
            try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
                 VirtualMemoryBuffer b = r.allocate(SIZE);
                 Stream s = Stream.create(0)) {
                b.fill((byte) 0x42);
                CountDownLatch gate = hold(s);
                queueCopyIntoALeakedRegisteredBuffer(b, s);
                // Long enough for the collector to find both the PinnedHostBuffer and the
                // ByteBuffer unreachable and for the JDK to free the ByteBuffer's memory.
                for (int i = 0; i < 20; i++) {
                    System.gc();
                    Thread.sleep(25);
                }
                gate.countDown();
                s.synchronize();
            }
            System.out.println("SURVIVED");
        }

        private static void queueCopyIntoALeakedRegisteredBuffer(VirtualMemoryBuffer b, Stream s) {
            ByteBuffer caller = ByteBuffer.allocateDirect(SIZE);
            PinnedHostBuffer pinned = PinnedHostBuffer.register(caller);
            b.copyToAsync(0, pinned, 0, SIZE, s);
        }
    }

    /** Holds {@code s} (a host function) until the latch is counted down (60 s at most). */
    static CountDownLatch hold(Stream s) {
        CountDownLatch gate = new CountDownLatch(1);
        s.launchHostFunction(() -> {
            try {
                gate.await(60, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        });
        return gate;
    }

    /**
     * Child: a pinned buffer (registered, or allocated with {@code -Dpinned.allocate}) with a
     * copy queued behind a held stream is closed from a host function on another stream (the
     * release goes to cuvmm's release thread, which waits for the copy) and dropped. Prints
     * whether the teardown ran before the copy could (it must not: the release thread's task
     * keeps the buffer reachable; a reviewer's test found the cleaner running it at once).
     */
    public static final class HostFunctionCloseChild {
        public static void main(String[] args) throws Exception {
            try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
                 VirtualMemoryBuffer b = r.allocate(SIZE);
                 Stream s = Stream.create(0);
                 Stream closer = Stream.create(0)) {
                b.fill((byte) 0x42);
                CountDownLatch gate = hold(s);
                queueCopyThenCloseInAHostFunction(b, s, closer);
                closer.synchronize();
                for (int i = 0; i < 20; i++) {
                    System.gc();
                    Thread.sleep(25);
                }
                String early = "none";
                for (Map.Entry<Thread, StackTraceElement[]> e : Thread.getAllStackTraces().entrySet()) {
                    for (StackTraceElement f : e.getValue()) {
                        if (f.getClassName().endsWith("PinnedHostBuffer$Teardown")) early = e.getKey().getName();
                    }
                }
                System.out.println("TEARDOWN_BEFORE_COPY_RAN_ON=" + early);
                gate.countDown();
                s.synchronize();
            }
            System.out.println("SURVIVED");
        }

        private static void queueCopyThenCloseInAHostFunction(VirtualMemoryBuffer b, Stream s, Stream closer) {
            PinnedHostBuffer pinned = System.getProperty("pinned.allocate") != null ? PinnedHostBuffer.allocate(SIZE)
                    : PinnedHostBuffer.register(ByteBuffer.allocateDirect(SIZE));
            b.copyToAsync(0, pinned, 0, SIZE, s);
            closer.launchHostFunction(pinned::close);
        }
    }

    @Test
    void aRegisteredBufferClosedInAHostFunctionIsReleasedAfterItsQueuedCopy() throws Exception {
        ChildJvm.Result r = TestSupport.runChild(HostFunctionCloseChild.class, List.of(), Map.of());
        assertEquals(0, r.exitCode(), r.toString());
        assertTrue(r.output().contains("TEARDOWN_BEFORE_COPY_RAN_ON=none\n"), r.toString());
        assertTrue(r.output().contains("SURVIVED"), r.toString());
    }

    @Test
    void anAllocatedBufferClosedInAHostFunctionIsFreedAfterItsQueuedCopy() throws Exception {
        ChildJvm.Result r = TestSupport.runChild(HostFunctionCloseChild.class, List.of("-Dpinned.allocate=1"), Map.of());
        assertEquals(0, r.exitCode(), r.toString());
        assertTrue(r.output().contains("TEARDOWN_BEFORE_COPY_RAN_ON=none\n"), r.toString());
        assertTrue(r.output().contains("SURVIVED"), r.toString());
    }

    @Test
    void aLeakedRegisteredBufferIsReleasedAfterItsQueuedCopy() throws Exception {
        ChildJvm.Result r = TestSupport.runChild(Child.class, List.of(), Map.of());
        assertEquals(0, r.exitCode(), r.toString());
        assertTrue(r.output().contains("SURVIVED"), r.toString());
        assertTrue(r.output().contains("LEAK: PinnedHostBuffer["), "the leak is reported:\n" + r);
    }
}
