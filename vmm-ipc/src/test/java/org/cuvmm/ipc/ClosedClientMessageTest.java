package org.cuvmm.ipc;

import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.Map;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.pool.VirtualMemoryPool;
import org.junit.jupiter.api.Test;

/**
 * Probe: an attach racing SharingClient.close() (version 1: no cache involved) fails with
 * "ATTACH to PATH failed: null" (the ClosedChannelException's null message): the message says
 * nothing about the client having been closed.
 */
class ClosedClientMessageTest {
    static final int ITERATIONS = Integer.getInteger("probe.iterations", 200);

    @Test
    void attachRacingClientCloseSaysWhy() throws Exception {
        Path sock = IpcTestSupport.socketPath();
        Map<String, AtomicLong> kinds = new ConcurrentHashMap<>();
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             VirtualMemoryResource into = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(resource).name("probe-cm").leakSampleRate(0)
                     .build();
             SharingServer server = SharingServer.builder(sock).build()) {
            VirtualMemoryBuffer frame = pool.allocateExported(resource.granularity());
            server.publish("f", frame);
            for (int it = 0; it < ITERATIONS; it++) {
                SharingClient client = SharingClient.builder(sock).protocolVersion(1).build();
                AtomicBoolean stop = new AtomicBoolean();
                Thread[] ts = new Thread[3];
                for (int t = 0; t < ts.length; t++) {
                    ts[t] = new Thread(() -> {
                        while (!stop.get()) {
                            try {
                                client.attach("f", into).close();
                            } catch (Throwable e) {
                                kinds.computeIfAbsent(e.getClass().getSimpleName() + ": "
                                        + String.valueOf(e.getMessage()).replaceAll("[0-9]+", "N"), x -> new AtomicLong())
                                        .incrementAndGet();
                                if (!client.isConnected()) return;
                            }
                        }
                    });
                    ts[t].start();
                }
                Thread.sleep(ThreadLocalRandom.current().nextInt(1, 8));
                client.close();
                stop.set(true);
                for (Thread t : ts) t.join(30_000);
                IpcTestSupport.await("connection ended", 10, () -> server.connectionCount() == 0);
            }
            server.unpublish("f");
            frame.close();
        } finally {
            IpcTestSupport.deleteTree(sock.getParent());
        }
        System.out.println("ClosedClientMessageTest: " + kinds);
        assertTrue(kinds.keySet().stream().noneMatch(k -> k.endsWith("failed: null")),
                "an attach racing close() failed with a message ending in 'null': " + kinds);
    }
}
