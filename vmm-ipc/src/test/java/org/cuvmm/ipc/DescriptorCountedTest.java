package org.cuvmm.ipc;

import static org.cuvmm.ipc.IpcTestSupport.frame;
import static org.cuvmm.ipc.IpcTestSupport.str;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * {@link SharingServer#totalLeaseCount()} counts "leases granted (their DESCRIPTOR queued)"
 * and {@link SharingStats#fdsSent()} "fds this server has queued in DESCRIPTORs": neither
 * may lag behind a DESCRIPTOR a writer is already sending.
 */
@Timeout(60)
class DescriptorCountedTest {
    @AfterEach
    void tearDown() {
        SharingServer.afterDescriptorQueued = null;
        SendQueue.beforeSend = (q, i) -> {};
        SendQueue.directWrites = true;
    }

    /**
     * Two pipelined ATTACHes. The sender thread holds the first DESCRIPTOR until the second is
     * queued, so it is still looping and takes the second at once, while the reader is right
     * after the queueing (the seam waits there until the sender has taken it). The old code
     * counted the lease and its fds only after that point, so the sender was about to send a
     * DESCRIPTOR that totalLeaseCount() and fdsSent() did not count yet (1 read, 2 expected);
     * now they are counted with the queueing, under the queue's lock.
     */
    @Test
    void aDescriptorBeingSentIsCounted() throws Exception {
        Path sock = IpcTestSupport.socketPath();
        CountDownLatch firstMaySend = new CountDownLatch(1);
        CountDownLatch secondTaken = new CountDownLatch(1);
        AtomicInteger queued = new AtomicInteger();
        AtomicInteger taken = new AtomicInteger();
        AtomicInteger leasesAtSecond = new AtomicInteger(-1);
        AtomicLong fdsAtSecond = new AtomicLong(-1);
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer buf = r.allocate(r.granularity());
             SharingServer server = SharingServer.builder(sock).build()) {
            server.publish("b", buf);
            SendQueue.directWrites = false; // every frame through the sender thread
            SendQueue.beforeSend = (q, item) -> {
                if (item.fds() == null) return;
                if (taken.incrementAndGet() == 1) {
                    await(firstMaySend);
                } else {
                    leasesAtSecond.set(server.totalLeaseCount());
                    fdsAtSecond.set(server.stats().fdsSent());
                    secondTaken.countDown();
                }
            };
            SharingServer.afterDescriptorQueued = () -> {
                if (queued.incrementAndGet() != 2) return;
                firstMaySend.countDown();
                await(secondTaken);
            };
            try (FdSocket s = FdSocket.connect(sock)) {
                s.send(frame(1, 1, str("counted")), null);
                s.send(frame(3, 2, str("b")), null);
                s.send(frame(3, 3, str("b")), null);
                for (FrameType expected : new FrameType[] {FrameType.HELLO_OK, FrameType.DESCRIPTOR, FrameType.DESCRIPTOR}) {
                    try (Frame f = FrameIO.read(s)) {
                        assertSame(expected, f.type, "got " + f);
                    }
                }
                assertTrue(secondTaken.getCount() == 0, "the sender thread took the second DESCRIPTOR");
                assertEquals(2, leasesAtSecond.get(), "totalLeaseCount() while the second DESCRIPTOR was being sent");
                assertEquals(2, fdsAtSecond.get(), "stats().fdsSent() while the second DESCRIPTOR was being sent");
            }
        } finally {
            IpcTestSupport.deleteTree(sock.getParent());
        }
    }

    /** Waits 10 s at most: a bound, not an assertion (the test's own checks say what went wrong). */
    private static void await(CountDownLatch l) {
        try {
            l.await(10, TimeUnit.SECONDS);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
