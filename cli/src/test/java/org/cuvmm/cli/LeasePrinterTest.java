package org.cuvmm.cli;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.ByteArrayOutputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.nio.charset.StandardCharsets;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.cuvmm.ipc.LeaseEvent;
import org.cuvmm.ipc.PeerCredentials;
import org.junit.jupiter.api.Test;

/** The printer's queue is bounded: an output that cannot keep up drops lines, counted and reported. */
class LeasePrinterTest {
    @Test
    void aStuckOutputDropsAndCountsLinesInsteadOfGrowingWithoutBound() throws Exception {
        CountDownLatch writing = new CountDownLatch(1);
        CountDownLatch unblock = new CountDownLatch(1);
        ByteArrayOutputStream text = new ByteArrayOutputStream();
        OutputStream stuck = new OutputStream() {
            @Override
            public synchronized void write(int b) { write(new byte[] {(byte) b}, 0, 1); }

            @Override
            public synchronized void write(byte[] b, int off, int len) {
                writing.countDown();
                try {
                    unblock.await(30, TimeUnit.SECONDS);
                } catch (InterruptedException e) {
                    Thread.currentThread().interrupt();
                }
                text.write(b, off, len);
            }
        };
        PrintStream out = new PrintStream(stuck, true, StandardCharsets.UTF_8);
        LeasePrinter printer = new LeasePrinter(out, 4);
        try {
            PeerCredentials peer = new PeerCredentials(1, 2, 3);
            printer.attached(new LeaseEvent("t", 1, peer, "c", LeaseEvent.Reason.ATTACHED, 1));
            assertTrue(writing.await(30, TimeUnit.SECONDS), "the printer took the first line and is stuck printing it");
            for (int i = 2; i <= 11; i++) printer.attached(new LeaseEvent("t", i, peer, "c", LeaseEvent.Reason.ATTACHED, i));
            assertEquals(6, printer.dropped(), "4 queued behind the stuck one, 6 dropped");
        } finally {
            unblock.countDown();
            printer.close();
        }
        String printed = text.toString(StandardCharsets.UTF_8);
        assertTrue(printed.contains("(6 attach/release lines dropped: the output could not keep up)"), printed);
        assertEquals(5, printed.lines().filter(l -> l.startsWith("attach ")).count(), printed);
    }
}
