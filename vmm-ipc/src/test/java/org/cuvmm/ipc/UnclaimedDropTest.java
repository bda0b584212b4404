package org.cuvmm.ipc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;

import org.cuvmm.BufferDescriptor;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * A DROP read before its attach() registered the attachment is parked until that attach
 * claims it; the parked DROPs are bounded, the oldest evicted first. The bound used to be kept
 * by clearing every parked DROP once there were more than 10,000, which also threw away the
 * newest one: after that many DROPs for leases the client no longer (or never) held, an
 * in-flight attach's DROP was lost, its attachment never marked dropped and no listener told
 * (this test failed so before the fix). The last check fails on a set left unbounded.
 */
class UnclaimedDropTest extends FakeServerSupport {
    private static final long LEASE = 1_000_000;
    /** A DROP for a lease never granted, sent right after LEASE's: its dispatch means LEASE's DROP was handled. */
    private static final long SENTINEL = LEASE + 1;

    @AfterEach
    void clearSeam() {
        SharingClient.beforeRegisterForTest = null;
    }

    @Test
    void anInFlightAttachsDropSurvivesTheStaleDropsParkedBeforeIt() throws Exception {
        CompletableFuture<Void> server = fake(2, (s, v) -> {
            Frame attach = next(s, v, FrameType.ATTACH);
            // Leases this client never held: each DROP is parked and never claimed. Exactly the
            // bound, so the in-flight attach's DROP is the one that goes over it.
            for (long stale = 1; stale <= SharingClient.MAX_UNCLAIMED_DROPS; stale++) {
                FrameIO.write(s, new Messages.Drop(stale, "stale"), 0, null, v);
            }
            try (BufferDescriptor d = real.exportDescriptor()) {
                s.send(raw(2, FrameType.DESCRIPTOR, attach.requestId, v2desc(LEASE, 2 * G, new long[] {2 * G},
                        new long[] {1}, new int[] {Protocol.CHUNK_FLAG_FD})), d.fds());
            }
            FrameIO.write(s, new Messages.Drop(LEASE, "x"), 0, null, v);
            FrameIO.write(s, new Messages.Drop(SENTINEL, "sentinel"), 0, null, v);
        });
        try (SharingClient c = client(2)) {
            // Frames are dispatched one at a time in the order read: the sentinel's dispatch
            // starting means LEASE's DROP has been handled (parked, as its attach has not
            // registered yet).
            CountDownLatch dropHandled = new CountDownLatch(1);
            c.dispatchHook = f -> {
                if (f.message instanceof Messages.Drop d && d.leaseId() == SENTINEL) dropHandled.countDown();
            };
            CompletableFuture<DropNotice> heard = new CompletableFuture<>();
            c.addDropListener(n -> {
                if (n.leaseId() == LEASE) heard.complete(n);
            });
            Thread attacher = Thread.currentThread();
            AtomicBoolean droppedFirst = new AtomicBoolean();
            SharingClient.beforeRegisterForTest = () -> {
                if (Thread.currentThread() != attacher) return;
                try {
                    // A bound on a wait for an event, not a timing assumption: false fails below.
                    droppedFirst.set(dropHandled.await(30, TimeUnit.SECONDS));
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            };
            try (Attachment a = c.attach("x", resource)) {
                assertTrue(droppedFirst.get(), "the DROP was dispatched while the attach had not registered");
                assertEquals(LEASE, a.leaseId());
                assertTrue(a.isDropped(), "the attach claimed its parked DROP (the old bound cleared it with the "
                        + SharingClient.MAX_UNCLAIMED_DROPS + " stale ones)");
                DropNotice n = heard.get(10, TimeUnit.SECONDS);
                assertSame(a, n.attachment(), "the notice names the attachment");
                assertEquals("x", n.name());
                assertTrue(c.unclaimedDropCount() <= SharingClient.MAX_UNCLAIMED_DROPS,
                        "parked DROPs stay within the bound: " + c.unclaimedDropCount());
            }
        }
        server.get(30, TimeUnit.SECONDS);
    }
}
