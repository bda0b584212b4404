package org.cuvmm.ipc;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.lang.reflect.Field;
import java.nio.file.Path;
import java.util.Set;
import java.util.concurrent.TimeUnit;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * Issue 11, the round trip: a cached v2 round (ATTACH -> DESCRIPTOR, RELEASE -> RELEASED)
 * makes one {@code recvmsg} per frame on each side (docs/PROTOCOL.md section 1, reading
 * ahead): 2 on the client's socket and 2 on the server's connection socket, counted (not 4:
 * a header and a payload read per frame).
 */
class CachedRoundRecvmsgTest {
    private Path sock;
    private VirtualMemoryResource resource;
    private long savedIdle;

    @BeforeEach
    void setUp() throws Exception {
        sock = IpcTestSupport.socketPath();
        resource = VirtualMemoryResource.create(0);
        savedIdle = ReadToken.readerIdleNanos;
    }

    @AfterEach
    void tearDown() {
        ReadToken.readerIdleNanos = savedIdle;
        resource.close();
        IpcTestSupport.deleteTree(sock.getParent());
    }

    /** recvmsg calls on {@code s} that read bytes (a slice that passed with nothing is not counted). */
    private static long reads(long[] calls) { return calls[0] - calls[2]; }

    /** The server's one connection socket (the test reads SharingServer's private set). */
    private static FdSocket connectionSocket(SharingServer server) throws Exception {
        Field f = SharingServer.class.getDeclaredField("connections");
        f.setAccessible(true);
        Set<?> connections = (Set<?>) f.get(server);
        assertEquals(1, connections.size(), "connections");
        return ((ServerConnection) connections.iterator().next()).socket;
    }

    /**
     * Waits until the server's connection reader is blocked in its next {@code recvmsg} (a
     * call is counted as it starts: counted at both ends of the measure, it cancels out).
     */
    private static void awaitServerReaderInRecvmsg() throws InterruptedException {
        IpcTestSupport.await("the server's connection reader blocked in recvmsg", 10, () -> {
            for (Thread t : Thread.getAllStackTraces().keySet()) {
                if (!t.getName().endsWith("-read") || !t.getName().startsWith("cuvmm-ipc-conn-")) continue;
                StackTraceElement[] stack = t.getStackTrace();
                if (t.getState() != Thread.State.RUNNABLE || stack.length == 0 || !stack[0].isNativeMethod()) continue;
                for (StackTraceElement e : stack) {
                    if (e.getMethodName().equals("recvmsg")) return true;
                }
            }
            return false;
        });
    }

    @Test
    void aCachedRoundMakesOneRecvmsgPerFrameOnEachSide() throws Exception {
        // The client's reader thread keeps out: each caller reads its own reply.
        ReadToken.readerIdleNanos = TimeUnit.SECONDS.toNanos(60);
        int rounds = 50;
        try (VirtualMemoryBuffer b = resource.allocate(resource.granularity());
             SharingServer server = SharingServer.builder(sock).build();
             SharingClient c = SharingClient.connect(sock)) {
            server.publish("frame", b);
            c.attach("frame", resource).close(); // the cache's miss: fd, import
            FdSocket serverSide = connectionSocket(server);
            awaitServerReaderInRecvmsg();
            long[] clientBefore = c.socketCalls();
            long[] serverBefore = serverSide.ioCalls();
            for (int i = 0; i < rounds; i++) {
                try (Attachment a = c.attach("frame", resource)) { // ATTACH -> DESCRIPTOR, cached
                    a.buffer().size();
                } // RELEASE -> RELEASED
            }
            long clientReads = reads(c.socketCalls()) - reads(clientBefore);
            awaitServerReaderInRecvmsg();
            long serverReads = reads(serverSide.ioCalls()) - reads(serverBefore);
            assertEquals(rounds, c.importCache().stats().hits(), c.importCache().stats().toString());
            org.junit.jupiter.api.Assertions.assertAll(
                    () -> assertEquals(2L * rounds, clientReads, "recvmsg calls that read bytes on the client's socket over "
                    + rounds + " cached rounds (expected: 2 a round, one per reply)"),
                    () -> assertEquals(2L * rounds, serverReads, "recvmsg calls that read bytes on the server's connection socket"
                    + " over " + rounds + " cached rounds (expected: 2 a round, one per request)"));
        }
    }
}
