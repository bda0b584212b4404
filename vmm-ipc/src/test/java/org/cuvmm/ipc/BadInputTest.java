package org.cuvmm.ipc;

import static org.cuvmm.ipc.IpcTestSupport.assertFdsBack;
import static org.cuvmm.ipc.IpcTestSupport.await;
import static org.cuvmm.ipc.IpcTestSupport.concat;
import static org.cuvmm.ipc.IpcTestSupport.descriptorPayload;
import static org.cuvmm.ipc.IpcTestSupport.fdSnapshot;
import static org.cuvmm.ipc.IpcTestSupport.frame;
import static org.cuvmm.ipc.IpcTestSupport.header;
import static org.cuvmm.ipc.IpcTestSupport.str;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;

import jnr.constants.platform.Fcntl;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.ipc.internal.BytePattern;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * Bad input to the server from a raw socket. Each case gets a clear ERROR (and the
 * connection survives unless the stream cannot be trusted), every fd sent is closed by the
 * server, and the server keeps serving: after each case a well-behaved client attaches.
 */
class BadInputTest {
    private static final int O_NONBLOCK = 04000;
    private static final long MiB = 1L << 20;

    private static VirtualMemoryResource resource;
    private static VirtualMemoryBuffer buffer;
    private Path sock;
    private SharingServer server;
    private Map<String, Integer> base;
    private final List<String> errors = new CopyOnWriteArrayList<>();

    @BeforeAll
    static void allocate() {
        resource = VirtualMemoryResource.create(0);
        buffer = resource.allocate(resource.granularity());
        BytePattern.fill(buffer, 1);
    }

    @AfterAll
    static void release() {
        buffer.close();
        resource.close();
    }

    @BeforeEach
    void start() throws Exception {
        sock = IpcTestSupport.socketPath();
        // One good attach first: classes are loaded, so the fd baseline is stable.
        server = SharingServer.builder(sock).listener(new SharingListener() {
            @Override
            public void error(PeerCredentials peer, String client, ErrorCode code, String message, boolean byClient) {
                errors.add(code + ": " + message);
            }
        }).build();
        server.publish("b", buffer);
        assertServing();
        await("the good client's connection closed on the server side", 5, () -> server.connectionCount() == 0);
        base = fdSnapshot();
    }

    @AfterEach
    void stop() throws Exception {
        assertServing();
        await("raw connections gone", 5, () -> server.connectionCount() == 0);
        assertEquals(0, server.totalLeaseCount(), "no lease left");
        assertFdsBack(base, "after the bad input (server still running)");
        server.close();
        IpcTestSupport.deleteTree(sock.getParent());
    }

    /** A well-behaved client still attaches and reads the right bytes. */
    private void assertServing() throws Exception {
        try (SharingClient c = SharingClient.connect(sock, "good"); Attachment a = c.attach("b", resource)) {
            BytePattern.verify(a.buffer(), 1);
        }
    }

    private FdSocket connect() throws Exception { return FdSocket.connect(sock); }

    private FdSocket helloed() throws Exception {
        FdSocket s = connect();
        s.send(frame(1, 1, str("raw")), null);
        try (Frame f = FrameIO.read(s)) {
            assertEquals(FrameType.HELLO_OK, f.type);
        }
        return s;
    }

    private static Messages.Error expectError(FdSocket s, ErrorCode code, int requestId, String text) throws Exception {
        try (Frame f = FrameIO.read(s)) {
            assertNotNull(f, "an ERROR before the connection ends");
            assertEquals(FrameType.ERROR, f.type, "got " + f);
            Messages.Error e = (Messages.Error) f.message;
            assertEquals(code, e.errorCode(), e.message());
            assertEquals(requestId, f.requestId, "request id of the ERROR");
            assertTrue(e.message().contains(text), "message '" + e.message() + "' should contain '" + text + "'");
            return e;
        }
    }

    private static void expectEndOfStream(FdSocket s) throws Exception {
        assertNull(FrameIO.read(s), "the server closed the connection");
    }

    /** The connection still works: an ATTACH is answered with a DESCRIPTOR (then released). */
    private static void expectAlive(FdSocket s) throws Exception {
        s.send(frame(3, 900, str("b")), null);
        long lease;
        try (Frame f = FrameIO.read(s)) {
            assertEquals(FrameType.DESCRIPTOR, f.type, "got " + f);
            lease = ((Messages.Descriptor) f.message).leaseId();
        }
        s.send(frame(5, 901, ByteBuffer.allocate(8).putLong(lease).array()), null);
        try (Frame f = FrameIO.read(s)) {
            assertEquals(FrameType.RELEASED, f.type, "got " + f);
        }
    }

    /** A pipe whose write end we send; we keep only the non-blocking read end. */
    private static int[] pipeToSend() {
        int[] p = IpcTestSupport.pipe();
        NativeIo.posix().fcntl(p[0], Fcntl.F_SETFL, O_NONBLOCK);
        return p;
    }

    /** After we closed our write end: read() returns 0 (end of file) only if nobody else holds one. */
    private static void assertServerClosedIt(int[] pipe) {
        NativeIo.closeQuietly(pipe[1]);
        int n = NativeIo.posix().read(pipe[0], new byte[1], 1);
        NativeIo.closeQuietly(pipe[0]);
        assertEquals(0, n, "the server closed the write end it received (read: " + n + ", 0 = no writer left)");
    }

    @Test
    void truncatedPayload() throws Exception {
        try (FdSocket s = helloed()) {
            s.send(concat(header(Protocol.MAGIC, 1, 3, 7, 10), new byte[] {0, 8, 'a', 'b'}), null);
            s.shutdownOutput();
            expectError(s, ErrorCode.TRUNCATED, 7, "after 4 of the 10 payload bytes");
            expectEndOfStream(s);
        }
    }

    @Test
    void truncatedHeader() throws Exception {
        try (FdSocket s = connect()) {
            s.send(new byte[] {0x43, 0x56, 0x4D, 0x4D, 0, 1, 0}, null);
            s.shutdownOutput();
            expectError(s, ErrorCode.TRUNCATED, 0, "after 7 of the 16 header bytes");
            expectEndOfStream(s);
        }
    }

    @Test
    void peerDisconnectsMidFrameWithFdsInFlight() throws Exception {
        int[] pipe = pipeToSend();
        try (FdSocket s = helloed()) {
            s.send(concat(header(Protocol.MAGIC, 1, 4, 8, 40), new byte[12]), new int[] {pipe[1]});
        }
        await("the server saw the disconnect", 5, () -> errors.stream().anyMatch(e -> e.startsWith("TRUNCATED")));
        assertServerClosedIt(pipe);
    }

    @Test
    void wrongMagicClosesOnlyThatConnection() throws Exception {
        try (FdSocket other = helloed(); FdSocket s = connect()) {
            s.send(concat(header(0xDEADBEEF, 1, 1, 5, 0)), null);
            expectError(s, ErrorCode.BAD_MAGIC, 0, "bad magic 0xDEADBEEF");
            expectEndOfStream(s);
            expectAlive(other);
        }
    }

    @Test
    void wrongVersionIsSkippedAndTheConnectionSurvives() throws Exception {
        try (FdSocket s = helloed()) {
            s.send(concat(header(Protocol.MAGIC, 2, 3, 11, 3), new byte[] {0, 1, 'b'}), null);
            expectError(s, ErrorCode.BAD_VERSION, 11, "protocol version 2 (expected: 1)");
            expectAlive(s);
        }
    }

    @Test
    void unknownTypeIsSkipped() throws Exception {
        try (FdSocket s = helloed()) {
            s.send(frame(99, 12, new byte[5]), null);
            expectError(s, ErrorCode.UNKNOWN_TYPE, 12, "frame type 99");
            expectAlive(s);
        }
    }

    @Test
    void oversizedFrames() throws Exception {
        try (FdSocket s = helloed()) {
            s.send(header(Protocol.MAGIC, 1, 3, 13, Protocol.MAX_PAYLOAD + 1L), null);
            expectError(s, ErrorCode.TOO_LARGE, 0, "payload length 65537"); // an untrusted header: id 0
            expectEndOfStream(s);
        }
        try (FdSocket s = helloed()) {
            s.send(header(Protocol.MAGIC, 1, 3, 14, 0xFFFFFFFFL), null);
            expectError(s, ErrorCode.TOO_LARGE, 0, "payload length 4294967295");
            expectEndOfStream(s);
        }
    }

    @Test
    void framesOutOfOrder() throws Exception {
        try (FdSocket s = connect()) {
            s.send(frame(3, 20, str("b")), null);
            expectError(s, ErrorCode.UNEXPECTED_FRAME, 20, "ATTACH before HELLO");
            s.send(frame(1, 21, str("late")), null);
            try (Frame f = FrameIO.read(s)) {
                assertEquals(FrameType.HELLO_OK, f.type);
            }
            s.send(frame(1, 22, str("again")), null);
            expectError(s, ErrorCode.UNEXPECTED_FRAME, 22, "already sent");
            s.send(frame(6, 23, new byte[8]), null);
            expectError(s, ErrorCode.UNEXPECTED_FRAME, 23, "RELEASED is sent by servers");
            s.send(frame(5, 24, ByteBuffer.allocate(8).putLong(424242).array()), null);
            expectError(s, ErrorCode.UNKNOWN_LEASE, 24, "lease 424242 is not held");
            s.send(frame(3, 25, str("missing")), null);
            expectError(s, ErrorCode.UNKNOWN_NAME, 25, "no buffer is published as 'missing'");
            // A client's ERROR is logged, never answered.
            s.send(frame(8, 26, concat(ByteBuffer.allocate(4).putInt(11).array(), str("client side trouble"))), null);
            expectAlive(s);
            assertTrue(errors.stream().anyMatch(e -> e.contains("client side trouble")), errors.toString());
        }
    }

    @Test
    void fdsWithAFrameThatCarriesNone() throws Exception {
        int[] pipe = pipeToSend();
        try (FdSocket s = helloed()) {
            s.send(frame(3, 30, str("b")), new int[] {pipe[1]});
            expectError(s, ErrorCode.UNEXPECTED_FDS, 30, "ATTACH arrived with 1 fds");
            expectAlive(s);
        }
        assertServerClosedIt(pipe);
    }

    @Test
    void descriptorShapedFrameWithAPipeIsRefusedAndThePipeClosed() throws Exception {
        int[] pipe = pipeToSend();
        try (FdSocket s = helloed()) {
            s.send(frame(4, 31, descriptorPayload(1, 1, 2 * MiB, 2 * MiB)), new int[] {pipe[1]});
            expectError(s, ErrorCode.UNEXPECTED_FRAME, 31, "DESCRIPTOR is sent by servers");
            expectAlive(s);
        }
        assertServerClosedIt(pipe);
    }

    @Test
    void moreAndFewerFdsThanTheFrameSays() throws Exception {
        int[] pipe = pipeToSend();
        try (FdSocket s = helloed()) {
            s.send(frame(4, 32, descriptorPayload(1, 1, 2 * MiB, 2 * MiB)), new int[] {pipe[1], pipe[1]});
            expectError(s, ErrorCode.FD_COUNT_MISMATCH, 32, "says 1 chunks but arrived with 2 fds; closed them");
            s.send(frame(4, 33, descriptorPayload(1, 1, 6 * MiB, 2 * MiB, 2 * MiB, 2 * MiB)), new int[] {pipe[1]});
            expectError(s, ErrorCode.FD_COUNT_MISMATCH, 33, "says 3 chunks but arrived with 1 fds");
            s.send(frame(4, 34, descriptorPayload(1, 1, 2 * MiB, 2 * MiB)), null);
            // Nothing to close: the message does not say it closed them (an independent client).
            assertTrue(expectError(s, ErrorCode.FD_COUNT_MISMATCH, 34, "says 1 chunks but arrived with 0 fds").message()
                    .endsWith("arrived with 0 fds"));
            expectAlive(s);
        }
        assertServerClosedIt(pipe);
    }

    @Test
    void sizesThatAreZeroNegativeOrOverflow() throws Exception {
        int[] pipe = pipeToSend();
        int[] one = {pipe[1]};
        int[] two = {pipe[1], pipe[1]};
        try (FdSocket s = helloed()) {
            s.send(frame(4, 40, descriptorPayload(1, 1, 2 * MiB, 0)), one);
            expectError(s, ErrorCode.BAD_PAYLOAD, 40, "chunk 0 size 0");
            s.send(frame(4, 41, descriptorPayload(1, 1, 2 * MiB, -2 * MiB)), one);
            expectError(s, ErrorCode.BAD_PAYLOAD, 41, "is negative");
            s.send(frame(4, 42, descriptorPayload(1, 1, 2 * MiB, Long.MAX_VALUE, Long.MAX_VALUE)), two);
            expectError(s, ErrorCode.BAD_PAYLOAD, 42, "overflow");
            s.send(frame(4, 43, descriptorPayload(1, 1, 0, 2 * MiB)), one);
            expectError(s, ErrorCode.BAD_PAYLOAD, 43, "buffer size 0");
            s.send(frame(4, 44, descriptorPayload(1, 1, -1, 2 * MiB)), one);
            expectError(s, ErrorCode.BAD_PAYLOAD, 44, "negative");
            s.send(frame(4, 45, descriptorPayload(1, 1, 4 * MiB, 2 * MiB)), one);
            expectError(s, ErrorCode.BAD_PAYLOAD, 45, "larger than the sum");
            s.send(frame(4, 46, descriptorPayload(1, 7, 2 * MiB, 2 * MiB)), one);
            expectError(s, ErrorCode.BAD_PAYLOAD, 46, "handle type 7");
            s.send(frame(4, 47, ByteBuffer.allocate(24).putLong(1).putInt(1).putLong(1).putInt(-1).array()), one);
            expectError(s, ErrorCode.BAD_PAYLOAD, 47, "chunk count 4294967295");
            expectAlive(s);
        }
        assertServerClosedIt(pipe);
    }

    @Test
    void payloadsThatDoNotParse() throws Exception {
        try (FdSocket s = helloed()) {
            s.send(frame(3, 50, new byte[] {0, 9, 'a'}), null);
            expectError(s, ErrorCode.BAD_PAYLOAD, 50, "runs past the payload");
            s.send(frame(3, 51, concat(str("b"), new byte[] {1, 2})), null);
            expectError(s, ErrorCode.BAD_PAYLOAD, 51, "2 bytes left over");
            s.send(frame(3, 52, new byte[] {0, 2, (byte) 0xC3, (byte) 0x28}), null);
            expectError(s, ErrorCode.BAD_PAYLOAD, 52, "not valid UTF-8");
            s.send(frame(3, 53, str("")), null);
            expectError(s, ErrorCode.BAD_PAYLOAD, 53, "name is 0 bytes");
            s.send(frame(3, 54, str("n".repeat(256))), null);
            expectError(s, ErrorCode.BAD_PAYLOAD, 54, "name is 256 bytes");
            s.send(frame(5, 55, new byte[7]), null);
            expectError(s, ErrorCode.BAD_PAYLOAD, 55, "ends before its fields");
            s.send(frame(3, 56, new byte[0]), null);
            expectError(s, ErrorCode.BAD_PAYLOAD, 56, "ends before its fields");
            expectAlive(s);
        }
    }

    @Test
    void tooManyConnectionsAreRefused() throws Exception {
        Path other = IpcTestSupport.socketPath();
        try (SharingServer small = SharingServer.builder(other).maxConnections(1).build();
             FdSocket first = FdSocket.connect(other)) {
            assertTrue(first.isOpen());
            await("first connection admitted", 5, () -> small.connectionCount() == 1);
            try (FdSocket second = FdSocket.connect(other)) {
                expectError(second, ErrorCode.TOO_MANY_CONNECTIONS, 0, "too many connections");
                expectEndOfStream(second);
            }
        } finally {
            IpcTestSupport.deleteTree(other.getParent());
        }
    }
}
