package org.cuvmm.ipc;

import static org.cuvmm.ipc.IpcTestSupport.await;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.Arrays;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;

import org.cuvmm.Stream;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * A consumer that closes an attachment while stream work it queued on the imported memory is
 * still pending (issue 9): the close waits for that work, and the lease goes back only after
 * it, so the producer (and its pool) never gets the memory back while the consumer's stream
 * can still write it.
 */
class AttachmentStreamWorkTest {
    private Path sock;

    @BeforeEach
    void setUp() throws Exception { sock = IpcTestSupport.socketPath(); }

    @AfterEach
    void tearDown() { IpcTestSupport.deleteTree(sock.getParent()); }

    @Test
    void theLeaseGoesBackOnlyAfterTheConsumersStreamWork() throws Exception {
        CountDownLatch gate = new CountDownLatch(1);
        try (VirtualMemoryResource owner = VirtualMemoryResource.create(0);
                VirtualMemoryBuffer published = owner.allocate(owner.granularity());
                SharingServer server = SharingServer.builder(sock).build();
                VirtualMemoryResource importer = VirtualMemoryResource.create(0);
                SharingClient client = SharingClient.connect(sock, "stream-work");
                Stream stream = Stream.create(0)) {
            int n = (int) published.size();
            published.fill((byte) 1);
            server.publish("s", published);
            Attachment a = client.attach("s", importer);
            // Hold the stream shut, then queue a write of the imported memory behind the gate.
            stream.launchHostFunction(() -> {
                try {
                    gate.await(60, TimeUnit.SECONDS);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            });
            a.buffer().fillAsync(0, n, (byte) 7, stream);

            AtomicReference<Throwable> closeFailure = new AtomicReference<>();
            Thread closer = new Thread(() -> {
                try {
                    a.close();
                } catch (Throwable t) {
                    closeFailure.set(t);
                }
            }, "attachment-closer");
            closer.start();
            try {
                // While the fill cannot run, the lease must stay: give a wrong close every
                // chance to release it (a bounded wait that must run out).
                long deadline = System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(500);
                while (System.nanoTime() < deadline && server.leaseCount("s") == 1 && !a.isReleased()) {
                    Thread.sleep(10);
                }
                assertEquals(1, server.leaseCount("s"), "the lease is held while the consumer's fill is queued");
                assertFalse(a.isReleased(), "no RELEASE while the consumer's stream may still write the memory");
                assertTrue(closer.isAlive(), "close() waits for the recorded stream work");
            } finally {
                gate.countDown();
            }
            closer.join(TimeUnit.SECONDS.toMillis(30));
            assertFalse(closer.isAlive(), "close() returned once the stream work was done");
            assertNull(closeFailure.get(), () -> "close() failed: " + closeFailure.get());
            assertTrue(a.isClosed() && a.isReleased());
            await("the lease released after the stream work", 10, () -> server.leaseCount("s") == 0);
            // The consumer's queued write ran before the release, into the producer's memory.
            byte[] back = new byte[n];
            published.copyTo(back);
            byte[] sevens = new byte[n];
            Arrays.fill(sevens, (byte) 7);
            assertArrayEquals(sevens, back, "the consumer's fill landed before its lease went back");
            stream.synchronize();
        }
    }
}
