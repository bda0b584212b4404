package org.cuvmm.ipc;

import static org.cuvmm.ipc.IpcTestSupport.await;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.file.Path;

import org.cuvmm.BufferOrigin;
import org.cuvmm.HandleType;
import org.cuvmm.LocationType;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.VirtualMemoryResourceOptions;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * The lease follows the consumer's mappings: {@link Attachment#close()} while an alias or a
 * ByteBuffer view of the imported buffer still maps the memory keeps the lease, so the
 * producer cannot get the memory back (and a pool reuse it); it is released when the last
 * mapping goes.
 */
class LeaseFollowsMappingsTest {
    private Path sock;

    @BeforeEach
    void setUp() throws Exception { sock = IpcTestSupport.socketPath(); }

    @AfterEach
    void tearDown() { IpcTestSupport.deleteTree(sock.getParent()); }

    private static VirtualMemoryResource hostResource() {
        return VirtualMemoryResource.create(0, VirtualMemoryResourceOptions.builder()
                .locationType(LocationType.HOST_NUMA).handleType(HandleType.POSIX_FD).build());
    }

    @Test
    void anAliasKeepsTheLeaseUntilItIsClosed() throws Exception {
        try (VirtualMemoryResource owner = VirtualMemoryResource.create(0);
                VirtualMemoryBuffer published = owner.allocate(2 * owner.granularity());
                SharingServer server = SharingServer.builder(sock).build();
                VirtualMemoryResource importer = VirtualMemoryResource.create(0);
                SharingClient client = SharingClient.connect(sock, "alias")) {
            published.fill((byte) 3);
            server.publish("p", published);
            Attachment a = client.attach("p", importer);
            VirtualMemoryBuffer alias = importer.modifyAllocation(a.buffer(), importer.granularity());
            a.close();
            assertTrue(a.isClosed());
            assertTrue(a.buffer().isClosed());
            assertFalse(a.isReleased(), "an alias still maps the memory");
            assertEquals(1, server.leaseCount("p"), "the lease is held while an alias maps the memory");
            byte[] one = new byte[1];
            alias.copyTo(0, one, 0, 1);
            assertEquals(3, one[0]);
            alias.close();
            assertTrue(a.isReleased());
            await("the lease released after the alias closed", 10, () -> server.leaseCount("p") == 0);
        }
    }

    @Test
    void aGrowOfAGrowKeepsTheLease() throws Exception {
        try (VirtualMemoryResource owner = VirtualMemoryResource.create(0);
                VirtualMemoryBuffer published = owner.allocate(owner.granularity());
                SharingServer server = SharingServer.builder(sock).build();
                VirtualMemoryResource importer = VirtualMemoryResource.create(0);
                SharingClient client = SharingClient.connect(sock, "grow")) {
            server.publish("g", published);
            Attachment a = client.attach("g", importer);
            long g = importer.granularity();
            VirtualMemoryBuffer grown = importer.modifyAllocation(a.buffer(), 2 * g); // imported chunk + a local one
            VirtualMemoryBuffer grownTwice = importer.modifyAllocation(grown, 4 * g);
            a.close();
            grown.close();
            assertEquals(1, server.leaseCount("g"), "a grow of a grow still maps the imported chunk");
            grownTwice.close();
            await("the lease released after the last grow closed", 10, () -> server.leaseCount("g") == 0);
        }
    }

    @Test
    void aByteBufferViewKeepsTheLeaseUntilCollected() throws Exception {
        try (VirtualMemoryResource owner = hostResource();
                VirtualMemoryBuffer published = owner.allocate(owner.granularity());
                SharingServer server = SharingServer.builder(sock).build();
                VirtualMemoryResource importer = hostResource();
                SharingClient client = SharingClient.connect(sock, "view")) {
            published.fill((byte) 9);
            server.publish("v", published);
            Attachment a = client.attach("v", importer);
            ByteBuffer view = a.buffer().asByteBuffer();
            a.close();
            assertEquals(1, server.leaseCount("v"), "the lease is held while a view maps the memory");
            assertEquals(9, view.get(4096));
            view = null;
            long deadline = System.nanoTime() + 10_000_000_000L;
            while (server.leaseCount("v") != 0 && System.nanoTime() < deadline) {
                System.gc();
                Thread.sleep(20);
            }
            assertEquals(0, server.leaseCount("v"), "the lease released once the view was collected");
            assertTrue(a.isReleased());
        }
    }

    @Test
    void closingTheClientKeepsTheConnectionWhileAnAliasLives() throws Exception {
        try (VirtualMemoryResource owner = VirtualMemoryResource.create(0);
                VirtualMemoryBuffer published = owner.allocate(owner.granularity());
                SharingServer server = SharingServer.builder(sock).build();
                VirtualMemoryResource importer = VirtualMemoryResource.create(0)) {
            server.publish("c", published);
            SharingClient client = SharingClient.connect(sock, "closing");
            Attachment a = client.attach("c", importer);
            VirtualMemoryBuffer alias = importer.modifyAllocation(a.buffer(), importer.granularity());
            client.close();
            assertTrue(a.isClosed());
            assertFalse(client.isConnected(), "closed for new requests");
            assertEquals(1, server.leaseCount("c"), "the connection (and the lease) lives while the alias maps the memory");
            assertEquals(1, server.connectionCount());
            alias.close();
            await("the lease released", 10, () -> server.leaseCount("c") == 0);
            await("the connection closed after the last release", 10, () -> server.connectionCount() == 0);
        }
    }

    /** Makes an alias of {@code b} and drops it unclosed: only the cleaner can unmap it. */
    private static void leakAnAlias(VirtualMemoryResource r, VirtualMemoryBuffer b) {
        r.modifyAllocation(b, r.granularity());
    }

    @Test
    void aLeakedAliasReleasedByTheCleanerReleasesTheLease() throws Exception {
        try (VirtualMemoryResource owner = VirtualMemoryResource.create(0);
                VirtualMemoryBuffer published = owner.allocate(owner.granularity());
                SharingServer server = SharingServer.builder(sock).build();
                VirtualMemoryResource importer = VirtualMemoryResource.create(0);
                SharingClient client = SharingClient.connect(sock, "leaked")) {
            server.publish("l", published);
            Attachment a = client.attach("l", importer);
            leakAnAlias(importer, a.buffer());
            a.close();
            assertEquals(1, server.leaseCount("l"), "the leaked alias still maps the memory");
            long deadline = System.nanoTime() + 10_000_000_000L;
            while (server.leaseCount("l") != 0 && System.nanoTime() < deadline) {
                System.gc();
                Thread.sleep(20);
            }
            assertEquals(0, server.leaseCount("l"), "the lease released once the cleaner unmapped the leaked alias");
            assertTrue(a.isReleased());
        }
    }

    private static VirtualMemoryResource resourceAt(long hint) {
        return VirtualMemoryResource.create(0, VirtualMemoryResourceOptions.builder().addressHint(hint).build());
    }

    /** A grow that moves (a decoy sits right after the imported buffer) re-maps the imported chunk: the lease stays. */
    @Test
    void aGrowThatMovesKeepsTheLeaseUntilClosed() throws Exception {
        try (VirtualMemoryResource owner = VirtualMemoryResource.create(0);
                VirtualMemoryBuffer published = owner.allocate(owner.granularity());
                SharingServer server = SharingServer.builder(sock).build();
                VirtualMemoryResource importer = VirtualMemoryResource.create(0);
                SharingClient client = SharingClient.connect(sock, "moved")) {
            long g = owner.granularity();
            server.publish("m", published);
            Attachment a = client.attach("m", importer);
            // A decoy asked for right after the imported buffer (as GrowTest forces a move): the
            // grow cannot extend in place. An import takes no address hint, so something else of
            // the process (the host driver's private view of a device allocation, say) may
            // already sit there; the decoy then lands elsewhere, and the grow must move all the same.
            try (VirtualMemoryResource decoyResource = resourceAt(a.buffer().address() + g);
                    VirtualMemoryBuffer decoy = decoyResource.allocate(g)) {
                VirtualMemoryBuffer moved = importer.modifyAllocation(a.buffer(), 3 * g);
                assertEquals(BufferOrigin.MOVED, moved.origin());
                a.close();
                assertFalse(a.isReleased());
                assertEquals(1, server.leaseCount("m"), "the moved buffer still maps the imported chunk");
                moved.close();
                assertTrue(a.isReleased());
                await("the lease released after the moved buffer closed", 10, () -> server.leaseCount("m") == 0);
            }
        }
    }
}
