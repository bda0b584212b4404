package org.cuvmm.ipc;

import static org.cuvmm.ipc.IpcTestSupport.await;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertInstanceOf;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * Two closes of one {@link Attachment} racing while a third thread is inside a call on its
 * buffer: the close that claimed the work is refused, and the racing one must not return as
 * if the attachment were closed (it used to return at once, leaving the attachment open and
 * its lease held with neither caller told: an independent probe, 7 to 11 per run). It waits
 * for the first one's outcome, tries itself, and is refused too; a later close succeeds.
 */
class AttachmentCloseRaceTest {
    private Path sock;

    @BeforeEach
    void setUp() throws Exception { sock = IpcTestSupport.socketPath(); }

    @AfterEach
    void tearDown() {
        Attachment.afterCloseClaimed = null;
        IpcTestSupport.deleteTree(sock.getParent());
    }

    @Test
    void aCloseRacingARefusedCloseIsRefusedToo() throws Exception {
        try (VirtualMemoryResource owner = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer published = owner.allocate(owner.granularity());
             SharingServer server = SharingServer.builder(sock).build();
             VirtualMemoryResource importer = VirtualMemoryResource.create(0);
             SharingClient client = SharingClient.builder(sock).protocolVersion(2).build()) {
            server.publish("p", published);
            Attachment a = client.attach("p", importer);

            // A user of the buffer, inside a call on it until `done`.
            CountDownLatch inside = new CountDownLatch(1);
            CountDownLatch done = new CountDownLatch(1);
            CompletableFuture<Void> user = CompletableFuture.runAsync(() -> a.buffer().withAddress(address -> {
                inside.countDown();
                try {
                    done.await();
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }));
            assertTrue(inside.await(10, TimeUnit.SECONDS));

            // The first close claims the work and stops right there until the racing one is waiting.
            CountDownLatch claimed = new CountDownLatch(1);
            CountDownLatch raced = new CountDownLatch(1);
            Attachment.afterCloseClaimed = () -> {
                Attachment.afterCloseClaimed = null; // the first claim only
                claimed.countDown();
                try {
                    raced.await(10, TimeUnit.SECONDS);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            };
            CompletableFuture<Throwable> first = closeOnAThread(a);
            assertTrue(claimed.await(10, TimeUnit.SECONDS));
            CompletableFuture<Throwable> second = closeOnAThread(a);
            Thread.sleep(200);
            assertFalse(second.isDone(), "the racing close waits for the first one's outcome");
            raced.countDown();

            assertInstanceOf(IllegalStateException.class, first.get(10, TimeUnit.SECONDS), "the buffer is in use");
            assertInstanceOf(IllegalStateException.class, second.get(10, TimeUnit.SECONDS),
                    "the racing close tried itself and was refused too, not told the attachment closed");
            assertFalse(a.isClosed());
            assertEquals(1, server.leaseCount("p"), "still open: the lease is held");

            done.countDown();
            user.get(10, TimeUnit.SECONDS);
            a.close();
            assertTrue(a.isClosed() && a.isReleased());
            await("the lease released", 10, () -> server.leaseCount("p") == 0);
        }
    }

    /** Closes {@code a} on a new thread: completes with what it threw, or null. */
    private static CompletableFuture<Throwable> closeOnAThread(Attachment a) {
        CompletableFuture<Throwable> outcome = new CompletableFuture<>();
        Thread t = new Thread(() -> {
            try {
                a.close();
                outcome.complete(null);
            } catch (Throwable e) {
                outcome.complete(e);
            }
        }, "attachment-closer");
        t.setDaemon(true);
        t.start();
        return outcome;
    }
}
