package org.cuvmm.ipc;

import static org.cuvmm.ipc.IpcTestSupport.concat;
import static org.cuvmm.ipc.IpcTestSupport.frame;
import static org.cuvmm.ipc.IpcTestSupport.str;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * A client may pipeline ATTACH and a RELEASE of the lease id it predicts (ids come from one
 * counter): the lease must not end while its DESCRIPTOR still waits to be sent
 * (docs/PROTOCOL.md section 6); the RELEASE is deferred until the DESCRIPTOR has left.
 */
class PipelinedReleaseTest {
    private Path sock;
    private VirtualMemoryResource resource;

    @BeforeEach
    void setUp() throws Exception {
        sock = IpcTestSupport.socketPath();
        resource = VirtualMemoryResource.create(0);
    }

    @AfterEach
    void tearDown() {
        SendQueue.beforeSend = (q, i) -> {};
        SendQueue.directWrites = true;
        resource.close();
        IpcTestSupport.deleteTree(sock.getParent());
    }

    @Test
    void aReleaseOfALeaseWhoseDescriptorIsUnsentWaitsForTheSend() throws Exception {
        CountDownLatch released = new CountDownLatch(1);
        List<String> violations = new CopyOnWriteArrayList<>();
        try (VirtualMemoryBuffer buffer = resource.allocate(resource.granularity());
             SharingServer server = SharingServer.builder(sock).listener(new SharingListener() {
                 @Override
                 public void released(LeaseEvent e) { released.countDown(); }
             }).build();
             FdSocket s = FdSocket.connect(sock)) {
            server.publish("b", buffer);
            s.send(frame(1, 1, str("t")), null);
            try (Frame f = FrameIO.read(s)) {
                assertEquals(FrameType.HELLO_OK, f.type, "got " + f);
            }
            // The sender thread's path: the reader writes no frame itself (DirectWriteTest covers that).
            SendQueue.directWrites = false;
            // Stall the writer on the DESCRIPTOR; the reader meanwhile reads the RELEASE. The
            // lease must still hold when the DESCRIPTOR leaves. (Fixed code: the release event
            // cannot come while the writer is stalled, so the bounded wait runs out.)
            SendQueue.beforeSend = (q, item) -> {
                if (item.fds() == null) return;
                try {
                    if (released.await(2, TimeUnit.SECONDS) || server.totalLeaseCount() != 1) {
                        violations.add("the lease ended before its DESCRIPTOR was sent (leases now "
                                + server.totalLeaseCount() + ")");
                    }
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            };
            s.send(concat(frame(3, 2, str("b")), frame(5, 3, ByteBuffer.allocate(8).putLong(1).array())), null);
            try (Frame f = FrameIO.read(s)) {
                assertNotNull(f);
                assertEquals(FrameType.DESCRIPTOR, f.type, "got " + f);
                assertEquals(1, ((Messages.Descriptor) f.message).leaseId(), "the predicted lease id");
            }
            try (Frame f = FrameIO.read(s)) {
                assertNotNull(f);
                assertEquals(FrameType.RELEASED, f.type, "got " + f);
            }
            assertTrue(violations.isEmpty(), violations.toString());
            assertTrue(released.await(10, TimeUnit.SECONDS));
            assertEquals(0, server.totalLeaseCount());
        }
    }
}
