package org.cuvmm.ipc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Path;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * The client's reader thread never writes: the ERROR that rejects a bad frame and the
 * RELEASE that disposes of an unrequested DESCRIPTOR are sent by the event thread. A server
 * that stops reading while it sends (its send queue full) must not stop the client's
 * reading: otherwise both sides block in send and neither ever reads again.
 */
class ClientReaderNeverWritesTest {
    /** Far more frames than two Unix socket buffers hold (each small frame costs about 1 KiB of buffer). */
    private static final int FRAMES = 5000;

    private Path sock;

    @BeforeEach
    void setUp() throws Exception { sock = IpcTestSupport.socketPath(); }

    @AfterEach
    void tearDown() { IpcTestSupport.deleteTree(sock.getParent()); }

    @Test
    void rejectingFramesWhileTheServerDoesNotReadKeepsTheReaderReading() throws Exception {
        AtomicInteger sent = new AtomicInteger();
        CountDownLatch allSent = new CountDownLatch(1);
        CountDownLatch helloDone = new CountDownLatch(1);
        CountDownLatch clientClosed = new CountDownLatch(1);
        try (FdServerSocket server = FdServerSocket.bind(sock)) {
            CompletableFuture<Void> fake = CompletableFuture.runAsync(() -> {
                try (FdSocket s = server.accept()) {
                    try (Frame hello = FrameIO.read(s)) {
                        s.send(IpcTestSupport.frame(2, hello.requestId, new byte[] {0, 1, 0, (byte) 253}), null);
                    }
                    helloDone.countDown();
                    // A client-only frame, which the client rejects with an ERROR, over and
                    // over, never reading those ERRORs.
                    for (int i = 1; i <= FRAMES; i++) {
                        FrameIO.write(s, new Messages.Attach("x"), i, null);
                        sent.incrementAndGet();
                    }
                    allSent.countDown();
                    clientClosed.await(30, TimeUnit.SECONDS);
                } catch (IOException e) {
                    throw new UncheckedIOException(e);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            });
            try (SharingClient c = SharingClient.connect(sock, "never-writes")) {
                assertTrue(helloDone.await(10, TimeUnit.SECONDS));
                try {
                    if (!allSent.await(30, TimeUnit.SECONDS)) {
                        throw new AssertionError("the fake server's sends blocked after " + sent.get() + " of "
                                + FRAMES + " frames: the client stopped reading (its reader was blocked sending an ERROR)");
                    }
                } finally {
                    clientClosed.countDown();
                }
                assertEquals(FRAMES, sent.get());
            }
            fake.get(10, TimeUnit.SECONDS);
        }
    }

    /** A DESCRIPTOR nobody asked for is disposed of (RELEASE) by the event thread, not the reader. */
    @Test
    void disposingOfUnrequestedDescriptorsWhileTheServerDoesNotReadKeepsTheReaderReading() throws Exception {
        AtomicInteger sent = new AtomicInteger();
        CountDownLatch allSent = new CountDownLatch(1);
        CountDownLatch clientClosed = new CountDownLatch(1);
        int[] pipe = IpcTestSupport.pipe();
        try (FdServerSocket server = FdServerSocket.bind(sock)) {
            CompletableFuture<Void> fake = CompletableFuture.runAsync(() -> {
                try (FdSocket s = server.accept()) {
                    try (Frame hello = FrameIO.read(s)) {
                        s.send(IpcTestSupport.frame(2, hello.requestId, new byte[] {0, 1, 0, (byte) 253}), null);
                    }
                    for (int i = 1; i <= FRAMES; i++) {
                        byte[] d = IpcTestSupport.descriptorPayload(1000 + i, 1, 2L << 20, 2L << 20);
                        s.send(IpcTestSupport.frame(4, 0x4000_0000 + i, d), new int[] {pipe[0]});
                        sent.incrementAndGet();
                    }
                    allSent.countDown();
                    clientClosed.await(30, TimeUnit.SECONDS);
                } catch (IOException e) {
                    throw new UncheckedIOException(e);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            });
            try (SharingClient c = SharingClient.connect(sock, "never-writes")) {
                try {
                    if (!allSent.await(30, TimeUnit.SECONDS)) {
                        throw new AssertionError("the fake server's sends blocked after " + sent.get() + " of "
                                + FRAMES + " frames: the client stopped reading (its reader was blocked sending a RELEASE)");
                    }
                } finally {
                    clientClosed.countDown();
                }
                assertEquals(FRAMES, sent.get());
            }
            fake.get(10, TimeUnit.SECONDS);
        } finally {
            NativeIo.closeAll(pipe);
        }
    }
}
