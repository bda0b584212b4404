package org.cuvmm.ipc;

/**
 * A lease opened or ended on a {@link SharingServer}.
 *
 * @param name the published name
 * @param leaseId the lease id sent to the client
 * @param peer the client process
 * @param clientName the name the client gave in HELLO
 * @param reason what happened
 * @param leaseCount leases on that published buffer after this event
 */
public record LeaseEvent(String name, long leaseId, PeerCredentials peer, String clientName, Reason reason,
                         int leaseCount) {
    /** What happened to the lease. */
    public enum Reason {
        /** The client attached. */
        ATTACHED,
        /** The client sent RELEASE. */
        RELEASED,
        /** The client's connection ended (it closed, crashed or was killed) while holding the lease. */
        DISCONNECTED,
        /** The server closed while the client held the lease. */
        SERVER_CLOSED
    }

    @Override
    public String toString() {
        return reason + " '" + name + "' lease " + leaseId + " by " + (clientName.isEmpty() ? "?" : clientName) + " ("
                + peer + "), leases now " + leaseCount;
    }
}
