package org.cuvmm.ipc;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.SocketTimeoutException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/**
 * Deferred consumption ({@link FdSocket#deferConsumption}) against what the kernel does: a
 * blocking peek that slept (a slice that passed, or new bytes that woke it) reads nothing
 * already read (Linux before commit 7bf3a476ce43 did: FdSocket's probe then turns deferral
 * off, and these skip); and held bytes leave the queue while signals keep interrupting an
 * unbounded wait (a wall-clock profiler), so a peer with the smallest send buffer goes on.
 * From an independent review of the change (the signal test failed before its fix).
 */
class DeferredConsumptionKernelTest {
    private static final int SIGURG = new sun.misc.Signal("URG").getNumber();
    private static SignalInterruptTest.ThreadCalls calls;
    private static sun.misc.SignalHandler previous;

    @BeforeAll
    static void handler() {
        calls = jnr.ffi.LibraryLoader.create(SignalInterruptTest.ThreadCalls.class)
                .load(jnr.ffi.Platform.getNativePlatform().getStandardCLibraryName());
        previous = sun.misc.Signal.handle(new sun.misc.Signal("URG"), s -> { });
    }

    @AfterAll
    static void restore() {
        if (previous != null) sun.misc.Signal.handle(new sun.misc.Signal("URG"), previous);
    }

    private static FdSocket[] deferringPair(int sliceMs) throws Exception {
        DeferredConsumptionTest.assumeTrustedPeekOffset();
        FdSocket[] p = FdSocket.pair();
        p[1].setReceiveSlice(sliceMs);
        assertTrue(p[1].deferConsumption());
        return p;
    }

    /**
     * Kernel dependence (af_unix before 7bf3a476ce43, Nov 2025): a blocking MSG_PEEK whose
     * SO_PEEK_OFF is at the end of the queue restarted at the queue's head after it slept, so
     * the held bytes came back (after the slice, or with new data). Passes where the probe
     * lets deferral on; skipped elsewhere.
     */
    @Test
    void aSliceThatEndsWithBytesHeldReadsNothingAgain() throws Exception {
        FdSocket[] p = deferringPair(20);
        try {
            p[0].send(new byte[] {1, 2, 3, 4}, null);
            p[1].receive(4).close(); // held (peeked, not consumed)
            SocketTimeoutException t = assertThrows(SocketTimeoutException.class,
                    () -> p[1].receive(4, 0, System.nanoTime() + TimeUnit.SECONDS.toNanos(5), true).close(),
                    "a buggy kernel returns the held bytes 1,2,3,4 again");
            assertEquals(0, t.bytesTransferred);
        } finally {
            p[0].close();
            p[1].close();
        }
    }

    @Test
    void aPeekWokenByNewBytesReadsTheNewBytes() throws Exception {
        FdSocket[] p = deferringPair(2000);
        try {
            p[0].send(new byte[] {1, 2, 3, 4}, null);
            p[1].receive(4).close(); // held
            CompletableFuture<byte[]> next = CompletableFuture.supplyAsync(() -> {
                try (ReceivedMessage m = p[1].receive(4)) {
                    return m.data();
                } catch (Exception e) {
                    throw new RuntimeException(e);
                }
            });
            Thread.sleep(200); // the reader sleeps in its peek, one 2 s slice
            p[0].send(new byte[] {5, 6, 7, 8}, null);
            assertArrayEquals(new byte[] {5, 6, 7, 8}, next.get(10, TimeUnit.SECONDS),
                    "a buggy kernel returns 1,2,3,4 (the held bytes) here");
        } finally {
            p[0].close();
            p[1].close();
        }
    }

    /**
     * The unbounded reader retries EINTR with a fresh slice (recvOnce's loop) without taking
     * its held bytes off: signals more often than the slice (a wall-clock profiler's SIGPROF)
     * keep a peer with a small send buffer blocked for as long as they come.
     */
    @Test
    @Timeout(value = 60, threadMode = Timeout.ThreadMode.SEPARATE_THREAD)
    void heldBytesLeaveTheQueueWhileSignalsInterruptTheUnboundedWait() throws Exception {
        FdSocket[] p = deferringPair(20);
        try {
            assertEquals(0, new NativeMsg(16).setIntOption(DeferredConsumptionTest.fdOf(p[0]), NativeIo.SOL_SOCKET, 7 /* SO_SNDBUF */, 1));
            int count = 100;
            AtomicInteger sent = new AtomicInteger();
            CompletableFuture<Void> sender = CompletableFuture.runAsync(() -> {
                try {
                    for (int i = 0; i < count; i++) {
                        p[0].send(new byte[] {(byte) i}, null);
                        sent.incrementAndGet();
                    }
                } catch (Exception e) {
                    throw new RuntimeException(e);
                }
            });
            AtomicLong tid = new AtomicLong();
            CompletableFuture<Void> reader = new CompletableFuture<>();
            Thread r = new Thread(() -> {
                tid.set(calls.gettid());
                try {
                    for (int i = 0; i < count; i++) {
                        try (ReceivedMessage m = p[1].receive(1)) { // unbounded
                            assertEquals((byte) i, m.data()[0]);
                        }
                    }
                    reader.complete(null);
                } catch (Throwable x) {
                    reader.completeExceptionally(x);
                }
            }, "review-reader");
            r.setDaemon(true);
            r.start();
            IpcTestSupport.await("reader started", 10, () -> tid.get() != 0);
            long end = System.nanoTime() + TimeUnit.SECONDS.toNanos(3);
            while (!sender.isDone() && System.nanoTime() < end) {
                calls.tgkill(calls.getpid(), (int) tid.get(), SIGURG);
                Thread.sleep(3);
            }
            boolean doneUnderSignals = sender.isDone();
            int sentThen = sent.get();
            sender.get(30, TimeUnit.SECONDS); // signals stopped: the slice ends, the bytes leave
            reader.get(30, TimeUnit.SECONDS);
            assertTrue(doneUnderSignals, "the sender was blocked for 3 s of signals every 3 ms: sent " + sentThen
                    + " of " + count + " (without signals: about 0.4 s)");
        } finally {
            p[0].close();
            p[1].close();
        }
    }
}
