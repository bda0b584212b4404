package org.cuvmm.ipc;

import static org.cuvmm.ipc.IpcTestSupport.assertFdsBack;
import static org.cuvmm.ipc.IpcTestSupport.await;
import static org.cuvmm.ipc.IpcTestSupport.fdSnapshot;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.concurrent.BlockingQueue;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.TimeUnit;

import org.cuvmm.BufferOrigin;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.ipc.internal.BytePattern;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/** Server and client in one JVM: attach, leases, release, drop, errors, fd accounting. */
class SharingTest {
    private Path sock;
    private final List<LeaseEvent> events = new CopyOnWriteArrayList<>();
    private final SharingListener recorder = new SharingListener() {
        @Override
        public void attached(LeaseEvent e) { events.add(e); }

        @Override
        public void released(LeaseEvent e) { events.add(e); }
    };

    @BeforeEach
    void setUp() throws Exception { sock = IpcTestSupport.socketPath(); }

    @AfterEach
    void tearDown() { IpcTestSupport.deleteTree(sock.getParent()); }

    private SharingServer server() throws Exception {
        return SharingServer.builder(sock).listener(recorder).build();
    }

    @Test
    void attachImportsTheSameMemory() throws Exception {
        try (IpcTestSupport.ThreeChunks owner = new IpcTestSupport.ThreeChunks(); SharingServer server = server();
             VirtualMemoryResource importer = VirtualMemoryResource.create(0);
             SharingClient client = SharingClient.connect(sock, "test")) {
            BytePattern.fill(owner.buffer, 7);
            server.publish("three", owner.buffer);
            assertEquals(Protocol.LATEST_VERSION, client.serverVersion()); // the default client speaks v2
            assertEquals(253, client.serverMaxFds());
            try (Attachment a = client.attach("three", importer)) {
                VirtualMemoryBuffer b = a.buffer();
                // Version 2: the attachment's buffer is a view of the import the client's cache keeps.
                assertEquals(BufferOrigin.SHARED_VIEW, b.origin());
                assertTrue(b.isImported());
                assertEquals(owner.buffer.size(), b.size());
                assertEquals(3, b.chunkCount());
                BytePattern.verify(b, 7);
                b.fill(10, 5, (byte) 0x5A);
                byte[] seen = new byte[5];
                owner.buffer.copyTo(10, seen, 0, 5);
                assertEquals(0x5A, seen[4], "the owner sees the importer's write: shared memory");
                assertEquals(1, server.leaseCount("three"));
                await("the attach event", 5, () -> events.size() == 1);
                assertEquals(LeaseEvent.Reason.ATTACHED, events.get(0).reason());
                assertEquals("test", events.get(0).clientName());
                assertEquals(ProcessHandle.current().pid(), events.get(0).peer().pid());
            }
            assertEquals(0, server.leaseCount("three"), "close() waits for RELEASED");
            await("the release event", 5, () -> events.size() == 2);
            assertEquals(LeaseEvent.Reason.RELEASED, events.get(1).reason());
        }
    }

    @Test
    void leasesAreCountedPerAttachAndFreedOnReleaseAndDisconnect() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer buf = r.allocate(r.granularity());
             SharingServer server = server()) {
            server.publish("b", buf);
            SharingClient c1 = SharingClient.connect(sock, "one");
            SharingClient c2 = SharingClient.connect(sock, "two");
            Attachment a1 = c1.attach("b", r);
            Attachment a2 = c1.attach("b", r);
            Attachment a3 = c2.attach("b", r);
            assertEquals(3, server.leaseCount("b"));
            assertEquals(3, server.totalLeaseCount());
            assertTrue(a1.leaseId() != a2.leaseId());
            a1.close();
            a1.close();
            assertEquals(2, server.leaseCount("b"));
            // A client whose connection ends frees its leases, whatever its attachments think.
            c2.close();
            assertTrue(a3.isClosed(), "closing the client closes its attachments");
            assertEquals(1, server.leaseCount("b"));
            FdSocket raw = FdSocket.connect(sock);
            raw.send(IpcTestSupport.frame(1, 1, IpcTestSupport.str("raw")), null);
            FrameIO.read(raw).close();
            raw.send(IpcTestSupport.frame(3, 2, IpcTestSupport.str("b")), null);
            Frame d = FrameIO.read(raw);
            assertEquals(FrameType.DESCRIPTOR, d.type);
            d.close();
            await("raw client's lease counted", 5, () -> server.leaseCount("b") == 2);
            raw.close(); // no RELEASE: the connection ending frees it
            await("lease of a vanished connection freed", 5, () -> server.leaseCount("b") == 1);
            await("the disconnect event", 5, () -> events.stream().anyMatch(e -> e.reason() == LeaseEvent.Reason.DISCONNECTED));
            a2.close();
            assertEquals(0, server.leaseCount("b"));
            c1.close();
            await("connections gone", 5, () -> server.connectionCount() == 0);
        }
    }

    @Test
    void theOwnersCloseRefusesWhileAConsumerHoldsALease() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); SharingServer server = server();
             SharingClient c = SharingClient.connect(sock, "holder")) {
            VirtualMemoryBuffer buf = r.allocate(r.granularity());
            server.publish("owned", buf);
            Attachment a = c.attach("owned", r);
            IllegalStateException e = assertThrows(IllegalStateException.class, buf::close);
            assertTrue(e.getMessage().contains("'holder'") && e.getMessage().contains("lease " + a.leaseId()),
                    "names the consumer: " + e.getMessage());
            assertFalse(buf.isClosed(), "a refused close leaves the buffer usable");
            buf.fill(0, 1, (byte) 9);
            a.close();
            buf.close();
            assertTrue(buf.isClosed(), "closes once the lease is released");
            // A buffer the owner closed cannot be attached any more.
            SharingException gone = assertThrows(SharingException.class, () -> c.attach("owned", r));
            assertEquals(ErrorCode.INTERNAL, gone.code());
        }
    }

    @Test
    void closeWhenUnusedClosesAfterTheLastConsumerLeaves() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); SharingServer server = server()) {
            VirtualMemoryBuffer buf = r.allocate(r.granularity());
            server.publish("later", buf);
            SharingClient c = SharingClient.connect(sock);
            c.attach("later", r);
            buf.closeWhenUnused();
            assertFalse(buf.isClosed());
            c.close(); // the consumer goes away: its lease ends
            await("closed at the last release", 5, buf::isClosed);
        }
    }

    @Test
    void unpublishSendsDropToEveryHolderWithoutBlocking() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer buf = r.allocate(r.granularity());
             SharingServer server = server(); SharingClient c = SharingClient.connect(sock)) {
            server.publish("d", buf);
            BlockingQueue<DropNotice> drops = new LinkedBlockingQueue<>();
            c.addDropListener(drops::add);
            Attachment a = c.attach("d", r);
            // A raw client that holds a lease and never reads: unpublish must not wait for it.
            FdSocket silent = FdSocket.connect(sock);
            silent.send(IpcTestSupport.frame(1, 1, IpcTestSupport.str("silent")), null);
            silent.send(IpcTestSupport.frame(3, 2, IpcTestSupport.str("d")), null);
            await("two leases", 5, () -> server.leaseCount("d") == 2);
            long t0 = System.nanoTime();
            assertTrue(server.unpublish("d"));
            assertTrue(System.nanoTime() - t0 < TimeUnit.MILLISECONDS.toNanos(500), "unpublish returned at once");
            assertFalse(server.unpublish("d"));
            DropNotice n = drops.poll(5, TimeUnit.SECONDS);
            assertTrue(n != null, "DROP delivered");
            assertEquals("d", n.name());
            assertEquals(a.leaseId(), n.leaseId());
            assertSame(a, n.attachment());
            assertTrue(a.isDropped());
            // Withdrawn: new attaches fail; the lease still counts until released.
            SharingException e = assertThrows(SharingException.class, () -> c.attach("d", r));
            assertEquals(ErrorCode.UNKNOWN_NAME, e.code());
            assertEquals(2, server.totalLeaseCount());
            a.close();
            silent.close();
            await("leases released", 5, () -> server.totalLeaseCount() == 0);
            // The silent client's DESCRIPTOR and DROP were queued for it: check they were well formed.
        }
    }

    @Test
    void serverErrorsBecomeExceptionsWithTheServersMessage() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer buf = r.allocate(r.granularity());
             SharingServer server = server(); SharingClient c = SharingClient.connect(sock)) {
            server.publish("x", buf);
            SharingException e = assertThrows(SharingException.class, () -> c.attach("nope", r));
            assertEquals(ErrorCode.UNKNOWN_NAME, e.code());
            assertTrue(e.getMessage().contains("no buffer is published as 'nope'") && e.getMessage().contains("[x]"),
                    e.getMessage());
            e = assertThrows(SharingException.class, () -> c.release(12345));
            assertEquals(ErrorCode.UNKNOWN_LEASE, e.code());
            // The owner closed the buffer while published: a clear INTERNAL error, the server keeps serving.
            VirtualMemoryBuffer gone = r.allocate(r.granularity());
            server.publish("gone", gone);
            gone.close();
            e = assertThrows(SharingException.class, () -> c.attach("gone", r));
            assertEquals(ErrorCode.INTERNAL, e.code());
            assertTrue(e.getMessage().contains("cannot lease 'gone'") && e.getMessage().contains(" is closed"),
                    e.getMessage());
            try (Attachment a = c.attach("x", r)) {
                assertEquals(buf.size(), a.buffer().size());
            }
        }
    }

    @Test
    void publishChecksItsArguments() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer buf = r.allocate(r.granularity());
             VirtualMemoryBuffer empty = r.allocate(0);
             VirtualMemoryResource local = VirtualMemoryResource.create(0, org.cuvmm.VirtualMemoryResourceOptions.builder()
                     .handleType(org.cuvmm.HandleType.NONE).build());
             VirtualMemoryBuffer notShareable = local.allocate(local.granularity());
             SharingServer server = server()) {
            assertThrows(IllegalArgumentException.class, () -> server.publish("", buf));
            assertThrows(IllegalArgumentException.class, () -> server.publish("n".repeat(256), buf));
            assertThrows(IllegalArgumentException.class, () -> server.publish("e", empty));
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> server.publish("l", notShareable));
            assertTrue(e.getMessage().contains("POSIX_FD"), e.getMessage());
            server.publish("n".repeat(255), buf);
            IllegalStateException twice = assertThrows(IllegalStateException.class, () -> server.publish("n".repeat(255), buf));
            assertTrue(twice.getMessage().contains("already published"), twice.getMessage());
            try (SharingClient c = SharingClient.connect(sock); Attachment a = c.attach("n".repeat(255), r)) {
                e = assertThrows(IllegalArgumentException.class, () -> server.publish("again", a.buffer()));
                assertTrue(e.getMessage().contains("imported"), e.getMessage());
            }
        }
    }

    @Test
    void allowListRefusesOtherUids() throws Exception {
        int me = NativeIo.posix().geteuid();
        List<String> refused = new CopyOnWriteArrayList<>();
        try (SharingServer server = SharingServer.builder(sock).allowUids(me + 12345).listener(new SharingListener() {
            @Override
            public void refused(PeerCredentials peer, String reason) { refused.add(reason); }
        }).build()) {
            SharingException e = assertThrows(SharingException.class, () -> SharingClient.connect(sock));
            assertEquals(ErrorCode.NOT_ALLOWED, e.code());
            assertTrue(e.getMessage().contains("uid " + me + " is not allowed"), e.getMessage());
            // The server sends its ERROR, then fires the event: a client that reads its own
            // reply can see the ERROR first.
            IpcTestSupport.await("the server's refused event", 10, () -> refused.size() == 1);
            assertEquals(1, refused.size());
            assertEquals(0, server.connectionCount());
        }
    }

    @Test
    void fdsReturnToBaselineAfter1000AttachReleaseCycles() throws Exception {
        try (IpcTestSupport.ThreeChunks owner = new IpcTestSupport.ThreeChunks();
             VirtualMemoryResource importer = VirtualMemoryResource.create(0)) {
            BytePattern.fill(owner.buffer, 3);
            try (SharingServer warm = server(); SharingClient c = SharingClient.connect(sock)) {
                warm.publish("w", owner.buffer);
                c.attach("w", importer).close(); // loads every class the cycle uses
            }
            Map<String, Integer> base = fdSnapshot();
            int memfdsBefore = base.getOrDefault("/memfd:cuvmm-host", 0);
            if (IpcTestSupport.memfdsBackAllocations()) {
                assertEquals(3, memfdsBefore, "the owner's three chunks (the host driver keeps one memfd per allocation)");
            }
            try (SharingServer server = server(); SharingClient c = SharingClient.connect(sock)) {
                server.publish("w", owner.buffer);
                int steady = -1;
                for (int i = 0; i < 1000; i++) {
                    try (Attachment a = c.attach("w", importer)) {
                        if (i % 250 == 0) BytePattern.verify(a.buffer(), 3);
                    }
                    if (i == 0) steady = IpcTestSupport.memfdCount();
                }
                assertEquals(0, server.leaseCount("w"));
                // Version 2: after the first cycle the client's cache keeps one fd per allocation id
                // and the import mapped (on the host driver a memfd each): no more during the run.
                assertEquals(steady, IpcTestSupport.memfdCount(), "no memfd left open during the run: "
                        + c.importCache());
                assertEquals(IpcTestSupport.memfdsBackAllocations() ? memfdsBefore + 6 : memfdsBefore, steady,
                        "the owner's 3, the 3 kept fds and the 3 cached imports' memfds: " + c.importCache());
            }
            assertFdsBack(base, "after 1000 attach/release cycles and closing server and client");
        }
    }

    /**
     * Several clients attach and release in parallel while another thread forces collections:
     * every native buffer a sendmsg/recvmsg uses must stay alive for the call (jnr-ffi frees
     * unreachable direct memory from a finalizer).
     */
    @Test
    void concurrentClientsUnderGcPressure() throws Exception {
        try (IpcTestSupport.ThreeChunks owner = new IpcTestSupport.ThreeChunks();
             VirtualMemoryResource importer = VirtualMemoryResource.create(0); SharingServer server = server()) {
            BytePattern.fill(owner.buffer, 5);
            server.publish("p", owner.buffer);
            java.util.concurrent.atomic.AtomicBoolean stop = new java.util.concurrent.atomic.AtomicBoolean();
            Thread gc = new Thread(() -> {
                while (!stop.get()) {
                    System.gc();
                    System.runFinalization();
                    try {
                        Thread.sleep(2);
                    } catch (InterruptedException e) {
                        return;
                    }
                }
            });
            gc.start();
            java.util.concurrent.ExecutorService pool = java.util.concurrent.Executors.newFixedThreadPool(4);
            try {
                List<java.util.concurrent.Future<Integer>> results = new java.util.ArrayList<>();
                for (int t = 0; t < 4; t++) {
                    int id = t;
                    results.add(pool.submit(() -> {
                        int ok = 0;
                        try (SharingClient c = SharingClient.connect(sock, "worker " + id)) {
                            for (int i = 0; i < 150; i++) {
                                try (Attachment a = c.attach("p", importer)) {
                                    byte[] b = new byte[64];
                                    long at = (i * 4099L) % (a.buffer().size() - 64);
                                    a.buffer().copyTo(at, b, 0, 64);
                                    for (int k = 0; k < 64; k++) {
                                        if (b[k] != BytePattern.byteAt(at + k, 5)) throw new AssertionError("byte " + (at + k));
                                    }
                                    ok++;
                                }
                            }
                        }
                        return ok;
                    }));
                }
                for (java.util.concurrent.Future<Integer> f : results) assertEquals(150, f.get(120, TimeUnit.SECONDS));
            } finally {
                stop.set(true);
                gc.join();
                pool.shutdown();
            }
            assertEquals(0, server.leaseCount("p"));
        }
    }

    @Test
    void closingTheServerEndsLeasesAndDeletesTheSocket() throws Exception {
        Map<String, Integer> base = fdSnapshot();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer buf = r.allocate(r.granularity())) {
            SharingServer server = server();
            server.publish("s", buf);
            SharingClient c = SharingClient.connect(sock);
            Attachment a = c.attach("s", r);
            server.close();
            server.close();
            assertFalse(java.nio.file.Files.exists(sock), "socket file deleted");
            assertTrue(events.stream().anyMatch(e -> e.reason() == LeaseEvent.Reason.SERVER_CLOSED));
            await("client sees the end", 5, () -> !c.isConnected());
            a.close(); // the connection has ended: only the buffer is closed
            c.close();
            assertThrows(IllegalStateException.class, () -> server.publish("t", buf));
        }
        assertFdsBack(base, "after the server closed under a client");
    }
}
