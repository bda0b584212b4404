package org.cuvmm.ipc;

import static org.cuvmm.ipc.IpcTestSupport.descriptorPayload;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.time.Duration;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.cuvmm.BufferDescriptor;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * Independent probe: the client's failure paths held to the javadoc of {@link SharingClient}
 * and {@link Attachment} (exception types, what a failure leaves behind), with the fake server
 * of FakeServerSupport (each case also checks that no fd, mapping or client thread is left).
 */
class ClientFailurePathsProbeTest extends FakeServerSupport {

    @AfterEach
    void clearSeams() {
        SharingClient.beforeRegisterForTest = null;
    }

    /**
     * Attachment.close(): "If the connection has ended, the server already freed the lease and
     * only the buffer is closed." A connection the client ended over the server's bad frame
     * records a SharingException as its failure (the server's fault, with its code); the
     * RELEASE of an attachment closed afterwards failed with a copy of it, which close() took
     * for the server's refusal of the release and threw IllegalStateException (and so did
     * SharingClient.close(), which closes the open attachments).
     */
    @Test
    void closingAnAttachmentAfterTheClientRejectedABadFrameDoesNotThrow() throws Exception {
        CountDownLatch attached = new CountDownLatch(1);
        CompletableFuture<Void> f = fake(1, grantThenBadFrame(700, attached));
        SharingClient c = client(1);
        try {
            Attachment a = c.attach("x", resource);
            attached.countDown();
            IpcTestSupport.await("the client ends the connection over the bad frame", 10, () -> !c.isConnected());
            assertEquals(0, c.pendingReleases(), "the connection's end freed the lease");
            a.close(); // threw IllegalStateException ("release of 'x' lease 700: the server sent a bad frame ...")
            assertTrue(a.isClosed());
            assertTrue(c.attachments().isEmpty(), c.attachments().toString());
        } finally {
            c.close();
        }
        f.get(10, TimeUnit.SECONDS);
    }

    /**
     * A fake server that grants one ATTACH (lease {@code lease}), waits for the test to say it
     * holds the attachment, then sends a frame with a bad magic: fatal, the client ends the
     * connection.
     */
    private Script grantThenBadFrame(long lease, CountDownLatch attached) {
        return (s, v) -> {
            Frame a = next(s, v, FrameType.ATTACH);
            try (BufferDescriptor d = real.exportDescriptor()) {
                s.send(raw(1, FrameType.DESCRIPTOR, a.requestId, descriptorPayload(lease, 1, 2 * G, 2 * G)), d.fds());
            }
            assertTrue(attached.await(10, TimeUnit.SECONDS), "the test never attached");
            byte[] bad = raw(1, FrameType.DROP, 0, new byte[10]);
            bad[0] ^= 0x55;
            s.send(bad, null);
        };
    }

    /** As above, through SharingClient.close(), which closes the attachment left open. */
    @Test
    void closingTheClientAfterItRejectedABadFrameDoesNotThrow() throws Exception {
        CountDownLatch attached = new CountDownLatch(1);
        CompletableFuture<Void> f = fake(1, grantThenBadFrame(701, attached));
        SharingClient c = client(1);
        Attachment a = c.attach("x", resource);
        attached.countDown();
        IpcTestSupport.await("the client ends the connection over the bad frame", 10, () -> !c.isConnected());
        try {
            c.close(); // threw IllegalStateException, documented only for a buffer in use on another thread
        } finally {
            a.close(); // idempotent
        }
        assertTrue(a.isClosed());
        f.get(10, TimeUnit.SECONDS);
    }

    /**
     * attach() racing close(): "such an attach closes what it made and throws" an IOException
     * (attach's javadoc: IOException when the connection failed or the server did not answer
     * in time). The close of what it made waits for the RELEASED; when the server did not
     * answer it in time, the UncheckedIOException of Attachment.close() escaped attach instead.
     * Two attaches are caught between their DESCRIPTOR and their registration (the seam) while
     * close() runs; the second is held there until the first has failed, so its lease keeps
     * the draining connection open while the first's RELEASE goes unanswered.
     */
    @Test
    void anAttachRacingCloseThrowsIOExceptionWhenItsReleaseTimesOut() throws Exception {
        CompletableFuture<Void> f = fake(1, (s, v) -> {
            for (int i = 0; i < 2; i++) {
                Frame a = next(s, v, FrameType.ATTACH);
                String name = ((Messages.Attach) a.message).name();
                try (BufferDescriptor d = real.exportDescriptor()) {
                    s.send(raw(1, FrameType.DESCRIPTOR, a.requestId, descriptorPayload(800 + name.length(), 1, 2 * G,
                            2 * G)), d.fds());
                }
            }
            // The RELEASE of lease 801 ("x") is never answered; that of 802 ("yy") is.
            for (Frame r; (r = FrameIO.read(s)) != null;) {
                r.close();
                seen.add(r);
                if (r.message instanceof Messages.Release rel && rel.leaseId() == 802) {
                    FrameIO.write(s, new Messages.Released(802), r.requestId, null, v);
                }
            }
        });
        SharingClient c = client(1);
        try {
            CountDownLatch bothRead = new CountDownLatch(2);
            CountDownLatch closeCalled = new CountDownLatch(1);
            CountDownLatch firstFailed = new CountDownLatch(1);
            SharingClient.beforeRegisterForTest = () -> {
                bothRead.countDown();
                try {
                    assertTrue(closeCalled.await(10, TimeUnit.SECONDS), "close() never ran");
                    if (Thread.currentThread().getName().endsWith(" yy")) {
                        assertTrue(firstFailed.await(10, TimeUnit.SECONDS), "the attach of 'x' never failed");
                    }
                } catch (InterruptedException e) {
                    throw new AssertionError(e);
                }
            };
            CompletableFuture<Throwable> x = attachExpectingFailure(c, "x");
            CompletableFuture<Throwable> yy = attachExpectingFailure(c, "yy");
            assertTrue(bothRead.await(10, TimeUnit.SECONDS), "both DESCRIPTORs read");
            c.setTimeout(Duration.ofMillis(300));
            c.close(); // both leases are in flight: the connection drains until they are released
            assertEquals(2, c.pendingReleases());
            closeCalled.countDown();
            Throwable ex = x.get(10, TimeUnit.SECONDS);
            firstFailed.countDown();
            Throwable ey = yy.get(10, TimeUnit.SECONDS);
            assertTrue(ex instanceof IOException, "attach 'x' should throw IOException: " + ex);
            assertTrue(ex.getMessage().contains("closed meanwhile"), ex.getMessage());
            assertTrue(ey instanceof IOException && ey.getMessage().contains("closed meanwhile"),
                    "attach 'yy' should throw IOException: " + ey);
            IpcTestSupport.await("the connection ends with the last release", 10, () -> c.pendingReleases() == 0);
        } finally {
            SharingClient.beforeRegisterForTest = null;
            c.closeNow();
        }
        f.get(10, TimeUnit.SECONDS);
    }

    /**
     * ImportCache.Stats: an entry leaves the counts "the moment ... the connection ends", and
     * an idle one is unmapped "by the thread that ends the connection (the client's close, or
     * whoever reads the end of the stream), there and then"; idsHeld stops counting at the end.
     * The thread that read the end of the stream failed the waiting requests first and ended
     * the cache after, so a request's caller, woken by its failure (isConnected() already
     * false), could still see the idle entry, its id held and its fd kept. As in
     * ClientProtocolRulesProbeTest.aFatalBadFrameEndsTheConnectionBeforeTheRequestFails, a
     * callback on the request's future reads the state at the moment of the failure.
     */
    @Test
    void theEndOfTheStreamEndsTheCacheBeforeTheWaitingRequestFails() throws Exception {
        checkCountsWhenTheSecondAttachFails((s, v) -> s.shutdownOutput());
    }

    /** As above, for a fatal bad frame answering the ATTACH (the client ends the connection). */
    @Test
    void aFatalBadFrameEndsTheCacheBeforeTheWaitingRequestFails() throws Exception {
        checkCountsWhenTheSecondAttachFails((s, v) -> {
            byte[] bad = raw(v, FrameType.DESCRIPTOR, lastAttach.requestId, new byte[10]);
            bad[0] ^= 0x55; // a bad magic: fatal
            s.send(bad, null);
        });
    }

    private volatile Frame lastAttach;

    private void checkCountsWhenTheSecondAttachFails(Script ending) throws Exception {
        CountDownLatch secondRead = new CountDownLatch(1);
        CountDownLatch watching = new CountDownLatch(1);
        CompletableFuture<Void> f = fake(2, (s, v) -> {
            Frame a = next(s, v, FrameType.ATTACH);
            try (BufferDescriptor d = real.exportDescriptor()) {
                FrameIO.write(s, IpcTestSupport.oneFreshChunk(900, 2 * G, 1), a.requestId, d.fds(), v);
            }
            lastAttach = next(s, v, FrameType.ATTACH);
            secondRead.countDown();
            assertTrue(watching.await(10, TimeUnit.SECONDS), "the test never watched the request");
            ending.run(s, v);
        });
        try (SharingClient c = client(2)) {
            c.attach("x", resource).close();
            ImportCache.Stats kept = c.importCache().stats();
            assertEquals(1, kept.entries(), "the idle import is kept: " + kept);
            assertEquals(1, kept.idsHeld(), kept.toString());
            assertEquals(1, kept.fdsKept(), kept.toString());
            CompletableFuture<Throwable> attempt = attachExpectingFailure(c, "x");
            assertTrue(secondRead.await(10, TimeUnit.SECONDS), "the fake server never read the second ATTACH");
            java.util.List<CompletableFuture<Frame>> waiting = c.pendingReplies();
            assertEquals(1, waiting.size(), "one request waits: the ATTACH");
            java.util.List<String> whenFailed = new java.util.concurrent.CopyOnWriteArrayList<>();
            waiting.get(0).whenComplete((r, t) -> whenFailed.add("connected " + c.isConnected() + ", "
                    + c.importCache().stats()));
            watching.countDown();
            Throwable e = attempt.get(10, TimeUnit.SECONDS);
            assertTrue(e instanceof IOException, "the ATTACH fails with the connection: " + e);
            assertEquals(1, whenFailed.size(), whenFailed.toString());
            String seenThen = whenFailed.get(0);
            ImportCache.Stats now = c.importCache().stats();
            assertEquals("connected false, " + new ImportCache.Stats(now.hits(), now.misses(), 0, 0, 0, 0,
                    now.evictions(), now.forgets(), now.fdsReceived()), seenThen, "the state when the ATTACH failed ("
                    + e + ")");
        }
        f.get(10, TimeUnit.SECONDS);
    }

    private CompletableFuture<Throwable> attachExpectingFailure(SharingClient c, String name) {
        CompletableFuture<Throwable> outcome = new CompletableFuture<>();
        Thread t = new Thread(() -> {
            try (Attachment unexpected = c.attach(name, resource)) {
                outcome.complete(new AssertionError("attach '" + name + "' succeeded after close(): " + unexpected));
            } catch (Throwable e) {
                outcome.complete(e);
            }
        }, "probe attach " + name);
        t.start();
        return outcome;
    }
}
