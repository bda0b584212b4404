package org.cuvmm.gpu;

import java.util.Map;
import static org.cuvmm.gpu.GpuSupport.assertContent;
import static org.cuvmm.testing.TestData.pattern;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;

import org.cuvmm.BufferOrigin;
import org.cuvmm.Device;
import org.cuvmm.Driver;
import org.cuvmm.DriverCounters;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.VirtualMemoryResourceOptions;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.cuvmm.testing.LiveObjects;

/**
 * The core contract on the real NVIDIA driver: sizes and rounding, data round trips, the
 * three grow outcomes, close order counted by our object model's counters, close refused
 * while another thread copies, use after close, peer access. Every size is derived from the
 * device's granularity, so the tests hold whatever the GPU reports. Skipped, with the
 * driver's reason, where the selected driver is not cuda.
 */
@Tag("gpu")
class CudaContractTest {
    private Driver driver;
    private VirtualMemoryResource resource;
    private long g;
    private Map<String, Long> liveBefore;

    @BeforeEach
    void open() {
        driver = GpuSupport.assumeCuda();
        liveBefore = LiveObjects.now();
        resource = VirtualMemoryResource.create(0);
        g = resource.granularity();
    }

    @AfterEach
    void closeAndCheckNothingLeft() {
        GpuSupport.closeAndCheckNothingLeft(resource, liveBefore);
    }

    @Test
    void theDriverReportsAVmmCapableDevice() {
        Device d = driver.device(0);
        System.out.println("cuda driver " + driver.versionString() + ": " + driver.reason());
        System.out.println("device 0: " + d + ", granularity " + g);
        assertTrue(driver.version() >= 10020, "cuDriverGetVersion " + driver.version() + " (VMM needs 10.2)");
        assertTrue(d.supportsVirtualMemoryManagement(), d.toString());
        assertFalse(d.name().isBlank(), d.toString());
        assertTrue(d.totalMemory() > 0, d.toString());
        assertTrue(g > 0 && (g & (g - 1)) == 0, "granularity " + g + " is a power of two");
    }

    @Test
    void allocateZeroIsEmptyAndMakesNoDriverCall() {
        long calls = driver.counters().totalCalls();
        try (VirtualMemoryBuffer b = resource.allocate(0)) {
            assertEquals(0, b.size());
            assertEquals(0, b.address());
            assertEquals(0, b.chunkCount());
            b.copyFrom(new byte[0]);
        }
        assertEquals(calls, driver.counters().totalCalls(), "allocate(0) must not call the driver");
    }

    @Test
    void oneByteIsRoundedUpToOneGranule() {
        try (VirtualMemoryBuffer b = resource.allocate(1)) {
            assertEquals(1, b.size());
            assertEquals(g, b.mappedSize());
            assertEquals(1, b.chunkCount());
            assertNotEquals(0, b.address());
            assertEquals(0, b.address() % g, "base is granularity-aligned");
            b.copyFrom(new byte[] {(byte) 0xA7});
            byte[] back = new byte[1];
            b.copyTo(back);
            assertEquals((byte) 0xA7, back[0]);
            b.fill((byte) 0x3C);
            b.copyTo(back);
            assertEquals((byte) 0x3C, back[0]);
        }
    }

    @Test
    void exactlyOneGranuleRoundTripsThroughArraysAndDirectBuffers() {
        try (VirtualMemoryBuffer b = resource.allocate(g)) {
            assertEquals(g, b.mappedSize());
            assertEquals(1, b.chunkCount());
            byte[] data = pattern((int) g, 11);
            b.copyFrom(data);
            assertContent(b, 0, data);
            ByteBuffer direct = ByteBuffer.allocateDirect(4096);
            direct.put(pattern(4096, 12)).flip();
            b.copyFrom(g - 4096, direct);
            ByteBuffer out = ByteBuffer.allocateDirect(4096);
            b.copyTo(g - 4096, out);
            out.flip();
            byte[] back = new byte[4096];
            out.get(back);
            assertEquals(ByteBuffer.wrap(pattern(4096, 12)), ByteBuffer.wrap(back));
        }
    }

    @Test
    void severalGranulesRoundUpAndCopyDeviceToDevice() {
        long size = 3 * g + 123;
        try (VirtualMemoryBuffer a = resource.allocate(size); VirtualMemoryBuffer b = resource.allocate(size)) {
            assertEquals(size, a.size());
            assertEquals(4 * g, a.mappedSize());
            assertEquals(1, a.chunkCount());
            byte[] data = pattern((int) size, 13);
            a.copyFrom(data);
            b.fill((byte) 0x5A);
            long dtod = driver.counters().calls("cuMemcpyDtoDAsync");
            b.copyFrom(0, a, 0, size);
            assertTrue(driver.counters().calls("cuMemcpyDtoDAsync") > dtod, "buffer to buffer is a device copy");
            assertContent(b, 0, data);
            b.fill(g - 1, 2, (byte) 1);
            byte[] edge = new byte[4];
            b.copyTo(g - 2, edge, 0, 4);
            assertEquals(data[(int) g - 2], edge[0]);
            assertEquals(1, edge[1]);
            assertEquals(1, edge[2]);
            assertEquals(data[(int) g + 1], edge[3]);
        }
    }

    @Test
    void notLargerThanMappedIsAnAliasWithoutDriverCalls() {
        try (VirtualMemoryBuffer b = resource.allocate(g / 2)) {
            byte[] data = pattern(1024, 14);
            b.copyFrom(0, data, 0, data.length);
            long calls = driver.counters().totalCalls();
            try (VirtualMemoryBuffer same = resource.modifyAllocation(b, g);
                 VirtualMemoryBuffer smaller = resource.modifyAllocation(b, 10)) {
                assertEquals(calls, driver.counters().totalCalls(), "an alias makes no driver call");
                assertEquals(BufferOrigin.ALIAS, same.origin());
                assertEquals(BufferOrigin.ALIAS, smaller.origin());
                assertEquals(b.address(), same.address());
                assertContent(same, 0, data);
            }
            assertContent(b, 0, data);
        }
    }

    @Test
    void growsInPlaceAtAnAddressHintWithDataIntact() {
        long hint = GpuSupport.freeRegion(32 * g);
        DriverCounters c = driver.counters();
        try (VirtualMemoryResource r = GpuSupport.resourceAt(hint); VirtualMemoryBuffer a = r.allocate(g + 1)) {
            assertEquals(hint, a.address(), "the driver honoured the address hint of a free region");
            byte[] data = pattern((int) (g + 1), 15);
            a.copyFrom(data);
            long reserves = c.calls("cuMemAddressReserve"), creates = c.calls("cuMemCreate"),
                    maps = c.calls("cuMemMap"), dtod = c.calls("cuMemcpyDtoDAsync");
            try (VirtualMemoryBuffer b = r.modifyAllocation(a, 5 * g)) {
                assertEquals(BufferOrigin.GROWN_IN_PLACE, b.origin());
                assertEquals(a.address(), b.address());
                assertEquals(2, b.chunkCount());
                assertEquals(2 * g, b.chunkSize(0));
                assertEquals(3 * g, b.chunkSize(1));
                assertEquals(1, c.calls("cuMemAddressReserve") - reserves, "one reservation, right after the buffer");
                assertEquals(1, c.calls("cuMemCreate") - creates, "one new chunk");
                assertEquals(1, c.calls("cuMemMap") - maps, "only the new chunk is mapped");
                assertEquals(0, c.calls("cuMemcpyDtoDAsync") - dtod, "nothing is copied");
                assertContent(b, 0, data);
                byte[] tail = pattern((int) (4 * g - 1), 16);
                b.copyFrom(g + 1, tail, 0, tail.length);
                assertContent(b, g + 1, tail);
                assertContent(a, 0, data);
            }
            assertContent(a, 0, data);
        }
    }

    @Test
    void movesPastADecoyWithoutCopyingAndKeepsTheData() {
        long hint = GpuSupport.freeRegion(32 * g);
        DriverCounters c = driver.counters();
        try (VirtualMemoryResource r = GpuSupport.resourceAt(hint); VirtualMemoryBuffer a = r.allocate(2 * g);
             VirtualMemoryResource decoyResource = GpuSupport.resourceAt(hint + 2 * g);
             VirtualMemoryBuffer decoy = decoyResource.allocate(g)) {
            assertEquals(hint, a.address(), "the driver honoured the address hint of a free region");
            assertEquals(hint + 2 * g, decoy.address(), "the decoy sits right after the buffer");
            byte[] data = pattern((int) (2 * g), 17);
            a.copyFrom(data);
            long copies = c.calls("cuMemcpyDtoDAsync"), creates = c.calls("cuMemCreate"), maps = c.calls("cuMemMap");
            try (VirtualMemoryBuffer b = r.modifyAllocation(a, 3 * g + 5)) {
                assertEquals(BufferOrigin.MOVED, b.origin());
                assertNotEquals(a.address(), b.address());
                assertEquals(2, b.chunkCount());
                assertEquals(0, c.calls("cuMemcpyDtoDAsync") - copies, "a move copies no byte");
                assertEquals(1, c.calls("cuMemCreate") - creates, "only the new chunk is created");
                assertEquals(2, c.calls("cuMemMap") - maps, "old chunk re-mapped + new chunk mapped");
                assertContent(b, 0, data);
                // One physical allocation behind both addresses: a write through the new
                // address shows at the old one.
                b.fill(0, 64, (byte) 0x11);
                byte[] viaOld = new byte[64];
                a.copyTo(0, viaOld, 0, 64);
                for (byte x : viaOld) assertEquals(0x11, x);
            }
            assertEquals(0x11, readByte(a, 63));
        }
    }

    @Test
    void severalChunksByRepeatedGrowthKeepDataAcrossChunkBoundaries() {
        long hint = GpuSupport.freeRegion(32 * g);
        try (VirtualMemoryResource r = GpuSupport.resourceAt(hint)) {
            List<VirtualMemoryBuffer> holders = new ArrayList<>();
            try {
                VirtualMemoryBuffer b = r.allocate(g);
                holders.add(b);
                byte[] first = pattern((int) g, 18);
                b.copyFrom(first);
                for (long size : new long[] {2 * g + 1, 5 * g, 6 * g}) {
                    b = r.modifyAllocation(b, size);
                    holders.add(b);
                    assertEquals(BufferOrigin.GROWN_IN_PLACE, b.origin(), "grow to " + size);
                    assertEquals(hint, b.address());
                }
                assertEquals(4, b.chunkCount());
                assertEquals(6 * g, b.mappedSize());
                assertEquals(g, b.chunkSize(0));
                assertEquals(2 * g, b.chunkSize(1));
                assertEquals(2 * g, b.chunkSize(2));
                assertEquals(g, b.chunkSize(3));
                assertContent(b, 0, first);
                byte[] across = pattern((int) (6 * g), 19);
                b.copyFrom(across);
                assertContent(b, 0, across);
                // A window straddling every chunk boundary, read back through the first alias.
                byte[] straddle = new byte[64];
                for (long boundary : new long[] {g, 3 * g, 5 * g}) {
                    b.copyTo(boundary - 32, straddle, 0, 64);
                    for (int i = 0; i < 64; i++) assertEquals(across[(int) (boundary - 32) + i], straddle[i]);
                }
                assertContent(holders.get(0), 0, java.util.Arrays.copyOf(across, (int) g));
            } finally {
                for (VirtualMemoryBuffer h : holders) h.close();
            }
        }
    }

    @Test
    void closeOrderFreesEachChunkWhenItsLastHolderGoes() {
        Map<String, Long> base = LiveObjects.now();
        long hint = GpuSupport.freeRegion(32 * g);
        DriverCounters k = driver.counters();
        VirtualMemoryResource r = GpuSupport.resourceAt(hint);
        VirtualMemoryBuffer a = r.allocate(g);                           // chunk 1 at hint
        VirtualMemoryBuffer b = r.modifyAllocation(a, 2 * g);            // + chunk 2, in place
        assertEquals(BufferOrigin.GROWN_IN_PLACE, b.origin());
        VirtualMemoryResource decoyResource = GpuSupport.resourceAt(hint + 2 * g);
        VirtualMemoryBuffer decoy = decoyResource.allocate(g);
        assertEquals(hint + 2 * g, decoy.address(), "the decoy sits right after the buffer");
        VirtualMemoryBuffer c = r.modifyAllocation(b, 3 * g);            // chunks 1, 2 re-mapped + chunk 3
        assertEquals(BufferOrigin.MOVED, c.origin());
        byte[] data = pattern((int) (3 * g), 20);
        c.copyFrom(data);
        decoy.close();
        decoyResource.close();
        // allocations: 1, 2, 3; mappings: a{1} b{+2} c{1',2',3}; reservations: r1, r2, r3
        assertEquals(base.get("allocations") + 3, k.liveAllocations());
        assertEquals(base.get("mappings") + 5, k.liveMappings());
        assertEquals(base.get("reservations") + 3, k.liveReservations());
        long unmaps = k.calls("cuMemUnmap"), releases = k.calls("cuMemRelease"), frees = k.calls("cuMemAddressFree");
        a.close(); // chunk 1's first mapping is still held by b
        assertEquals(base.get("mappings") + 5, k.liveMappings());
        assertEquals(0, k.calls("cuMemUnmap") - unmaps, "closing a still-shared alias unmaps nothing");
        b.close(); // the first mappings of chunks 1 and 2 go, and with them r1 and r2
        assertEquals(base.get("mappings") + 3, k.liveMappings());
        assertEquals(base.get("reservations") + 1, k.liveReservations());
        assertEquals(base.get("allocations") + 3, k.liveAllocations(), "c still maps all three chunks");
        assertEquals(2, k.calls("cuMemUnmap") - unmaps);
        assertEquals(2, k.calls("cuMemAddressFree") - frees);
        assertEquals(0, k.calls("cuMemRelease") - releases, "no allocation is released while c maps it");
        assertContent(c, 0, data);
        GpuSupport.assertHostCountersZero();
        c.close();
        assertEquals(5, k.calls("cuMemUnmap") - unmaps);
        assertEquals(3, k.calls("cuMemRelease") - releases);
        assertEquals(3, k.calls("cuMemAddressFree") - frees);
        r.close();
        LiveObjects.assertBack(base, "after the last holder closed");
    }

    @Test
    void closeIsRefusedWhileAnotherThreadIsInsideACopyThenSucceeds() throws Exception {
        int n = (int) Math.min(Integer.MAX_VALUE - 8, Math.max(g, 256L << 20) / g * g);
        ExecutorService pool = Executors.newSingleThreadExecutor();
        try {
            int refusals = 0;
            for (int round = 0; round < 10 && refusals == 0; round++) {
                VirtualMemoryBuffer b = resource.allocate(n);
                byte[] data = pattern(4096, 21 + round);
                b.copyFrom(0, data, 0, data.length);
                byte[] sink = new byte[n];
                AtomicBoolean stop = new AtomicBoolean();
                AtomicLong copies = new AtomicLong();
                CountDownLatch started = new CountDownLatch(1);
                Future<Throwable> copier = pool.submit(() -> {
                    started.countDown();
                    try {
                        while (!stop.get()) {
                            b.copyTo(0, sink, 0, n); // device to host, hundreds of MiB: milliseconds
                            copies.incrementAndGet();
                        }
                        return null;
                    } catch (Throwable t) {
                        return t;
                    }
                });
                assertTrue(started.await(10, TimeUnit.SECONDS));
                Thread.sleep(5); // the copier is now almost surely inside copyTo
                try {
                    b.close();
                    // The close landed between two copies: the copier's next call must see a
                    // closed buffer (and nothing may crash). Try again with a new buffer.
                    Throwable t = copier.get(30, TimeUnit.SECONDS);
                    assertTrue(t instanceof IllegalStateException && t.getMessage().contains("closed"),
                            "after close won, the copier saw: " + t);
                    continue;
                } catch (IllegalStateException refused) {
                    refusals++;
                    assertTrue(refused.getMessage().contains("in use"), refused.getMessage());
                }
                assertFalse(b.isClosed(), "a refused close leaves the buffer open");
                // Still fully usable, from this thread, while the copier goes on.
                b.fill(4096, 16, (byte) 0x77);
                assertContent(b, 0, data);
                stop.set(true);
                Throwable t = copier.get(60, TimeUnit.SECONDS);
                assertEquals(null, t, "the copier failed");
                assertTrue(copies.get() >= 1, "the copier completed at least one copy");
                b.close();
                assertTrue(b.isClosed());
            }
            assertEquals(1, refusals, "a close while another thread copied was refused in one of 10 rounds");
        } finally {
            pool.shutdownNow();
            assertTrue(pool.awaitTermination(60, TimeUnit.SECONDS));
        }
    }

    @Test
    void useAfterCloseThrowsWithoutCallingTheDriver() {
        VirtualMemoryBuffer b = resource.allocate(g);
        b.close();
        b.close();
        assertTrue(b.isClosed());
        long calls = driver.counters().totalCalls();
        IllegalStateException e = assertThrows(IllegalStateException.class, () -> b.fill((byte) 1));
        assertTrue(e.getMessage().contains("closed"), e.getMessage());
        assertThrows(IllegalStateException.class, b::address);
        assertThrows(IllegalStateException.class, () -> b.copyTo(new byte[1]));
        assertThrows(IllegalStateException.class, () -> b.copyFrom(new byte[1]));
        assertThrows(IllegalStateException.class, () -> resource.modifyAllocation(b, 4 * g));
        assertThrows(IllegalStateException.class, b::chunkCount);
        try (VirtualMemoryBuffer other = resource.allocate(0)) {
            assertThrows(IllegalStateException.class, () -> other.copyFrom(0, b, 0, 0));
        }
        assertEquals(calls, driver.counters().totalCalls(), "no driver call after close");
        assertEquals(g, b.size(), "size stays readable");
    }

    @Test
    void peerAccessOnASecondDevice() {
        GpuSupport.assumePeers(driver, 0, 1);
        VirtualMemoryResourceOptions withPeer = VirtualMemoryResourceOptions.builder().peers(1).build();
        try (VirtualMemoryResource r0 = VirtualMemoryResource.create(0, withPeer);
             VirtualMemoryResource r1 = VirtualMemoryResource.create(1,
                     VirtualMemoryResourceOptions.builder().peers(0).build());
             VirtualMemoryBuffer a = r0.allocate(2 * g);
             VirtualMemoryBuffer b = r1.allocate(2 * g)) {
            byte[] data = pattern((int) (2 * g), 22);
            a.copyFrom(data);
            b.copyFrom(0, a, 0, 2 * g); // device 0 memory into device 1 memory
            assertContent(b, 0, data);
            try (VirtualMemoryBuffer grown = r0.modifyAllocation(a, 4 * g)) {
                assertContent(grown, 0, data);
                grown.fill(2 * g, 2 * g, (byte) 9);
                b.copyFrom(0, grown, 2 * g, 2 * g); // the new chunk is peer-accessible too
                assertEquals(9, readByte(b, 2 * g - 1));
            }
        }
    }

    /**
     * Audit A3: unmap, release and address-free run on whichever thread drops the last
     * reference (the cleaner's, a fresh one) and that thread has no current context; cuvmm
     * makes the resource's context current for them. The first GPU run settles whether the
     * driver would have failed them without (a failure shows as cleanupFailures).
     */
    @Test
    void closeOnAFreshThreadTearsDownCleanly() throws Exception {
        DriverCounters k = driver.counters();
        long failures = k.cleanupFailures();
        long unmaps = k.calls("cuMemUnmap"), releases = k.calls("cuMemRelease"), frees = k.calls("cuMemAddressFree");
        VirtualMemoryBuffer b = resource.allocate(2 * g);
        b.fill(0, 2 * g, (byte) 3);
        AtomicReference<Throwable> thrown = new AtomicReference<>();
        Thread fresh = new Thread(() -> {
            try {
                b.close();
            } catch (Throwable t) {
                thrown.set(t);
            }
        }, "cuvmm-test-fresh-thread");
        fresh.start();
        fresh.join(TimeUnit.SECONDS.toMillis(60));
        assertFalse(fresh.isAlive(), "close on a fresh thread did not return");
        assertEquals(null, thrown.get(), "close on a fresh thread threw");
        assertEquals(1, k.calls("cuMemUnmap") - unmaps);
        assertEquals(1, k.calls("cuMemRelease") - releases);
        assertEquals(1, k.calls("cuMemAddressFree") - frees);
        assertEquals(failures, k.cleanupFailures(), "teardown calls that failed on a thread with no context");
    }

    private static byte readByte(VirtualMemoryBuffer b, long offset) {
        byte[] one = new byte[1];
        b.copyTo(offset, one, 0, 1);
        return one[0];
    }
}
