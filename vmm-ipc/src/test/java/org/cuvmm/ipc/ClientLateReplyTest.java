package org.cuvmm.ipc;

import static org.cuvmm.ipc.IpcTestSupport.assertFdsBack;
import static org.cuvmm.ipc.IpcTestSupport.descriptorPayload;
import static org.cuvmm.ipc.IpcTestSupport.fdSnapshot;
import static org.cuvmm.ipc.IpcTestSupport.frame;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.cuvmm.VirtualMemoryResource;
import org.junit.jupiter.api.Test;

/**
 * A reply that arrives just after its request timed out: nobody will read it, so the client
 * must close its fds and release its lease. The window (between the timeout and the request
 * giving up its future) is hit deterministically through {@link SharingClient#afterTimeoutHook}:
 * the fake server sends the DESCRIPTOR from inside it, and the hook returns only once the
 * client's reader has dispatched that reply.
 */
class ClientLateReplyTest {
    private static final long MiB = 1L << 20;
    private static final long LEASE = 91;

    @Test
    void aDescriptorDispatchedJustAfterTheTimeoutIsClosedAndReleased() throws Exception {
        Path sock = IpcTestSupport.socketPath();
        Map<String, Integer> base = fdSnapshot();
        int[] pipe = IpcTestSupport.pipe();
        CountDownLatch timedOut = new CountDownLatch(1);
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
                FdServerSocket server = FdServerSocket.bind(sock)) {
            CompletableFuture<Frame> afterReply = CompletableFuture.supplyAsync(() -> {
                try (FdSocket s = server.accept()) {
                    try (Frame hello = FrameIO.read(s)) {
                        s.send(frame(2, hello.requestId, new byte[] {0, 1, 0, (byte) 253}), null);
                    }
                    int attachId;
                    try (Frame attach = FrameIO.read(s)) {
                        attachId = attach.requestId;
                    }
                    assertTrue(timedOut.await(10, TimeUnit.SECONDS), "the client's request timed out");
                    s.send(frame(4, attachId, descriptorPayload(LEASE, 1, 2 * MiB, 2 * MiB)), new int[] {pipe[1]});
                    Frame next = FrameIO.read(s); // the RELEASE of the unread reply's lease, or null at close
                    if (next != null && next.type == FrameType.RELEASE) {
                        s.send(frame(6, next.requestId, ByteBuffer.allocate(8).putLong(LEASE).array()), null);
                    }
                    return next;
                } catch (IOException | InterruptedException e) {
                    throw new IllegalStateException(e);
                }
            });
            try (SharingClient c = SharingClient.connect(sock, "late")) {
                c.setTimeout(Duration.ofMillis(200));
                c.afterTimeoutHook = reply -> {
                    timedOut.countDown();
                    try {
                        IpcTestSupport.await("the reader dispatched the late reply", 10, reply::isDone);
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                    }
                };
                IOException e = assertThrows(IOException.class, () -> c.attach("x", resource));
                assertTrue(e.getMessage().contains("no reply"), e.getMessage());
                Frame released;
                try {
                    released = afterReply.get(10, TimeUnit.SECONDS);
                } catch (java.util.concurrent.TimeoutException t) {
                    released = null;
                }
                assertNotNull(released, "the client released the lease of the reply nobody read");
                assertEquals(FrameType.RELEASE, released.type);
                assertEquals(LEASE, ((Messages.Release) released.message).leaseId());
            }
        } finally {
            NativeIo.closeAll(pipe);
            IpcTestSupport.deleteTree(sock.getParent());
        }
        assertFdsBack(base, "after a reply that came too late (its fd must be closed)");
    }

    /** The reverse order: the request gives up first, then the reply comes; the reader disposes of it. */
    @Test
    void aDescriptorArrivingAfterTheRequestGaveUpIsClosedAndReleased() throws Exception {
        Path sock = IpcTestSupport.socketPath();
        Map<String, Integer> base = fdSnapshot();
        int[] pipe = IpcTestSupport.pipe();
        CompletableFuture<Void> gaveUp = new CompletableFuture<>();
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
                FdServerSocket server = FdServerSocket.bind(sock)) {
            CompletableFuture<Frame> afterReply = CompletableFuture.supplyAsync(() -> {
                try (FdSocket s = server.accept()) {
                    try (Frame hello = FrameIO.read(s)) {
                        s.send(frame(2, hello.requestId, new byte[] {0, 1, 0, (byte) 253}), null);
                    }
                    int attachId;
                    try (Frame attach = FrameIO.read(s)) {
                        attachId = attach.requestId;
                    }
                    gaveUp.get(10, TimeUnit.SECONDS);
                    s.send(frame(4, attachId, descriptorPayload(LEASE, 1, 2 * MiB, 2 * MiB)), new int[] {pipe[1]});
                    Frame next = FrameIO.read(s);
                    if (next != null && next.type == FrameType.RELEASE) {
                        s.send(frame(6, next.requestId, ByteBuffer.allocate(8).putLong(LEASE).array()), null);
                    }
                    return next;
                } catch (Exception e) {
                    throw new IllegalStateException(e);
                }
            });
            try (SharingClient c = SharingClient.connect(sock, "late")) {
                c.setTimeout(Duration.ofMillis(200));
                assertThrows(IOException.class, () -> c.attach("x", resource));
                gaveUp.complete(null);
                Frame released = afterReply.get(10, TimeUnit.SECONDS);
                assertNotNull(released, "the client released the lease of the reply nobody read");
                assertEquals(FrameType.RELEASE, released.type);
                assertEquals(LEASE, ((Messages.Release) released.message).leaseId());
            }
        } finally {
            NativeIo.closeAll(pipe);
            IpcTestSupport.deleteTree(sock.getParent());
        }
        assertFdsBack(base, "after a reply that came after the request gave up");
    }
}
