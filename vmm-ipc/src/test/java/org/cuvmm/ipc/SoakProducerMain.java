package org.cuvmm.ipc;

import java.nio.ByteBuffer;
import java.nio.file.Path;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.pool.VirtualMemoryPool;

/** Probe producer: args SOCKET FRAMES; publishes f0..f(FRAMES-1) (stamped like MultiJvmSoakTest), prints READY, waits. */
public final class SoakProducerMain {
    private SoakProducerMain() {}

    public static void main(String[] args) throws Exception {
        int n = Integer.parseInt(args[1]);
        VirtualMemoryResource resource = VirtualMemoryResource.create(0);
        VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(resource).name("probe-producer").build();
        SharingServer server = SharingServer.builder(Path.of(args[0])).build();
        for (int i = 0; i < n; i++) {
            VirtualMemoryBuffer b = pool.allocateExported((1 + i % 3) * resource.granularity());
            byte[] v = ByteBuffer.allocate(8).putLong(((long) i << 48) | 7).array();
            b.copyFrom(0, v, 0, 8);
            b.copyFrom(b.size() - 8, v, 0, 8);
            server.publish("f" + i, b);
        }
        System.out.println("READY");
        System.out.flush();
        Thread.sleep(Long.MAX_VALUE);
    }
}
