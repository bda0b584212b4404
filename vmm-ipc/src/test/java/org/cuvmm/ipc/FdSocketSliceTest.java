package org.cuvmm.ipc;

import static org.cuvmm.ipc.IpcTestSupport.assertFdsBack;
import static org.cuvmm.ipc.IpcTestSupport.fdSnapshot;
import static org.cuvmm.ipc.IpcTestSupport.pipe;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.SocketTimeoutException;
import java.nio.channels.ClosedChannelException;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.Test;

/**
 * {@link FdSocket#setReceiveSlice}: a bounded receive waits in a blocking {@code recvmsg} one
 * slice at a time (no {@code poll} while bytes come), an idle first-byte wait ends after one
 * slice with nothing consumed, a mid-frame stall still stops at the deadline, and an idle
 * unbounded reader sleeps in one {@code poll} (no wake-up per slice) that {@code close()} ends.
 */
class FdSocketSliceTest {
    private static final int SLICE_MS = 5;

    private static long in(long ms) { return System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(ms); }

    @Test
    void bytesThatArriveAreReadWithNoPollAndTheirFdsWithThem() throws Exception {
        Map<String, Integer> fds = fdSnapshot();
        FdSocket[] p = FdSocket.pair();
        int[] pipe = pipe();
        try {
            p[1].setReceiveSlice(SLICE_MS);
            CompletableFuture<ReceivedMessage> got = CompletableFuture.supplyAsync(() -> {
                try {
                    return p[1].receive(3, 253, in(30_000), true);
                } catch (Exception e) {
                    throw new RuntimeException(e);
                }
            });
            p[0].send(new byte[] {1, 2}, new int[] {pipe[0]});
            p[0].send(new byte[] {3}, null);
            try (ReceivedMessage m = got.get(30, TimeUnit.SECONDS)) {
                assertArrayEquals(new byte[] {1, 2, 3}, m.data());
                assertEquals(1, m.fdCount());
            }
            assertEquals(0, p[1].ioCalls()[1], "poll calls with the deadline far away");
        } finally {
            NativeIo.closeAll(pipe);
            p[0].close();
            p[1].close();
        }
        assertFdsBack(fds, "after a sliced receive");
    }

    @Test
    void anIdleFirstByteWaitEndsAfterOneSliceWithNothingConsumed() throws Exception {
        FdSocket[] p = FdSocket.pair();
        try {
            p[1].setReceiveSlice(SLICE_MS);
            SocketTimeoutException e = assertThrows(SocketTimeoutException.class,
                    () -> p[1].receive(16, 253, in(30_000), true));
            assertEquals(0, e.bytesTransferred, e.getMessage());
            assertEquals(1, p[1].ioCalls()[0], "recvmsg calls: one slice, then back to the caller");
            assertEquals(0, p[1].ioCalls()[1], "poll calls");
            p[0].send(new byte[16], null); // still in step: the next receive reads the whole message
            try (ReceivedMessage m = p[1].receive(16, 253, in(30_000), true)) {
                assertEquals(16, m.length());
            }
        } finally {
            p[0].close();
            p[1].close();
        }
    }

    @Test
    void aStallMidMessageStopsAtTheDeadlineAndClosesItsFds() throws Exception {
        Map<String, Integer> fds = fdSnapshot();
        FdSocket[] p = FdSocket.pair();
        int[] pipe = pipe();
        try {
            p[1].setReceiveSlice(SLICE_MS);
            p[0].send(new byte[] {1, 2}, new int[] {pipe[0], pipe[1]});
            // idleSlice does not end a wait once a byte is read: only the deadline does.
            SocketTimeoutException e = assertThrows(SocketTimeoutException.class,
                    () -> p[1].receive(16, 253, in(100), true));
            assertEquals(2, e.bytesTransferred, e.getMessage());
            assertTrue(p[1].ioCalls()[0] > 2, "recvmsg calls: one per slice until the last two slices ("
                    + p[1].ioCalls()[0] + ")");
        } finally {
            NativeIo.closeAll(pipe);
            p[0].close();
            p[1].close();
        }
        assertFdsBack(fds, "after a sliced receive stopped at its deadline (the 2 fds that arrived closed)");
    }

    @Test
    void anIdleUnboundedReaderSleepsInOnePollThatCloseEnds() throws Exception {
        FdSocket[] p = FdSocket.pair();
        try {
            p[1].setReceiveSlice(SLICE_MS);
            CompletableFuture<ReceivedMessage> got = CompletableFuture.supplyAsync(() -> {
                try {
                    return p[1].receive(4);
                } catch (Exception e) {
                    throw new RuntimeException(e);
                }
            });
            long until = in(30_000);
            while (p[1].ioCalls()[1] == 0 && System.nanoTime() < until) Thread.onSpinWait();
            assertEquals(1, p[1].ioCalls()[1], "the reader sleeps in poll after its first slice");
            // Twenty slices pass: no further recvmsg or poll (no wake-up per slice).
            assertThrows(java.util.concurrent.TimeoutException.class, () -> got.get(20 * SLICE_MS, TimeUnit.MILLISECONDS));
            assertEquals(1, p[1].ioCalls()[0], "recvmsg calls while idle");
            assertEquals(1, p[1].ioCalls()[1], "poll calls while idle");
            p[1].close();
            ExecutionException e = assertThrows(ExecutionException.class, () -> got.get(30, TimeUnit.SECONDS));
            assertTrue(e.getCause().getCause() instanceof ClosedChannelException, String.valueOf(e.getCause()));
        } finally {
            p[0].close();
            p[1].close();
        }
    }

    @Test
    void anIdleUnboundedReaderReadsWhatComesAfterItsPoll() throws Exception {
        FdSocket[] p = FdSocket.pair();
        try {
            p[1].setReceiveSlice(SLICE_MS);
            CompletableFuture<ReceivedMessage> got = CompletableFuture.supplyAsync(() -> {
                try {
                    return p[1].receive(4);
                } catch (Exception e) {
                    throw new RuntimeException(e);
                }
            });
            long until = in(30_000);
            while (p[1].ioCalls()[1] == 0 && System.nanoTime() < until) Thread.onSpinWait();
            p[0].send(new byte[] {1, 2, 3, 4}, null);
            try (ReceivedMessage m = got.get(30, TimeUnit.SECONDS)) {
                assertArrayEquals(new byte[] {1, 2, 3, 4}, m.data());
            }
            assertEquals(2, p[1].ioCalls()[0], "recvmsg calls: the slice that ended, the read");
        } finally {
            p[0].close();
            p[1].close();
        }
    }
}
