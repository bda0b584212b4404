package org.cuvmm.ipc;

import static org.cuvmm.ipc.IpcTestSupport.assertFdsBack;
import static org.cuvmm.ipc.IpcTestSupport.fdSnapshot;
import static org.cuvmm.ipc.IpcTestSupport.header;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.io.IOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.junit.jupiter.api.Test;

/**
 * A peer that spreads fds over many one-byte sends (253 per {@code sendmsg}) must not push
 * the server toward its open-file limit: the server drops the connection the moment a frame's
 * fds pass 253, having never held more than that (plus the two a control area's alignment can
 * let in), closes them all, and keeps serving other clients.
 */
class FdFloodTest {
    /** The two sockets of the attacking connection and the two extra fds alignment can admit, with room to spare. */
    private static final int SLACK = 16;

    /** Every fd of this process, counted fast (no readlink). */
    private static int openFdCount() {
        String[] names = new File("/proc/self/fd").list();
        return names == null ? 0 : names.length;
    }

    @Test
    void aPeerSpreadingFdsOverOneByteSendsIsDroppedAtTheLimit() throws Exception {
        Path sock = IpcTestSupport.socketPath();
        int[] pipe = IpcTestSupport.pipe();
        try (VirtualMemoryResource owner = VirtualMemoryResource.create(0);
                VirtualMemoryBuffer buffer = owner.allocate(owner.granularity());
                SharingServer server = SharingServer.builder(sock).build()) {
            server.publish("ok", buffer);
            Map<String, Integer> base = fdSnapshot();
            int before = openFdCount();
            AtomicInteger peak = new AtomicInteger(before);
            AtomicBoolean sampling = new AtomicBoolean(true);
            // Samples about every millisecond rather than spinning: a spinning sampler takes a
            // core from the server it watches (2 cores shared here).
            Thread sampler = new Thread(() -> {
                while (sampling.get()) {
                    peak.accumulateAndGet(openFdCount(), Math::max);
                    java.util.concurrent.locks.LockSupport.parkNanos(1_000_000);
                }
            }, "fd-sampler");
            sampler.start();
            List<Frame> answer = new ArrayList<>();
            try (FdSocket attacker = FdSocket.connect(sock)) {
                byte[] h = header(Protocol.MAGIC, Protocol.VERSION, FrameType.HELLO.code(), 1, 100);
                int[] many = new int[Protocol.MAX_FDS_PER_FRAME];
                for (int i = 0; i < many.length; i++) many[i] = pipe[i % 2];
                // 15 of the 16 header bytes: a server that checks only at the end would wait for
                // the 16th holding 15 * 253 fds. The first send must succeed (else nothing was
                // tested); a later one may find the connection already dropped.
                attacker.send(new byte[] {h[0]}, many);
                for (int i = 1; i < Protocol.HEADER_SIZE - 1; i++) {
                    try {
                        attacker.send(new byte[] {h[i]}, many);
                    } catch (IOException dropped) {
                        break; // the server already closed the connection
                    }
                }
                CompletableFuture<Void> reader = CompletableFuture.runAsync(() -> {
                    try {
                        for (Frame f; (f = FrameIO.read(attacker)) != null; ) answer.add(f);
                    } catch (IOException endedWithAnError) {
                        // reset: the server closed with our bytes unread; the connection is over all the same
                    }
                });
                try {
                    reader.get(10, TimeUnit.SECONDS);
                } catch (TimeoutException e) {
                    throw new AssertionError("the server did not drop a connection that sent "
                            + (Protocol.HEADER_SIZE - 1) * many.length + " fds in one header (holding "
                            + (openFdCount() - before) + " fds more than before)");
                }
            } finally {
                sampling.set(false);
                sampler.join(10_000);
            }
            assertTrue(peak.get() <= before + Protocol.MAX_FDS_PER_FRAME + SLACK, "the server held "
                    + (peak.get() - before) + " fds more than before (expected: at most "
                    + Protocol.MAX_FDS_PER_FRAME + " + " + SLACK + ")");
            for (Frame f : answer) {
                if (f.type == FrameType.ERROR) {
                    assertEquals(ErrorCode.FD_COUNT_MISMATCH.code(), ((Messages.Error) f.message).code(), f.toString());
                }
            }
            assertFdsBack(base, "after the server dropped the flooding connection");
            // It keeps serving others.
            try (VirtualMemoryResource importer = VirtualMemoryResource.create(0);
                    SharingClient client = SharingClient.connect(sock, "next");
                    Attachment a = client.attach("ok", importer)) {
                assertEquals(buffer.size(), a.buffer().size());
            }
        } finally {
            NativeIo.closeAll(pipe);
            IpcTestSupport.deleteTree(sock.getParent());
        }
    }
}
