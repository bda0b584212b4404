package org.cuvmm.ipc;

import static org.cuvmm.ipc.IpcTestSupport.frame2;
import static org.cuvmm.ipc.IpcTestSupport.str;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assertions.fail;

import java.io.ByteArrayOutputStream;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeMap;

import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.Test;

/**
 * More EVICT ids than one frame may carry (docs/PROTOCOL.md section 13.8: "ids per FORGET or
 * EVICT: 1 to 8190 ... a server splits a longer EVICT into several frames"), against the real
 * {@link SharingServer}, seen from a raw version-2 client.
 *
 * <p>Why it needs this set-up: the Java server sends one EVICT per allocation as each is
 * released and groups only ids that waited behind a full send queue (section 13.6), so a
 * frame of more than one id, and a split, happen only when more than 8190 ids are parked at
 * once. A connection can have EVICTs only for ids it holds, and released ids count against
 * {@code maxIdsPerConnection} until their FORGET: with the default limit (4096) no connection
 * can ever have more than 4096 EVICT ids pending, and the split is unreachable. So the
 * producer, in a child JVM ({@link EvictSplitProducerMain}: host driver at 4096-byte
 * granularity, which must be set before the driver is first used), allows 16384 ids and
 * publishes {@value #COUNT} one-page buffers (one memfd each, so the child needs about
 * {@value #COUNT} fds). This client attaches and releases each (ATTACHes and RELEASEs
 * pipelined 256 at a time; the one fd of each DESCRIPTOR is closed at once, so it never holds
 * more than a frame's fds). Then the producer holds its connection's sender thread (test seam),
 * releases every allocation (the first 257 EVICTs take the sender and the 256-frame queue,
 * the rest are parked: more than 8190, which the child checks and reports), and lets the
 * sender go while this client reads.
 *
 * <p>Checked: every EVICT has request id 0, no fd, 1 to 8190 ids; every id given is evicted
 * exactly once and no other; the parked ids came in several multi-id frames (the split, not
 * one id per frame); meanwhile the server counts each allocation once as released, still
 * mapped; then the connection still works: a FORGET of 8190 ids and one of the rest are
 * answered with FORGOTTEN (the next frames: no stray EVICT), the server holds nothing, and a
 * later ATTACH gets the counter's next id with its fd. fds of this JVM are back to their
 * baseline at the end.
 */
class EvictSplitTest {
    /** Allocations released at once: 257 go before the queue is full, so 8743 are parked (> 8190). */
    private static final int COUNT = 9000;
    /** The producer's {@code maxIdsPerConnection}: above COUNT, which the default (4096) is not. */
    private static final int MAX_IDS = 16384;
    /** ATTACHes (then RELEASEs) sent in one write before their replies are read. */
    private static final int BATCH = 256;
    /** The most one read may wait for its frame (a server that never sends fails, not hangs). */
    private static final int READ_WAIT_SECONDS = 60;

    private int nextRequest = 1;



    @Test
    void moreEvictIdsThanOneFrameHoldsComeInSeveralFramesEachIdOnce() throws Exception {
        Path sock = IpcTestSupport.socketPath();
        Map<String, Integer> fds0 = IpcTestSupport.fdSnapshot();
        SoakChild producer = new SoakChild("evict-split-producer", EvictSplitProducerMain.class, sock.toString(),
                Integer.toString(COUNT), Integer.toString(MAX_IDS),
                System.getProperty("org.bytedeco.javacpp.cachedir", ""));
        try {
            String ready = producer.awaitLine("READY", 1, 120);
            Assumptions.assumeFalse(ready.startsWith("READY skip"),
                    "the child's fd limit cannot hold " + COUNT + " memfds: " + ready);
            try (FdSocket s = FdSocket.connect(sock)) {
                IpcTestSupport.hello2(s, nextRequest++, "evict-split", READ_WAIT_SECONDS);
                long[] given = attachAndReleaseAll(s);
                String before = stats(producer);
                assertEquals(COUNT, SoakChild.field(before, "idsHeld"), "one id per allocation attached: " + before);
                assertEquals(COUNT, SoakChild.field(before, "fdsSent"), "one fd per id: " + before);
                assertEquals(0, SoakChild.field(before, "leases"), before);
                assertEquals(0, SoakChild.field(before, "releasedStillMapped"), before);

                producer.command("release");
                String released = producer.awaitLine("RELEASED", 1, 120);
                long parked = SoakChild.field(released, "parked");
                assertTrue(parked > Protocol.MAX_IDS_PER_FRAME, "the set-up must park more EVICT ids than one frame "
                        + "carries (" + Protocol.MAX_IDS_PER_FRAME + "), or the split is not exercised: " + released);
                assertEquals(COUNT, parked + SoakChild.field(released, "queuedFrames")
                        + SoakChild.field(released, "inSender"), "every id parked or in a one-id frame: " + released);

                List<Integer> frameSizes = readEvicts(s, given);
                long multi = frameSizes.stream().filter(n -> n > 1).count();
                long inMulti = frameSizes.stream().filter(n -> n > 1).mapToLong(Integer::longValue).sum();
                Map<Integer, Integer> histogram = new TreeMap<>();
                for (int n : frameSizes) histogram.merge(n, 1, Integer::sum);
                System.out.println("EvictSplitTest: " + COUNT + " ids in " + frameSizes.size()
                        + " EVICT frames (ids per frame -> frames: " + histogram + "); " + released);
                assertTrue(multi >= 2, "the " + parked + " parked ids (more than " + Protocol.MAX_IDS_PER_FRAME
                        + ") came split into several frames of more than one id; frame sizes: " + histogram);
                assertTrue(inMulti >= parked, "the parked ids came grouped: " + inMulti + " ids in multi-id frames, "
                        + parked + " parked; frame sizes: " + histogram);

                String evicted = stats(producer);
                assertEquals(COUNT, SoakChild.field(evicted, "releasedIdsHeld"), "released, FORGET not yet: " + evicted);
                assertEquals(COUNT, SoakChild.field(evicted, "releasedStillMapped"),
                        "each allocation counted once as released, still mapped: " + evicted);
                assertEquals(COUNT * 4096L, SoakChild.field(evicted, "releasedStillMappedBytes"), evicted);

                // The connection still works: FORGET all (the largest FORGET, then the rest).
                long[] sorted = given.clone();
                Arrays.sort(sorted);
                forget(s, Arrays.copyOfRange(sorted, 0, Protocol.MAX_IDS_PER_FRAME));
                forget(s, Arrays.copyOfRange(sorted, Protocol.MAX_IDS_PER_FRAME, COUNT));
                String forgotten = stats(producer);
                assertEquals(0, SoakChild.field(forgotten, "idsHeld"), "every id forgotten: " + forgotten);
                assertEquals(0, SoakChild.field(forgotten, "releasedIdsHeld"), forgotten);
                assertEquals(0, SoakChild.field(forgotten, "releasedStillMapped"),
                        "nothing released still mapped after the FORGETs: " + forgotten);

                // A later ATTACH: the counter's next id (ids only grow), with its fd.
                int request = nextRequest++;
                s.send(frame2(3, request, str("after")), null);
                Messages.DescriptorV2 d;
                try (Frame f = IpcTestSupport.nextFrame2(s, READ_WAIT_SECONDS, "the DESCRIPTOR of 'after'")) {
                    assertSame(FrameType.DESCRIPTOR, f.type, "the ATTACH after the EVICTs is answered: got " + f);
                    assertEquals(request, f.requestId);
                    assertEquals(1, f.fdCount(), "the fd of a new id: " + f);
                    d = (Messages.DescriptorV2) f.message;
                }
                assertArrayEquals(new long[] {COUNT + 1L}, d.ids(), "the counter's next id");
                assertArrayEquals(new int[] {Protocol.CHUNK_FLAG_FD}, d.flags());
                release(s, d.leaseId());
                String last = stats(producer);
                assertEquals(1, SoakChild.field(last, "idsHeld"), last);
                assertEquals(COUNT + 1L, SoakChild.field(last, "fdsSent"), "one fd per id, none twice: " + last);
                assertEquals(0, SoakChild.field(last, "errors"), "the server reported no error: " + last);
            }
            assertEquals(0, producer.exit(60), "the producer's exit status:\n" + producer.output());
        } finally {
            producer.close();
            IpcTestSupport.deleteTree(sock.getParent());
        }
        IpcTestSupport.assertFdsBack(fds0, "after " + COUNT + " DESCRIPTOR fds were received and closed");
    }


    /**
     * ATTACH b0..b(COUNT-1) and RELEASE each lease, {@link #BATCH} requests per write; each
     * DESCRIPTOR names one new id with its fd (closed at once). Returns the ids, in order.
     */
    private long[] attachAndReleaseAll(FdSocket s) throws Exception {
        long[] ids = new long[COUNT];
        Set<Long> seen = new HashSet<>();
        for (int from = 0; from < COUNT; from += BATCH) {
            int n = Math.min(BATCH, COUNT - from);
            int firstRequest = nextRequest;
            ByteArrayOutputStream attaches = new ByteArrayOutputStream();
            for (int i = 0; i < n; i++) attaches.write(frame2(3, nextRequest++, str("b" + (from + i))));
            s.send(attaches.toByteArray(), null);
            long[] leases = new long[n];
            for (int i = 0; i < n; i++) {
                try (Frame f = IpcTestSupport.nextFrame2(s, READ_WAIT_SECONDS, "the DESCRIPTOR of b" + (from + i))) { // closes its fd
                    assertSame(FrameType.DESCRIPTOR, f.type, "got " + f);
                    assertEquals(firstRequest + i, f.requestId, "replies in request order");
                    assertEquals(1, f.fdCount(), "one fd per new id: " + f);
                    Messages.DescriptorV2 d = (Messages.DescriptorV2) f.message;
                    assertEquals(1, d.ids().length, d.toString());
                    assertEquals(Protocol.CHUNK_FLAG_FD, d.flags()[0], "a new id comes with its fd: " + d);
                    ids[from + i] = d.ids()[0];
                    assertTrue(seen.add(d.ids()[0]), "id " + d.ids()[0] + " given twice");
                    leases[i] = d.leaseId();
                }
            }
            firstRequest = nextRequest;
            ByteArrayOutputStream releases = new ByteArrayOutputStream();
            for (int i = 0; i < n; i++) {
                releases.write(frame2(5, nextRequest++, ByteBuffer.allocate(8).putLong(leases[i]).array()));
            }
            s.send(releases.toByteArray(), null);
            for (int i = 0; i < n; i++) {
                try (Frame f = IpcTestSupport.nextFrame2(s, READ_WAIT_SECONDS, "RELEASED")) {
                    assertSame(FrameType.RELEASED, f.type, "got " + f);
                    assertEquals(firstRequest + i, f.requestId);
                }
            }
        }
        return ids;
    }

    /**
     * Reads frames until every id of {@code given} was evicted; each must be an EVICT (nothing
     * else is due: this client sends nothing meanwhile) of 1 to 8190 ids given to this
     * connection, none twice. Returns the ids per frame, in arrival order.
     */
    private static List<Integer> readEvicts(FdSocket s, long[] given) throws Exception {
        Set<Long> givenSet = new HashSet<>();
        for (long id : given) givenSet.add(id);
        Set<Long> evicted = new HashSet<>();
        List<Integer> sizes = new ArrayList<>();
        while (evicted.size() < given.length) {
            try (Frame f = IpcTestSupport.nextFrame2(s, READ_WAIT_SECONDS, "EVICTs (" + evicted.size() + " of " + given.length + " ids so far, in "
                    + sizes.size() + " frames)")) {
                assertSame(FrameType.EVICT, f.type, "only EVICTs are due: got " + f);
                assertEquals(0, f.requestId, "an EVICT is unsolicited (request id 0)");
                assertEquals(0, f.fdCount(), "an EVICT carries no fd");
                long[] ids = ((Messages.Evict) f.message).ids();
                assertTrue(ids.length >= 1 && ids.length <= Protocol.MAX_IDS_PER_FRAME,
                        "an EVICT of " + ids.length + " ids (expected: 1 to " + Protocol.MAX_IDS_PER_FRAME + ")");
                for (long id : ids) {
                    assertTrue(givenSet.contains(id), "EVICT names id " + id + ", never given to this connection");
                    if (!evicted.add(id)) fail("id " + id + " evicted twice (frame " + (sizes.size() + 1) + ")");
                }
                sizes.add(ids.length);
            }
        }
        return sizes;
    }

    /** FORGET {@code ids}; the next frame must be its FORGOTTEN with their count. */
    private void forget(FdSocket s, long[] ids) throws Exception {
        int request = nextRequest++;
        s.send(frame2(9, request, new Messages.Forget(ids).encode()), null);
        try (Frame f = IpcTestSupport.nextFrame2(s, READ_WAIT_SECONDS, "FORGOTTEN of " + ids.length + " ids")) {
            assertSame(FrameType.FORGOTTEN, f.type, "the FORGET of " + ids.length + " evicted ids is answered "
                    + "next (no EVICT left over): got " + f);
            assertEquals(request, f.requestId, "FORGOTTEN carries the FORGET's request id");
            assertEquals(ids.length, ((Messages.Forgotten) f.message).count(), "FORGOTTEN counts every id forgotten");
        }
    }

    private void release(FdSocket s, long lease) throws Exception {
        int request = nextRequest++;
        s.send(frame2(5, request, ByteBuffer.allocate(8).putLong(lease).array()), null);
        try (Frame f = IpcTestSupport.nextFrame2(s, READ_WAIT_SECONDS, "RELEASED")) {
            assertSame(FrameType.RELEASED, f.type, "got " + f);
            assertEquals(request, f.requestId);
        }
    }

    /** The producer's next STATS line. */
    private static String stats(SoakChild producer) throws Exception {
        producer.command("stats");
        return producer.next("STATS", 60);
    }
}
