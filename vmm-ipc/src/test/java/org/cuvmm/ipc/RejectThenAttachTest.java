package org.cuvmm.ipc;

import static org.cuvmm.ipc.IpcTestSupport.assertFdsBack;
import static org.cuvmm.ipc.IpcTestSupport.fdSnapshot;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import org.cuvmm.VirtualMemoryResource;
import org.junit.jupiter.api.Test;

/**
 * PROTOCOL.md 13.3: a client that rejects a version-2 DESCRIPTOR sends FORGET for the new
 * ids it carried, since the server holds them from the moment it sent them. An attach made
 * after the rejected one has failed must reach the server after that FORGET: otherwise the
 * server names those ids without their fds, and the client refuses its own server's reply.
 * The failed attach was reported at once while the FORGET waited on the event thread, so a
 * caller retrying at once could overtake it (an independent probe saw about 30% of retries
 * fail that way at the fd limit). A fake version-2 server sends, for every other ATTACH, a
 * DESCRIPTOR whose FD chunk comes with no fd (rejected: FD_COUNT_MISMATCH), and checks that
 * the next ATTACH comes after the FORGET of that chunk's id.
 */
class RejectThenAttachTest {
    private static final int ROUNDS = 40;

    @Test
    void theRetryFollowsTheForgetOfTheRejectedIds() throws Exception {
        Map<String, Integer> fds = fdSnapshot();
        Path sock = IpcTestSupport.socketPath();
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             FdServerSocket server = FdServerSocket.bind(sock)) {
            long g = resource.granularity();
            CompletableFuture<List<String>> fake = CompletableFuture.supplyAsync(() -> {
                List<String> overtaken = new ArrayList<>();
                try (FdSocket s = server.accept()) {
                    IpcTestSupport.answerHelloV2(s);
                    long nextId = 1;
                    long lease = 1;
                    long unforgotten = 0; // the id of the last rejected DESCRIPTOR, until its FORGET
                    boolean sendBad = true;
                    while (true) {
                        try (Frame f = FrameIO.read(s, 2, 2)) {
                            if (f == null) return overtaken;
                            switch (f.type) {
                                case ATTACH -> {
                                    if (sendBad) {
                                        unforgotten = nextId++;
                                        Messages.DescriptorV2 bad = new Messages.DescriptorV2(lease++,
                                                Protocol.HANDLE_TYPE_POSIX_FD, g, new long[] {g}, new long[] {unforgotten},
                                                new int[] {Protocol.CHUNK_FLAG_FD});
                                        FrameIO.write(s, bad, f.requestId, null, 2); // no fd: rejected
                                    } else {
                                        if (unforgotten != 0) overtaken.add("id " + unforgotten);
                                        FrameIO.write(s, new Messages.Error(ErrorCode.UNKNOWN_NAME.code(), "no such name"),
                                                f.requestId, null, 2);
                                    }
                                    sendBad = !sendBad;
                                }
                                case FORGET -> {
                                    long[] ids = ((Messages.Forget) f.message).ids();
                                    for (long id : ids) if (id == unforgotten) unforgotten = 0;
                                    FrameIO.write(s, new Messages.Forgotten(ids.length), f.requestId, null, 2);
                                }
                                case RELEASE -> FrameIO.write(s, new Messages.Released(((Messages.Release) f.message)
                                        .leaseId()), f.requestId, null, 2);
                                default -> { } // the client's ERROR about the bad frame: never answered
                            }
                        }
                    }
                } catch (IOException e) {
                    throw new UncheckedIOException(e);
                }
            });
            try (SharingClient client = SharingClient.builder(sock).protocolVersion(2).build()) {
                for (int i = 0; i < ROUNDS; i++) {
                    SharingException rejected = assertThrows(SharingException.class, () -> client.attach("b", resource));
                    assertEquals(ErrorCode.FD_COUNT_MISMATCH, rejected.code(), rejected.getMessage());
                    SharingException retry = assertThrows(SharingException.class, () -> client.attach("b", resource));
                    assertEquals(ErrorCode.UNKNOWN_NAME, retry.code(), "the retry reached the server in step: "
                            + retry.getMessage());
                }
            }
            List<String> overtaken = fake.get(30, TimeUnit.SECONDS);
            assertTrue(overtaken.isEmpty(), "ATTACHes that overtook the FORGET of a rejected DESCRIPTOR's ids: "
                    + overtaken.size() + " of " + ROUNDS + " " + overtaken);
        } finally {
            IpcTestSupport.deleteTree(sock.getParent());
        }
        assertFdsBack(fds, "after rejected DESCRIPTORs and their retries");
    }

    /**
     * A request made on the client's event thread (here a drop listener's attach) whose reply
     * is rejected fails at once with the rejection: its failure cannot wait behind its own
     * thread's queue (found by a reviewer of the deferral above: it waited out its whole
     * timeout and reported "no reply ... within"). A fake version-2 server grants one good
     * lease of a real buffer, drops it, and answers the listener's ATTACH with a DESCRIPTOR
     * whose FD chunk comes with no fd.
     */
    @Test
    void aDropListenersAttachFailsWithTheRejectionNotATimeout() throws Exception {
        Map<String, Integer> fds = fdSnapshot();
        Path sock = IpcTestSupport.socketPath();
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             org.cuvmm.VirtualMemoryBuffer buffer = resource.allocate(resource.granularity());
             FdServerSocket server = FdServerSocket.bind(sock)) {
            long g = resource.granularity();
            CompletableFuture<Void> fake = CompletableFuture.runAsync(() -> {
                try (FdSocket s = server.accept()) {
                    IpcTestSupport.answerHelloV2(s);
                    try (Frame attach = FrameIO.read(s, 2, 2); org.cuvmm.BufferDescriptor d = buffer.exportDescriptor()) {
                        Messages.DescriptorV2 good = IpcTestSupport.oneFreshChunk(1, g, 1);
                        d.useFds(f -> FrameIO.write(s, good, attach.requestId, f, 2));
                    }
                    FrameIO.write(s, new Messages.Drop(1, "b"), 0, null, 2);
                    while (true) {
                        try (Frame f = FrameIO.read(s, 2, 2)) {
                            if (f == null) return;
                            // The listener's attach fails at once (the point of this test), so the
                            // event thread sends the rejection's RELEASE (lease 2) and FORGET after it
                            // returned, unawaited: the test may release lease 1 and close the client
                            // before they are answered. Only those replies may find the client gone
                            // (CI saw EPIPE on the FORGOTTEN once); any other failed write still fails.
                            boolean unawaited = f.type == FrameType.FORGET || (f.type == FrameType.RELEASE
                                    && ((Messages.Release) f.message).leaseId() == 2);
                            if (unawaited) {
                                try {
                                    FrameIO.write(s, f.type == FrameType.FORGET
                                            ? new Messages.Forgotten(((Messages.Forget) f.message).ids().length)
                                            : new Messages.Released(2), f.requestId, null, 2);
                                } catch (IOException clientGone) {
                                    return;
                                }
                                continue;
                            }
                            switch (f.type) {
                                case ATTACH -> FrameIO.write(s, IpcTestSupport.oneFreshChunk(2, g, 2), f.requestId, null, 2); // no fd: rejected
                                case RELEASE -> FrameIO.write(s, new Messages.Released(((Messages.Release) f.message)
                                        .leaseId()), f.requestId, null, 2);
                                default -> { }
                            }
                        }
                    }
                } catch (IOException e) {
                    throw new UncheckedIOException(e);
                }
            });
            try (SharingClient client = SharingClient.builder(sock).protocolVersion(2)
                    .timeout(java.time.Duration.ofSeconds(20)).build()) {
                CompletableFuture<Throwable> listenerAttach = new CompletableFuture<>();
                client.addDropListener(notice -> {
                    try (Attachment again = client.attach("b", resource)) {
                        listenerAttach.complete(null);
                    } catch (Throwable t) {
                        listenerAttach.complete(t);
                    }
                });
                try (Attachment first = client.attach("b", resource)) {
                    Throwable t = listenerAttach.get(30, TimeUnit.SECONDS);
                    assertTrue(t instanceof SharingException se && se.code() == ErrorCode.FD_COUNT_MISMATCH,
                            "the listener's attach failed with the rejection, not a timeout: " + t);
                }
            }
            fake.get(30, TimeUnit.SECONDS);
        } finally {
            IpcTestSupport.deleteTree(sock.getParent());
        }
        assertFdsBack(fds, "after a drop listener's rejected attach");
    }
}
