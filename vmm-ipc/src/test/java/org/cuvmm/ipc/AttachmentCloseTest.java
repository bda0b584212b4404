package org.cuvmm.ipc;

import static org.cuvmm.ipc.IpcTestSupport.await;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicReference;

import org.cuvmm.BufferDescriptor;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * {@link Attachment#close()} holds no monitor while it closes the buffer (the final
 * unmap/release, a driver call), and a close the buffer refuses leaves the attachment open
 * and closable later.
 */
class AttachmentCloseTest {
    private Path sock;

    @BeforeEach
    void setUp() throws Exception { sock = IpcTestSupport.socketPath(); }

    @AfterEach
    void tearDown() { IpcTestSupport.deleteTree(sock.getParent()); }

    /**
     * The import's whenUnmapped callback runs inside the buffer's close, after the final
     * unmap: it records whether the closing thread holds the attachment's monitor there.
     */
    @Test
    void closeHoldsNoMonitorAcrossTheBuffersTeardown() throws Exception {
        try (VirtualMemoryResource owner = VirtualMemoryResource.create(0);
                VirtualMemoryBuffer published = owner.allocate(owner.granularity());
                SharingServer server = SharingServer.builder(sock).build();
                VirtualMemoryResource importer = VirtualMemoryResource.create(0);
                SharingClient client = SharingClient.connect(sock, "no-monitor")) {
            server.publish("p", published);
            // A real lease, whose release the hooked attachment below sends.
            Attachment granted = client.attach("p", importer);
            client.forget(granted);
            long lease = granted.leaseId();
            AtomicReference<Attachment> self = new AtomicReference<>();
            AtomicReference<Boolean> heldMonitor = new AtomicReference<>();
            Attachment a = new Attachment(client, "p", lease, whenUnmapped -> {
                try (BufferDescriptor d = published.exportDescriptor()) {
                    return importer.importBuffer(d, () -> {
                        heldMonitor.set(Thread.holdsLock(self.get()));
                        whenUnmapped.run();
                    });
                }
            });
            self.set(a);
            try {
                a.close();
                assertNotNull(heldMonitor.get(), "the buffer's close ran the callback");
                assertFalse(heldMonitor.get(), "Attachment.close held its monitor across the buffer's teardown");
                assertTrue(a.isReleased());
                await("the lease released", 10, () -> server.leaseCount("p") == 0);
            } finally {
                granted.buffer().close(); // its release of the same lease is answered UNKNOWN_LEASE and ignored
            }
        }
    }

    /** The buffer is in use on another thread: close refuses, the attachment stays open, and a later close works. */
    @Test
    void aRefusedCloseLeavesTheAttachmentOpenAndClosableLater() throws Exception {
        try (VirtualMemoryResource owner = VirtualMemoryResource.create(0);
                VirtualMemoryBuffer published = owner.allocate(owner.granularity());
                SharingServer server = SharingServer.builder(sock).build();
                VirtualMemoryResource importer = VirtualMemoryResource.create(0);
                SharingClient client = SharingClient.connect(sock, "refused")) {
            server.publish("r", published);
            Attachment a = client.attach("r", importer);
            CountDownLatch inUse = new CountDownLatch(1);
            CountDownLatch done = new CountDownLatch(1);
            CompletableFuture<Void> user = CompletableFuture.runAsync(() -> a.buffer().withAddress(address -> {
                inUse.countDown();
                try {
                    done.await(30, TimeUnit.SECONDS);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
            }));
            assertTrue(inUse.await(10, TimeUnit.SECONDS));
            assertThrows(IllegalStateException.class, a::close);
            assertFalse(a.isClosed());
            assertFalse(a.isReleased());
            assertEquals(1, client.attachments().size(), "still listed by the client");
            assertEquals(1, server.leaseCount("r"));
            done.countDown();
            user.get(10, TimeUnit.SECONDS);
            a.close();
            assertTrue(a.isClosed());
            assertTrue(a.isReleased());
            assertEquals(0, server.leaseCount("r"), "close waited for RELEASED");
        }
    }
}
