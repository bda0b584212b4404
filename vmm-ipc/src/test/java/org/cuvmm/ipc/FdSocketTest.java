package org.cuvmm.ipc;

import static org.cuvmm.ipc.IpcTestSupport.assertFdsBack;
import static org.cuvmm.ipc.IpcTestSupport.fdSnapshot;
import static org.cuvmm.ipc.IpcTestSupport.isOpen;
import static org.cuvmm.ipc.IpcTestSupport.pipe;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.io.IOException;
import java.nio.channels.ClosedChannelException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import jnr.constants.platform.Fcntl;
import org.junit.jupiter.api.Test;

/** The raw-fd transport: bytes and fds on one sendmsg, and the receive-side traps. */
class FdSocketTest {
    private static final int FD_CLOEXEC = 1;

    @Test
    void roundTripCarriesBytesAndWorkingFds() throws Exception {
        Map<String, Integer> base = fdSnapshot();
        FdSocket[] p = FdSocket.pair();
        int[] pipe = pipe();
        try (FdSocket a = p[0]; FdSocket b = p[1]) {
            a.send("hello".getBytes(StandardCharsets.UTF_8), new int[] {pipe[1]});
            try (ReceivedMessage m = b.receive(5)) {
                assertEquals("hello", new String(m.data(), StandardCharsets.UTF_8));
                assertEquals(1, m.fdCount());
                int writeEnd = m.fds()[0];
                assertTrue(writeEnd != pipe[1], "a new fd number in the receiver");
                int flags = NativeIo.posix().fcntl(writeEnd, Fcntl.F_GETFD);
                assertEquals(FD_CLOEXEC, flags & FD_CLOEXEC, "received with MSG_CMSG_CLOEXEC");
                // It is the same pipe: write through the received fd, read from ours.
                assertEquals(3, NativeIo.posix().write(writeEnd, new byte[] {1, 2, 3}, 3));
                byte[] back = new byte[3];
                assertEquals(3, NativeIo.posix().read(pipe[0], back, 3));
                assertArrayEquals(new byte[] {1, 2, 3}, back);
            }
        } finally {
            NativeIo.closeAll(pipe);
        }
        assertFdsBack(base, "after a round trip");
    }

    @Test
    void fdsStayWithTheirOwnMessage() throws Exception {
        Map<String, Integer> base = fdSnapshot();
        FdSocket[] p = FdSocket.pair();
        int[] pipe = pipe();
        try (FdSocket a = p[0]; FdSocket b = p[1]) {
            a.send(new byte[10], new int[] {pipe[0]});
            a.send(new byte[10], new int[] {pipe[0], pipe[1]});
            a.send(new byte[10], null);
            try (ReceivedMessage m1 = b.receive(10); ReceivedMessage m2 = b.receive(10); ReceivedMessage m3 = b.receive(10)) {
                assertEquals(1, m1.fdCount());
                assertEquals(2, m2.fdCount());
                assertEquals(0, m3.fdCount());
            }
        } finally {
            NativeIo.closeAll(pipe);
        }
        assertFdsBack(base, "after three messages");
    }

    @Test
    void moreFdsThanAllowedAreCountedFromTheDataLengthAndAllClosed() throws Exception {
        Map<String, Integer> base = fdSnapshot();
        FdSocket[] p = FdSocket.pair();
        int[] pipe = pipe();
        try (FdSocket a = p[0]; FdSocket b = p[1]) {
            // CMSG_SPACE(4) == CMSG_SPACE(8): a receiver sized for one fd can get two.
            a.send(new byte[4], new int[] {pipe[0], pipe[1]});
            FdTransferException e = assertThrows(FdTransferException.class, () -> b.receive(4, 1));
            assertEquals(FdTransferException.Reason.TOO_MANY_FDS, e.reason());
            assertEquals(2, e.fdsClosed());
            assertEquals(4, e.data().length, "the bytes were read: the stream stays in step");
            a.send(new byte[] {7}, null);
            try (ReceivedMessage m = b.receive(1)) {
                assertEquals(7, m.data()[0]);
            }
        } finally {
            NativeIo.closeAll(pipe);
        }
        assertFdsBack(base, "after rejecting extra fds");
    }

    /**
     * The limit holds as fds arrive: ten one-byte sends of 253 fds each would make 2,530 fds
     * if the count were checked only when the 10 bytes are complete. Reading stops on the
     * second byte, with at most 253 + 2 fds ever held (room for one more than allowed, and one
     * that alignment lets in), all closed.
     */
    @Test
    void fdsSpreadOverManySendsAreRefusedAsTheyArrive() throws Exception {
        Map<String, Integer> base = fdSnapshot();
        FdSocket[] p = FdSocket.pair();
        int[] pipe = pipe();
        try (FdSocket a = p[0]; FdSocket b = p[1]) {
            int[] many = new int[NativeIo.MAX_FDS_PER_MESSAGE];
            for (int i = 0; i < many.length; i++) many[i] = pipe[i % 2];
            for (int i = 0; i < 10; i++) a.send(new byte[] {(byte) i}, many);
            FdTransferException e = assertThrows(FdTransferException.class, () -> b.receive(10, many.length));
            assertEquals(FdTransferException.Reason.TOO_MANY_FDS, e.reason());
            assertTrue(e.fdsClosed() > many.length && e.fdsClosed() <= many.length + 2, "fds received before "
                    + "stopping: " + e.fdsClosed() + " (expected: 254 or 255)");
            assertEquals(2, e.data().length, "stopped on the second byte: " + e.getMessage());
            assertFalse(e.streamInStep(), e.getMessage());
        } finally {
            NativeIo.closeAll(pipe);
        }
        assertFdsBack(base, "after refusing fds spread over many sends");
    }

    @Test
    void fdsSpreadOverSendsUpToTheLimitAreAccepted() throws Exception {
        Map<String, Integer> base = fdSnapshot();
        FdSocket[] p = FdSocket.pair();
        int[] pipe = pipe();
        try (FdSocket a = p[0]; FdSocket b = p[1]) {
            a.send(new byte[] {1}, new int[] {pipe[0], pipe[1], pipe[0]});
            a.send(new byte[] {2}, new int[] {pipe[1]});
            try (ReceivedMessage m = b.receive(2, 4)) {
                assertEquals(4, m.fdCount());
                assertArrayEquals(new byte[] {1, 2}, m.data());
            }
            a.send(new byte[] {3}, new int[] {pipe[0], pipe[1], pipe[0]});
            a.send(new byte[] {4}, new int[] {pipe[1], pipe[0]});
            FdTransferException e = assertThrows(FdTransferException.class, () -> b.receive(2, 4));
            assertEquals(5, e.fdsClosed());
            assertTrue(e.streamInStep(), "the limit was passed on the last byte: " + e.getMessage());
        } finally {
            NativeIo.closeAll(pipe);
        }
        assertFdsBack(base, "after fds spread over sends");
    }

    @Test
    void takeFdsTransfersOwnershipExactlyOnce() throws Exception {
        FdSocket[] p = FdSocket.pair();
        int[] pipe = pipe();
        try (FdSocket a = p[0]; FdSocket b = p[1]) {
            a.send(new byte[1], new int[] {pipe[0]});
            ReceivedMessage m = b.receive(1);
            int[] mine = m.takeFds();
            m.close();
            assertTrue(isOpen(mine[0]), "close() after takeFds() leaves the fds to the taker");
            assertThrows(IllegalStateException.class, m::takeFds);
            NativeIo.closeAll(mine);
            a.send(new byte[1], new int[] {pipe[0]});
            ReceivedMessage m2 = b.receive(1);
            int fd = m2.fds()[0];
            m2.close();
            m2.close();
            assertFalse(isOpen(fd), "close() closed the received fd");
        } finally {
            NativeIo.closeAll(pipe);
        }
    }

    @Test
    void endOfStreamMidMessageIsReported() throws Exception {
        FdSocket[] p = FdSocket.pair();
        FdSocket a = p[0];
        try (FdSocket b = p[1]) {
            a.send(new byte[] {1, 2, 3}, null);
            a.close();
            try (ReceivedMessage m = b.receive(10)) {
                assertTrue(m.endOfStream());
                assertEquals(3, m.length());
            }
            try (ReceivedMessage m = b.receive(10)) {
                assertTrue(m.endOfStream());
                assertEquals(0, m.length());
            }
        }
    }

    @Test
    void sendChecksItsArguments() throws Exception {
        FdSocket[] p = FdSocket.pair();
        try (FdSocket a = p[0]; FdSocket b = p[1]) {
            assertTrue(b.isOpen());
            assertThrows(IllegalArgumentException.class, () -> a.send(new byte[0], new int[] {0}));
            assertThrows(IllegalArgumentException.class, () -> a.send(new byte[1], new int[] {-1}));
            assertThrows(IllegalArgumentException.class, () -> a.send(new byte[1], new int[254]));
            // A number no fd can have (far above any RLIMIT_NOFILE). A closed pipe's number, as
            // this used before, can be reused by another thread of the JVM before the send
            // (it flaked so in CI: the send then succeeded).
            int neverOpen = Integer.MAX_VALUE;
            IOException e = assertThrows(IOException.class, () -> a.send(new byte[1], new int[] {neverOpen}));
            assertTrue(e.getMessage().contains("not open"), e.getMessage());
        }
    }

    /**
     * The receiver must be blocked in {@code recvmsg} when {@code close()} runs (a close that
     * came first would make any receive fail, proving nothing): the test waits until the
     * receiving thread's stack is inside jnr-posix's {@code recvmsg} with a native method on
     * top, then closes.
     */
    @Test
    void closeWakesABlockedReceiverAndLaterCallsFail() throws Exception {
        FdSocket[] p = FdSocket.pair();
        FdSocket b = p[1];
        CompletableFuture<Throwable> blocked = new CompletableFuture<>();
        Thread receiver = new Thread(() -> {
            try {
                b.receive(4);
                blocked.complete(null);
            } catch (Throwable t) {
                blocked.complete(t);
            }
        }, "blocked-receiver");
        receiver.setDaemon(true);
        receiver.start();
        IpcTestSupport.await("the receiver blocked in recvmsg", 10, () -> inNativeRecvmsg(receiver));
        b.close();
        Throwable t = blocked.get(5, TimeUnit.SECONDS);
        assertTrue(t instanceof ClosedChannelException, "woke with " + t);
        assertThrows(ClosedChannelException.class, () -> b.receive(1));
        assertThrows(ClosedChannelException.class, () -> b.send(new byte[1], null));
        p[0].close();
    }

    /** True when {@code t} runs native code (a blocked syscall shows as RUNNABLE) called from a {@code recvmsg} frame. */
    private static boolean inNativeRecvmsg(Thread t) {
        StackTraceElement[] stack = t.getStackTrace();
        if (t.getState() != Thread.State.RUNNABLE || stack.length == 0 || !stack[0].isNativeMethod()) return false;
        for (StackTraceElement e : stack) {
            if (e.getMethodName().equals("recvmsg")) return true;
        }
        return false;
    }

    @Test
    void peerClosedGivesAClearSendError() throws Exception {
        FdSocket[] p = FdSocket.pair();
        try (FdSocket a = p[0]) {
            p[1].close();
            IOException e = assertThrows(IOException.class, () -> {
                for (int i = 0; i < 100; i++) a.send(new byte[1024], null);
            });
            assertTrue(e.getMessage().contains("peer closed"), e.getMessage());
        }
    }

    @Test
    void pathsTooLongForASocketAreRefused() {
        Path tooLong = Path.of("/tmp/" + "x".repeat(120));
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> FdSocket.connect(tooLong));
        assertTrue(e.getMessage().contains("107"), e.getMessage());
    }

    /**
     * A refused connect says what to check by its reason: the path and the server for
     * ENOENT (here: no file) and ECONNREFUSED; the socket file's mode and group for a
     * permission refusal, which got the server hint too (an independent probe; the real
     * EACCES, from another uid, is in SocketOptionsTest).
     */
    @Test
    void aRefusedConnectSaysWhatToCheckByItsReason() throws Exception {
        Path missing = IpcTestSupport.socketPath();
        IOException e = assertThrows(IOException.class, () -> FdSocket.connect(missing));
        assertTrue(e.getMessage().contains("No such file or directory") && e.getMessage().contains("that its server is up"),
                e.getMessage());
        // A socket file nothing listens on any more: ECONNREFUSED.
        Path stale = IpcTestSupport.socketPath();
        try (jnr.unixsocket.UnixServerSocketChannel ch = jnr.unixsocket.UnixServerSocketChannel.open()) {
            ch.socket().bind(new jnr.unixsocket.UnixSocketAddress(stale.toFile()));
        }
        try {
            IOException refused = assertThrows(IOException.class, () -> FdSocket.connect(stale));
            assertTrue(refused.getMessage().contains("Connection refused")
                    && refused.getMessage().contains("that its server is up"), refused.getMessage());
        } finally {
            java.nio.file.Files.deleteIfExists(stale);
        }
        for (String denied : List.of("Permission denied", "Operation not permitted")) {
            String hint = FdSocket.connectHint(denied);
            assertFalse(hint.contains("server is up"), hint);
            assertTrue(hint.contains("the socket file's mode and group") && hint.contains("--socket-mode"), hint);
        }
        assertEquals("(expected: the socket file of a running cuvmm server)",
                FdSocket.connectHint("Too many levels of symbolic links"));
    }

    /**
     * MSG_CTRUNC: a child JVM at its open-file limit receives more fds than it has room for;
     * it must see CONTROL_TRUNCATED, close the ones that did arrive, and have its fds back.
     */
    @Test
    void fdsDroppedAtTheFdLimitAreDetectedAndClosed() throws Exception {
        Path sock = IpcTestSupport.socketPath();
        File log = File.createTempFile("cuvmm-ctrunc", ".log");
        int[] pipe = pipe();
        try (FdServerSocket server = FdServerSocket.bind(sock)) {
            Process child = IpcTestSupport.startChild(ChildMain.class, log, List.of(), List.of(), "ctrunc", sock.toString());
            try (FdSocket s = server.accept()) {
                try (ReceivedMessage ready = s.receive(1)) {
                    assertEquals(1, ready.length(), "child ready: " + IpcTestSupport.read(log));
                }
                int[] many = new int[20];
                for (int i = 0; i < many.length; i++) many[i] = i % 2 == 0 ? pipe[0] : pipe[1];
                s.send(new byte[8], many);
                assertTrue(child.waitFor(60, TimeUnit.SECONDS), "child finished");
            }
            String out = IpcTestSupport.read(log);
            assertEquals(0, child.exitValue(), out);
            assertTrue(out.contains("CONTROL_TRUNCATED"), out);
            // The message names the limit and the remedy (it said only "RLIMIT_NOFILE" before).
            assertTrue(out.contains("RLIMIT_NOFILE soft limit ") && out.contains("ulimit -n"), out);
            assertTrue(out.contains("fds back to baseline"), out);
        } finally {
            NativeIo.closeAll(pipe);
            log.delete();
            IpcTestSupport.deleteTree(sock.getParent());
        }
    }
}
