package org.cuvmm.ipc;

import static org.cuvmm.ipc.IpcTestSupport.assertFdsBack;
import static org.cuvmm.ipc.IpcTestSupport.fdSnapshot;
import static org.cuvmm.ipc.IpcTestSupport.header;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Arrays;
import java.util.Map;

import org.junit.jupiter.api.Test;

/**
 * One rule for the fd limit (docs/PROTOCOL.md section 1): more than 253 fds within one
 * frame, header and payload together, is fatal (FD_COUNT_MISMATCH, the connection closes),
 * wherever the count passes 253, even on the frame's last byte. Once the header is whole
 * (its last byte included) the refusal carries the frame's request id: before, the 254th fd
 * on the header's last byte was refused with request id 0 (found by an independent client
 * written from PROTOCOL.md).
 */
class FrameFdLimitTest {
    private static int[] copies(int[] pipe, int n) {
        int[] fds = new int[n];
        for (int i = 0; i < n; i++) fds[i] = pipe[i % 2];
        return fds;
    }

    /**
     * Fatal FD_COUNT_MISMATCH with the frame's request id (its header is whole and trusted, so
     * the refusal names the frame: PROTOCOL.md section 2), and a message that counts the
     * frame's fds, not only those of the last receive.
     */
    private static void assertFatalFdCount(FdSocket b, String counted) {
        ProtocolException e = assertThrows(ProtocolException.class, () -> FrameIO.read(b));
        assertEquals(ErrorCode.FD_COUNT_MISMATCH, e.code(), e.getMessage());
        assertTrue(e.fatal(), "more than 253 fds in one frame must close the connection: " + e.getMessage());
        assertEquals(7, e.requestId(), "the header was whole and trusted: its request id, " + e.getMessage());
        assertEquals(FrameType.HELLO, e.frameType, e.getMessage());
        assertTrue(e.getMessage().contains(counted), "'" + e.getMessage() + "' should say '" + counted + "'");
    }

    /**
     * 200 fds on the first 15 header bytes and 60 on the 16th: the count passes 253 on the
     * header's last byte. The payload must not get a fresh allowance of 253.
     */
    @Test
    void passingTheLimitOnTheHeadersLastByteIsFatal() throws Exception {
        Map<String, Integer> base = fdSnapshot();
        FdSocket[] p = FdSocket.pair();
        int[] pipe = IpcTestSupport.pipe();
        try (FdSocket a = p[0]; FdSocket b = p[1]) {
            byte[] payload = {0, 0};
            byte[] h = header(Protocol.MAGIC, Protocol.VERSION, FrameType.HELLO.code(), 7, payload.length);
            a.send(Arrays.copyOf(h, Protocol.HEADER_SIZE - 1), copies(pipe, 200));
            a.send(new byte[] {h[Protocol.HEADER_SIZE - 1]}, copies(pipe, 60));
            a.send(payload, null);
            assertFatalFdCount(b, "at least 254"); // 60 were sent; room was left for one more than allowed
        } finally {
            NativeIo.closeAll(pipe);
        }
        assertFdsBack(base, "after a frame passed the fd limit on its header's last byte");
    }

    /** The same on the payload's last byte: fatal too (one rule, wherever the count passes). */
    @Test
    void passingTheLimitOnThePayloadsLastByteIsFatal() throws Exception {
        Map<String, Integer> base = fdSnapshot();
        FdSocket[] p = FdSocket.pair();
        int[] pipe = IpcTestSupport.pipe();
        try (FdSocket a = p[0]; FdSocket b = p[1]) {
            byte[] payload = {0, 0};
            byte[] h = header(Protocol.MAGIC, Protocol.VERSION, FrameType.HELLO.code(), 7, payload.length);
            a.send(h, copies(pipe, 200));
            a.send(new byte[] {payload[0]}, null);
            a.send(new byte[] {payload[1]}, copies(pipe, 60));
            assertFatalFdCount(b, "200 with its header, then 54 more: at least 254");
        } finally {
            NativeIo.closeAll(pipe);
        }
        assertFdsBack(base, "after a frame passed the fd limit on its payload's last byte");
    }
}
