package org.cuvmm.ipc;

import static org.cuvmm.ipc.IpcTestSupport.assertFdsBack;
import static org.cuvmm.ipc.IpcTestSupport.descriptorPayload;
import static org.cuvmm.ipc.IpcTestSupport.fdSnapshot;
import static org.cuvmm.ipc.IpcTestSupport.frame;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * A fake server sends the client bad DESCRIPTORs: the client closes every fd it received,
 * releases a lease it was granted, tells the server why, and throws a clear exception.
 */
class ClientBadInputTest {
    private static final long MiB = 1L << 20;
    private Path sock;
    private VirtualMemoryResource resource;

    @BeforeEach
    void setUp() throws Exception {
        sock = IpcTestSupport.socketPath();
        resource = VirtualMemoryResource.create(0);
    }

    @AfterEach
    void tearDown() {
        resource.close();
        IpcTestSupport.deleteTree(sock.getParent());
    }

    /** What the fake server received after its bad answer to ATTACH. */
    private List<Frame> serve(byte[] answer, int[] fds, int expectFrames) throws Exception {
        List<Frame> seen = new CopyOnWriteArrayList<>();
        try (FdServerSocket server = FdServerSocket.bind(sock)) {
            CompletableFuture<Void> fake = CompletableFuture.runAsync(() -> {
                try (FdSocket s = server.accept()) {
                    try (Frame hello = FrameIO.read(s)) {
                        s.send(frame(2, hello.requestId, new byte[] {0, 1, 0, (byte) 253}), null);
                    }
                    try (Frame attach = FrameIO.read(s)) {
                        ByteBuffer b = ByteBuffer.wrap(answer.clone());
                        b.putInt(8, attach.requestId); // answer the request the client made
                        s.send(b.array(), fds);
                    }
                    for (int i = 0; i < expectFrames; i++) {
                        try (Frame f = FrameIO.read(s)) {
                            if (f == null) break;
                            seen.add(f);
                            if (f.type == FrameType.RELEASE) {
                                s.send(frame(6, f.requestId, ByteBuffer.allocate(8)
                                        .putLong(((Messages.Release) f.message).leaseId()).array()), null);
                            }
                        }
                    }
                } catch (IOException e) {
                    throw new java.io.UncheckedIOException(e);
                }
            });
            try (SharingClient c = SharingClient.connect(sock, "victim")) {
                c.setTimeout(java.time.Duration.ofSeconds(10));
                SharingException e = assertThrows(SharingException.class, () -> c.attach("x", resource));
                fake.get(10, TimeUnit.SECONDS); // the fake server has read what the client sent
                seen.add(new Frame(FrameType.ERROR, 0, new Messages.Error(e.code() == null ? 0 : e.code().code(),
                        e.getMessage()), new ReceivedMessage(new byte[0], new int[0], false)));
            }
        }
        return seen;
    }

    private static String thrown(List<Frame> seen) { return ((Messages.Error) seen.get(seen.size() - 1).message).message(); }

    /** A closed resource is refused before any request: no ATTACH, no lease granted and given back. */
    @Test
    void aClosedResourceIsRefusedBeforeAnyRequest() throws Exception {
        try (VirtualMemoryBuffer b = resource.allocate(2 * MiB);
             SharingServer server = SharingServer.builder(sock).build();
             SharingClient c = SharingClient.connect(sock, "closed-resource")) {
            server.publish("b", b);
            VirtualMemoryResource closed = VirtualMemoryResource.create(0);
            closed.close();
            IllegalStateException e = assertThrows(IllegalStateException.class, () -> c.attach("b", closed));
            assertTrue(e.getMessage().startsWith("resource: ") && e.getMessage().contains(" is closed (expected: an "
                    + "open resource to import into)"), e.getMessage());
            assertEquals(0, server.stats().fdsSent(), "no ATTACH reached the server (no descriptor, no fd)");
            server.unpublish("b");
        }
    }

    @Test
    void aPipeInsteadOfMemoryIsRejectedReleasedAndClosed() throws Exception {
        int[] pipe = IpcTestSupport.pipe();
        Map<String, Integer> base = fdSnapshot();
        List<Frame> seen = serve(frame(4, 0, descriptorPayload(77, 1, 2 * MiB, 2 * MiB)), new int[] {pipe[1]}, 1);
        assertEquals(FrameType.RELEASE, seen.get(0).type, "the client released the lease it could not use");
        assertEquals(77, ((Messages.Release) seen.get(0).message).leaseId());
        assertTrue(thrown(seen).contains("could not be imported"), thrown(seen));
        assertFdsBack(base, "after a pipe was sent as memory");
        NativeIo.closeAll(pipe);
    }

    @Test
    void fdCountMismatchIsRejected() throws Exception {
        int[] pipe = IpcTestSupport.pipe();
        Map<String, Integer> base = fdSnapshot();
        List<Frame> seen = serve(frame(4, 0, descriptorPayload(78, 1, 4 * MiB, 2 * MiB, 2 * MiB)), new int[] {pipe[1]}, 2);
        assertEquals(FrameType.ERROR, seen.get(0).type, "the client told the server why");
        assertEquals(ErrorCode.FD_COUNT_MISMATCH.code(), ((Messages.Error) seen.get(0).message).code());
        assertEquals(FrameType.RELEASE, seen.get(1).type);
        assertEquals(78, ((Messages.Release) seen.get(1).message).leaseId());
        assertTrue(thrown(seen).contains("says 2 chunks but arrived with 1 fds"), thrown(seen));
        assertFdsBack(base, "after a descriptor with too few fds");
        NativeIo.closeAll(pipe);
    }

    @Test
    void overflowingSizesAreRejected() throws Exception {
        int[] pipe = IpcTestSupport.pipe();
        Map<String, Integer> base = fdSnapshot();
        List<Frame> seen = serve(frame(4, 0, descriptorPayload(79, 1, 2 * MiB, Long.MAX_VALUE, 2 * MiB)),
                new int[] {pipe[1], pipe[1]}, 1);
        assertEquals(FrameType.ERROR, seen.get(0).type);
        assertEquals(ErrorCode.BAD_PAYLOAD.code(), ((Messages.Error) seen.get(0).message).code());
        assertTrue(thrown(seen).contains("overflow"), thrown(seen));
        assertFdsBack(base, "after a descriptor whose sizes overflow");
        NativeIo.closeAll(pipe);
    }

    @Test
    void aServerThatDiesMidFrameFailsTheRequest() throws Exception {
        try (FdServerSocket server = FdServerSocket.bind(sock)) {
            CompletableFuture<Void> fake = CompletableFuture.runAsync(() -> {
                try (FdSocket s = server.accept()) {
                    try (Frame hello = FrameIO.read(s)) {
                        s.send(frame(2, hello.requestId, new byte[] {0, 1, 0, (byte) 253}), null);
                    }
                    FrameIO.read(s).close();
                    s.send(new byte[] {0x43, 0x56, 0x4D}, null);
                } catch (IOException e) {
                    throw new java.io.UncheckedIOException(e);
                }
            });
            try (SharingClient c = SharingClient.connect(sock)) {
                IOException e = assertThrows(IOException.class, () -> c.attach("x", resource));
                assertTrue(e.getMessage().contains("TRUNCATED") || e.getMessage().contains("ended"), e.getMessage());
                fake.get(10, TimeUnit.SECONDS);
                IpcTestSupport.await("client notices", 5, () -> !c.isConnected());
                assertFalse(c.isConnected());
            }
        }
    }
}
