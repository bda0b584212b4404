package org.cuvmm.ipc;

import static org.cuvmm.ipc.IpcTestSupport.await;
import static org.cuvmm.ipc.IpcTestSupport.concat;
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
import java.util.concurrent.CopyOnWriteArrayList;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * The rules of docs/PROTOCOL.md that the outside review found ambiguous, one test each:
 * ERRORs are never answered (malformed or before HELLO), an untrusted header's ERROR carries
 * request id 0, and requests with id 0 are refused.
 */
class ProtocolRulesTest {
    private Path sock;
    private VirtualMemoryResource resource;
    private VirtualMemoryBuffer buffer;
    private SharingServer server;
    private final List<String> errors = new CopyOnWriteArrayList<>();

    @BeforeEach
    void start() throws Exception {
        sock = IpcTestSupport.socketPath();
        resource = VirtualMemoryResource.create(0);
        buffer = resource.allocate(resource.granularity());
        server = SharingServer.builder(sock).listener(new SharingListener() {
            @Override
            public void error(PeerCredentials peer, String client, ErrorCode code, String message, boolean byClient) {
                errors.add(code + ": " + message);
            }
        }).build();
        server.publish("b", buffer);
    }

    @AfterEach
    void stop() throws Exception {
        await("connections gone", 10, () -> server.connectionCount() == 0);
        server.close();
        buffer.close();
        resource.close();
        IpcTestSupport.deleteTree(sock.getParent());
    }

    private FdSocket helloed() throws Exception {
        FdSocket s = FdSocket.connect(sock);
        s.send(frame(1, 1, str("raw")), null);
        expect(s, FrameType.HELLO_OK, 1);
        return s;
    }

    private static Frame expect(FdSocket s, FrameType type, int requestId) throws Exception {
        Frame f = FrameIO.read(s);
        assertNotNull(f, "a " + type + " before the end of stream");
        try (f) {
            assertEquals(type, f.type, "got " + f + (f.message instanceof Messages.Error e ? ": " + e.message() : ""));
            assertEquals(requestId, f.requestId, "request id of " + f);
        }
        return f;
    }

    private static void expectError(FdSocket s, ErrorCode code, int requestId, String text) throws Exception {
        try (Frame f = FrameIO.read(s)) {
            assertNotNull(f, "an ERROR before the end of stream");
            assertEquals(FrameType.ERROR, f.type, "got " + f);
            Messages.Error e = (Messages.Error) f.message;
            assertEquals(code, e.errorCode(), e.message());
            assertEquals(requestId, f.requestId, "request id of the ERROR");
            assertTrue(e.message().contains(text), "message '" + e.message() + "' should contain '" + text + "'");
        }
    }

    /** An ATTACH then a RELEASE; the first frame back must be the DESCRIPTOR (nothing answered what came before). */
    private static void expectNextReplyIsTheAttach(FdSocket s, int id) throws Exception {
        s.send(frame(3, id, str("b")), null);
        long lease;
        try (Frame f = FrameIO.read(s)) {
            assertEquals(FrameType.DESCRIPTOR, f.type, "the next frame answers the ATTACH; got " + f
                    + (f.message instanceof Messages.Error e ? ": " + e.errorCode() + " " + e.message() : ""));
            assertEquals(id, f.requestId);
            lease = ((Messages.Descriptor) f.message).leaseId();
        }
        s.send(frame(5, id + 1, ByteBuffer.allocate(8).putLong(lease).array()), null);
        expect(s, FrameType.RELEASED, id + 1);
    }

    private static byte[] errorPayload(int code, String message) {
        return concat(ByteBuffer.allocate(4).putInt(code).array(), str(message));
    }

    @Test
    void aMalformedErrorFromTheClientIsNotAnswered() throws Exception {
        int[] pipe = IpcTestSupport.pipe();
        try (FdSocket s = helloed()) {
            s.send(frame(8, 60, new byte[] {0, 0, 0}), null); // too short for its fields
            s.send(frame(8, 61, concat(errorPayload(11, "x"), new byte[] {9})), null); // bytes left over
            s.send(frame(8, 62, errorPayload(11, "with an fd")), new int[] {pipe[1]}); // fds on an ERROR
            s.send(frame(8, 0, new byte[] {0, 0, 0, 11, 0, 2, (byte) 0xC3, (byte) 0x28}), null); // not UTF-8
            expectNextReplyIsTheAttach(s, 63);
        } finally {
            NativeIo.closeQuietly(pipe[1]);
        }
        assertEquals(0, NativeIo.posix().read(pipe[0], new byte[1], 1), "the server closed the fd the ERROR carried");
        NativeIo.closeQuietly(pipe[0]);
        assertEquals(4, errors.stream().filter(e -> e.contains("a malformed ERROR from the client (not answered)")).count(),
                errors.toString());
    }

    /** An ERROR with a bad protocol version has a trusted header: it is not answered either. */
    @Test
    void anErrorWithABadVersionIsNotAnswered() throws Exception {
        try (FdSocket s = helloed()) {
            byte[] p = errorPayload(11, "from the future");
            s.send(concat(header(Protocol.MAGIC, 2, 8, 70, p.length), p), null);
            expectNextReplyIsTheAttach(s, 71);
        }
        assertTrue(errors.stream().anyMatch(e -> e.startsWith("BAD_VERSION: a malformed ERROR from the client (not "
                + "answered)")), errors.toString());
    }

    /**
     * An ERROR that carries more than 253 fds breaks the stream: the connection is closed
     * without an answer (an ERROR is never answered), and the fds are closed.
     */
    @Test
    void anErrorWithTooManyFdsClosesTheConnectionUnanswered() throws Exception {
        int[] pipe = IpcTestSupport.pipe();
        int[] fds = new int[200];
        java.util.Arrays.fill(fds, pipe[1]);
        try (FdSocket s = helloed()) {
            byte[] p = errorPayload(11, "fd flood");
            s.send(header(Protocol.MAGIC, 1, 8, 72, p.length), fds);
            s.send(p, java.util.Arrays.copyOf(fds, 60));
            assertNull(FrameIO.read(s), "the end of stream, no ERROR answering the ERROR");
        } finally {
            NativeIo.closeQuietly(pipe[1]);
        }
        assertEquals(0, NativeIo.posix().read(pipe[0], new byte[1], 1), "the server closed every fd the ERROR carried");
        NativeIo.closeQuietly(pipe[0]);
        assertTrue(errors.stream().anyMatch(e -> e.startsWith("FD_COUNT_MISMATCH: a malformed ERROR from the client "
                + "(not answered; closing the connection)")), errors.toString());
    }

    @Test
    void anErrorBeforeHelloIsNotAnsweredAndIsNotAHello() throws Exception {
        try (FdSocket s = FdSocket.connect(sock)) {
            s.send(frame(8, 5, errorPayload(11, "client trouble before hello")), null);
            s.send(frame(3, 6, str("b")), null); // still before HELLO
            expectError(s, ErrorCode.UNEXPECTED_FRAME, 6, "ATTACH before HELLO");
            s.send(frame(1, 7, str("late")), null);
            expect(s, FrameType.HELLO_OK, 7);
            expectNextReplyIsTheAttach(s, 8);
        }
        assertTrue(errors.stream().anyMatch(e -> e.contains("client trouble before hello")), errors.toString());
    }

    @Test
    void anUntrustedHeadersErrorCarriesRequestId0() throws Exception {
        try (FdSocket s = helloed()) {
            s.send(header(Protocol.MAGIC, 1, 3, 4242, Protocol.MAX_PAYLOAD + 1L), null);
            expectError(s, ErrorCode.TOO_LARGE, 0, "payload length 65537");
            assertNull(FrameIO.read(s), "TOO_LARGE is fatal: the connection ends");
        }
        try (FdSocket s = helloed()) {
            s.send(header(0x12345678, 1, 3, 4243, 0), null);
            expectError(s, ErrorCode.BAD_MAGIC, 0, "bad magic");
            assertNull(FrameIO.read(s));
        }
        try (FdSocket s = helloed()) {
            // A trusted header, a payload cut short: the ERROR names the request.
            s.send(concat(header(Protocol.MAGIC, 1, 3, 4244, 10), new byte[] {0, 8}), null);
            s.shutdownOutput();
            expectError(s, ErrorCode.TRUNCATED, 4244, "after 2 of the 10 payload bytes");
            assertNull(FrameIO.read(s));
        }
    }

    @Test
    void requestsWithId0AreRefused() throws Exception {
        try (FdSocket s = FdSocket.connect(sock)) {
            s.send(frame(3, 0, str("b")), null); // before HELLO too: the request-id rule comes first
            expectError(s, ErrorCode.BAD_REQUEST_ID, 0, "ATTACH with request id 0");
            s.send(frame(1, 0, str("zero")), null);
            expectError(s, ErrorCode.BAD_REQUEST_ID, 0, "HELLO with request id 0");
            s.send(frame(1, 1, str("one")), null);
            expect(s, FrameType.HELLO_OK, 1); // the refused HELLO did not count
            s.send(frame(3, 0, str("b")), null);
            expectError(s, ErrorCode.BAD_REQUEST_ID, 0, "ATTACH with request id 0 (expected: a non-zero id");
            assertEquals(0, server.totalLeaseCount(), "no lease for a refused ATTACH");
            s.send(frame(5, 0, ByteBuffer.allocate(8).putLong(1).array()), null);
            expectError(s, ErrorCode.BAD_REQUEST_ID, 0, "RELEASE with request id 0");
            expectNextReplyIsTheAttach(s, 2);
        }
    }
}
