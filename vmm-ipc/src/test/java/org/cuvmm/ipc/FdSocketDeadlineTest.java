package org.cuvmm.ipc;

import static org.cuvmm.ipc.IpcTestSupport.assertFdsBack;
import static org.cuvmm.ipc.IpcTestSupport.fdSnapshot;
import static org.cuvmm.ipc.IpcTestSupport.pipe;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.net.SocketTimeoutException;
import java.util.Map;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.Test;

/**
 * {@link FdSocket#receive(int, int, long)} and {@link FrameIO#readBefore}: a receive with a
 * deadline returns what is complete, and when bytes are missing at the deadline it stops,
 * says how many it read and closes the fds that came with them.
 */
class FdSocketDeadlineTest {
    private static long soon() { return System.nanoTime() + TimeUnit.MILLISECONDS.toNanos(100); }

    @Test
    void aCompleteMessageIsReadAsWithoutADeadline() throws Exception {
        Map<String, Integer> fds = fdSnapshot();
        FdSocket[] p = FdSocket.pair();
        int[] pipe = pipe();
        try {
            p[0].send(new byte[] {1, 2}, new int[] {pipe[0]});
            p[0].send(new byte[] {3}, null);
            try (ReceivedMessage m = p[1].receive(3, 253, System.nanoTime() + TimeUnit.SECONDS.toNanos(30))) {
                assertArrayEquals(new byte[] {1, 2, 3}, m.data());
                assertEquals(1, m.fdCount());
            }
        } finally {
            NativeIo.closeAll(pipe);
            p[0].close();
            p[1].close();
        }
        assertFdsBack(fds, "after a receive with a deadline");
    }

    @Test
    void missingBytesAtTheDeadlineStopTheReceiveAndCloseItsFds() throws Exception {
        Map<String, Integer> fds = fdSnapshot();
        FdSocket[] p = FdSocket.pair();
        int[] pipe = pipe();
        try {
            p[0].send(new byte[] {1, 2, 3}, new int[] {pipe[0], pipe[1]});
            SocketTimeoutException e = assertThrows(SocketTimeoutException.class, () -> p[1].receive(10, 253, soon()));
            assertEquals(3, e.bytesTransferred, e.getMessage());
            assertTrue(e.getMessage().contains("3 of 10"), e.getMessage());
        } finally {
            NativeIo.closeAll(pipe);
            p[0].close();
            p[1].close();
        }
        assertFdsBack(fds, "after a receive stopped at its deadline (the 2 fds that arrived closed)");
    }

    @Test
    void aFrameStalledMidwayIsReportedAsOutOfStep() throws Exception {
        FdSocket[] p = FdSocket.pair();
        try {
            byte[] frame = Frame.encode(new Messages.Error(ErrorCode.UNKNOWN_NAME, "x"), 7, 2);
            p[0].send(java.util.Arrays.copyOf(frame, 20), null); // the header and 4 payload bytes
            FrameIO.Stalled s = assertThrows(FrameIO.Stalled.class, () -> FrameIO.readBefore(p[1], 2, 2, soon()));
            assertTrue(s.midFrame());
            assertTrue(s.getMessage().contains("stalled mid-frame: 20 of the " + frame.length + " bytes"),
                    s.getMessage());
            // Nothing at all by the deadline: no byte consumed, still in step.
            FrameIO.Stalled none = assertThrows(FrameIO.Stalled.class, () -> FrameIO.readBefore(p[1], 2, 2, soon()));
            assertTrue(!none.midFrame(), none.getMessage());
        } finally {
            p[0].close();
            p[1].close();
        }
    }
}
