package org.cuvmm.ipc;

import static org.cuvmm.ipc.IpcTestSupport.assertFdsBack;
import static org.cuvmm.ipc.IpcTestSupport.fdSnapshot;
import static org.cuvmm.ipc.IpcTestSupport.pipe;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.lang.reflect.Field;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;
import org.junit.jupiter.api.io.TempDir;

/**
 * {@link FdSocket#deferConsumption}: reads peek and their bytes leave the kernel's queue in
 * batches; the bytes and fds read are the same as without it; fds are installed once and none
 * leak; a peer with the smallest send buffer the kernel allows is never stuck behind bytes
 * held unconsumed (the receive slice takes them off); the peer reads the end of the stream,
 * not a reset, after a close with bytes held; the property turns it off; the sharing
 * connections on both ends use it.
 */
class DeferredConsumptionTest {
    private static final int SLICE_MS = 20;
    private static final int SO_SNDBUF = 7;

    @TempDir
    Path dir;

    @AfterEach
    void clearProperty() {
        System.clearProperty(FdSocket.DEFER_PROPERTY);
    }

    /** Skips, saying why, where the kernel's peek offset fails its probe (FdSocket#peekOffsetWorks). */
    static void assumeTrustedPeekOffset() {
        assumeTrue(FdSocket.peekOffsetWorks(), "this kernel's MSG_PEEK with SO_PEEK_OFF fails FdSocket's probe (Linux "
                + "before commit 7bf3a476ce43 reads bytes already peeked again after a blocking peek slept): cuvmm reads "
                + "plainly there, and there is no deferred consumption to test");
    }

    private static FdSocket[] deferringPair() throws Exception {
        assumeTrustedPeekOffset();
        FdSocket[] p = FdSocket.pair();
        p[1].setReceiveSlice(SLICE_MS);
        assertTrue(p[1].deferConsumption(), "this kernel takes SO_PEEK_OFF on a Unix stream socket");
        return p;
    }

    static int fdOf(FdSocket s) throws ReflectiveOperationException {
        Field f = FdSocket.class.getDeclaredField("fd");
        f.setAccessible(true);
        return f.getInt(s);
    }

    private static String link(int fd) throws java.io.IOException {
        return Files.readSymbolicLink(Path.of("/proc/self/fd/" + fd)).toString();
    }

    /** One raw recvmsg on {@code fd} (no FdSocket): bytes read, 0 at end of stream, or minus the errno. */
    private static int rawRead(int fd, int length) {
        return new NativeMsg(4096).recvmsg(fd, length, 0, 0);
    }

    @Test
    void readsPeekAndTheirBytesLeaveTheQueueEverySixteenReads() throws Exception {
        FdSocket[] p = deferringPair();
        try {
            for (int i = 0; i < 40; i++) {
                p[0].send(new byte[] {(byte) i, 7}, null);
                try (ReceivedMessage m = p[1].receive(2)) {
                    assertArrayEquals(new byte[] {(byte) i, 7}, m.data(), "read " + i);
                }
            }
            long[] calls = p[1].ioCalls();
            assertEquals(40, calls[0], "reads (peeks)");
            assertEquals(2, calls[3], "consuming recvmsg calls: after the 16th and the 32nd read");
            // The 8 bytes of the last 8 reads are still on the queue, and the stream goes on past them.
            p[0].send(new byte[] {9, 9, 9}, null);
            try (ReceivedMessage m = p[1].receive(3)) {
                assertArrayEquals(new byte[] {9, 9, 9}, m.data());
            }
        } finally {
            p[0].close();
            p[1].close();
        }
    }

    @Test
    void framesReadAheadArriveInOrderWithTheirFdsAndNoneLeak() throws Exception {
        Map<String, Integer> fds = fdSnapshot();
        FdSocket[] p = deferringPair();
        int[] pipe = pipe();
        try {
            for (int round = 0; round < 20; round++) {
                p[0].send(new byte[] {1, 2, 3}, round % 5 == 0 ? new int[] {pipe[0], pipe[1]} : null);
                p[0].send(new byte[] {4, 5}, null);
                try (ReceivedMessage a = p[1].receive(3, 4); ReceivedMessage b = p[1].receive(2, 4)) {
                    assertArrayEquals(new byte[] {1, 2, 3}, a.data());
                    assertArrayEquals(new byte[] {4, 5}, b.data());
                    assertEquals(round % 5 == 0 ? 2 : 0, a.fdCount(), "fds of round " + round);
                    assertEquals(0, b.fdCount());
                    if (a.fdCount() == 2) {
                        int[] got = a.takeFds();
                        try {
                            // The fds are the pipe's two ends (the same pipe inode).
                            assertEquals(link(pipe[0]), link(got[0]));
                            assertEquals(link(pipe[1]), link(got[1]));
                        } finally {
                            NativeIo.closeAll(got);
                        }
                    }
                }
            }
            assertTrue(p[1].ioCalls()[3] >= 4, "a read that brought fds is taken off the queue at once: "
                    + p[1].ioCalls()[3] + " consuming calls");
        } finally {
            NativeIo.closeAll(pipe);
            p[0].close();
            p[1].close();
        }
        assertFdsBack(fds, "after deferred reads with fds (each installed once)");
    }

    @Test
    void fdsOfASegmentReadInPartsArriveOnceWithItsFirstPart() throws Exception {
        // A peek leaves a segment's fds on the queue: a second peek into the same segment would
        // install them again, unless the first part was taken off at once (which detaches them).
        Map<String, Integer> fds = fdSnapshot();
        FdSocket[] p = deferringPair();
        int[] pipe = pipe();
        try {
            p[0].send(new byte[] {1, 2, 3, 4}, new int[] {pipe[0]});
            try (ReceivedMessage a = p[1].receive(2, 4); ReceivedMessage b = p[1].receive(2, 4)) {
                assertArrayEquals(new byte[] {1, 2}, a.data());
                assertArrayEquals(new byte[] {3, 4}, b.data());
                assertEquals(1, a.fdCount(), "the fd, with the segment's first part");
                assertEquals(0, b.fdCount(), "the fd again with the second part");
            }
        } finally {
            NativeIo.closeAll(pipe);
            p[0].close();
            p[1].close();
        }
        assertFdsBack(fds, "after a segment with an fd read in two parts");
    }

    @Test
    @Timeout(value = 60, threadMode = Timeout.ThreadMode.SEPARATE_THREAD) // stuck: a deadlock, not a slow pass
    void aPeerWithTheSmallestSendBufferIsNotStuckBehindHeldBytes() throws Exception {
        FdSocket[] p = deferringPair();
        try {
            // The kernel's floor (about 4.6 KB): a handful of one-byte messages fill it, far fewer than the
            // 16 reads a deferring reader holds before it takes their bytes off the queue.
            assertEquals(0, new NativeMsg(16).setIntOption(fdOf(p[0]), NativeIo.SOL_SOCKET, SO_SNDBUF, 1));
            int count = 200;
            CompletableFuture<Void> sender = CompletableFuture.runAsync(() -> {
                try {
                    for (int i = 0; i < count; i++) p[0].send(new byte[] {(byte) i}, null); // one skb each
                } catch (Exception e) {
                    throw new RuntimeException(e);
                }
            });
            for (int i = 0; i < count; i++) {
                try (ReceivedMessage m = p[1].receive(1)) {
                    assertEquals((byte) i, m.data()[0], "byte " + i);
                }
            }
            sender.get(30, TimeUnit.SECONDS);
            assertTrue(p[1].ioCalls()[3] > count / FdSocket.DEFER_MAX_READS, "the slice took held bytes off before "
                    + "the 16th read, or the sender could not have gone on: " + p[1].ioCalls()[3] + " consuming calls");
        } finally {
            p[0].close();
            p[1].close();
        }
    }

    @Test
    void thePeerReadsTheEndOfTheStreamAfterACloseWithBytesHeld() throws Exception {
        FdSocket[] p = deferringPair();
        try {
            p[0].send(new byte[] {1, 2, 3, 4}, null);
            try (ReceivedMessage m = p[1].receive(4)) {
                assertEquals(4, m.data().length);
            }
            assertEquals(0, p[1].ioCalls()[3], "held, not yet taken off");
            p[1].close();
            // A socket closed with unread bytes makes its peer's read fail with ECONNRESET.
            assertEquals(0, rawRead(fdOf(p[0]), 16), "the peer's read after the close: 0 is the end of the stream, "
                    + "-" + NativeIo.ECONNRESET + " a reset");
        } finally {
            p[0].close();
            p[1].close();
        }
    }

    @Test
    void thePropertyTurnsItOffAndItNeedsASliceAndNoEarlierRead() throws Exception {
        assumeTrustedPeekOffset();
        FdSocket[] p = FdSocket.pair();
        FdSocket[] q = FdSocket.pair();
        try {
            assertThrows(IllegalStateException.class, p[1]::deferConsumption, "no slice yet");
            p[1].setReceiveSlice(SLICE_MS);
            p[0].send(new byte[] {1}, null);
            p[1].receive(1).close();
            IllegalStateException late = assertThrows(IllegalStateException.class, p[1]::deferConsumption);
            assertTrue(late.getMessage().contains("before the first receive"), late.getMessage());

            System.setProperty(FdSocket.DEFER_PROPERTY, "no");
            IllegalArgumentException bad = assertThrows(IllegalArgumentException.class, q[1]::deferConsumption);
            assertTrue(bad.getMessage().startsWith("cuvmm.ipc.deferConsumption: no (expected: true or false"),
                    bad.getMessage());
            System.setProperty(FdSocket.DEFER_PROPERTY, "false");
            q[1].setReceiveSlice(SLICE_MS);
            assertFalse(q[1].deferConsumption());
            assertFalse(q[1].isDeferringConsumption());
            q[0].send(new byte[] {1, 2}, null);
            q[1].receive(2).close();
            assertEquals(0, q[1].ioCalls()[3], "consuming calls with deferral off");
        } finally {
            for (FdSocket s : new FdSocket[] {p[0], p[1], q[0], q[1]}) s.close();
        }
    }

    @Test
    void aBadPropertyValueIsRefusedByBothBuildersAndOpensNothing() throws Exception {
        Path sock = dir.resolve("s");
        try (SharingServer server = SharingServer.builder(sock).build()) {
            Map<String, Integer> fds = fdSnapshot();
            System.setProperty(FdSocket.DEFER_PROPERTY, "yes");
            IllegalArgumentException c = assertThrows(IllegalArgumentException.class,
                    () -> SharingClient.builder(sock).build());
            assertTrue(c.getMessage().startsWith("cuvmm.ipc.deferConsumption: yes (expected: true or false"),
                    c.getMessage());
            IllegalArgumentException s = assertThrows(IllegalArgumentException.class,
                    () -> SharingServer.builder(dir.resolve("t")).build());
            assertTrue(s.getMessage().startsWith("cuvmm.ipc.deferConsumption: yes"), s.getMessage());
            assertFalse(Files.exists(dir.resolve("t")), "no socket file bound");
            assertFdsBack(fds, "after both builders refused the value");
            // Set wrong after the server was built: the server goes on, its connections read plainly.
            try (FdSocket raw = FdSocket.connect(sock)) {
                IpcTestSupport.await("the server admitted the connection", 10, () -> {
                    try {
                        return CachedRoundRecvmsgTest.connectionSocket(server) != null;
                    } catch (Throwable notYet) {
                        return false;
                    }
                });
                assertFalse(CachedRoundRecvmsgTest.connectionSocket(server).isDeferringConsumption());
            }
        }
    }

    @Test
    void bothEndsOfASharingConnectionDeferAndThePropertyTurnsBothOff() throws Exception {
        assumeTrustedPeekOffset();
        Path sock = dir.resolve("s");
        try (SharingServer server = SharingServer.builder(sock).build();
             SharingClient client = SharingClient.connect(sock)) {
            assertTrue(client.defersConsumption(), "the client's socket");
            assertTrue(CachedRoundRecvmsgTest.connectionSocket(server).isDeferringConsumption(), "the server's connection");
        }
        Files.deleteIfExists(sock);
        System.setProperty(FdSocket.DEFER_PROPERTY, "false");
        try (SharingServer server = SharingServer.builder(sock).build();
             SharingClient client = SharingClient.connect(sock)) {
            assertFalse(client.defersConsumption(), "the client's socket, property false");
            assertFalse(CachedRoundRecvmsgTest.connectionSocket(server).isDeferringConsumption(),
                    "the server's connection, property false");
        }
    }
}
