package org.cuvmm.ipc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.file.Path;
import java.util.concurrent.atomic.AtomicInteger;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Test;

/**
 * Review of 1a1473d: the out-of-fds retry keys on the text "RLIMIT_NOFILE" anywhere in the
 * exception chain, server ERRORs included. A server that cannot export at ITS OWN fd limit
 * answers ERROR INTERNAL "cannot export 'x': ... RLIMIT_NOFILE ..." (SharingServer:733 with the
 * core's fd-limit text). The client then flushes its whole idle import cache (unmaps, FORGETs,
 * waits) and asks again: a second ATTACH the server cannot serve either, and every id it
 * forgot must later be sent with a fresh fd, which is more fds for the server that ran out.
 */
class ServerFdLimitErrorNoRetryTest {
    @AfterEach
    void reset() { SharingServer.failAttachAt = null; }

    @Test
    void aServersOwnFdLimitErrorDoesNotFlushTheClientsCacheNorRetry() throws Exception {
        Path sock = IpcTestSupport.socketPath();
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             SharingServer server = SharingServer.builder(sock).build()) {
            long g = resource.granularity();
            VirtualMemoryBuffer a = resource.allocate(g);
            VirtualMemoryBuffer b = resource.allocate(g);
            server.publish("a", a);
            server.publish("b", b);
            try (SharingClient c = SharingClient.builder(sock).protocolVersion(2).cacheMaxEntries(8).build()) {
                c.attach("a", resource).close(); // cached, idle
                ImportCache.Stats before = c.importCache().stats();
                assertEquals(1, before.entries(), "setup: " + before);
                AtomicInteger exports = new AtomicInteger();
                SharingServer.failAttachAt = step -> {
                    if (!step.equals("export")) return false;
                    exports.incrementAndGet();
                    // What the core says when the SERVER process is at its limit (native/fd_utils.cpp).
                    throw new IllegalStateException("cuMemExportToShareableHandle failed: the process is at its "
                            + "file descriptor limit (1024 open, RLIMIT_NOFILE soft limit 1024)");
                };
                SharingException e = assertThrows(SharingException.class, () -> c.attach("b", resource));
                assertEquals(ErrorCode.INTERNAL, e.code(), e.toString());
                ImportCache.Stats after = c.importCache().stats();
                System.out.println("REVIEW exports asked " + exports.get() + "; cache before " + before + " after " + after);
                assertEquals(1, exports.get(), "ATTACHes the server saw for one attach() refused by the SERVER's fd limit");
                assertEquals(before.entries(), after.entries(), "the client's idle cache was flushed: " + after);
                assertEquals(before.forgets(), after.forgets(), "FORGETs sent for a server-side failure: " + after);
            } finally {
                SharingServer.failAttachAt = null;
                server.unpublish("a");
                server.unpublish("b");
                a.close();
                b.close();
            }
        } finally {
            IpcTestSupport.deleteTree(sock.getParent());
        }
    }
}
