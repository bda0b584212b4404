package org.cuvmm.ipc;

/**
 * Events of a {@link SharingServer}, for logs and command-line tools. Called on the server's
 * threads (the connection's own reader thread for lease events): return quickly. An
 * exception (or error) thrown by a listener is logged and ignored. A listener may call
 * {@link SharingServer#close()} (say, when the last lease ends): it does not wait for the
 * calling thread, which ends once the listener returns.
 */
public interface SharingListener {
    /** A client connected and passed the credentials check. */
    default void connected(PeerCredentials peer) {}

    /** A client attached: a lease was counted and its DESCRIPTOR queued. */
    default void attached(LeaseEvent event) {}

    /**
     * A lease ended: the client released it, or its connection ended (see {@link
     * LeaseEvent#reason()}). For a RELEASE it is called after the RELEASED is sent (as {@link
     * #attached} after the DESCRIPTOR is queued), so the client's {@code Attachment.close()} may
     * return before this runs; the counts ({@code leaseCount}, {@code totalLeaseCount}, {@code
     * stats()}) already say the lease ended when the RELEASED is sent.
     */
    default void released(LeaseEvent event) {}

    /** A connection was refused (uid not allowed: NOT_ALLOWED; too many connections: TOO_MANY_CONNECTIONS). */
    default void refused(PeerCredentials peer, String reason) {}

    /**
     * A client sent a bad frame (answered with an ERROR, except a malformed ERROR, which is
     * never answered), its connection timed out (code TIMEOUT: the ERROR is sent and the
     * connection closed), or it sent an ERROR of its own ({@code sentByClient}).
     */
    default void error(PeerCredentials peer, String clientName, ErrorCode code, String message, boolean sentByClient) {}

    /** A connection ended (after its leases were released). */
    default void disconnected(PeerCredentials peer, String clientName) {}
}
