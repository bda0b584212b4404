package org.cuvmm.ipc;

import static org.cuvmm.ipc.IpcTestSupport.assertFdsBack;
import static org.cuvmm.ipc.IpcTestSupport.fdSnapshot;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;

import org.cuvmm.VirtualMemoryResource;
import org.junit.jupiter.api.Test;

/**
 * A server that stops reading cannot hold a client's caller past its timeout. The request's
 * send waits for room in the socket's send buffer until the request's deadline, no longer:
 * before, it blocked in {@code sendmsg} until the server read again or the connection ended
 * (documented then as a limit of {@link SharingClient#setTimeout}). Each test fails on that
 * code by its own bound (the attach never returned).
 */
class StalledReaderSendTest {
    @Test
    void anAttachToAServerThatStoppedReadingFailsWithinItsTimeoutAndTheConnectionStays() throws Exception {
        Map<String, Integer> fds = fdSnapshot();
        Path sock = IpcTestSupport.socketPath();
        CountDownLatch done = new CountDownLatch(1);
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             FdServerSocket server = FdServerSocket.bind(sock)) {
            // A version-1 server that answers HELLO, then reads nothing until the test is done.
            CompletableFuture<Void> fake = CompletableFuture.runAsync(() -> {
                try (FdSocket s = server.accept()) {
                    IpcTestSupport.answerHelloV1(s);
                    done.await();
                } catch (IOException e) {
                    throw new UncheckedIOException(e);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            });
            SharingClient client = SharingClient.builder(sock).protocolVersion(1).build();
            try {
                client.setTimeout(Duration.ofMillis(300));
                int filled = fillSendBuffer(client);
                assertTrue(filled > 0, "bytes written to fill the client's send buffer: " + filled);
                // On its own thread: on the old code the attach never returned, and the test must end.
                Future<IOException> attach = CompletableFuture.supplyAsync(() -> assertThrows(IOException.class,
                        () -> client.attach("b", resource)));
                IOException e;
                try {
                    e = attach.get(20, TimeUnit.SECONDS);
                } catch (TimeoutException t) {
                    throw new AssertionError("the attach was still blocked 20 s after its 300 ms timeout (its send "
                            + "waited for the server to read)");
                } catch (ExecutionException x) {
                    throw new AssertionError(x.getCause());
                }
                assertTrue(e.getMessage().startsWith("ATTACH to " + sock + " could not be sent within PT0.3S: the "
                        + "server is not reading"), e.getMessage());
                // Nothing of the ATTACH went: the stream is in step, and the connection stays.
                assertTrue(client.isConnected(), "a request that sent nothing does not end the connection");
                assertEquals(0, client.pendingReleases());
            } finally {
                done.countDown();
                client.closeNow();
                fake.get(30, TimeUnit.SECONDS);
            }
        }
        assertFdsBack(fds, "after the client and the fake server closed");
    }

    /**
     * An attachment's RELEASE that cannot go within the timeout ends the connection (the server
     * then frees the lease), where failing that request alone would leave the lease held on the
     * server while the client had let it go. The close returns, quietly (the lease ended with the
     * connection, as Attachment.close says), and the server reads the end of the stream.
     */
    @Test
    void aReleaseThatCannotBeSentEndsTheConnection() throws Exception {
        Map<String, Integer> fds = fdSnapshot();
        Path sock = IpcTestSupport.socketPath();
        CountDownLatch filled = new CountDownLatch(1);
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             org.cuvmm.VirtualMemoryBuffer buffer = resource.allocate(resource.granularity());
             FdServerSocket server = FdServerSocket.bind(sock)) {
            // A version-1 server that grants one lease, then reads nothing until the client's
            // send buffer is full, then reads to the end of the stream (what the client does last).
            CompletableFuture<Boolean> fake = CompletableFuture.supplyAsync(() -> {
                try (FdSocket s = server.accept()) {
                    IpcTestSupport.answerHelloV1(s);
                    try (Frame attach = FrameIO.read(s); org.cuvmm.BufferDescriptor d = buffer.exportDescriptor()) {
                        Messages.Descriptor m = new Messages.Descriptor(1, Protocol.HANDLE_TYPE_POSIX_FD, d.size(),
                                d.sizes());
                        d.useFds(f -> FrameIO.write(s, m, attach.requestId, f));
                    }
                    filled.await();
                    for (boolean end = false; !end; ) { // the filler's bytes, then the end of the stream
                        try (ReceivedMessage r = s.receive(1 << 16)) {
                            end = r.endOfStream();
                        }
                    }
                    return true;
                } catch (IOException e) {
                    throw new UncheckedIOException(e);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                    return false;
                }
            });
            SharingClient client = SharingClient.builder(sock).protocolVersion(1).build();
            try {
                Attachment a = client.attach("b", resource);
                client.setTimeout(Duration.ofMillis(300));
                assertTrue(fillSendBuffer(client) > 0);
                Future<Void> close = CompletableFuture.runAsync(a::close);
                try {
                    close.get(20, TimeUnit.SECONDS);
                } catch (TimeoutException t) {
                    throw new AssertionError("the attachment's close was still blocked 20 s after its 300 ms timeout");
                }
                assertTrue(a.isClosed());
                assertTrue(!client.isConnected(), "a RELEASE that could not be sent ends the connection");
                assertEquals(0, client.pendingReleases());
            } finally {
                filled.countDown();
                client.closeNow();
            }
            assertTrue(fake.get(30, TimeUnit.SECONDS), "the server read the end of the stream");
        }
        assertFdsBack(fds, "after the connection ended over an unsent RELEASE");
    }

    @Test
    void aBoundedSendOfMoreThanFitsSaysHowMuchWent() throws Exception {
        FdSocket[] pair = FdSocket.pair();
        try (FdSocket a = pair[0]; FdSocket b = pair[1]) {
            byte[] big = new byte[8 << 20]; // more than any send buffer holds; b reads nothing
            long start = System.nanoTime();
            FdSocket.SendTimeoutException e = assertThrows(FdSocket.SendTimeoutException.class,
                    () -> a.send(big, 0, big.length, null, System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(200)));
            assertTrue(System.nanoTime() - start < TimeUnit.SECONDS.toNanos(20), "bounded by its deadline");
            assertTrue(e.bytesTransferred > 0 && e.bytesTransferred < big.length,
                    "part of the bytes went: " + e.bytesTransferred);
            assertTrue(e.getMessage().startsWith("send: " + e.bytesTransferred + " of " + big.length + " bytes sent when "
                    + "the deadline passed"), e.getMessage());
            // Nothing more fits now: a second bounded send sends nothing, and says so.
            FdSocket.SendTimeoutException none = assertThrows(FdSocket.SendTimeoutException.class,
                    () -> a.send(new byte[16], 0, 16, null, System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(50)));
            assertEquals(0, none.bytesTransferred);
        }
    }

    /** Writes raw bytes on the client's socket until its send buffer is full; returns how many went. */
    private static int fillSendBuffer(SharingClient client) throws Exception {
        java.lang.reflect.Field f = SharingClient.class.getDeclaredField("socket");
        f.setAccessible(true);
        FdSocket s = (FdSocket) f.get(client);
        byte[] junk = new byte[4096];
        int total = 0;
        for (int n; (n = s.sendNow(junk, null)) > 0; ) total += n;
        return total;
    }
}
