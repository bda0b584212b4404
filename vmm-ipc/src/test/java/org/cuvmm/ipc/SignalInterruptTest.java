package org.cuvmm.ipc;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.Test;

/**
 * Signals that interrupt the socket calls ({@code EINTR}). A receive with a slice ({@code
 * SO_RCVTIMEO}, the client's) is never restarted by the kernel, whatever the handler's
 * {@code SA_RESTART}: each signal ends the {@code recvmsg} with {@code EINTR} (a wall-clock
 * profiler's {@code SIGPROF} does this hundreds of times a second). The bytes must still
 * arrive whole and in order, the deadline must still hold, and a sharing round must not fail.
 * The signal is {@code SIGURG} (its default action is to ignore it), sent with {@code
 * tgkill} to the threads blocked in the calls, with a handler
 * installed through {@code sun.misc.Signal} so that it is delivered (an ignored signal
 * interrupts nothing). The first test counts the receive calls that returned nothing, so it
 * fails if the signals interrupted nothing (50 signals: 50 such calls when written).
 */
class SignalInterruptTest {
    /** libc's thread calls, for the test only. Public: jnr-ffi implements it in a class of its own. */
    public interface ThreadCalls {
        int getpid();

        int gettid();

        int tgkill(int tgid, int tid, int signal);
    }

    private static final int SIGURG = new sun.misc.Signal("URG").getNumber();
    private static final AtomicInteger HANDLED = new AtomicInteger();
    private static ThreadCalls threadCalls;
    private static sun.misc.SignalHandler previous;

    @BeforeAll
    static void installHandler() {
        threadCalls = jnr.ffi.LibraryLoader.create(ThreadCalls.class)
                .load(jnr.ffi.Platform.getNativePlatform().getStandardCLibraryName());
        previous = sun.misc.Signal.handle(new sun.misc.Signal("URG"), s -> HANDLED.incrementAndGet());
    }

    @AfterAll
    static void restoreHandler() {
        if (previous != null) sun.misc.Signal.handle(new sun.misc.Signal("URG"), previous);
    }

    /**
     * Sends SIGURG to thread {@code tid} of this process (tgkill: a thread id that has ended
     * gets ESRCH, never another thread's signal, unlike a stale pthread_t).
     */
    private static int signal(long tid) {
        return threadCalls.tgkill(threadCalls.getpid(), (int) tid, SIGURG);
    }

    /** {@link #signal(long)} {@code count} times, {@code gapMillis} apart, to a thread that must be alive. */
    private static void signal(long tid, int count, long gapMillis) throws InterruptedException {
        for (int i = 0; i < count; i++) {
            assertEquals(0, signal(tid), "tgkill");
            Thread.sleep(gapMillis);
        }
    }

    /** What a reader thread runs; it may throw. */
    private interface Body<T> {
        T run() throws Exception;
    }

    /**
     * Starts a thread that records its thread id (gettid) in {@code self}, then runs {@code
     * body}; the future completes with its result or what it threw.
     */
    private static <T> CompletableFuture<T> startThread(String name, AtomicLong self, Body<T> body) {
        CompletableFuture<T> result = new CompletableFuture<>();
        Thread t = new Thread(() -> {
            self.set(threadCalls.gettid());
            try {
                result.complete(body.run());
            } catch (Throwable x) {
                result.completeExceptionally(x);
            }
        }, name);
        t.setDaemon(true);
        t.start();
        return result;
    }

    @Test
    void aSlicedReceiveInterruptedManyTimesStillGetsEveryByteInTime() throws Exception {
        FdSocket[] p = FdSocket.pair();
        try {
            p[1].setReceiveSlice(20);
            AtomicLong self = new AtomicLong();
            CompletableFuture<ReceivedMessage> got = startThread("signal-test-reader", self,
                    () -> p[1].receive(24, 0, System.nanoTime() + TimeUnit.SECONDS.toNanos(20)));
            IpcTestSupport.await("the reader to block", 10, () -> self.get() != 0 && p[1].ioCalls()[0] > 0);
            long emptyBefore = p[1].ioCalls()[2];
            int handledBefore = HANDLED.get();
            signal(self.get(), 40, 2);
            byte[] msg = new byte[24];
            for (int i = 0; i < msg.length; i++) msg[i] = (byte) (i + 1);
            p[0].send(msg, 0, 12, null);
            signal(self.get(), 10, 2);
            p[0].send(msg, 12, 12, null);
            try (ReceivedMessage m = got.get(10, TimeUnit.SECONDS)) {
                assertArrayEquals(msg, m.data(), "the bytes, whole and in order");
            }
            IpcTestSupport.await("the handler to run", 10, () -> HANDLED.get() > handledBefore);
            long empty = p[1].ioCalls()[2] - emptyBefore;
            // 50 signals in about 100 ms: a slice of 20 ms alone ends about 5 calls empty.
            assertTrue(empty >= 15, "recvmsg calls that returned nothing (EINTR or a slice's end): " + empty
                    + "; the signals did not interrupt the call, so this test tested nothing");
        } finally {
            p[0].close();
            p[1].close();
        }
    }

    @Test
    void aSlicedReceiveStillTimesOutUnderSignals() throws Exception {
        FdSocket[] p = FdSocket.pair();
        try {
            p[1].setReceiveSlice(20);
            AtomicLong self = new AtomicLong();
            CompletableFuture<Long> took = startThread("signal-test-timeout", self, () -> {
                long start = System.nanoTime();
                try {
                    p[1].receive(24, 0, start + TimeUnit.MILLISECONDS.toNanos(300));
                } catch (java.net.SocketTimeoutException e) {
                    return TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - start);
                }
                throw new AssertionError("a receive with nothing sent returned");
            });
            IpcTestSupport.await("the reader to start", 10, () -> self.get() != 0);
            // Signals all along (every 2 ms, longer than the deadline): each restarts nothing.
            Thread sender = new Thread(() -> {
                try {
                    while (!took.isDone()) {
                        signal(self.get()); // ESRCH once the reader has ended: harmless
                        Thread.sleep(2);
                    }
                } catch (InterruptedException e) {
                    // done
                }
            }, "signal-test-sender");
            sender.start();
            long ms = took.get(10, TimeUnit.SECONDS);
            sender.join(TimeUnit.SECONDS.toMillis(10));
            assertTrue(ms >= 300 && ms < 2_000, "the 300 ms deadline held under signals: timed out after " + ms + " ms");
        } finally {
            p[0].close();
            p[1].close();
        }
    }

    /** Thread ids of this process's threads named cuvmm-ipc-conn-* now (a thread that ends while listed is skipped). */
    private static java.util.Set<Integer> connectionThreads() {
        java.util.Set<Integer> out = new java.util.HashSet<>();
        try (java.util.stream.Stream<Path> tasks = Files.list(Path.of("/proc/self/task"))) {
            for (Path t : (Iterable<Path>) tasks::iterator) {
                try {
                    if (Files.readString(t.resolve("comm")).startsWith("cuvmm-ipc-conn-")) {
                        out.add(Integer.parseInt(t.getFileName().toString()));
                    }
                } catch (java.nio.file.NoSuchFileException ended) {
                    // ended while listed
                }
            }
        } catch (java.io.IOException e) {
            throw new java.io.UncheckedIOException("listing /proc/self/task", e);
        }
        return out;
    }

    @Test
    void cachedSharingRoundsSurviveSignalsOnBothSides(@org.junit.jupiter.api.io.TempDir Path dir) throws Exception {
        Path sock = dir.resolve("s");
        try (VirtualMemoryResource producer = VirtualMemoryResource.create(0);
             VirtualMemoryResource consumer = VirtualMemoryResource.create(0);
             SharingServer server = SharingServer.builder(sock).build()) {
            VirtualMemoryBuffer b = producer.allocate(producer.granularity());
            server.publish("b", b);
            java.util.Set<Integer> before = connectionThreads();
            try (SharingClient client = SharingClient.builder(sock).build()) {
                // The consumer's thread (this one) and this connection's threads on the server
                // (its reader, which answers, and its writer): not those of other test classes.
                java.util.List<Integer> tids = new java.util.ArrayList<>();
                tids.add(threadCalls.gettid());
                IpcTestSupport.await("the connection's threads", 10, () -> {
                    java.util.Set<Integer> now = connectionThreads();
                    now.removeAll(before);
                    return !now.isEmpty();
                });
                java.util.Set<Integer> mine = connectionThreads();
                mine.removeAll(before);
                tids.addAll(mine);
                AtomicInteger rounds = new AtomicInteger();
                AtomicInteger sent = new AtomicInteger();
                Thread sender = new Thread(() -> {
                    try {
                        while (rounds.get() < 2_000) {
                            for (int tid : tids) if (signal(tid) == 0) sent.incrementAndGet();
                            Thread.sleep(1);
                        }
                    } catch (InterruptedException e) {
                        // done
                    }
                }, "signal-test-sender");
                sender.start();
                try {
                    for (int i = 0; i < 2_000; i++) {
                        try (Attachment a = client.attach("b", consumer)) {
                            assertEquals(b.size(), a.buffer().size());
                        }
                        rounds.incrementAndGet();
                    }
                } finally {
                    rounds.set(Integer.MAX_VALUE);
                    sender.join(TimeUnit.SECONDS.toMillis(10));
                }
                assertTrue(sent.get() >= 20, "signals sent during the rounds: " + sent.get());
            }
            server.unpublish("b");
            b.close();
        }
    }
}
