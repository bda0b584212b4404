package org.cuvmm.ipc;

/**
 * The JMX view of a {@link SharingServer}, registered by {@link
 * SharingServer.Builder#registerMBean(boolean) registerMBean(true)} under {@code
 * org.cuvmm:type=SharingServer,name=<the socket path, quoted>} ({@link
 * SharingServer#objectName()}) and unregistered when the server closes. JConsole and VisualVM
 * show it in the MBeans tab.
 *
 * <p><b>Released, still mapped.</b> The producer's pool bean ({@code
 * org.cuvmm.pool.VirtualMemoryPoolMXBean}) drops memory the pool released at once; an
 * allocation a protocol-version-2 consumer still maps stays alive until that consumer unmaps
 * it. This bean shows those: {@code ReleasedStillMappedBytes}, the allocations and, for each,
 * how many consumers still map it (EVICT sent, FORGET not yet received). Each attribute reads
 * a fresh {@link SharingServer#stats()} snapshot when asked; see {@link SharingStats} for the
 * meaning of each value, and for what the server cannot see (a consumer whose connection
 * ended is no longer counted).
 */
public interface SharingServerMXBean {
    /** The socket path the server listens on. */
    String getSocketPath();

    /** Connections being served ({@link SharingServer#connectionCount()}). */
    int getConnectionCount();

    /** Leases held, all connections together ({@link SharingServer#totalLeaseCount()}). */
    int getLeaseCount();

    /** Allocation ids the version-2 connections hold ({@link SharingStats#idsHeld()}). */
    long getIdsHeld();

    /** fds queued in DESCRIPTORs since the server started ({@link SharingStats#fdsSent()}). */
    long getFdsSent();

    /** Allocations the producer released that consumers still map ({@link SharingStats#releasedStillMappedAllocations()}). */
    int getReleasedStillMappedAllocations();

    /** Their bytes, each allocation counted once ({@link SharingStats#releasedStillMappedBytes()}). */
    long getReleasedStillMappedBytes();

    /** Connections that still map at least one of them. */
    int getReleasedStillMappedConsumers();

    /**
     * One line per such allocation, in allocation-id order: {@code "allocation 7: 2097152 bytes,
     * released, still mapped by 2 consumers"}.
     */
    String[] getReleasedStillMapped();
}
