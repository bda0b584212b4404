package org.cuvmm.ipc;

import static org.cuvmm.ipc.IpcTestSupport.frame2;
import static org.cuvmm.ipc.IpcTestSupport.str;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.EnumMap;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.cuvmm.AllocationReleaseNotices;
import org.cuvmm.Driver;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.junit.jupiter.api.Test;

/**
 * EVICT and FORGET crossing (docs/PROTOCOL.md section 13.10, and 13.4 to 13.6), against the
 * real {@link SharingServer}, from a raw version-2 client that follows the rules: it keeps
 * each id's fd until FORGOTTEN or the id's EVICT, whichever comes first, and ignores an EVICT
 * of an id it has already sent FORGET for.
 *
 * <p>Each round the client attaches a fresh one-allocation buffer (a new id, with its fd) and
 * releases the lease; then the client's FORGET of that id and the producer's release of the
 * allocation (unpublish, close: the core's release notice marks the id released and queues an
 * EVICT) happen in one of three orders:
 * <ul>
 * <li>{@code FORGET_FIRST}: FORGOTTEN is read before the producer releases: the server holds no
 *     id for the allocation any more, so no EVICT may ever name it;</li>
 * <li>{@code RELEASE_FIRST}: the server has queued the EVICT (this test's own release
 *     listener, registered after the server's, has heard the release) before the client sends
 *     FORGET without reading it: the crossing itself. The EVICT comes (before the FORGOTTEN,
 *     as it was queued first), the client ignores it, and until the FORGET the server counts
 *     the allocation once as released, still mapped by one consumer;</li>
 * <li>{@code RACE}: FORGET sent and release started at the same moment from two threads; either
 *     order may win (both are counted and printed, not asserted: the deterministic rounds
 *     above cover each).</li>
 * </ul>
 * In every order: the FORGET is answered with FORGOTTEN (count 1, its request id), never an
 * ERROR; at most one EVICT names the id, it names nothing else, and it comes before the reply
 * to the next request made after the server heard the release; right after FORGOTTEN the
 * server holds no id and counts nothing as released, still mapped (the FORGET acknowledges
 * the EVICT: nothing is left over or counted twice); each round's DESCRIPTOR gives a new,
 * larger id with its fd; the server sends exactly one fd per round and reports no error.
 * At the end the connection still attaches, every fd this JVM received is closed and every
 * memfd is gone (fds back to their baseline).
 */
class EvictForgetCrossingTest {
    private static final int ROUNDS = 250;
    /** The most one read may wait for its frame (a server that never answers fails the test, not hangs it). */
    private static final int READ_WAIT_SECONDS = 30;

    private enum Order { FORGET_FIRST, RELEASE_FIRST, RACE }

    private int nextRequest = 1;
    /** Ids this client holds: id -> its fd, kept until FORGOTTEN or EVICT (then closed and set to -1). */
    private final Map<Long, Integer> keptFds = new HashMap<>();
    /** Ids the client has sent FORGET for. */
    private final Set<Long> forgetSent = new HashSet<>();
    /** Ids an EVICT named, each at most once. */
    private final Set<Long> evicted = new HashSet<>();
    /** Ids given by a DESCRIPTOR, in order. */
    private final List<Long> given = new ArrayList<>();
    /**
     * Ids up to this one are settled: the server had heard their release before this client
     * sent a request whose reply it has read since, so no EVICT may name them any more.
     */
    private long settled;
    /** EVICTs of ids whose FORGET had already been sent (the crossing: ignored). */
    private int evictsIgnored;


    @Test
    void forgetAndEvictCrossingLeaveNothingHeldOrCounted() throws Exception {
        Path sock = IpcTestSupport.socketPath();
        Map<String, Integer> fds0 = IpcTestSupport.fdSnapshot();
        List<String> serverErrors = new java.util.concurrent.CopyOnWriteArrayList<>();
        Set<Long> heard = ConcurrentHashMap.newKeySet();
        List<long[]> rounds = new ArrayList<>(); // id, order, EVICT read before FORGOTTEN (1) or not (0)
        ExecutorService producerThread = Executors.newSingleThreadExecutor();
        AllocationReleaseNotices.Registration listening = null;
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             SharingServer server = SharingServer.builder(sock).listener(new SharingListener() {
                 @Override
                 public void error(PeerCredentials peer, String clientName, ErrorCode code, String message,
                                   boolean sentByClient) {
                     serverErrors.add(code + ": " + message);
                 }
             }).build();
             FdSocket s = FdSocket.connect(sock)) {
            IpcTestSupport.hello2(s, nextRequest++, "evict-forget-crossing", READ_WAIT_SECONDS);
            // After the server's registration (made at the version-2 HELLO): for each release
            // the server's listener has run (and queued its EVICT, if any) when this one hears it.
            listening = Driver.get().addAllocationReleaseListener(heard::add);
            for (int round = 0; round < ROUNDS; round++) {
                Order order = round % 10 == 0 ? Order.FORGET_FIRST : round % 10 == 1 ? Order.RELEASE_FIRST : Order.RACE;
                String name = "r" + round;
                VirtualMemoryBuffer b = r.allocate(r.granularity());
                long allocation = b.allocationIds()[0];
                server.publish(name, b);
                long lease = attach(s, name);
                long id = given.get(given.size() - 1);
                assertEquals(1, heldIds(server), "round " + round + ": the new id is held");
                release(s, lease);

                int forgetRequest = nextRequest++;
                byte[] forget = frame2(9, forgetRequest, new Messages.Forget(new long[] {id}).encode());
                Runnable producerRelease = () -> {
                    server.unpublish(name);
                    b.close(); // the only mapping: the allocation is really released
                };
                boolean evictBeforeForgotten;
                switch (order) {
                    case FORGET_FIRST -> {
                        sendForget(s, id, forget);
                        evictBeforeForgotten = readUntilForgotten(s, forgetRequest, id, round);
                        assertAfterForgotten(server, round);
                        producerRelease.run();
                    }
                    case RELEASE_FIRST -> {
                        producerRelease.run();
                        IpcTestSupport.await("round " + round + ": the release heard", 10, () -> heard.contains(allocation));
                        SharingStats st = server.stats();
                        assertEquals(List.of(new SharingStats.ReleasedAllocation(allocation, r.granularity(), 1)),
                                st.releasedStillMapped(), "round " + round + ": released, still mapped by this one "
                                        + "consumer until its FORGET: " + st);
                        assertEquals(1, st.connections().get(0).releasedIdsHeld(), st.toString());
                        sendForget(s, id, forget); // the EVICT is on its way: they cross
                        evictBeforeForgotten = readUntilForgotten(s, forgetRequest, id, round);
                        assertTrue(evicted.contains(id), "round " + round + ": the EVICT queued before the FORGET was "
                                + "sent came before FORGOTTEN");
                        assertAfterForgotten(server, round);
                    }
                    default -> {
                        CyclicBarrier together = new CyclicBarrier(2);
                        Future<?> releasing = producerThread.submit(() -> {
                            together.await(10, TimeUnit.SECONDS);
                            producerRelease.run();
                            return null;
                        });
                        together.await(10, TimeUnit.SECONDS);
                        sendForget(s, id, forget);
                        evictBeforeForgotten = readUntilForgotten(s, forgetRequest, id, round);
                        assertAfterForgotten(server, round);
                        releasing.get(10, TimeUnit.SECONDS);
                    }
                }
                // The server has run its release listener for this allocation once this one heard it:
                // an EVICT it queued then comes before the reply to the next ATTACH (or the last one).
                IpcTestSupport.await("round " + round + ": the release heard", 10, () -> heard.contains(allocation));
                rounds.add(new long[] {id, order.ordinal(), evictBeforeForgotten ? 1 : 0});
            }
            // The last round's EVICT, if any, comes before this DESCRIPTOR; then the connection still works.
            VirtualMemoryBuffer last = r.allocate(r.granularity());
            server.publish("last", last);
            release(s, attach(s, "last"));
            long lastId = given.get(given.size() - 1);
            int forgetLast = nextRequest++;
            sendForget(s, lastId, frame2(9, forgetLast, new Messages.Forget(new long[] {lastId}).encode()));
            readUntilForgotten(s, forgetLast, lastId, ROUNDS);
            assertAfterForgotten(server, ROUNDS);
            server.unpublish("last");
            last.close();

            // Every EVICT due has come by now: count the outcomes per order.
            Map<Order, int[]> outcomes = new EnumMap<>(Order.class); // rounds, with an EVICT, EVICT after FORGOTTEN
            for (long[] rd : rounds) {
                Order order = Order.values()[(int) rd[1]];
                boolean evict = evicted.contains(rd[0]);
                int[] o = outcomes.computeIfAbsent(order, k -> new int[3]);
                o[0]++;
                if (evict) o[1]++;
                if (evict && rd[2] == 0) o[2]++;
                if (order == Order.FORGET_FIRST) {
                    assertFalse(evict, "id " + rd[0] + " was forgotten (FORGOTTEN read) before its allocation was "
                            + "released: no EVICT may name it");
                }
                if (order == Order.RELEASE_FIRST) assertTrue(evict, "id " + rd[0] + ": its EVICT was queued before "
                        + "the FORGET was sent");
            }
            for (Map.Entry<Order, int[]> e : outcomes.entrySet()) {
                System.out.println("EvictForgetCrossingTest: " + e.getKey() + ": " + e.getValue()[0] + " rounds, "
                        + e.getValue()[1] + " with an EVICT, " + e.getValue()[2] + " of them after FORGOTTEN");
            }
            System.out.println("EvictForgetCrossingTest: " + evictsIgnored + " EVICTs ignored (their FORGET already sent)");
            assertEquals(evicted.size(), evictsIgnored, "every EVICT named an id whose FORGET was sent");
            assertEquals(ROUNDS + 1, given.size());
            SharingStats st = server.stats();
            assertEquals(ROUNDS + 1L, st.fdsSent(), "one fd per new id, one new id per round: " + st);
            assertEquals(0, server.totalLeaseCount());
            assertEquals(List.of(), serverErrors, "the server reported no error");
        } finally {
            if (listening != null) listening.close();
            producerThread.shutdownNow();
            for (int fd : keptFds.values()) if (fd >= 0) NativeIo.closeQuietly(fd);
            IpcTestSupport.deleteTree(sock.getParent());
        }
        IpcTestSupport.assertFdsBack(fds0, "after " + ROUNDS + " rounds: every fd received closed, every memfd gone");
    }


    /**
     * ATTACH {@code name} (one allocation); EVICTs read before its DESCRIPTOR are handled.
     * The DESCRIPTOR must give a new id, larger than every earlier one, with its fd (kept).
     * Returns the lease id; the new id is the last of {@link #given}.
     */
    private long attach(FdSocket s, String name) throws Exception {
        int request = nextRequest++;
        s.send(frame2(3, request, str(name)), null);
        for (;;) {
            try (Frame f = IpcTestSupport.nextFrame2(s, READ_WAIT_SECONDS, "the DESCRIPTOR of " + name)) {
                if (f.type == FrameType.EVICT) {
                    onEvict(f, "before the DESCRIPTOR of " + name);
                    continue;
                }
                assertSame(FrameType.DESCRIPTOR, f.type, "got " + f);
                assertEquals(request, f.requestId);
                Messages.DescriptorV2 d = (Messages.DescriptorV2) f.message;
                assertEquals(1, d.ids().length, d.toString());
                long id = d.ids()[0];
                assertArrayEquals(new int[] {Protocol.CHUNK_FLAG_FD}, d.flags(), "a new allocation's id comes with its fd");
                assertTrue(given.isEmpty() || id > given.get(given.size() - 1), "id " + id + " is new and larger than "
                        + "every earlier id (never reused, never named after its EVICT): " + given);
                assertFalse(evicted.contains(id), "a DESCRIPTOR names id " + id + " after its EVICT");
                int[] fds = f.takeFds();
                assertEquals(1, fds.length, "one fd for the new id");
                keptFds.put(id, fds[0]);
                // Every earlier round ended once its release was heard, before this ATTACH was sent.
                if (!given.isEmpty()) settled = given.get(given.size() - 1);
                given.add(id);
                return d.leaseId();
            }
        }
    }

    private void release(FdSocket s, long lease) throws Exception {
        int request = nextRequest++;
        s.send(frame2(5, request, ByteBuffer.allocate(8).putLong(lease).array()), null);
        for (;;) {
            try (Frame f = IpcTestSupport.nextFrame2(s, READ_WAIT_SECONDS, "RELEASED")) {
                if (f.type == FrameType.EVICT) {
                    onEvict(f, "before RELEASED");
                    continue;
                }
                assertSame(FrameType.RELEASED, f.type, "got " + f);
                assertEquals(request, f.requestId);
                return;
            }
        }
    }

    private void sendForget(FdSocket s, long id, byte[] forget) throws Exception {
        assertTrue(forgetSent.add(id), "FORGET of id " + id + " sent once");
        s.send(forget, null);
    }

    /**
     * Reads until the FORGOTTEN of {@code request} (which must be the answer: not an ERROR),
     * handling EVICTs on the way. Returns true when no EVICT of {@code id} was still to come:
     * an EVICT of it arrived before FORGOTTEN, or none came by then (one may still follow).
     */
    private boolean readUntilForgotten(FdSocket s, int request, long id, int round) throws Exception {
        for (;;) {
            try (Frame f = IpcTestSupport.nextFrame2(s, READ_WAIT_SECONDS, "FORGOTTEN of id " + id + " (round " + round + ")")) {
                if (f.type == FrameType.EVICT) {
                    onEvict(f, "round " + round + ", before FORGOTTEN");
                    continue;
                }
                assertSame(FrameType.FORGOTTEN, f.type, "round " + round + ": the FORGET of id " + id + ", which this "
                        + "connection held, is answered with FORGOTTEN whether or not its EVICT crossed it: got " + f);
                assertEquals(request, f.requestId, "FORGOTTEN carries the FORGET's request id");
                assertEquals(1, ((Messages.Forgotten) f.message).count(), "one id forgotten");
                closeKept(id); // FORGOTTEN: no DESCRIPTOR names the id from here on
                return evicted.contains(id);
            }
        }
    }

    /**
     * An EVICT: request id 0, no fd, each id one this connection was given, named by no
     * earlier EVICT. An id whose FORGET was already sent is ignored (its FORGET acknowledges
     * the EVICT); for any other the client would unmap, close and FORGET: this client sends
     * FORGET only in its rounds, so none is expected here.
     */
    private void onEvict(Frame f, String when) {
        assertEquals(0, f.requestId, "an EVICT is unsolicited (request id 0)");
        assertEquals(0, f.fdCount(), "an EVICT carries no fd");
        for (long id : ((Messages.Evict) f.message).ids()) {
            assertTrue(given.contains(id), "EVICT " + when + " names id " + id + ", never given: " + given);
            assertTrue(evicted.add(id), "EVICT " + when + " names id " + id + " a second time");
            assertTrue(id > settled, "EVICT " + when + " of id " + id + " after the reply to a request sent once the "
                    + "server had heard its release (it was queued before that request was sent)");
            assertTrue(forgetSent.contains(id), "EVICT " + when + " of id " + id + " before this client sent its "
                    + "FORGET: the producer released it before the round let it (a round's allocation is released "
                    + "only after its lease)");
            evictsIgnored++;
            closeKept(id); // an evicted id's fd may be closed at once (section 13.4)
        }
    }

    private void closeKept(long id) {
        Integer fd = keptFds.get(id);
        if (fd != null && fd >= 0) {
            NativeIo.closeQuietly(fd);
            keptFds.put(id, -1);
        }
    }

    /** Right after FORGOTTEN: the server holds no id of this connection and counts nothing as released, still mapped. */
    private static void assertAfterForgotten(SharingServer server, int round) {
        SharingStats st = server.stats();
        assertEquals(0, st.idsHeld(), "round " + round + ": no id held after FORGOTTEN: " + st);
        assertEquals(0, st.connections().get(0).releasedIdsHeld(), "round " + round + ": " + st);
        assertEquals(List.of(), st.releasedStillMapped(), "round " + round + ": nothing released, still mapped after "
                + "FORGOTTEN (the FORGET acknowledged any EVICT): " + st);
        assertEquals(0L, st.releasedStillMappedBytes(), "round " + round + ": " + st);
    }

    private static int heldIds(SharingServer server) {
        return (int) server.stats().idsHeld();
    }

}
