package org.cuvmm.ipc;

import static org.cuvmm.ipc.IpcTestSupport.assertFdsBack;
import static org.cuvmm.ipc.IpcTestSupport.fdSnapshot;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import org.cuvmm.BufferDescriptor;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.junit.jupiter.api.Test;

/**
 * {@link SharingClient#close()} against a server that stops answering: the first release
 * waits its timeout, the others are sent without waiting (one timeout in all, not one per
 * attachment), every attachment is closed, every RELEASE still goes out, and nothing leaks.
 * Before: each attachment's release waited a whole timeout in turn (found by an independent
 * probe against a stopped server).
 */
class CloseStalledServerTest {
    private static final int ATTACHMENTS = 3;

    @Test
    void closeWaitsOneTimeoutNotOnePerAttachment() throws Exception {
        Map<String, Integer> fds = fdSnapshot();
        Path sock = IpcTestSupport.socketPath();
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer buffer = resource.allocate(resource.granularity());
             FdServerSocket server = FdServerSocket.bind(sock)) {
            // A version-1 server that grants ATTACHMENTS leases of one real buffer, then reads
            // the client's frames without answering any (a server that stopped answering).
            CompletableFuture<List<FrameType>> fake = CompletableFuture.supplyAsync(() -> {
                List<FrameType> unanswered = new ArrayList<>();
                try (FdSocket s = server.accept()) {
                    IpcTestSupport.answerHelloV1(s);
                    for (int lease = 1; lease <= ATTACHMENTS; lease++) {
                        try (Frame attach = FrameIO.read(s); BufferDescriptor d = buffer.exportDescriptor()) {
                            Messages.Descriptor m = new Messages.Descriptor(lease, Protocol.HANDLE_TYPE_POSIX_FD,
                                    d.size(), d.sizes());
                            d.useFds(f -> FrameIO.write(s, m, attach.requestId, f));
                        }
                    }
                    while (true) {
                        try (Frame f = FrameIO.read(s)) {
                            if (f == null) return unanswered; // the client ended the connection
                            unanswered.add(f.type);
                        }
                    }
                } catch (IOException e) {
                    throw new UncheckedIOException(e);
                }
            });
            SharingClient client = SharingClient.builder(sock).protocolVersion(1).build();
            List<Attachment> held = new ArrayList<>();
            try {
                for (int i = 0; i < ATTACHMENTS; i++) held.add(client.attach("b", resource));
                // Short only now: the attaches (cold: class loading, export, import) keep the default.
                client.setTimeout(Duration.ofMillis(300));
                UncheckedIOException e = assertThrows(UncheckedIOException.class, client::close);
                // One release waited for its timeout; the others did not wait at all.
                assertEquals(0, e.getSuppressed().length, "releases that each waited a timeout after the first: "
                        + List.of(e.getSuppressed()));
                for (Attachment a : held) assertTrue(a.isClosed(), a + " closed by client.close()");
                // Every RELEASE went out, then the client ended the connection by itself.
                List<FrameType> got = fake.get(30, TimeUnit.SECONDS);
                assertEquals(ATTACHMENTS, got.stream().filter(t -> t == FrameType.RELEASE).count(),
                        "RELEASEs sent: " + got);
                assertEquals(0, client.pendingReleases(), "no lease left to release");
            } finally {
                client.closeNow();
            }
            assertFalse(client.isConnected(), "the connection ended");
        } finally {
            IpcTestSupport.deleteTree(sock.getParent());
        }
        assertFdsBack(fds, "after closing a client whose server stopped answering");
    }
}
