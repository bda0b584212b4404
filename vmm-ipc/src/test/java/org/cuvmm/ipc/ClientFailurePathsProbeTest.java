package org.cuvmm.ipc;

import static org.cuvmm.ipc.IpcTestSupport.descriptorPayload;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.cuvmm.BufferDescriptor;
import org.junit.jupiter.api.Test;

/**
 * Independent probe: the client's failure paths held to the javadoc of {@link SharingClient}
 * and {@link Attachment} (exception types, what a failure leaves behind), with the fake server
 * of FakeServerSupport (each case also checks that no fd, mapping or client thread is left).
 */
class ClientFailurePathsProbeTest extends FakeServerSupport {

    /**
     * Attachment.close(): "If the connection has ended, the server already freed the lease and
     * only the buffer is closed." A connection the client ended over the server's bad frame
     * records a SharingException as its failure (the server's fault, with its code); the
     * RELEASE of an attachment closed afterwards failed with a copy of it, which close() took
     * for the server's refusal of the release and threw IllegalStateException (and so did
     * SharingClient.close(), which closes the open attachments).
     */
    @Test
    void closingAnAttachmentAfterTheClientRejectedABadFrameDoesNotThrow() throws Exception {
        CountDownLatch attached = new CountDownLatch(1);
        CompletableFuture<Void> f = fake(1, (s, v) -> {
            Frame a = next(s, v, FrameType.ATTACH);
            try (BufferDescriptor d = real.exportDescriptor()) {
                s.send(raw(1, FrameType.DESCRIPTOR, a.requestId, descriptorPayload(700, 1, 2 * G, 2 * G)), d.fds());
            }
            assertTrue(attached.await(10, TimeUnit.SECONDS), "the test never attached");
            byte[] bad = raw(1, FrameType.DROP, 0, new byte[10]);
            bad[0] ^= 0x55; // a bad magic: fatal, the client ends the connection
            s.send(bad, null);
        });
        SharingClient c = client(1);
        try {
            Attachment a = c.attach("x", resource);
            attached.countDown();
            IpcTestSupport.await("the client ends the connection over the bad frame", 10, () -> !c.isConnected());
            assertEquals(0, c.pendingReleases(), "the connection's end freed the lease");
            a.close(); // threw IllegalStateException ("release of 'x' lease 700: the server sent a bad frame ...")
            assertTrue(a.isClosed());
            assertTrue(c.attachments().isEmpty(), c.attachments().toString());
        } finally {
            c.close();
        }
        f.get(10, TimeUnit.SECONDS);
    }

    /** As above, through SharingClient.close(), which closes the attachment left open. */
    @Test
    void closingTheClientAfterItRejectedABadFrameDoesNotThrow() throws Exception {
        CountDownLatch attached = new CountDownLatch(1);
        CompletableFuture<Void> f = fake(1, (s, v) -> {
            Frame a = next(s, v, FrameType.ATTACH);
            try (BufferDescriptor d = real.exportDescriptor()) {
                s.send(raw(1, FrameType.DESCRIPTOR, a.requestId, descriptorPayload(701, 1, 2 * G, 2 * G)), d.fds());
            }
            assertTrue(attached.await(10, TimeUnit.SECONDS), "the test never attached");
            byte[] bad = raw(1, FrameType.DROP, 0, new byte[10]);
            bad[0] ^= 0x55;
            s.send(bad, null);
        });
        SharingClient c = client(1);
        Attachment a = c.attach("x", resource);
        attached.countDown();
        IpcTestSupport.await("the client ends the connection over the bad frame", 10, () -> !c.isConnected());
        try {
            c.close(); // threw IllegalStateException, documented only for a buffer in use on another thread
        } finally {
            a.close(); // idempotent
        }
        assertTrue(a.isClosed());
        f.get(10, TimeUnit.SECONDS);
    }
}
