package org.cuvmm.ipc;

import java.util.ArrayList;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Set;

import org.cuvmm.BufferLease;
import org.cuvmm.VirtualMemoryBuffer;

/** A buffer published under a name, and its leases. Guarded by its own monitor. Package-private. */
final class Publication {
    /**
     * One consumer's hold on a publication: (connection, DESCRIPTOR). {@code bufferLease}
     * makes the owner's {@code close()} of the buffer refuse, naming the consumer, until
     * the lease ends.
     */
    record Lease(long id, Publication publication, ServerConnection connection, BufferLease bufferLease) {}

    final String name;
    final VirtualMemoryBuffer buffer;
    private final Set<Lease> leases = new LinkedHashSet<>();
    private boolean withdrawn;

    Publication(String name, VirtualMemoryBuffer buffer) {
        this.name = name;
        this.buffer = buffer;
    }

    synchronized boolean isWithdrawn() { return withdrawn; }

    synchronized int leaseCount() { return leases.size(); }

    /** Called with this monitor held. */
    void addLease(Lease l) {
        assert Thread.holdsLock(this);
        leases.add(l);
    }

    /** Removes {@code l} and ends its hold on the buffer; returns the leases left. */
    synchronized int removeLease(Lease l) {
        leases.remove(l);
        l.bufferLease().close();
        return leases.size();
    }

    /** Marks withdrawn; returns the leases held at that moment. */
    synchronized List<Lease> withdraw() {
        withdrawn = true;
        return new ArrayList<>(leases);
    }
}
