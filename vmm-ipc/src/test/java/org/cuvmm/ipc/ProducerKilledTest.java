package org.cuvmm.ipc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.testing.OpenFds;
import org.junit.jupiter.api.Test;

/**
 * Probe: the producer JVM is SIGKILLed while this JVM (v1 and v2 clients) holds leases and cached
 * mappings: the clients see the end, held attachments stay readable, and once they are closed
 * every fd and mapping is gone.
 */
class ProducerKilledTest {
    @Test
    void producerKilledWhileLeasesAndCachedMappingsAreHeld() throws Exception {
        Path sock = IpcTestSupport.socketPath();
        Map<String, Integer> fds0 = OpenFds.byKind();
        long maps0 = OpenFds.cuvmmMemfdMappings();
        SoakChild producer = new SoakChild("producer", SoakProducerMain.class, sock.toString(), "6");
        try (VirtualMemoryResource into = VirtualMemoryResource.create(0)) {
            producer.awaitLine("READY", 1, 60);
            SharingClient v2 = SharingClient.connect(sock, "probe-v2");
            SharingClient v1 = SharingClient.builder(sock).protocolVersion(1).build();
            List<Attachment> held = new ArrayList<>();
            for (int i = 0; i < 6; i++) {
                v2.attach("f" + i, into).close(); // cached
                if (i % 2 == 0) held.add(v2.attach("f" + i, into));
                if (i % 3 == 0) held.add(v1.attach("f" + i, into));
            }
            assertTrue(v2.importCache().stats().entries() > 0);
            producer.process.destroyForcibly();
            producer.process.waitFor();
            IpcTestSupport.await("both clients see the end", 10, () -> !v1.isConnected() && !v2.isConnected());
            IpcTestSupport.await("idle cached mappings gone", 10, () -> v2.importCache().stats().entries() == 0);
            byte[] b8 = new byte[8];
            for (Attachment a : held) {
                a.buffer().copyTo(0, b8, 0, 8);
                long first = ByteBuffer.wrap(b8).getLong();
                a.buffer().copyTo(a.buffer().size() - 8, b8, 0, 8);
                assertEquals(first, ByteBuffer.wrap(b8).getLong(), a + " still readable after the producer died");
                assertEquals(7, first & 0xffff, a.toString());
            }
            assertThrows(IOException.class, () -> v2.attach("f0", into));
            assertThrows(IOException.class, () -> v1.attach("f0", into));
            for (Attachment a : held) a.close(); // documented: only the buffer is closed (the connection has ended)
            assertEquals(0, v1.pendingReleases());
            assertEquals(0, v2.pendingReleases());
            v1.close();
            v2.close();
            ImportCache.Stats s = v2.importCache().stats();
            assertEquals(0, s.entries(), s.toString());
            assertEquals(0, s.fdsKept(), s.toString());
            assertFalse(v2.isConnected());
        } finally {
            producer.close();
            IpcTestSupport.deleteTree(sock.getParent());
        }
        IpcTestSupport.assertFdsBack(fds0, "after the producer's death and every close");
        assertEquals(maps0, OpenFds.cuvmmMemfdMappings(), "memfd mappings back");
    }
}
