package org.cuvmm.ipc;

import java.time.Duration;

import org.cuvmm.internal.Checks;

/**
 * What one {@link SharingServer} allows its clients, so that no peer can exhaust it: how many
 * connections at once, how many leases one connection may hold, how long a connection may
 * take to say HELLO, and how long one that holds no lease may stay silent. Each refusal is
 * an ERROR code of docs/PROTOCOL.md section 4 ({@code TOO_MANY_CONNECTIONS},
 * {@code TOO_MANY_LEASES}, {@code TIMEOUT}). A timeout of {@link Duration#ZERO} disables it.
 *
 * @param maxConnections connections served at once (default {@value #DEFAULT_MAX_CONNECTIONS})
 * @param maxLeasesPerConnection leases one connection may hold at once (default {@value #DEFAULT_MAX_LEASES})
 * @param handshakeTimeout time from accept to HELLO (default 10 s)
 * @param idleTimeout time a connection holding no lease may send nothing (default 5 min); a
 *     connection that holds a lease is never idle, however long it stays silent
 */
public record ConnectionLimits(int maxConnections, int maxLeasesPerConnection, Duration handshakeTimeout,
                               Duration idleTimeout) {
    /** Default of {@code maxConnections}. */
    public static final int DEFAULT_MAX_CONNECTIONS = 256;
    /** Default of {@code maxLeasesPerConnection}. */
    public static final int DEFAULT_MAX_LEASES = 1024;
    /** Default of {@code handshakeTimeout}. */
    public static final Duration DEFAULT_HANDSHAKE_TIMEOUT = Duration.ofSeconds(10);
    /** Default of {@code idleTimeout}. */
    public static final Duration DEFAULT_IDLE_TIMEOUT = Duration.ofMinutes(5);

    /** The defaults. */
    public static final ConnectionLimits DEFAULTS = new ConnectionLimits(DEFAULT_MAX_CONNECTIONS, DEFAULT_MAX_LEASES,
            DEFAULT_HANDSHAKE_TIMEOUT, DEFAULT_IDLE_TIMEOUT);

    /** @throws IllegalArgumentException naming the limit and the value when one is out of range */
    public ConnectionLimits {
        checkAtLeastOne("maxConnections", maxConnections);
        checkAtLeastOne("maxLeasesPerConnection", maxLeasesPerConnection);
        checkTimeout("handshakeTimeout", handshakeTimeout);
        checkTimeout("idleTimeout", idleTimeout);
    }

    static int checkAtLeastOne(String name, int n) {
        if (n < 1) throw new IllegalArgumentException(name + ": " + n + " (expected: >= 1)");
        return n;
    }

    static Duration checkTimeout(String name, Duration d) {
        Checks.notNull(name, d);
        if (d.isNegative()) {
            throw new IllegalArgumentException(name + ": " + d + " (expected: a positive duration, or Duration.ZERO "
                    + "for none)");
        }
        try {
            d.toNanos();
        } catch (ArithmeticException e) {
            throw new IllegalArgumentException(name + ": " + d + " (expected: at most about 292 years)");
        }
        return d;
    }
}
