package org.cuvmm;

import java.util.LinkedHashMap;
import java.util.Map;

import org.cuvmm.internal.jni.NativeApi;

/**
 * Counters kept by the native layer: calls per driver entry point (either driver), live
 * objects of cuvmm's object model (either driver), and the host driver's own view of live
 * allocations, reservations, mappings and memfds (0 on the cuda driver). Tests and
 * benchmarks use them to check that work was (or was not) done; they are not a timing tool.
 */
public final class DriverCounters {
    static final DriverCounters INSTANCE = new DriverCounters();

    private DriverCounters() {}

    /** Calls made to {@code entryPoint} ("cuMemCreate") since start or the last {@link #resetCalls()}. */
    public long calls(String entryPoint) {
        int n = NativeApi.entry_count();
        for (int i = 0; i < n; i++) {
            if (NativeApi.entry_name(i).equals(entryPoint)) return NativeApi.call_count(i);
        }
        throw new IllegalArgumentException("entryPoint: " + entryPoint + " (expected: one of " + calls().keySet() + ")");
    }

    /** All call counters, in the order of the driver table. */
    public Map<String, Long> calls() {
        int n = NativeApi.entry_count();
        Map<String, Long> m = new LinkedHashMap<>();
        for (int i = 0; i < n; i++) m.put(NativeApi.entry_name(i), NativeApi.call_count(i));
        return m;
    }

    /** Sum of all call counters. */
    public long totalCalls() {
        long sum = 0;
        for (long v : calls().values()) sum += v;
        return sum;
    }

    public void resetCalls() { NativeApi.reset_call_counts(); }

    /** Host driver: allocations alive (created or imported, not yet released and unmapped). */
    public long hostAllocations() { return NativeApi.host_live(0); }
    /** Host driver: reserved address ranges not yet freed. */
    public long hostReservations() { return NativeApi.host_live(1); }
    /** Host driver: mapped chunks. */
    public long hostMappings() { return NativeApi.host_live(2); }
    /** Host driver: memfds it holds open (one per live allocation). */
    public long hostMemfds() { return NativeApi.host_live(3); }

    /** cuvmm's allocation boxes alive (either driver). */
    public long liveAllocations() { return NativeApi.object_live(0); }
    public long liveReservations() { return NativeApi.object_live(1); }
    public long liveMappings() { return NativeApi.object_live(2); }
    /** Ranges alive: one per distinct buffer extent (aliases of one allocate share none). */
    public long liveRanges() { return NativeApi.object_live(3); }

    /** Undo calls (unmap, release, free) that failed during cleanup; each was also logged. */
    public long cleanupFailures() { return NativeApi.cleanup_failures(); }

    @Override
    public String toString() {
        return "DriverCounters[allocations=" + liveAllocations() + ", reservations=" + liveReservations()
                + ", mappings=" + liveMappings() + ", ranges=" + liveRanges() + ", host allocations="
                + hostAllocations() + ", host reservations=" + hostReservations() + ", host mappings="
                + hostMappings() + ", host memfds=" + hostMemfds() + "]";
    }
}
