package org.cuvmm;

import static org.junit.jupiter.api.Assumptions.assumeTrue;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicBoolean;

import org.cuvmm.internal.HostDriverHooks;
import org.cuvmm.testing.LiveObjects;
import org.cuvmm.testing.OpenFds;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** Probes: close of events, streams, pinned and device buffers racing their use on other threads. */
class CloseRaceAcrossObjectsTest {
    private static void expectOnlyDocumented(ConcurrentLinkedQueue<Throwable> seen) {
        for (Throwable t : seen) {
            if (!(t instanceof IllegalStateException)) throw new AssertionError("undocumented " + t, t);
            String m = String.valueOf(t.getMessage());
            if (!(m.contains("closed") || m.contains("inside a call") || m.contains("in use") || m.contains("another thread"))) {
                throw new AssertionError("message names no state: " + m, t);
            }
        }
    }

    @Test
    @Timeout(120)
    void closesRacingUses() throws Exception {
        assumeTrue(TestSupport.onHostDriver(), "host driver only: the test paces its streams with the host driver's stream delay (HostDriverHooks)");
        Map<String, Long> live = LiveObjects.now();
        Map<String, String> fds = OpenFds.byNumber();
        ConcurrentLinkedQueue<Throwable> seen = new ConcurrentLinkedQueue<>();
        ConcurrentLinkedQueue<Throwable> bad = new ConcurrentLinkedQueue<>();
        java.util.Set<String> msgs = java.util.concurrent.ConcurrentHashMap.newKeySet();
        HostDriverHooks.setStreamDelayMicros(50);
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0)) {
            long g = resource.granularity();
            for (int round = 0; round < 60; round++) {
                Stream s = Stream.create(0);
                Stream s2 = Stream.create(0);
                Event ev = Event.create(0);
                PinnedHostBuffer pin = PinnedHostBuffer.allocate(g);
                VirtualMemoryBuffer b = resource.allocate(g);
                VirtualMemoryBuffer b2 = resource.allocate(g);
                CountDownLatch go = new CountDownLatch(1);
                AtomicBoolean stop = new AtomicBoolean();
                List<Thread> users = new ArrayList<>();
                final int r = round;
                // Each worker waits for what it queued before queuing more: an unbounded backlog
                // (enqueueing outrunning the host driver's streams) only makes waits long, which
                // a first version of this probe mistook for a hang.
                Runnable[] work = {
                    () -> { try { b.copyToAsync(0, pin, 0, g, s); ev.record(s); s2.waitFor(ev); b2.copyFromAsync(0, b, 0, g, s2); }
                            finally { s.synchronize(); s2.synchronize(); } },
                    () -> { try { pin.asByteBuffer(); b.fillAsync(0, g, (byte) r, s2); ev.synchronize(); ev.isDone(); s.isDone(); }
                            finally { s2.synchronize(); } },
                    () -> { try { s.synchronize(); b.recordUse(s2); b2.copyFromAsync(0, pin, 0, g, s); s2.synchronize(); }
                            finally { s.synchronize(); } },
                };
                for (Runnable w : work) {
                    Thread t = new Thread(() -> {
                        try {
                            go.await();
                            while (!stop.get()) {
                                try {
                                    w.run();
                                } catch (IllegalStateException e) {
                                    seen.add(e);
                                    msgs.add(e.getMessage().replaceAll("0x[0-9a-f]+", "0x_").replaceAll("\\d+", "N"));
                                } catch (Throwable e) {
                                    bad.add(e);
                                    return;
                                }
                            }
                        } catch (InterruptedException e) {
                            Thread.currentThread().interrupt();
                        }
                    });
                    t.start();
                    users.add(t);
                }
                go.countDown();
                Thread.sleep(2);
                // close everything while the users run; retry a refused close until the users are gone
                Object[] closables = {ev, pin, b, b2, s, s2};
                int idx = round % closables.length;
                for (int k = 0; k < closables.length; k++) {
                    AutoCloseable c = (AutoCloseable) closables[(idx + k) % closables.length];
                    try {
                        c.close();
                    } catch (IllegalStateException e) {
                        seen.add(e);
                        msgs.add(e.getMessage().replaceAll("0x[0-9a-f]+", "0x_").replaceAll("\\d+", "N"));
                    }
                }
                stop.set(true);
                for (Thread t : users) {
                    t.join(20_000);
                    assertTrue(!t.isAlive(), "a user thread hung: " + t + " " + java.util.Arrays.toString(t.getStackTrace()));
                }
                for (Object o : closables) ((AutoCloseable) o).close();
                if (!bad.isEmpty()) break;
            }
        } finally {
            HostDriverHooks.setStreamDelayMicros(0);
        }
        System.err.println("probe close race: " + seen.size() + " ISEs; distinct messages:\n  " + String.join("\n  ", msgs));
        if (!bad.isEmpty()) {
            AssertionError e = new AssertionError(bad.size() + " undocumented failures, first: " + bad.peek(), bad.peek());
            throw e;
        }
        expectOnlyDocumented(seen);
        assertTrue(StreamOrderedRelease.awaitIdle(30_000));
        LiveObjects.settle();
        LiveObjects.assertBack(live, "after the close races");
        OpenFds.assertNoNewFds(fds, "after the close races");
    }
}
