package org.cuvmm.ipc;

/**
 * {@link SharingServerMXBean} over a live server: every attribute reads a fresh snapshot (no
 * state of its own, no lock held beyond what {@link SharingServer#stats()} takes).
 * Package-private.
 */
final class SharingServerMXBeanImpl implements SharingServerMXBean {
    private final SharingServer server;

    SharingServerMXBeanImpl(SharingServer server) {
        this.server = server;
    }

    @Override
    public String getSocketPath() { return server.socketPath().toString(); }

    @Override
    public int getConnectionCount() { return server.connectionCount(); }

    @Override
    public int getLeaseCount() { return server.totalLeaseCount(); }

    @Override
    public long getIdsHeld() { return server.stats().idsHeld(); }

    @Override
    public long getFdsSent() { return server.stats().fdsSent(); }

    @Override
    public int getReleasedStillMappedAllocations() { return server.stats().releasedStillMappedAllocations(); }

    @Override
    public long getReleasedStillMappedBytes() { return server.stats().releasedStillMappedBytes(); }

    @Override
    public int getReleasedStillMappedConsumers() {
        int n = 0;
        for (SharingStats.ConnectionStats c : server.stats().connections()) {
            if (c.releasedIdsHeld() > 0) n++;
        }
        return n;
    }

    @Override
    public String[] getReleasedStillMapped() {
        java.util.List<SharingStats.ReleasedAllocation> list = server.stats().releasedStillMapped();
        String[] lines = new String[list.size()];
        for (int i = 0; i < lines.length; i++) {
            SharingStats.ReleasedAllocation r = list.get(i);
            lines[i] = "allocation " + r.allocationId() + ": " + r.bytes() + " bytes, released, still mapped by "
                    + r.consumers() + " consumer" + (r.consumers() == 1 ? "" : "s");
        }
        return lines;
    }
}
