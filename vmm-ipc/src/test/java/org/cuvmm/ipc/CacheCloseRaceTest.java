package org.cuvmm.ipc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.TimeUnit;

import org.cuvmm.Driver;
import org.cuvmm.DriverCounters;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.junit.jupiter.api.Test;

/**
 * A version-2 client closed while other threads take import-cache hits leaves no mapping: the
 * cache's end closes an entry whose view is being made only when that view goes. It closed the
 * kept import under the share, the close was refused ("in use") and the import stayed mapped
 * until the garbage collector found it (an independent probe: one leak per 13 to 212 rounds).
 * Counted without a GC, round after round: the host driver's live allocations and mappings
 * are back once everything is closed.
 */
class CacheCloseRaceTest {
    private static final int ROUNDS = 200;
    private static final int THREADS = 4;

    @Test
    void closingAClientDuringCacheHitsLeavesNoMapping() throws Exception {
        Path sock = IpcTestSupport.socketPath();
        DriverCounters c = Driver.get().counters();
        try (VirtualMemoryResource producer = VirtualMemoryResource.create(0);
             VirtualMemoryResource consumer = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer frame = producer.allocate(producer.granularity());
             SharingServer server = SharingServer.builder(sock).build()) {
            server.publish("frame", frame);
            for (int round = 0; round < ROUNDS; round++) {
                long allocations = c.liveAllocations(), mappings = c.liveMappings();
                SharingClient client = SharingClient.builder(sock).protocolVersion(2).build();
                client.attach("frame", consumer).close(); // the entry is cached: later attaches are hits
                List<Attachment> made = new CopyOnWriteArrayList<>();
                List<Thread> threads = new ArrayList<>();
                CountDownLatch going = new CountDownLatch(THREADS);
                for (int t = 0; t < THREADS; t++) {
                    Thread th = new Thread(() -> {
                        going.countDown();
                        for (;;) {
                            try {
                                Attachment a = client.attach("frame", consumer);
                                made.add(a);
                                a.close();
                            } catch (IOException | RuntimeException ended) {
                                if (!client.isConnected()) return;
                            }
                        }
                    }, "cache-hits-" + t);
                    threads.add(th);
                    th.start();
                }
                going.await();
                Thread.sleep(ThreadLocalRandom.current().nextInt(1, 4));
                client.closeNow();
                for (Thread th : threads) {
                    th.join(TimeUnit.SECONDS.toMillis(20));
                    assertTrue(!th.isAlive(), "round " + round + ": an attaching thread hung");
                }
                for (Attachment a : made) {
                    try {
                        a.close();
                    } catch (RuntimeException closedWithTheClient) {
                        // the connection ended: the server freed the lease
                    }
                }
                int r = round;
                IpcTestSupport.await("round " + r + ": live allocations and mappings back (" + allocations + ", "
                        + mappings + ") without a GC", 10,
                        () -> c.liveAllocations() == allocations && c.liveMappings() == mappings);
            }
            server.unpublish("frame");
            // The server sees the last clients' ends on its own threads, a moment after they
            // closed (CI saw 2 leases still counted at once): wait for it, bounded.
            IpcTestSupport.await("no lease left (" + server.totalLeaseCount() + " now)", 10,
                    () -> server.totalLeaseCount() == 0);
            assertEquals(0, server.totalLeaseCount(), "no lease left");
        } finally {
            IpcTestSupport.deleteTree(sock.getParent());
        }
    }
}
