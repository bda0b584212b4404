package org.cuvmm.ipc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

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
 * a header and a payload read per frame). Both ends defer consumption (FdSocket): those reads
 * peek, and the bytes of every 16 leave the queue in one more {@code recvmsg}, counted apart.
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
    static FdSocket connectionSocket(SharingServer server) throws Exception {
        Field f = SharingServer.class.getDeclaredField("connections");
        f.setAccessible(true);
        Set<?> connections = (Set<?>) f.get(server);
        assertEquals(1, connections.size(), "connections");
        return ((ServerConnection) connections.iterator().next()).socket;
    }

    /**
     * Waits until the server's connection reader is idle. With deferred consumption it waits
     * in {@code poll}: its last {@code recvmsg} waited a whole receive slice ({@link
     * SharingServer#DEFERRED_SLICE_MS}) and read nothing (counted as empty), and it took what
     * it had peeked off the queue. Without (a kernel whose peek offset fails FdSocket's probe)
     * it is blocked in its next {@code recvmsg}, counted as it starts. Either way the count is
     * the same at both ends of the measure.
     */
    private static void awaitServerReaderIdle() throws InterruptedException {
        String in = FdSocket.deferConsumptionAllowed() ? "poll" : "recvmsg";
        IpcTestSupport.await("the server's connection reader idle in " + in, 10, () -> {
            for (Thread t : Thread.getAllStackTraces().keySet()) {
                if (!t.getName().endsWith("-read") || !t.getName().startsWith("cuvmm-ipc-conn-")) continue;
                StackTraceElement[] stack = t.getStackTrace();
                if (t.getState() != Thread.State.RUNNABLE || stack.length == 0 || !stack[0].isNativeMethod()) continue;
                for (StackTraceElement e : stack) {
                    if (e.getMethodName().equals(in)) return true;
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
            awaitServerReaderIdle();
            long[] clientBefore = c.socketCalls();
            long[] serverBefore = serverSide.ioCalls();
            for (int i = 0; i < rounds; i++) {
                try (Attachment a = c.attach("frame", resource)) { // ATTACH -> DESCRIPTOR, cached
                    a.buffer().size();
                } // RELEASE -> RELEASED
            }
            long[] clientAfter = c.socketCalls();
            long clientReads = reads(clientAfter) - reads(clientBefore);
            awaitServerReaderIdle();
            long[] serverAfter = serverSide.ioCalls();
            long serverReads = reads(serverAfter) - reads(serverBefore);
            // Deferred consumption (FdSocket): the bytes of every 16 reads leave the queue in one more
            // recvmsg, and so do those held when a reader's wait ends with nothing (a slice that passed).
            long clientConsumes = clientAfter[3] - clientBefore[3];
            long serverConsumes = serverAfter[3] - serverBefore[3];
            long clientEmpty = clientAfter[2] - clientBefore[2];
            long serverEmpty = serverAfter[2] - serverBefore[2];
            assertEquals(rounds, c.importCache().stats().hits(), c.importCache().stats().toString());
            org.junit.jupiter.api.Assertions.assertAll(
                    () -> assertEquals(2L * rounds, clientReads, "recvmsg calls that read bytes on the client's socket over "
                    + rounds + " cached rounds (expected: 2 a round, one per reply)"),
                    () -> assertEquals(2L * rounds, serverReads, "recvmsg calls that read bytes on the server's connection socket"
                    + " over " + rounds + " cached rounds (expected: 2 a round, one per request)"),
                    () -> assertEquals(FdSocket.deferConsumptionAllowed(), c.defersConsumption(), "the client defers"),
                    () -> assertEquals(FdSocket.deferConsumptionAllowed(), serverSide.isDeferringConsumption(),
                            "the server's connection defers"),
                    () -> assertTrue(!c.defersConsumption() ? clientConsumes == 0
                            : clientConsumes >= 2L * rounds / FdSocket.DEFER_MAX_READS
                            && clientConsumes <= 2L * rounds / FdSocket.DEFER_MAX_READS + 1 + clientEmpty,
                            "consuming recvmsg calls on the client's socket: " + clientConsumes + " (empty reads "
                            + clientEmpty + ")"),
                    () -> assertTrue(!serverSide.isDeferringConsumption() ? serverConsumes == 0
                            : serverConsumes >= 2L * rounds / FdSocket.DEFER_MAX_READS
                            && serverConsumes <= 2L * rounds / FdSocket.DEFER_MAX_READS + 1 + serverEmpty,
                            "consuming recvmsg calls on the server's socket: " + serverConsumes + " (empty reads "
                            + serverEmpty + ")"));
        }
    }
}
