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
                CountDownLatch gate = new CountDownLatch(1);
                s.launchHostFunction(() -> {
                    try {
                        gate.await(60, TimeUnit.SECONDS);
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                    }
                });
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

    @Test
    void aLeakedRegisteredBufferIsReleasedAfterItsQueuedCopy() throws Exception {
        ChildJvm.Result r = TestSupport.runChild(Child.class, List.of(), Map.of());
        assertEquals(0, r.exitCode(), r.toString());
        assertTrue(r.output().contains("SURVIVED"), r.toString());
        assertTrue(r.output().contains("LEAK: PinnedHostBuffer["), "the leak is reported:\n" + r);
    }
}
