package org.cuvmm.ipc;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.junit.jupiter.api.Test;

/**
 * A review of 1129fb0 (close()/closeNow() then waited up to 5 s for the event thread): a DROP
 * listener that needs a lock the closing thread holds (an application that synchronizes its
 * listener and its shutdown on one monitor) cannot finish until close returns: close then
 * cost the full 5 s, twice (10 s), where it returned at once before (closeNow's javadoc: "Ends the
 * connection at once").
 */
class CloseWithBusyListenerTest {
    private static long closeWhileListenerWaitsForOurLock(boolean now) throws Exception {
        Path sock = IpcTestSupport.socketPath();
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             SharingServer server = SharingServer.builder(sock).build()) {
            VirtualMemoryBuffer a = resource.allocate(resource.granularity());
            try {
                server.publish("a", a);
                SharingClient c = SharingClient.builder(sock).build();
                Attachment att = c.attach("a", resource);
                Object appLock = new Object();
                CountDownLatch inListener = new CountDownLatch(1);
                c.addDropListener(n -> {
                    inListener.countDown();
                    synchronized (appLock) {
                        if (n.attachment() != null) n.attachment().close();
                    }
                });
                long ms;
                synchronized (appLock) {
                    server.unpublish("a"); // DROP: the listener runs and waits for appLock
                    assertTrue(inListener.await(10, TimeUnit.SECONDS), "listener ran");
                    long t0 = System.nanoTime();
                    if (now) c.closeNow();
                    else c.close();
                    ms = (System.nanoTime() - t0) / 1_000_000;
                }
                System.out.println("REVIEW " + (now ? "closeNow" : "close") + " took " + ms + " ms; " + att);
                // The server ends the client's lease when it reads the connection's end, on its
                // own thread, after close returns: the buffer is in use until then.
                IpcTestSupport.await("the server to end the closed client's lease", 10,
                        () -> server.totalLeaseCount() == 0);
                return ms;
            } finally {
                a.close();
            }
        } finally {
            IpcTestSupport.deleteTree(sock.getParent());
        }
    }

    @Test
    void closeNowDoesNotWaitForAListenerBlockedOnTheCallersLock() throws Exception {
        long ms = closeWhileListenerWaitsForOurLock(true);
        assertTrue(ms < 1000, "closeNow() took " + ms + " ms");
    }

    @Test
    void closeDoesNotWaitForAListenerBlockedOnTheCallersLock() throws Exception {
        long ms = closeWhileListenerWaitsForOurLock(false);
        assertTrue(ms < 1000, "close() took " + ms + " ms");
    }
}
