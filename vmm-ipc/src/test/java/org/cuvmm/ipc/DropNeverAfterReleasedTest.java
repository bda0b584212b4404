package org.cuvmm.ipc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * No DROP follows the RELEASED of its lease (PROTOCOL.md section 5). An unpublish that found
 * the lease held is held back (test seam) right before it offers the DROP; meanwhile the
 * client releases the lease and reads its RELEASED; then the unpublish goes on. Before the
 * fix the DROP was queued behind the RELEASED and the client read it there, naming a lease it
 * had already given back.
 */
class DropNeverAfterReleasedTest {
    private Path sock;
    private Map<String, Integer> fds;

    @BeforeEach
    void setUp() throws Exception {
        sock = IpcTestSupport.socketPath();
        fds = IpcTestSupport.fdSnapshot();
    }

    @AfterEach
    void tearDown() throws Exception {
        ServerConnection.beforeDropOffered = null;
        IpcTestSupport.deleteTree(sock.getParent());
        IpcTestSupport.assertFdsBack(fds, "after the test");
    }

    @Test
    void aDropOfferedAfterTheReleaseIsNotSent() throws Exception {
        List<FrameType> after = framesAfterRelease(true);
        assertTrue(after.isEmpty(), "frames read after RELEASED: " + after + " (expected none: the lease was released"
                + " before its DROP was offered)");
    }

    /** The same steps without a RELEASE: the DROP of a held lease still comes (the seam itself loses nothing). */
    @Test
    void aDropOfAHeldLeaseStillComes() throws Exception {
        assertEquals(List.of(FrameType.DROP), framesAfterRelease(false));
    }

    /**
     * HELLO, ATTACH "x", then an unpublish on another thread held at the seam; with {@code
     * release}: RELEASE, and the RELEASED read. Then the unpublish goes on, and the frames the
     * client reads within 1 s are returned (every DROP checked to name the lease).
     */
    private List<FrameType> framesAfterRelease(boolean release) throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer x = r.allocate(r.granularity());
             SharingServer server = SharingServer.builder(sock).build()) {
            server.publish("x", x);
            try (FdSocket s = FdSocket.connect(sock)) {
                long lease = IpcTestSupport.helloAndAttachV1(s, "drop-after-released", "x");

                CountDownLatch atSeam = new CountDownLatch(1);
                CountDownLatch go = new CountDownLatch(1);
                ServerConnection.beforeDropOffered = () -> {
                    atSeam.countDown();
                    try {
                        go.await(20, TimeUnit.SECONDS);
                    } catch (InterruptedException e) {
                        Thread.currentThread().interrupt();
                    }
                };
                Thread unpublisher = new Thread(() -> server.unpublish("x"), "unpublisher");
                unpublisher.start();
                assertTrue(atSeam.await(20, TimeUnit.SECONDS), "the unpublish reached the DROP's offer");
                if (release) {
                    byte[] payload = ByteBuffer.allocate(8).putLong(lease).array();
                    s.send(IpcTestSupport.frame(5, 3, payload), null);
                    try (Frame f = FrameIO.read(s)) {
                        assertSame(FrameType.RELEASED, f.type, "got " + f);
                    }
                }
                go.countDown();
                unpublisher.join(20_000);
                ServerConnection.beforeDropOffered = null;

                List<FrameType> seen = new ArrayList<>();
                long deadline = System.nanoTime() + 1_000_000_000L;
                for (;;) {
                    Frame f;
                    try {
                        f = FrameIO.readBefore(s, 1, 1, deadline);
                    } catch (FrameIO.Stalled e) {
                        break;
                    }
                    if (f == null) break;
                    try (f) {
                        seen.add(f.type);
                        if (f.type == FrameType.DROP) assertEquals(lease, ((Messages.Drop) f.message).leaseId());
                    }
                }
                return seen;
            } finally {
                ServerConnection.beforeDropOffered = null;
            }
        }
    }
}
