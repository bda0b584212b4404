package org.cuvmm.ipc;

import static org.cuvmm.ipc.IpcTestSupport.frame;
import static org.cuvmm.ipc.IpcTestSupport.str;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;

import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.time.Duration;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * The idle watchdog and ATTACH race (docs/PROTOCOL.md section 8): "holds no lease and is
 * idle, so cut it" and "grant a lease" are atomic with each other, so a connection is never
 * cut while it holds a lease, and no lease is granted on a connection being cut.
 */
class IdleLeaseRaceTest {
    private Path sock;
    private VirtualMemoryResource resource;
    private VirtualMemoryBuffer buffer;
    private final ExecutorService reads = Executors.newCachedThreadPool();

    @BeforeEach
    void setUp() throws Exception {
        sock = IpcTestSupport.socketPath();
        resource = VirtualMemoryResource.create(0);
        buffer = resource.allocate(resource.granularity());
    }

    @AfterEach
    void tearDown() {
        IdleWatchdog.beforeTimeOut = c -> {};
        reads.shutdownNow();
        buffer.close();
        resource.close();
        IpcTestSupport.deleteTree(sock.getParent());
    }

    private Frame next(FdSocket s) throws Exception {
        Future<Frame> f = reads.submit(() -> FrameIO.read(s));
        try {
            return f.get(30, TimeUnit.SECONDS);
        } catch (java.util.concurrent.TimeoutException e) {
            s.close();
            throw new AssertionError("no frame from the server within 30 s", e);
        }
    }

    /**
     * The watchdog decides the silent, lease-less connection is idle; before it acts, the
     * client attaches and gets its DESCRIPTOR. The connection now holds a lease: it must not
     * be cut (before the fix: DESCRIPTOR, then TIMEOUT and the end of stream, the lease ended
     * while the client maps the memory).
     */
    @Test
    void anAttachJustBeforeTheIdleCutKeepsTheConnection() throws Exception {
        AtomicBoolean once = new AtomicBoolean();
        AtomicReference<Throwable> hookFailed = new AtomicReference<>();
        AtomicLong lease = new AtomicLong(-1);
        try (SharingServer server = SharingServer.builder(sock).handshakeTimeout(Duration.ZERO)
                .idleTimeout(Duration.ofMillis(200)).build();
             FdSocket s = FdSocket.connect(sock)) {
            server.publish("b", buffer);
            IdleWatchdog.beforeTimeOut = c -> {
                if (!once.compareAndSet(false, true)) return;
                try {
                    s.send(frame(3, 2, str("b")), null);
                    try (Frame f = next(s)) {
                        assertNotNull(f, "a DESCRIPTOR");
                        assertEquals(FrameType.DESCRIPTOR, f.type, "got " + f);
                        lease.set(((Messages.Descriptor) f.message).leaseId());
                    }
                } catch (Throwable t) {
                    hookFailed.set(t);
                }
            };
            s.send(frame(1, 1, str("t")), null);
            try (Frame f = next(s)) {
                assertEquals(FrameType.HELLO_OK, f.type, "got " + f);
            }
            IpcTestSupport.await("the watchdog decided the connection was idle", 30, once::get);
            IpcTestSupport.await("the hook attached", 30, () -> lease.get() >= 0 || hookFailed.get() != null);
            if (hookFailed.get() != null) throw new AssertionError("attach in the hook failed", hookFailed.get());
            s.send(frame(5, 3, ByteBuffer.allocate(8).putLong(lease.get()).array()), null);
            try (Frame f = next(s)) {
                assertNotNull(f, "RELEASED, not the end of stream");
                assertEquals(FrameType.RELEASED, f.type, "the connection holding a lease was cut: got " + f);
            }
            assertEquals(0, server.totalLeaseCount());
        }
    }
}
