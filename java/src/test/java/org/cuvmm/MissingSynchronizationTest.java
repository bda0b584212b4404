package org.cuvmm;

import static org.cuvmm.StreamTestSupport.assertAll;
import static org.cuvmm.StreamTestSupport.gate;
import static org.cuvmm.TestSupport.MiB;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import java.util.Map;
import java.util.concurrent.CountDownLatch;

import org.cuvmm.testing.LiveObjects;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * The host driver catches ordering bugs: with {@code cuvmm.host.streamDelayMicros} on, a read
 * through a second stream that does not wait for the writer's event reads stale data, and the
 * same read after {@link Stream#waitFor(Event)} reads the new data. The first test is the one
 * that fails when the wait is removed (each op sleeps 20 ms, and the write has three ops ahead
 * of it on its stream, so the unordered read wins by about 60 ms); the second shows the stale
 * read deterministically, with the writer held by a gate.
 */
class MissingSynchronizationTest {
    private static final int WRITTEN = 0x5A;
    private static final int OLD = 0x01;
    private Map<String, Long> live;
    private VirtualMemoryResource resource;

    @BeforeEach
    void open() {
        assumeTrue(TestSupport.onHostDriver(), "the stream delay is a host-driver setting");
        live = LiveObjects.now();
        resource = VirtualMemoryResource.create(0);
    }

    @AfterEach
    void close() {
        if (resource == null) return;
        StreamTestSupport.delay(0);
        resource.close();
        StreamTestSupport.reaperDrained();
        LiveObjects.assertBack(live, "after the test");
    }

    @Test
    void aReadOnAnotherStreamSeesTheWriteOnlyAfterWaitingForItsEvent() {
        StreamTestSupport.delay(20_000);
        try (Stream writer = Stream.builder(0).nonBlocking(true).build();
             Stream reader = Stream.builder(0).nonBlocking(true).build();
             VirtualMemoryBuffer b = resource.allocate(MiB); VirtualMemoryBuffer scratch = resource.allocate(MiB);
             PinnedHostBuffer out = PinnedHostBuffer.allocate(MiB)) {
            b.fill((byte) OLD);
            for (int i = 0; i < 3; i++) scratch.fillAsync(0, 4096, (byte) i, writer); // work ahead of the write
            b.fillAsync(0, MiB, (byte) WRITTEN, writer);
            try (Event written = writer.recordEvent()) {
                reader.waitFor(written); // remove this line and the assertion below fails (stale 0x01)
                b.copyToAsync(0, out, 0, MiB, reader);
                reader.synchronize();
            }
            assertAll(out.asByteBuffer(), (int) MiB, WRITTEN, "the read after waiting for the write's event");
            writer.synchronize();
        }
    }

    @Test
    void withoutTheWaitTheReadIsStale() {
        StreamTestSupport.delay(1_000);
        try (Stream writer = Stream.builder(0).nonBlocking(true).build();
             Stream reader = Stream.builder(0).nonBlocking(true).build();
             VirtualMemoryBuffer b = resource.allocate(MiB); PinnedHostBuffer out = PinnedHostBuffer.allocate(MiB)) {
            b.fill((byte) OLD);
            CountDownLatch hold = gate(writer);
            try {
                b.fillAsync(0, MiB, (byte) WRITTEN, writer);
                b.copyToAsync(0, out, 0, MiB, reader); // no wait for the writer: a bug
                reader.synchronize();
                assertAll(out.asByteBuffer(), (int) MiB, OLD, "the unordered read ran before the write");
            } finally {
                hold.countDown();
            }
            writer.synchronize();
        }
    }
}
