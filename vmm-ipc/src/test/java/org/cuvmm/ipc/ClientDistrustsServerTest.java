package org.cuvmm.ipc;

import static org.cuvmm.ipc.IpcTestSupport.concat;
import static org.cuvmm.ipc.IpcTestSupport.descriptorPayload;
import static org.cuvmm.ipc.IpcTestSupport.str;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.TimeUnit;

import org.cuvmm.BufferDescriptor;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.ipc.internal.BytePattern;
import org.cuvmm.testing.OpenFds;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * Independent probe (frame fuzzer), client side: the defects found, each a failing test.
 */
class ClientDistrustsServerTest extends FakeServerSupport {
    /**
     * A server that gives the same lease id to two ATTACHes (lease ids are "unique for the life
     * of the server", PROTOCOL.md section 3). The client's close() must still unmap both
     * attachments it returned, or say what was wrong.
     */
    @Test
    void duplicateLeaseIdsFromTheServerLeakNoMapping() throws Exception {
        CompletableFuture<Void> f = fake(1, (s, v) -> {
            for (int i = 0; i < 2; i++) {
                Frame attach = next(s, v, FrameType.ATTACH);
                try (BufferDescriptor d = real.exportDescriptor()) {
                    s.send(raw(1, FrameType.DESCRIPTOR, attach.requestId, descriptorPayload(920, 1, 2 * G, 2 * G)), d.fds());
                }
            }
        });
        SharingClient c = client(1);
        Attachment a1 = null;
        Attachment a2 = null;
        Exception second = null;
        try {
            a1 = c.attach("x", resource);
            try {
                a2 = c.attach("x", resource);
            } catch (Exception e) {
                second = e; // refusing the duplicate is fine
            }
        } finally {
            try {
                c.close(); // closes the open attachments
            } catch (RuntimeException ignored) {
                // a refusal is fine; the mappings must go anyway
            }
        }
        f.get(10, TimeUnit.SECONDS);
        long maps = OpenFds.cuvmmMemfdMappings();
        // no explicit close of a1/a2: the client's close() is documented to release the open attachments
        boolean a1Open = a1 != null && !a1.buffer().isClosed();
        boolean a2Open = a2 != null && !a2.buffer().isClosed();
        String state = "after client.close(): first attachment open=" + a1Open + ", second open=" + a2Open
                + " (second attach threw: " + second + "), memfd mappings " + maps + " vs " + mapsBase;
        if (a1 != null) a1.close();
        if (a2 != null) a2.close();
        assertFalse(a1Open || a2Open, state);
    }

    /**
     * An unsolicited HELLO_OK (a request id the client never used) of version 1 must not set
     * the connection's version: the real HELLO_OK answering the client's HELLO says 2.
     */
    @Test
    void anUnsolicitedHelloOkDoesNotPickTheVersion() throws Exception {
        CompletableFuture<Void> f = CompletableFuture.runAsync(() -> {
            try (FdSocket s = listen.accept()) {
                Frame hello = next(s, 2, FrameType.HELLO);
                FrameIO.write(s, new Messages.HelloOk(1, 253), hello.requestId + 1000, null, 1); // answers nothing
                FrameIO.write(s, new Messages.HelloOk(2, 253), hello.requestId, null, 2);
                Frame attach = next(s, 2, FrameType.ATTACH);
                if (attach != null) {
                    FrameIO.write(s, new Messages.Error(ErrorCode.UNKNOWN_NAME, "none"), attach.requestId, null, 2);
                }
                next(s, 2, null);
            } catch (Exception e) {
                throw new RuntimeException(e);
            }
        });
        try (SharingClient c = client(2)) {
            assertEquals(2, c.protocolVersion(), "the version of the HELLO_OK that answered the HELLO");
        } finally {
            f.get(10, TimeUnit.SECONDS);
        }
    }
}
