package org.cuvmm.ipc;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Path;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.cuvmm.VirtualMemoryResource;
import org.junit.jupiter.api.Test;

/**
 * Whoever reads never writes, the event thread included: a DROP listener's attach leads the
 * read (the event thread holds the read token) and dispatches rejected DESCRIPTORs, whose
 * FORGETs must be queued, not written by that leading thread. Written inline (a fix for
 * listeners at the id limit did, for a while), a server that was not reading blocked the
 * client's only reader in sendmsg and neither side read again (a reviewer's test: the fake
 * server's sends blocked after 557 of 3000 frames).
 */
class EventThreadLeaderWritesTest {
    private static final int FRAMES = 3000;

    @Test
    void theLeadingEventThreadKeepsReadingWhileTheServerDoesNotRead() throws Exception {
        long idle = ReadToken.readerIdleNanos;
        ReadToken.readerIdleNanos = TimeUnit.SECONDS.toNanos(30); // the reader thread stays out: callers lead
        Path sock = IpcTestSupport.socketPath();
        AtomicInteger sent = new AtomicInteger();
        CountDownLatch allSent = new CountDownLatch(1);
        CountDownLatch done = new CountDownLatch(1);
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             org.cuvmm.VirtualMemoryBuffer buffer = resource.allocate(resource.granularity());
             FdServerSocket server = FdServerSocket.bind(sock)) {
            long g = resource.granularity();
            CompletableFuture<Void> fake = CompletableFuture.runAsync(() -> {
                try (FdSocket s = server.accept()) {
                    IpcTestSupport.answerHelloV2(s);
                    try (Frame attach = FrameIO.read(s, 2, 2); org.cuvmm.BufferDescriptor d = buffer.exportDescriptor()) {
                        // the DROP first: the main thread, leading, parks it; attach() then claims it
                        FrameIO.write(s, new Messages.Drop(1, "b"), 0, null, 2);
                        Messages.DescriptorV2 good = IpcTestSupport.oneFreshChunk(1, g, 1);
                        d.useFds(f -> FrameIO.write(s, good, attach.requestId, f, 2));
                    }
                    try (Frame attach = FrameIO.read(s, 2, 2)) { // the listener's ATTACH: it leads now
                        assertEquals(FrameType.ATTACH, attach.type);
                    }
                    // Not reading from here on; DESCRIPTORs with an FD chunk but no fd, nobody's reply:
                    // each is rejected and its new id forgotten (FORGET).
                    for (int i = 1; i <= FRAMES; i++) {
                        FrameIO.write(s, IpcTestSupport.oneFreshChunk(100 + i, g, 100 + i),
                                0x4000_0000 + i, null, 2);
                        sent.incrementAndGet();
                    }
                    allSent.countDown();
                    done.await(60, TimeUnit.SECONDS);
                } catch (IOException e) {
                    throw new UncheckedIOException(e);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            });
            SharingClient client = SharingClient.builder(sock).protocolVersion(2)
                    .timeout(java.time.Duration.ofSeconds(60)).build();
            try {
                client.addDropListener(notice -> {
                    try (Attachment again = client.attach("c", resource)) {
                        // not reached
                    } catch (Throwable t) {
                        // the connection ends at the test's close
                    }
                });
                Attachment first = client.attach("b", resource);
                boolean ok = allSent.await(30, TimeUnit.SECONDS);
                int n = sent.get();
                done.countDown();
                if (!ok) {
                    throw new AssertionError("the fake server's sends blocked after " + n + " of " + FRAMES
                            + " frames: the client stopped reading (its leading event thread was blocked sending FORGET)");
                }
            } finally {
                done.countDown();
                client.closeNow();
                ReadToken.readerIdleNanos = idle;
            }
            try { fake.get(30, TimeUnit.SECONDS); } catch (Exception ignored) { }
        } finally {
            IpcTestSupport.deleteTree(sock.getParent());
        }
    }
}
