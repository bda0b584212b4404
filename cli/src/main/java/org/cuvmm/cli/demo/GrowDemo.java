package org.cuvmm.cli.demo;

import java.util.ArrayDeque;
import java.util.Arrays;
import java.util.Deque;

import org.cuvmm.BufferOrigin;
import org.cuvmm.CudaException;
import org.cuvmm.Device;
import org.cuvmm.Driver;
import org.cuvmm.DriverCounters;
import org.cuvmm.HandleType;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.VirtualMemoryResourceOptions;
import org.cuvmm.cli.ByteSize;
import org.cuvmm.ipc.internal.BytePattern;

/**
 * The single-process half of the demo: allocate, grow in place, grow again with the next
 * range taken so the buffer has to move, verifying every byte at each step, then close
 * everything and check that nothing is left alive.
 *
 * <p>Both outcomes are forced honestly. In place: the buffer is placed (by address hint) at
 * the start of a range that was just free, so the range after it is free too. Move: a decoy
 * buffer is placed (by address hint) exactly where the grown buffer ends. Hints are only
 * hints; when one is not honoured the demo says so instead of claiming the outcome.
 */
public final class GrowDemo implements DemoPart {
    private static final long MiB = 1L << 20;
    private static final long FIRST = 3 * MiB;
    private static final long GROWN = 7 * MiB;
    private static final long MOVED = 12 * MiB;
    private static final int MARKER = 4096;

    private final int device;

    public GrowDemo(int device) {
        this.device = device;
    }

    @Override
    public String title() {
        return "grow in place, then move, in one process (device " + device + ")";
    }

    @Override
    public void run(DemoRun run) {
        DriverCounters counters = Driver.get().counters();
        long[] liveBefore = live(counters);
        Deque<AutoCloseable> open = new ArrayDeque<>();
        try {
            steps(run, open, counters, liveBefore);
        } catch (CudaException | IllegalArgumentException | IllegalStateException e) {
            run.fail("the demo stopped: " + e.getMessage());
        } finally {
            closeAll(open, run);
        }
    }

    private void steps(DemoRun run, Deque<AutoCloseable> open, DriverCounters counters, long[] liveBefore) {
        Device dev = Driver.get().device(device);
        // Exportable like a default resource where the device allows it; else plain memory.
        VirtualMemoryResourceOptions options = VirtualMemoryResourceOptions.builder()
                .handleType(dev.supportsPosixFileDescriptorHandles() ? HandleType.POSIX_FD : HandleType.NONE)
                .build();

        // 1. Find a free range: allocate a large probe, note its address, give it back.
        long hint;
        long granularity;
        try (VirtualMemoryResource probes = VirtualMemoryResource.create(device, options)) {
            granularity = probes.granularity();
            warmUp(probes);
            long probeSize = roundUp(Math.max(64 * MiB, 16 * granularity), granularity);
            long t = System.nanoTime();
            try (VirtualMemoryBuffer probe = probes.allocate(probeSize)) {
                long nanos = System.nanoTime() - t;
                hint = probe.address();
                run.step(DemoStep.of("probe for a free range", probe.origin().name(), probe, nanos,
                        "closed again; its address is the hint for the buffer", true));
            }
        }

        // 2. Allocate at the start of that free range and fill it with the pattern.
        VirtualMemoryResource resource = VirtualMemoryResource.create(device, options.toBuilder().addressHint(hint).build());
        open.push(resource);
        long t = System.nanoTime();
        VirtualMemoryBuffer first = resource.allocate(FIRST);
        long nanos = System.nanoTime() - t;
        open.push(first);
        BytePattern.fillHashed(first, 0, FIRST);
        String bad = BytePattern.hashMismatch(first, 0, FIRST);
        String placed = first.address() == hint ? "at the hint" : "NOT at the hint";
        run.step(DemoStep.of("allocate " + ByteSize.format(FIRST), first.origin().name(), first, nanos,
                bad != null ? bad : placed + "; " + ByteSize.format(FIRST) + " written, verified", bad == null));
        if (first.address() != hint) {
            run.note(String.format("the address hint 0x%x was not honoured (the buffer is at 0x%x): the range after "
                    + "it may not be free, so the first grow may not happen in place", hint, first.address()));
        }

        // 3. Grow: the range after the buffer is free, so this should map one chunk there.
        VirtualMemoryBuffer grown = grow(run, open, resource, first, FIRST, GROWN, BufferOrigin.GROWN_IN_PLACE);

        // 4. Take the range right after the grown buffer with a decoy.
        long end = grown.address() + grown.mappedSize();
        VirtualMemoryResource decoys = VirtualMemoryResource.create(device, options.toBuilder().addressHint(end).build());
        open.push(decoys);
        t = System.nanoTime();
        VirtualMemoryBuffer decoy = decoys.allocate(granularity);
        nanos = System.nanoTime() - t;
        open.push(decoy);
        boolean blocking = decoy.address() == end;
        run.step(DemoStep.of("place a decoy after it", decoy.origin().name(), decoy, nanos,
                blocking ? "at the grown buffer's end: the next range is taken" : "NOT at the grown buffer's end", true));
        if (!blocking) {
            run.note(String.format("the decoy's address hint 0x%x was not honoured (it is at 0x%x): nothing stops the "
                    + "next grow from happening in place", end, decoy.address()));
        }

        // 5. Grow again: the next range is taken, so every chunk is re-mapped into a new range.
        VirtualMemoryBuffer moved = grow(run, open, resource, grown, GROWN, MOVED, BufferOrigin.MOVED);
        if (moved.origin() == BufferOrigin.MOVED) checkSameMemory(run, grown, moved);

        // 6. Close everything (newest first) and check that nothing is left alive.
        t = System.nanoTime();
        while (!open.isEmpty()) close(open.pop());
        nanos = System.nanoTime() - t;
        long[] liveAfter = live(counters);
        boolean clean = Arrays.equals(liveBefore, liveAfter);
        run.step(DemoStep.withoutBuffer("close all", "CLOSED", nanos, clean
                ? "no allocation, reservation or mapping left alive"
                : "left alive [allocations, reservations, mappings, ranges; host: allocations, "
                        + "reservations, mappings, memfds]: " + Arrays.toString(
                        difference(liveAfter, liveBefore)), clean));
    }

    /**
     * A few untimed allocate/grow/close rounds, so that the times in the table are those of
     * the calls and not of class loading and the first native calls (tens of milliseconds).
     */
    private static void warmUp(VirtualMemoryResource resource) {
        for (int i = 0; i < 3; i++) {
            try (VirtualMemoryBuffer small = resource.allocate(1);
                 VirtualMemoryBuffer larger = resource.modifyAllocation(small, 2 * resource.granularity())) {
                larger.copyFrom(0, new byte[1], 0, 1);
            }
        }
    }

    /** Grows {@code from} to {@code newSize}; verifies its old bytes, then writes and verifies the new ones. */
    private static VirtualMemoryBuffer grow(DemoRun run, Deque<AutoCloseable> open, VirtualMemoryResource resource,
                                            VirtualMemoryBuffer from, long oldSize, long newSize, BufferOrigin wanted) {
        long t = System.nanoTime();
        VirtualMemoryBuffer grown = resource.modifyAllocation(from, newSize);
        long nanos = System.nanoTime() - t;
        open.push(grown);
        String bad = BytePattern.hashMismatch(grown, 0, oldSize);
        if (bad == null) {
            BytePattern.fillHashed(grown, oldSize, newSize - oldSize);
            bad = BytePattern.hashMismatch(grown, 0, newSize);
        }
        boolean sameAddress = grown.address() == from.address();
        if (bad == null && (grown.origin() == BufferOrigin.GROWN_IN_PLACE) != sameAddress) {
            bad = grown.origin() + " but the address " + (sameAddress ? "did not change" : "changed");
        }
        String outcome = grown.origin() == wanted ? wanted.name() : grown.origin() + " (wanted " + wanted + ")";
        run.step(DemoStep.of("grow to " + ByteSize.format(newSize), outcome, grown, nanos, bad != null ? bad
                : "old " + ByteSize.format(oldSize) + " intact, new " + ByteSize.format(newSize - oldSize)
                        + " written, verified", bad == null));
        if (grown.origin() != wanted) {
            run.note("the grow to " + ByteSize.format(newSize) + " came out " + grown.origin() + ", not " + wanted
                    + " as this demo tried to force; its data was still verified");
        }
        return grown;
    }

    /**
     * A move re-maps the same physical allocations: a write through the moved buffer must
     * show through the buffer it was grown from, which still maps them at the old address.
     */
    private static void checkSameMemory(DemoRun run, VirtualMemoryBuffer before, VirtualMemoryBuffer moved) {
        byte[] marker = new byte[MARKER];
        for (int i = 0; i < MARKER; i++) marker[i] = (byte) ~BytePattern.hashAt(i);
        long t = System.nanoTime();
        moved.copyFrom(0, marker, 0, MARKER);
        byte[] seen = new byte[MARKER];
        before.copyTo(0, seen, 0, MARKER);
        long nanos = System.nanoTime() - t;
        boolean shared = Arrays.equals(marker, seen);
        BytePattern.fillHashed(moved, 0, MARKER);
        String bad = BytePattern.hashMismatch(before, 0, MARKER);
        run.step(new DemoStep("write moved, read old", shared ? "SAME MEMORY" : "DIFFERENT MEMORY", before.address(),
                MARKER, -1, -1, nanos, !shared
                        ? "a write through the moved buffer did not show at the old address: bytes were copied"
                        : bad != null ? bad : "4 KiB written at the new address read back at the old one: no copy",
                shared && bad == null));
    }

    private static void closeAll(Deque<AutoCloseable> open, DemoRun run) {
        while (!open.isEmpty()) {
            try {
                close(open.pop());
            } catch (RuntimeException e) {
                run.fail("closing after a failure: " + e.getMessage());
            }
        }
    }

    private static void close(AutoCloseable c) {
        try {
            c.close();
        } catch (RuntimeException e) {
            throw e;
        } catch (Exception e) {
            throw new IllegalStateException(e);
        }
    }

    /** Live objects of cuvmm's object model (either driver), then the host driver's own (0 on cuda). */
    private static long[] live(DriverCounters c) {
        return new long[] {c.liveAllocations(), c.liveReservations(), c.liveMappings(), c.liveRanges(),
                c.hostAllocations(), c.hostReservations(), c.hostMappings(), c.hostMemfds()};
    }

    private static long[] difference(long[] a, long[] b) {
        long[] d = new long[a.length];
        for (int i = 0; i < a.length; i++) d[i] = a[i] - b[i];
        return d;
    }

    private static long roundUp(long size, long granularity) {
        return (size + granularity - 1) / granularity * granularity;
    }
}
