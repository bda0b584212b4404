package org.cuvmm.ipc;

import java.util.List;

import org.cuvmm.internal.Checks;

/**
 * A snapshot of a {@link SharingServer}'s sharing state ({@link SharingServer#stats()}).
 *
 * <p><b>Released, still mapped.</b> When the producer really releases a physical allocation
 * (pool eviction, {@code trim()}, close of the buffer or the pool) that a protocol-version-2
 * consumer still holds, the server sends that consumer an EVICT and counts the allocation
 * here until the consumer's FORGET. The physical memory stays alive while any process maps
 * it: the producer's own accounting (its pool's stats and MXBean) no longer shows those
 * bytes, but they are not free until every consumer named in {@code consumers} has
 * unmapped them (or died). A consumer that holds a lease on them unmaps after its RELEASE.
 * The server counts a consumer until its FORGET or the end of its connection: one whose
 * connection ended first (closed, or cut by the idle timeout while it held ids but no lease)
 * is no longer counted, though it may still map the memory until it reads that end (a Java
 * client then unmaps its idle cached entries; an attachment still open keeps its mapping
 * until closed). JMX shows the same figures: {@link SharingServerMXBean}.
 *
 * @param connections one entry per connection being served
 * @param releasedStillMapped the allocations released by the producer and still held by
 *     consumers, one entry per allocation
 * @param releasedStillMappedBytes the sum of their sizes (each allocation counted once,
 *     however many consumers map it)
 * @param fdsSent fds this server has queued in DESCRIPTORs since it started (version 1: one
 *     per chunk per ATTACH; version 2: one per allocation the connection did not hold)
 */
public record SharingStats(List<ConnectionStats> connections, List<ReleasedAllocation> releasedStillMapped,
                           long releasedStillMappedBytes, long fdsSent) {
    /** @throws NullPointerException when a list (or an element) is null; the message names the list */
    public SharingStats {
        connections = copyNamed(connections, "connections");
        releasedStillMapped = copyNamed(releasedStillMapped, "releasedStillMapped");
    }

    /** An unmodifiable copy of {@code list}; a null list or element throws NPE naming {@code what}. */
    private static <T> List<T> copyNamed(List<T> list, String what) {
        Checks.notNull(what, list);
        for (int i = 0; i < list.size(); i++) {
            if (list.get(i) == null) throw new NullPointerException(what + ": element " + i + " is null (expected: no null element)");
        }
        return List.copyOf(list);
    }

    /** Allocations released by the producer and still mapped by consumers. */
    public int releasedStillMappedAllocations() { return releasedStillMapped.size(); }

    /** The ids all connections hold (version-2 connections; 0 for version 1). */
    public long idsHeld() {
        long n = 0;
        for (ConnectionStats c : connections) n += c.idsHeld();
        return n;
    }

    /**
     * One connection.
     *
     * @param connectionId the server's number for it (in accept order)
     * @param peer the client's pid, uid and gid
     * @param clientName the name the client gave in HELLO ("" before it)
     * @param version the connection's protocol version (0 before HELLO)
     * @param leases leases held: granted (their DESCRIPTOR queued) and not yet ended. An ATTACH
     *     whose DESCRIPTOR could not be queued (the connection's send queue full or closing)
     *     may be counted for the moment before it is refused; {@link
     *     SharingServer#totalLeaseCount()} and {@link SharingServer#leaseCount(String)} never
     *     count one
     * @param idsHeld allocation ids the connection holds (version 2): each one a physical
     *     allocation the consumer keeps mapped or keeps an fd of; the server sends no fd for it
     * @param releasedIdsHeld of those, the ones whose allocation the producer released (EVICT
     *     sent, FORGET not yet received)
     * @param releasedBytesHeld their bytes
     */
    public record ConnectionStats(long connectionId, PeerCredentials peer, String clientName, int version, int leases,
                                  int idsHeld, int releasedIdsHeld, long releasedBytesHeld) {}

    /**
     * A physical allocation the producer released while consumers still hold it.
     *
     * @param allocationId the producer's allocation id (process-unique, from the core)
     * @param bytes its size
     * @param consumers how many connections still hold it: the memory stays alive until all
     *     of them have unmapped it
     */
    public record ReleasedAllocation(long allocationId, long bytes, int consumers) {}
}
