package org.cuvmm.ipc;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collection;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;

import org.cuvmm.Driver;
import org.cuvmm.DriverKind;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;

/**
 * The producer of {@link EvictSplitTest}, run in a child JVM (through {@link SoakChild}): args
 * {@code SOCKET COUNT MAX_IDS [JAVACPP_CACHEDIR]}.
 *
 * <p>It selects the host driver at its smallest granularity (4096 bytes; set here, before
 * anything uses the driver, which is why this runs in a JVM of its own), so that COUNT
 * allocations cost COUNT pages and COUNT memfds. It publishes COUNT one-chunk buffers
 * {@code b0} to {@code b<COUNT-1>} and one more, {@code after}, on a {@link SharingServer} that
 * lets one connection hold MAX_IDS ids, prints {@code READY ok nofile=N} and obeys lines on stdin
 * (or, when its fd limit cannot hold COUNT memfds, prints {@code READY skip nofile=N ...} and
 * waits for {@code exit}):
 * <ul>
 * <li>{@code release}: holds the connection's sender thread at its next frame (test seam
 *     {@link SendQueue#beforeSend}), so that nothing leaves while the producer releases;
 *     unpublishes and closes the COUNT buffers (each close really releases its allocation:
 *     one release notice, one EVICT id each); waits until the server has marked every id
 *     released and every EVICT id is queued, parked or held by the sender; prints
 *     {@code RELEASED parked=P queuedFrames=Q inSender=S}; then lets the sender go.</li>
 * <li>{@code stats}: prints {@code STATS} with the server's figures.</li>
 * <li>{@code exit}: closes the server, the buffers and the resource, and exits 0.</li>
 * </ul>
 * A failure prints {@code FAILED: ...} and exits 2.
 */
public final class EvictSplitProducerMain {
    private static final int RLIMIT_NOFILE = 7;

    private EvictSplitProducerMain() {}

    public static void main(String[] args) throws Exception {
        // Before anything uses the driver: system properties win over the environment the
        // child inherited (the cuda pass sets CUVMM_DRIVER=cuda there).
        System.setProperty("cuvmm.driver", "host");
        System.setProperty("cuvmm.host.granularity", "4096");
        if (args.length > 3 && !args[3].isEmpty()) System.setProperty("org.bytedeco.javacpp.cachedir", args[3]);
        IpcTestSupport.runChildMain(() -> run(Path.of(args[0]), Integer.parseInt(args[1]), Integer.parseInt(args[2])));
    }

    private static void run(Path sock, int count, int maxIds) throws Exception {
        Driver d = Driver.get();
        if (d.kind() != DriverKind.HOST) throw new IllegalStateException("driver " + d.describe() + " (expected: host)");
        jnr.posix.RLimit limit = NativeIo.posix().getrlimit(RLIMIT_NOFILE);
        long nofile = limit.rlimCur();
        if (nofile < count + 1024L) {
            // Not enough fds for COUNT memfds: the test skips (it says why).
            System.out.println("READY skip nofile=" + nofile + " (needs " + (count + 1024L) + ")");
            System.out.flush();
            waitForExit(new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8)));
            return;
        }
        AtomicInteger errors = new AtomicInteger();
        List<String> errorTexts = java.util.Collections.synchronizedList(new ArrayList<>());
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
            if (r.granularity() != 4096) throw new IllegalStateException("granularity " + r.granularity() + " (expected: 4096)");
            List<VirtualMemoryBuffer> buffers = new ArrayList<>(count);
            VirtualMemoryBuffer after = r.allocate(r.granularity());
            try (SharingServer server = SharingServer.builder(sock).maxIdsPerConnection(maxIds).listener(
                    new SharingListener() {
                        @Override
                        public void error(PeerCredentials peer, String clientName, ErrorCode code, String message,
                                          boolean sentByClient) {
                            errors.incrementAndGet();
                            if (errorTexts.size() < 5) errorTexts.add(code + ": " + message);
                        }
                    }).build()) {
                for (int i = 0; i < count; i++) {
                    VirtualMemoryBuffer b = r.allocate(r.granularity());
                    buffers.add(b);
                    server.publish("b" + i, b);
                }
                server.publish("after", after);
                System.out.println("READY ok nofile=" + nofile);
                System.out.flush();
                BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
                for (String line; (line = in.readLine()) != null; ) {
                    switch (line.trim()) {
                        case "release" -> release(server, buffers, count);
                        case "stats" -> {
                            SharingStats st = server.stats();
                            SharingStats.ConnectionStats c = st.connections().isEmpty() ? null : st.connections().get(0);
                            System.out.println("STATS connections=" + st.connections().size()
                                    + " idsHeld=" + st.idsHeld()
                                    + " releasedIdsHeld=" + (c == null ? 0 : c.releasedIdsHeld())
                                    + " leases=" + server.totalLeaseCount()
                                    + " releasedStillMapped=" + st.releasedStillMappedAllocations()
                                    + " releasedStillMappedBytes=" + st.releasedStillMappedBytes()
                                    + " fdsSent=" + st.fdsSent()
                                    + " errors=" + errors.get() + " " + errorTexts);
                        }
                        case "exit" -> {
                            return;
                        }
                        default -> throw new IllegalArgumentException("command: " + line);
                    }
                    System.out.flush();
                }
            } finally {
                SendQueue.beforeSend = (q, i) -> {};
                for (VirtualMemoryBuffer b : buffers) {
                    if (!b.isClosed()) b.close();
                }
                after.close();
            }
        }
    }

    /**
     * Holds the sender thread, releases every buffer, waits until all COUNT EVICT ids are
     * queued, parked or in the sender's hands, reports where they are, then lets the sender go.
     */
    private static void release(SharingServer server, List<VirtualMemoryBuffer> buffers, int count) throws Exception {
        CountDownLatch gate = new CountDownLatch(1);
        AtomicReference<SendQueue> heldQueue = new AtomicReference<>();
        AtomicInteger inSender = new AtomicInteger();
        SendQueue.beforeSend = (q, item) -> {
            if (gate.getCount() == 0) return;
            heldQueue.compareAndSet(null, q);
            inSender.incrementAndGet();
            try {
                gate.await(60, TimeUnit.SECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        };
        try {
            for (int i = 0; i < count; i++) {
                server.unpublish("b" + i);
                buffers.get(i).close(); // really released: the core's notice marks the id and queues its EVICT
            }
            java.lang.reflect.Field cf = SharingServer.class.getDeclaredField("connections");
            cf.setAccessible(true);
            Collection<?> connections = (Collection<?>) cf.get(server);
            if (connections.size() != 1) throw new IllegalStateException(connections.size() + " connections (expected: 1)");
            ServerConnection c = (ServerConnection) connections.iterator().next();
            java.lang.reflect.Field uf = ServerConnection.class.getDeclaredField("unsentEvicts");
            uf.setAccessible(true);
            Collection<?> parked = (Collection<?>) uf.get(c);
            long until = System.nanoTime() + TimeUnit.SECONDS.toNanos(60);
            for (;;) {
                SharingStats.ConnectionStats st = server.stats().connections().get(0);
                SendQueue q = heldQueue.get();
                // Each queued frame holds one id: while the sender is held, only the first
                // offers find room, one id each; everything after them is parked.
                int where = parked.size() + (q == null ? 0 : q.size()) + inSender.get();
                if (st.releasedIdsHeld() == count && where == count) break;
                if (System.nanoTime() > until) {
                    throw new IllegalStateException("after 60 s: " + st.releasedIdsHeld() + " of " + count
                            + " ids released, " + parked.size() + " parked, " + (q == null ? 0 : q.size()) + " queued, "
                            + inSender.get() + " in the sender");
                }
                Thread.sleep(5);
            }
            System.out.println("RELEASED parked=" + parked.size() + " queuedFrames=" + heldQueue.get().size()
                    + " inSender=" + inSender.get());
            System.out.flush();
        } finally {
            gate.countDown();
        }
    }

    private static void waitForExit(BufferedReader in) throws java.io.IOException {
        for (String line; (line = in.readLine()) != null; ) {
            if (line.trim().equals("exit")) return;
        }
    }
}
