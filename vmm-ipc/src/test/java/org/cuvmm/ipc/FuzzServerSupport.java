package org.cuvmm.ipc;

import static org.cuvmm.ipc.IpcTestSupport.await;
import static org.cuvmm.ipc.IpcTestSupport.concat;
import static org.cuvmm.ipc.IpcTestSupport.descriptorPayload;
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

import jnr.ffi.LibraryLoader;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.ipc.internal.BytePattern;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * Independent probe (frame fuzzer), server side: the fixture. A server with one published
 * buffer; after each case it must still serve a good client, and no fd, connection thread or
 * lease may be left (fds counted by kind in /proc/self/fd, settled with retries).
 */
abstract class FuzzServerSupport {
    /** libc calls to make fds of every kind. */
    public interface LibC {
        int open(String path, int flags);
        int socket(int domain, int type, int protocol);
        int memfd_create(String name, int flags);
        int ftruncate(int fd, long length);
        int close(int fd);
    }

    static final LibC LIBC = LibraryLoader.create(LibC.class).load("c");
    static VirtualMemoryResource resource;
    static VirtualMemoryBuffer buffer;
    Path sock;
    SharingServer server;
    Map<String, Integer> base;
    int baseThreads;
    final List<String> errors = new CopyOnWriteArrayList<>();

    @BeforeAll
    static void allocate() {
        resource = VirtualMemoryResource.create(0);
        buffer = resource.allocate(resource.granularity());
        BytePattern.fill(buffer, 3);
    }

    @AfterAll
    static void release() {
        buffer.close();
        resource.close();
    }

    SharingServer.Builder builder(Path p) {
        return SharingServer.builder(p).listener(new SharingListener() {
            @Override
            public void error(PeerCredentials peer, String client, ErrorCode code, String message, boolean byClient) {
                errors.add(code + ": " + message);
            }
        });
    }

    @BeforeEach
    void start() throws Exception {
        sock = IpcTestSupport.socketPath();
        server = builder(sock).build();
        server.publish("b", buffer);
        assertServing();
        await("good client gone", 5, () -> server.connectionCount() == 0);
        base = IpcTestSupport.fdSnapshot();
        baseThreads = connThreads();
    }

    @AfterEach
    void stop() throws Exception {
        assertServing();
        await("raw connections gone", 10, () -> server.connectionCount() == 0);
        assertEquals(0, server.totalLeaseCount(), "no lease left");
        IpcTestSupport.assertFdsBack(base, "after the bad input (server still running)");
        await("connection threads gone (" + connThreads() + " vs " + baseThreads + ")", 10,
                () -> connThreads() <= baseThreads);
        server.close();
        IpcTestSupport.deleteTree(sock.getParent());
    }

    static int connThreads() {
        int n = 0;
        for (Thread t : Thread.getAllStackTraces().keySet()) if (t.getName().startsWith("cuvmm-ipc-conn")) n++;
        return n;
    }

    void assertServing() throws Exception {
        try (SharingClient c = SharingClient.connect(sock, "good"); Attachment a = c.attach("b", resource)) {
            BytePattern.verify(a.buffer(), 3);
        }
    }

    static byte[] frameV(int version, int type, int requestId, byte[] payload) {
        return concat(header(Protocol.MAGIC, version, type, requestId, payload.length), payload);
    }

    static byte[] frame(int type, int requestId, byte[] payload) { return frameV(1, type, requestId, payload); }

    FdSocket helloed(int version) throws Exception {
        FdSocket s = FdSocket.connect(sock);
        s.send(frameV(version, 1, 1, str("probe")), null);
        try (Frame f = FrameIO.read(s)) {
            assertEquals(FrameType.HELLO_OK, f.type, "got " + f);
            assertEquals(version, f.version);
        }
        return s;
    }

    static Messages.Error expectError(FdSocket s, ErrorCode code, int requestId, String text) throws Exception {
        try (Frame f = FrameIO.read(s)) {
            assertNotNull(f, "an ERROR " + code + " before the end of stream");
            assertEquals(FrameType.ERROR, f.type, "got " + f);
            Messages.Error e = (Messages.Error) f.message;
            assertEquals(code, e.errorCode(), e.message());
            assertEquals(requestId, f.requestId, "request id of the ERROR " + e.message());
            assertTrue(e.message().contains(text), "message '" + e.message() + "' should contain '" + text + "'");
            return e;
        }
    }

    static void expectAlive(FdSocket s, int version, int id) throws Exception {
        s.send(frameV(version, 3, id, str("b")), null);
        long lease;
        try (Frame f = FrameIO.read(s)) {
            assertNotNull(f);
            assertEquals(FrameType.DESCRIPTOR, f.type, "got " + f);
            lease = f.message instanceof Messages.Descriptor d ? d.leaseId() : ((Messages.DescriptorV2) f.message).leaseId();
        }
        s.send(frameV(version, 5, id + 1, ByteBuffer.allocate(8).putLong(lease).array()), null);
        try (Frame f = FrameIO.read(s)) {
            assertEquals(FrameType.RELEASED, f.type, "got " + f);
            assertEquals(id + 1, f.requestId);
        }
    }

    static byte[] u64(long v) { return ByteBuffer.allocate(8).putLong(v).array(); }

    static byte[] idList(int count, long... ids) {
        ByteBuffer b = ByteBuffer.allocate(4 + 8 * ids.length).putInt(count);
        for (long id : ids) b.putLong(id);
        return b.array();
    }

    /** fds of every kind: a directory, /dev/null, a socket, a foreign memfd, a pipe end. */
    static int[] strangeFds() {
        int dir = LIBC.open("/tmp", 0200000 /* O_DIRECTORY */);
        int nul = LIBC.open("/dev/null", 2);
        int so = LIBC.socket(1 /* AF_UNIX */, 1 /* SOCK_STREAM */, 0);
        int mfd = LIBC.memfd_create("probe-foreign", 1);
        LIBC.ftruncate(mfd, 2 << 20);
        int[] p = IpcTestSupport.pipe();
        NativeIo.closeQuietly(p[0]);
        int[] fds = {dir, nul, so, mfd, p[1]};
        for (int fd : fds) assertTrue(fd >= 0, "fd made");
        return fds;
    }
}
