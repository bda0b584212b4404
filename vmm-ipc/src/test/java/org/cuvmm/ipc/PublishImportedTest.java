package org.cuvmm.ipc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;

import java.nio.file.Path;

import org.cuvmm.BufferDescriptor;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.internal.ErrorMessages;
import org.junit.jupiter.api.Test;

/** Publishing imported memory is refused with the core's words (one message factory, issue 8 tidy). */
class PublishImportedTest {
    private static final long MiB = 1L << 20;

    @Test
    void publishingImportedMemoryIsRefusedWithTheSharedMessage() throws Exception {
        Path sock = IpcTestSupport.socketPath();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer src = r.allocate(2 * MiB);
             BufferDescriptor d = src.exportDescriptor();
             VirtualMemoryBuffer imported = r.importBuffer(d);
             SharingServer server = SharingServer.builder(sock).build()) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class,
                    () -> server.publish("again", imported));
            assertEquals(ErrorMessages.importedCannotBeExported("publish 'again': " + imported, ""), e.getMessage());
        } finally {
            IpcTestSupport.deleteTree(sock.getParent());
        }
    }
}
