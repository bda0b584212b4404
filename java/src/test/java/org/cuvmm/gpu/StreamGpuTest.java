package org.cuvmm.gpu;

import static org.cuvmm.gpu.PresetsDriver.check;
import static org.cuvmm.testing.TestData.pattern;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.bytedeco.cuda.cudart.CUstream_st;
import org.bytedeco.cuda.global.cudart;
import org.bytedeco.javacpp.Pointer;
import org.cuvmm.BufferDescriptor;
import org.cuvmm.Event;
import org.cuvmm.PinnedHostBuffer;
import org.cuvmm.Stream;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.testing.LiveObjects;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;

/**
 * Streams on the NVIDIA driver: cuvmm's asynchronous copies, fills, events and host functions
 * on a real GPU, and a second binding (the JavaCPP CUDA presets) queueing work on a cuvmm
 * stream through {@link Stream#handle()}, recorded with
 * {@link VirtualMemoryBuffer#withAddress(Stream, java.util.function.LongConsumer)}, with the
 * buffer released in stream order after it. Skipped, with the reason, on the host driver.
 */
@Tag("gpu")
class StreamGpuTest {
    private VirtualMemoryResource resource;
    private long g;
    private Map<String, Long> liveBefore;
    private boolean contextRetained;

    @BeforeEach
    void open() {
        GpuSupport.assumeCuda();
        PresetsDriver.retainPrimaryContext("so the stream cross-check did not run");
        contextRetained = true;
        liveBefore = LiveObjects.now();
        resource = VirtualMemoryResource.create(0);
        g = resource.granularity();
    }

    @AfterEach
    void close() {
        GpuSupport.closeAndCheckNothingLeft(resource, liveBefore);
        if (contextRetained) PresetsDriver.releasePrimaryContext();
    }

    private static CUstream_st stream(Stream s) {
        final long h = s.handle();
        return new CUstream_st(new Pointer() {
            {
                address = h;
            }
        });
    }

    @Test
    void asyncCopiesFillsEventsAndHostFunctionsRunInStreamOrder() {
        int n = (int) g + 4096;
        byte[] data = pattern(n, 21);
        try (Stream s = Stream.builder(0).nonBlocking(true).build(); VirtualMemoryBuffer b = resource.allocate(2 * g);
             PinnedHostBuffer in = PinnedHostBuffer.allocate(n); PinnedHostBuffer out = PinnedHostBuffer.allocate(n);
             Event start = Event.create(0); Event end = Event.create(0)) {
            in.asByteBuffer().put(data);
            List<Integer> order = Collections.synchronizedList(new ArrayList<>());
            start.record(s);
            b.fillAsync(0, 2 * g, (byte) 0x11, s);
            s.launchHostFunction(() -> order.add(1));
            b.copyFromAsync(0, in, 0, n, s);
            s.launchHostFunction(() -> order.add(2));
            b.copyToAsync(0, out, 0, n, s);
            end.record(s);
            s.synchronize();
            byte[] back = new byte[n];
            out.asByteBuffer().get(back);
            assertArrayEquals(data, back);
            assertEquals(List.of(1, 2), order);
            assertTrue(end.elapsedMillis(start) >= 0);
            assertEquals(cudart.CUDA_SUCCESS, cudart.cuStreamQuery(stream(s)), "the other binding sees our stream done");

            byte[] heap = pattern(n, 22);
            byte[] expected = heap.clone();
            b.copyFromAsync(0, heap, 0, n, s);
            java.util.Arrays.fill(heap, (byte) 0);
            s.synchronize();
            GpuSupport.assertContent(b, 0, expected); // synchronous read on cuvmm's own stream
        }
    }

    @Test
    void workQueuedThroughAnotherBindingIsRecordedAndTheReleaseFollowsIt() throws Exception {
        CountDownLatch unmapped = new CountDownLatch(1);
        try (Stream s = Stream.create(0); VirtualMemoryBuffer owner = resource.allocate(g);
             BufferDescriptor d = owner.exportDescriptor(); PinnedHostBuffer out = PinnedHostBuffer.allocate(g)) {
            VirtualMemoryBuffer imported = resource.importBuffer(d, unmapped::countDown);
            imported.withAddress(s, address -> check(cudart.cuMemsetD8Async(address, (byte) 0x3C, g, stream(s)),
                    "cuMemsetD8Async on a cuvmm stream"));
            imported.copyToAsync(0, out, 0, g, s);
            imported.close(s); // never blocks; unmapped after the stream passed this point
            s.synchronize();
            assertTrue(unmapped.await(30, TimeUnit.SECONDS), "whenUnmapped ran after the stream work");
            ByteBuffer view = out.asByteBuffer();
            for (int i = 0; i < g; i += 4096) assertEquals((byte) 0x3C, view.get(i), "byte " + i);
            GpuSupport.assertContent(owner, 0, new byte[] {0x3C, 0x3C, 0x3C, 0x3C});
        }
    }
}
