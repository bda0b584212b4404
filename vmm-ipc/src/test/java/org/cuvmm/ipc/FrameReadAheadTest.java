package org.cuvmm.ipc;

import static org.cuvmm.ipc.IpcTestSupport.assertFdsBack;
import static org.cuvmm.ipc.IpcTestSupport.concat;
import static org.cuvmm.ipc.IpcTestSupport.fdSnapshot;
import static org.cuvmm.ipc.IpcTestSupport.header;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.ClosedChannelException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.Test;

/**
 * Reading ahead (docs/PROTOCOL.md section 1): a frame that arrives whole costs one {@code
 * recvmsg}; frames that arrived together are returned in order, the later ones with no call;
 * the fds of a read go to the last frame that starts in it; the fd limit and its errors stay
 * as with exact reads; buffered fds are closed with the socket.
 */
class FrameReadAheadTest {
    private static final long MIB2 = 2L << 20;

    private static byte[] released(int requestId, long lease) {
        return Frame.encode(new Messages.Released(lease), requestId);
    }

    private static byte[] descriptor(int requestId, long lease, int chunks) {
        long[] sizes = new long[chunks];
        Arrays.fill(sizes, MIB2);
        return Frame.encode(new Messages.Descriptor(lease, Protocol.HANDLE_TYPE_POSIX_FD, MIB2 * chunks, sizes),
                requestId);
    }

    /** recvmsg calls on {@code s} that read bytes. */
    private static long reads(FdSocket s) {
        long[] c = s.ioCalls();
        return c[0] - c[2];
    }

    private static int[] copies(int[] pipe, int n) {
        int[] fds = new int[n];
        for (int i = 0; i < n; i++) fds[i] = pipe[i % 2];
        return fds;
    }

    @Test
    void framesWrittenTogetherAreReadInOrderWithOneRecvmsg() throws Exception {
        FdSocket[] p = FdSocket.pair();
        try (FdSocket a = p[0]; FdSocket b = p[1]) {
            a.send(concat(released(1, 11), Frame.encode(new Messages.Attach("frame"), 2), released(3, 33)), null);
            Frame f1 = FrameIO.read(b);
            assertEquals(1, reads(b), "recvmsg calls after the first frame");
            Frame f2 = FrameIO.read(b);
            Frame f3 = FrameIO.read(b);
            assertEquals(1, reads(b), "recvmsg calls for three frames written together");
            assertEquals(new Messages.Released(11), f1.message);
            assertEquals(1, f1.requestId);
            assertEquals(new Messages.Attach("frame"), f2.message);
            assertEquals(2, f2.requestId);
            assertEquals(new Messages.Released(33), f3.message);
            assertEquals(3, f3.requestId);
            assertEquals(0, b.bufferedBytes());
            a.shutdownOutput();
            assertNull(FrameIO.read(b), "end of stream between frames");
        }
    }

    @Test
    void aFrameWrittenOneByteAtATimeReadsCorrectly() throws Exception {
        FdSocket[] p = FdSocket.pair();
        byte[] all = concat(released(1, 11), descriptor(2, 22, 2), released(3, 33));
        int[] pipe = IpcTestSupport.pipe();
        ConcurrentLinkedQueue<Throwable> errors = new ConcurrentLinkedQueue<>();
        int descriptorAt = released(1, 11).length;
        try (FdSocket a = p[0]; FdSocket b = p[1]) {
            Thread writer = new Thread(() -> {
                try {
                    for (int i = 0; i < all.length; i++) {
                        // The DESCRIPTOR's fds ride on its first byte, as a conforming sender's do.
                        a.send(new byte[] {all[i]}, i == descriptorAt ? pipe : null);
                        if (i % 3 == 0) Thread.yield();
                    }
                } catch (Throwable t) {
                    errors.add(t);
                }
            }, "one-byte-writer");
            writer.start();
            try (Frame f1 = FrameIO.read(b); Frame f2 = FrameIO.read(b); Frame f3 = FrameIO.read(b)) {
                assertEquals(new Messages.Released(11), f1.message);
                assertEquals(0, f1.fdCount());
                assertEquals(FrameType.DESCRIPTOR, f2.type);
                assertEquals(2, f2.fdCount(), "the DESCRIPTOR's fds");
                assertEquals(new Messages.Released(33), f3.message);
                assertEquals(0, f3.fdCount());
            }
            writer.join(TimeUnit.SECONDS.toMillis(10));
            assertFalse(writer.isAlive());
            assertTrue(errors.isEmpty(), errors.toString());
        } finally {
            NativeIo.closeAll(pipe);
        }
    }

    /**
     * Two fd-less frames, then a DESCRIPTOR with 2 fds, each its own sendmsg, all queued
     * before the read: one recvmsg takes the three (Linux stops after the segment with fds);
     * the fds go to the DESCRIPTOR, the frames before it get none; the frame sent after it
     * needs a second recvmsg.
     */
    @Test
    void fdsGoToTheLastFrameStartingInTheRead() throws Exception {
        Map<String, Integer> base = fdSnapshot();
        FdSocket[] p = FdSocket.pair();
        int[] pipe = IpcTestSupport.pipe();
        try (FdSocket a = p[0]; FdSocket b = p[1]) {
            a.send(released(1, 11), null);
            a.send(released(2, 22), null);
            a.send(descriptor(3, 33, 2), pipe);
            a.send(released(4, 44), null);
            try (Frame f1 = FrameIO.read(b); Frame f2 = FrameIO.read(b); Frame f3 = FrameIO.read(b)) {
                assertEquals(1, reads(b), "recvmsg calls for the three frames up to the one with fds");
                assertEquals(0, f1.fdCount());
                assertEquals(0, f2.fdCount());
                assertEquals(FrameType.DESCRIPTOR, f3.type);
                assertEquals(2, f3.fdCount());
                try (Frame f4 = FrameIO.read(b)) {
                    assertEquals(new Messages.Released(44), f4.message);
                    assertEquals(0, f4.fdCount());
                }
                assertEquals(2, reads(b), "the frame after the one with fds: a second recvmsg");
            }
        } finally {
            NativeIo.closeAll(pipe);
        }
        assertFdsBack(base, "after frames read ahead with fds");
    }

    /**
     * A non-conforming sender splits a RELEASED in two sendmsg and puts an fd on the second:
     * the fd belongs to the frame in progress (UNEXPECTED_FDS, not fatal; the fd closed),
     * and the next frame reads clean, as with exact reads.
     */
    @Test
    void fdsArrivingMidFrameStillGoToThatFrame() throws Exception {
        Map<String, Integer> base = fdSnapshot();
        FdSocket[] p = FdSocket.pair();
        int[] pipe = IpcTestSupport.pipe();
        try (FdSocket a = p[0]; FdSocket b = p[1]) {
            byte[] f = released(1, 11);
            a.send(Arrays.copyOf(f, Protocol.HEADER_SIZE + 3), null);
            a.send(Arrays.copyOfRange(f, Protocol.HEADER_SIZE + 3, f.length), new int[] {pipe[0]});
            a.send(released(2, 22), null);
            ProtocolException e = assertThrows(ProtocolException.class, () -> FrameIO.read(b));
            assertEquals(ErrorCode.UNEXPECTED_FDS, e.code(), e.getMessage());
            assertFalse(e.fatal(), e.getMessage());
            assertEquals(1, e.requestId());
            try (Frame next = FrameIO.read(b)) {
                assertEquals(new Messages.Released(22), next.message);
                assertEquals(0, next.fdCount());
            }
        } finally {
            NativeIo.closeAll(pipe);
        }
        assertFdsBack(base, "after fds arrived mid-frame");
    }

    /**
     * Two fd-less frames read ahead with the first 15 header bytes of a third that carry 200
     * fds; its 16th byte brings 60 more: the first two frames are returned, the third is
     * refused, fatally (more than 253 fds in one frame), and no fd stays open.
     */
    @Test
    void passingTheLimitInAFrameReadAheadIsStillFatal() throws Exception {
        Map<String, Integer> base = fdSnapshot();
        FdSocket[] p = FdSocket.pair();
        int[] pipe = IpcTestSupport.pipe();
        try (FdSocket a = p[0]; FdSocket b = p[1]) {
            byte[] payload = {0, 0};
            byte[] h = header(Protocol.MAGIC, Protocol.VERSION, FrameType.HELLO.code(), 7, payload.length);
            a.send(released(1, 11), null);
            a.send(released(2, 22), null);
            a.send(Arrays.copyOf(h, Protocol.HEADER_SIZE - 1), copies(pipe, 200));
            a.send(new byte[] {h[Protocol.HEADER_SIZE - 1]}, copies(pipe, 60));
            a.send(payload, null);
            try (Frame f1 = FrameIO.read(b); Frame f2 = FrameIO.read(b)) {
                assertEquals(new Messages.Released(11), f1.message);
                assertEquals(new Messages.Released(22), f2.message);
            }
            ProtocolException e = assertThrows(ProtocolException.class, () -> FrameIO.read(b));
            assertEquals(ErrorCode.FD_COUNT_MISMATCH, e.code(), e.getMessage());
            assertTrue(e.fatal(), e.getMessage());
        } finally {
            NativeIo.closeAll(pipe);
        }
        assertFdsBack(base, "after a frame read ahead passed the fd limit");
    }

    /** A raw receive after frame reads takes the buffered bytes first, with their frame's fds. */
    @Test
    void aRawReceiveTakesTheBufferedBytesAndFdsFirst() throws Exception {
        Map<String, Integer> base = fdSnapshot();
        FdSocket[] p = FdSocket.pair();
        int[] pipe = IpcTestSupport.pipe();
        try (FdSocket a = p[0]; FdSocket b = p[1]) {
            byte[] d = descriptor(2, 22, 2);
            a.send(released(1, 11), null);
            a.send(d, pipe);
            a.send(new byte[] {1, 2, 3}, null);
            try (Frame f1 = FrameIO.read(b)) {
                assertEquals(new Messages.Released(11), f1.message);
            }
            assertEquals(d.length, b.bufferedBytes());
            try (ReceivedMessage m = b.receive(d.length + 3)) {
                assertArrayEquals(concat(d, new byte[] {1, 2, 3}), m.data());
                assertEquals(2, m.fdCount(), "the buffered frame's fds");
            }
            assertEquals(0, b.bufferedBytes());
        } finally {
            NativeIo.closeAll(pipe);
        }
        assertFdsBack(base, "after a raw receive took buffered fds");
    }

    /** Closing the socket closes the fds of a frame still in the buffer. */
    @Test
    void closingTheSocketClosesBufferedFds() throws Exception {
        Map<String, Integer> base = fdSnapshot();
        FdSocket[] p = FdSocket.pair();
        int[] pipe = IpcTestSupport.pipe();
        try (FdSocket a = p[0]; FdSocket b = p[1]) {
            a.send(released(1, 11), null);
            a.send(descriptor(2, 22, 2), pipe);
            NativeIo.closeAll(pipe);
            try (Frame f1 = FrameIO.read(b)) {
                assertEquals(new Messages.Released(11), f1.message);
            }
            assertTrue(b.bufferedBytes() > 0, "the DESCRIPTOR waits in the buffer");
            b.close();
            assertThrows(ClosedChannelException.class, () -> FrameIO.read(b));
        }
        assertFdsBack(base, "after the socket closed with a frame and its fds buffered");
    }

    /**
     * Several threads read frames (and raw bytes) while a peer sends frames with fds, and the
     * socket is closed under them: every call ends (a frame, an error, or closed), no crash,
     * and every fd is closed once.
     */
    @Test
    void closeRacingReadersLeavesNoFdOpen() throws Exception {
        Map<String, Integer> base = fdSnapshot();
        int[] pipe = IpcTestSupport.pipe();
        try {
            for (int round = 0; round < 20; round++) {
                FdSocket[] p = FdSocket.pair();
                FdSocket a = p[0];
                FdSocket b = p[1];
                int readers = 4;
                CountDownLatch started = new CountDownLatch(readers);
                ConcurrentLinkedQueue<Throwable> unexpected = new ConcurrentLinkedQueue<>();
                List<Thread> threads = new ArrayList<>();
                for (int t = 0; t < readers; t++) {
                    boolean raw = t == readers - 1;
                    Thread th = new Thread(() -> {
                        started.countDown();
                        for (;;) {
                            try {
                                if (raw) {
                                    try (ReceivedMessage m = b.receive(7)) {
                                        if (m.endOfStream()) return;
                                    }
                                } else {
                                    try (Frame f = FrameIO.read(b)) {
                                        if (f == null) return;
                                    }
                                }
                            } catch (ClosedChannelException closed) {
                                return;
                            } catch (IOException expected) {
                                // a protocol error (readers interleaved) or a reset: keep reading
                            } catch (Throwable x) {
                                unexpected.add(x);
                                return;
                            }
                        }
                    }, "reader-" + t);
                    threads.add(th);
                    th.start();
                }
                started.await(10, TimeUnit.SECONDS);
                for (int i = 0; i < 30; i++) {
                    a.send(released(i, i + 1), null);
                    a.send(descriptor(i, i + 1, 2), pipe);
                }
                b.close();
                for (Thread th : threads) {
                    th.join(TimeUnit.SECONDS.toMillis(10));
                    assertFalse(th.isAlive(), th.getName() + " still reading after close");
                }
                a.close();
                assertTrue(unexpected.isEmpty(), unexpected.toString());
            }
        } finally {
            NativeIo.closeAll(pipe);
        }
        assertFdsBack(base, "after closes raced readers with frames and fds buffered");
    }

    /**
     * MSG_CTRUNC on a read ahead: a child JVM at its open-file limit reads a RELEASED and a
     * DESCRIPTOR with 20 fds in one recvmsg (the kernel drops most fds); the RELEASED reads
     * clean, the DESCRIPTOR is refused with a non-fatal FD_COUNT_MISMATCH, the next frame
     * reads clean, and the child's fds are back to baseline.
     */
    @Test
    void fdsDroppedOnAReadAheadRefuseTheirFrameOnly() throws Exception {
        Path sock = IpcTestSupport.socketPath();
        File log = File.createTempFile("cuvmm-ctrunc-ahead", ".log");
        int[] pipe = IpcTestSupport.pipe();
        try (FdServerSocket server = FdServerSocket.bind(sock)) {
            Process child = IpcTestSupport.startChild(ChildMain.class, log, List.of(), List.of(), "ctruncAhead",
                    sock.toString());
            try (FdSocket frames = server.accept(); FdSocket go = server.accept()) {
                try (ReceivedMessage ready = go.receive(1, 0)) {
                    assertEquals(1, ready.length(), "child ready: " + IpcTestSupport.read(log));
                }
                frames.send(released(1, 11), null);
                frames.send(descriptor(2, 22, 20), copies(pipe, 20));
                frames.send(released(3, 33), null);
                go.send(new byte[] {1}, null);
                assertTrue(child.waitFor(60, TimeUnit.SECONDS), "child finished");
            }
            String out = IpcTestSupport.read(log);
            assertEquals(0, child.exitValue(), out);
            assertTrue(out.contains("first Released[leaseId=11] fds 0; recvmsg 1; second FD_COUNT_MISMATCH not fatal; "
                    + "third Released[leaseId=33] fds 0"), out);
            assertTrue(out.contains("fds back to baseline"), out);
        } finally {
            NativeIo.closeAll(pipe);
            log.delete();
            IpcTestSupport.deleteTree(sock.getParent());
        }
    }

    /** Who owns a read's fds: the last frame starting in the read, else the frame in progress. */
    @Test
    void ownerOfReadWalksTheFrameHeaders() {
        byte[] f1 = released(1, 11); // 16 + 8 bytes
        byte[] f2 = released(2, 22);
        ByteBuffer data = ByteBuffer.wrap(concat(f1, f2, Arrays.copyOf(f1, 5)));
        int at2 = f1.length;
        int at3 = f1.length + f2.length;
        assertEquals(at3, FrameBuffer.ownerOfRead(data, 0, data.capacity()), "a partial header starts a frame too");
        assertEquals(at2, FrameBuffer.ownerOfRead(data, 0, at3), "the last whole frame");
        assertEquals(0, FrameBuffer.ownerOfRead(data, 0, at2), "one frame");
        assertEquals(0, FrameBuffer.ownerOfRead(data, 5, at2 - 1), "no frame starts in the read: the one in progress");
        assertEquals(at2, FrameBuffer.ownerOfRead(data, 5, at3), "after a partial header");
        ByteBuffer bad = ByteBuffer.wrap(concat(f1, header(0x12345678, 1, 1, 1, 0), f2));
        assertEquals(at2, FrameBuffer.ownerOfRead(bad, 0, bad.capacity()), "a bad header ends the walk");
    }

    /**
     * A conforming sender may send a frame's first bytes with its fds in a short sendmsg and
     * the rest with a plain write (PROTOCOL.md section 1). The reader must not read ahead
     * while it holds fds of the frame in progress: the next DESCRIPTOR's fds would then meet
     * a control area sized for the first frame's remaining allowance (54) and be dropped
     * (MSG_CTRUNC), refusing a valid frame. From the independent review of this change.
     */
    @Test
    void noReadAheadWhileFdsAreHeldForTheFrameInProgress() throws Exception {
        Map<String, Integer> base = fdSnapshot();
        FdSocket[] p = FdSocket.pair();
        int[] pipe = IpcTestSupport.pipe();
        try (FdSocket a = p[0]; FdSocket b = p[1]) {
            byte[] f = descriptorOf(1, 11, 200);
            int[] f200 = new int[200];
            Arrays.fill(f200, pipe[0]);
            int[] f100 = new int[100];
            Arrays.fill(f100, pipe[1]);
            a.send(f, 0, 5, f200);              // short first sendmsg, the fds on it
            a.send(f, 5, f.length - 5, null);   // continued with a plain write
            a.send(descriptorOf(2, 22, 100), f100);
            try (Frame f1 = FrameIO.read(b)) {
                assertEquals(200, f1.fdCount());
            }
            try (Frame f2 = FrameIO.read(b)) {
                assertEquals(100, f2.fdCount());
            }
        } finally {
            NativeIo.closeAll(pipe);
        }
        assertFdsBack(base, "after two DESCRIPTORs, the first sent in two parts");
    }

    private static byte[] descriptorOf(int requestId, long lease, int chunks) {
        long[] sizes = new long[chunks];
        Arrays.fill(sizes, 2L << 20);
        return Frame.encode(new Messages.Descriptor(lease, Protocol.HANDLE_TYPE_POSIX_FD, (2L << 20) * chunks, sizes),
                requestId);
    }
}
