package org.cuvmm.ipc;

import static org.cuvmm.ipc.IpcTestSupport.await;
import static org.cuvmm.ipc.IpcTestSupport.frame;
import static org.cuvmm.ipc.IpcTestSupport.str;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * The limits a peer meets (docs/PROTOCOL.md section 8): connections, leases per connection,
 * the handshake timeout and the idle timeout, each refused with its documented ERROR.
 */
class LimitsTest {
    private Path sock;
    private VirtualMemoryResource resource;
    private VirtualMemoryBuffer buffer;
    private final List<String> errors = new CopyOnWriteArrayList<>();
    private final ExecutorService reads = Executors.newCachedThreadPool();

    @BeforeEach
    void setUp() throws Exception {
        sock = IpcTestSupport.socketPath();
        resource = VirtualMemoryResource.create(0);
        buffer = resource.allocate(resource.granularity());
    }

    @AfterEach
    void tearDown() {
        reads.shutdownNow();
        buffer.close();
        resource.close();
        IpcTestSupport.deleteTree(sock.getParent());
    }

    private SharingServer.Builder builder() {
        return SharingServer.builder(sock).listener(new SharingListener() {
            @Override
            public void error(PeerCredentials peer, String client, ErrorCode code, String message, boolean byClient) {
                errors.add(code + ": " + message);
                if (Thread.currentThread().getName().startsWith("cuvmm-ipc-watchdog")) {
                    errors.add("ON THE WATCHDOG THREAD: " + code);
                }
            }
        });
    }

    /** The next frame, waiting at most 30 s (a server that never acts fails the test instead of hanging it). */
    private Frame next(FdSocket s) throws Exception {
        Future<Frame> f = reads.submit(() -> FrameIO.read(s));
        try {
            return f.get(30, TimeUnit.SECONDS);
        } catch (java.util.concurrent.TimeoutException e) {
            s.close();
            throw new AssertionError("no frame from the server within 30 s", e);
        }
    }

    private void expectError(FdSocket s, ErrorCode code, int requestId, String text) throws Exception {
        try (Frame f = next(s)) {
            assertNotNull(f, "an ERROR " + code + " before the end of stream");
            assertEquals(FrameType.ERROR, f.type, "got " + f);
            Messages.Error e = (Messages.Error) f.message;
            assertEquals(code, e.errorCode(), e.message());
            assertEquals(requestId, f.requestId, "request id of the ERROR");
            assertTrue(e.message().contains(text), "message '" + e.message() + "' should contain '" + text + "'");
        }
    }

    private void expectEnd(FdSocket s) throws Exception {
        assertNull(next(s), "the server closed the connection");
    }

    private long attach(FdSocket s, int id) throws Exception {
        s.send(frame(3, id, str("b")), null);
        try (Frame f = next(s)) {
            assertEquals(FrameType.DESCRIPTOR, f.type, "got " + f);
            return ((Messages.Descriptor) f.message).leaseId();
        }
    }

    private void release(FdSocket s, int id, long lease) throws Exception {
        s.send(frame(5, id, ByteBuffer.allocate(8).putLong(lease).array()), null);
        try (Frame f = next(s)) {
            assertEquals(FrameType.RELEASED, f.type, "got " + f);
        }
    }

    private FdSocket helloed() throws Exception {
        FdSocket s = FdSocket.connect(sock);
        s.send(frame(1, 1, str("t")), null);
        try (Frame f = next(s)) {
            assertEquals(FrameType.HELLO_OK, f.type, "got " + f);
        }
        return s;
    }

    @Test
    void theDefaultsAreSane() throws Exception {
        try (SharingServer server = SharingServer.builder(sock).build()) {
            assertEquals(ConnectionLimits.DEFAULTS, server.limits());
            assertEquals(256, server.limits().maxConnections());
            assertEquals(1024, server.limits().maxLeasesPerConnection());
            assertEquals(Duration.ofSeconds(10), server.limits().handshakeTimeout());
            assertEquals(Duration.ofMinutes(5), server.limits().idleTimeout());
        }
    }

    @Test
    void badLimitsAreRejectedByName() {
        SharingServer.Builder b = SharingServer.builder(sock);
        assertEquals("maxConnections: 0 (expected: >= 1)",
                assertThrows(IllegalArgumentException.class, () -> b.maxConnections(0)).getMessage());
        assertEquals("maxLeasesPerConnection: -1 (expected: >= 1)",
                assertThrows(IllegalArgumentException.class, () -> b.maxLeasesPerConnection(-1)).getMessage());
        assertTrue(assertThrows(IllegalArgumentException.class, () -> b.handshakeTimeout(Duration.ofSeconds(-1)))
                .getMessage().startsWith("handshakeTimeout: PT-1S (expected: a positive duration"));
        assertTrue(assertThrows(IllegalArgumentException.class, () -> b.idleTimeout(Duration.ofSeconds(Long.MAX_VALUE)))
                .getMessage().startsWith("idleTimeout: "));
    }

    @Test
    void tooManyConnectionsHaveTheirOwnCode() throws Exception {
        try (SharingServer server = builder().maxConnections(1).build(); FdSocket first = helloed()) {
            await("first admitted", 10, () -> server.connectionCount() == 1);
            try (FdSocket second = FdSocket.connect(sock)) {
                expectError(second, ErrorCode.TOO_MANY_CONNECTIONS, 0, "too many connections (the server serves at most 1)");
                expectEnd(second);
            }
            assertTrue(first.isOpen());
        }
    }

    @Test
    void leasesPerConnectionAreCapped() throws Exception {
        try (SharingServer server = builder().maxLeasesPerConnection(2).build()) {
            server.publish("b", buffer);
            try (FdSocket s = helloed(); FdSocket other = helloed()) {
                long a = attach(s, 2);
                long b = attach(s, 3);
                s.send(frame(3, 4, str("b")), null);
                expectError(s, ErrorCode.TOO_MANY_LEASES, 4, "this connection holds 2 leases, the most one connection");
                assertEquals(2, server.leaseCount("b"), "the refused ATTACH counted nothing");
                attach(other, 2); // the cap is per connection
                release(s, 5, a);
                long c = attach(s, 6); // room again, and the connection survived
                release(s, 7, b);
                release(s, 8, c);
            }
        }
    }

    /** One lease is "1 lease", not "1 leases". */
    @Test
    void theLeaseLimitOfOneSaysLeaseInTheSingular() throws Exception {
        try (SharingServer server = builder().maxLeasesPerConnection(1).build()) {
            server.publish("b", buffer);
            try (FdSocket s = helloed()) {
                long a = attach(s, 2);
                s.send(frame(3, 3, str("b")), null);
                expectError(s, ErrorCode.TOO_MANY_LEASES, 3, "this connection holds 1 lease, the most one connection");
                release(s, 4, a);
            }
        }
    }

    @Test
    void aConnectionThatSendsNoHelloIsClosed() throws Exception {
        try (SharingServer server = builder().handshakeTimeout(Duration.ofMillis(200)).build();
             FdSocket s = FdSocket.connect(sock)) {
            expectError(s, ErrorCode.TIMEOUT, 0, "no HELLO within 200 ms of connecting");
            expectEnd(s);
            await("connection gone", 10, () -> server.connectionCount() == 0);
            assertTrue(errors.stream().anyMatch(e -> e.startsWith("TIMEOUT: no HELLO")), errors.toString());
            assertTrue(errors.stream().noneMatch(e -> e.startsWith("ON THE WATCHDOG THREAD")),
                    "listeners run on the connection's reader, never on the watchdog: " + errors);
        }
    }

    /**
     * Idle means holding no lease and sending nothing. A consumer that holds a lease and
     * stays silent through many idle periods is not cut; once it released its last lease and
     * stays silent, it is.
     */
    @Test
    void anIdleConnectionIsClosedButNotOneThatHoldsALease() throws Exception {
        // The idle timeout must not pass between accept and ATTACH (1 s: room for a loaded
        // machine), else ATTACH gets TIMEOUT. The handshake timeout is far longer: the idle cut
        // after the release must not wait for it (it did, when the first check came at the
        // handshake timeout: found by an independent probe, seen failing here with the
        // handshake timeout at an hour).
        try (SharingServer server = builder().handshakeTimeout(Duration.ofHours(1)).idleTimeout(Duration.ofSeconds(1))
                .build()) {
            server.publish("b", buffer);
            try (FdSocket s = helloed()) {
                long lease = attach(s, 2);
                long before = server.watchdogChecks();
                await("the watchdog looked at the silent lease holder 3 times", 30,
                        () -> server.watchdogChecks() >= before + 3 || server.connectionCount() == 0);
                assertEquals(1, server.connectionCount(), "still connected while holding a lease");
                release(s, 3, lease); // works: the connection is alive
                expectError(s, ErrorCode.TIMEOUT, 0, "no frame for 1 s while holding no lease");
                expectEnd(s);
            }
            await("connection gone", 10, () -> server.connectionCount() == 0);
        }
    }

    /**
     * Both clocks run from accept, and the first rule due ends the connection: with an idle
     * timeout shorter than the handshake timeout, a connection that said HELLO and then
     * nothing, and one that never said anything (it holds no lease: idle too), are both cut
     * by the idle timeout, not an hour later by the handshake timeout.
     */
    @Test
    void anIdleTimeoutShorterThanTheHandshakeTimeoutIsNotDelayedByIt() throws Exception {
        try (SharingServer server = builder().handshakeTimeout(Duration.ofHours(1)).idleTimeout(Duration.ofSeconds(1))
                .build()) {
            try (FdSocket s = helloed()) {
                expectError(s, ErrorCode.TIMEOUT, 0, "no frame for 1 s while holding no lease");
                expectEnd(s);
            }
            try (FdSocket s = FdSocket.connect(sock)) { // never sends HELLO
                expectError(s, ErrorCode.TIMEOUT, 0, "no frame for 1 s while holding no lease");
                expectEnd(s);
            }
            await("connections gone", 10, () -> server.connectionCount() == 0);
        }
    }

    /**
     * An ended connection leaves no watchdog check behind: its scheduled check is cancelled,
     * so the connection is not kept reachable until the timeout would have come.
     */
    @Test
    void anEndedConnectionLeavesNoWatchdogCheck() throws Exception {
        try (SharingServer server = builder().handshakeTimeout(Duration.ofHours(1)).idleTimeout(Duration.ofHours(1))
                .build()) {
            try (FdSocket s = helloed()) {
                await("one check scheduled", 10, () -> server.watchdogQueued() == 1);
            }
            await("connection gone", 10, () -> server.connectionCount() == 0);
            // awaited, not asserted: the accept thread may still be between queueing the check
            // and noting it on the connection, and then cancels it itself when it sees the end
            await("the ended connection's check cancelled (an hour's timeout: never due here)", 10,
                    () -> server.watchdogQueued() == 0);
            try (FdSocket s = FdSocket.connect(sock)) { // never sends HELLO
                await("one check scheduled", 10, () -> server.watchdogQueued() == 1);
            }
            await("connection gone", 10, () -> server.connectionCount() == 0);
            // awaited, not asserted: the accept thread may still be between queueing the check
            // and noting it on the connection, and then cancels it itself when it sees the end
            await("the ended connection's check cancelled (an hour's timeout: never due here)", 10,
                    () -> server.watchdogQueued() == 0);
        }
    }

    @Test
    void zeroDisablesTheTimeouts() throws Exception {
        try (SharingServer server = builder().handshakeTimeout(Duration.ZERO).idleTimeout(Duration.ZERO).build();
             FdSocket s = FdSocket.connect(sock)) {
            await("admitted", 10, () -> server.connectionCount() == 1);
            assertEquals(0, server.watchdogChecks(), "nothing to watch");
            s.send(frame(1, 1, str("late")), null);
            try (Frame f = next(s)) {
                assertEquals(FrameType.HELLO_OK, f.type);
            }
        }
    }
}
