package org.cuvmm.ipc;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Path;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.pool.VirtualMemoryPool;
import org.cuvmm.testing.OpenFds;
import org.junit.jupiter.api.Test;

/**
 * Probe: SharingClient.close() racing attaches of a cached (v2) frame on other threads. close()'s
 * javadoc: "an attach() finishing now closes what it made"; the attach should fail with an
 * IOException saying the client is closed, not with a "bad frame from the server".
 */
class ClientCloseRaceTest {
    static final int ITERATIONS = Integer.getInteger("probe.iterations", 300);

    @Test
    void clientCloseRacingCachedAttachesReportsNoBadFrame() throws Exception {
        Path sock = IpcTestSupport.socketPath();
        Map<String, AtomicLong> kinds = new ConcurrentHashMap<>();
        StringBuilder first = new StringBuilder();
        Map<String, Integer> fds0 = OpenFds.byKind();
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             VirtualMemoryResource into = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(resource).name("probe-ccr").leakSampleRate(0)
                     .build();
             SharingServer server = SharingServer.builder(sock).build()) {
            VirtualMemoryBuffer frame = pool.allocateExported(2 * resource.granularity());
            server.publish("f", frame);
            for (int it = 0; it < ITERATIONS; it++) {
                SharingClient client = SharingClient.connect(sock, "probe-ccr");
                client.attach("f", into).close(); // cached: the ids are held, the next attach sends no fd
                AtomicBoolean stop = new AtomicBoolean();
                Thread[] ts = new Thread[3];
                for (int t = 0; t < ts.length; t++) {
                    ts[t] = new Thread(() -> {
                        while (!stop.get()) {
                            try {
                                client.attach("f", into).close();
                            } catch (Throwable e) {
                                String k = e.getClass().getSimpleName()
                                        + (e instanceof SharingException s ? "(" + s.code() + ")" : "") + ": "
                                        + String.valueOf(e.getMessage()).replaceAll("[0-9]+", "N");
                                if (kinds.computeIfAbsent(k, x -> new AtomicLong()).incrementAndGet() == 1
                                        && e instanceof SharingException) {
                                    synchronized (first) {
                                        java.io.StringWriter w = new java.io.StringWriter();
                                        e.printStackTrace(new java.io.PrintWriter(w));
                                        first.append(w).append('\n');
                                    }
                                }
                                if (!client.isConnected()) return;
                            }
                        }
                    });
                    ts[t].start();
                }
                Thread.sleep(ThreadLocalRandom.current().nextInt(1, 8));
                try {
                    client.close();
                } catch (RuntimeException e) {
                    kinds.computeIfAbsent("close " + e, x -> new AtomicLong()).incrementAndGet();
                }
                stop.set(true);
                for (Thread t : ts) t.join(30_000);
                IpcTestSupport.await("connection ended", 10, () -> server.connectionCount() == 0);
            }
            server.unpublish("f");
            frame.close();
        } finally {
            IpcTestSupport.deleteTree(sock.getParent());
        }
        System.out.println("ClientCloseRaceTest: " + kinds + "\n" + first);
        IpcTestSupport.assertFdsBack(fds0, "after all closed");
        assertTrue(kinds.keySet().stream().noneMatch(k -> k.startsWith("SharingException")),
                "attach failed with a SharingException (a 'bad frame' from the server) while the client was closing: "
                        + kinds + "\n" + first);
    }
}
