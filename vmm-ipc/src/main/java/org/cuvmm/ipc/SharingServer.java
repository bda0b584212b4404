package org.cuvmm.ipc;

import java.io.IOException;
import java.nio.channels.ClosedChannelException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;

import org.cuvmm.BufferDescriptor;
import org.cuvmm.BufferLease;
import org.cuvmm.HandleType;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.internal.Checks;

/**
 * Publishes named {@link VirtualMemoryBuffer}s to other processes over a Unix-domain socket,
 * speaking the sharing protocol (docs/PROTOCOL.md).
 *
 * <pre>{@code
 * try (SharingServer server = SharingServer.builder(Path.of("/run/me/cuvmm.sock")).build()) {
 *     server.publish("weights", buffer);
 *     ...
 *     server.unpublish("weights");   // consumers get a DROP notice
 * }
 * }</pre>
 *
 * <ul>
 * <li>Two gates admit a client. First the socket file's mode: the kernel lets only processes
 *     that may write the file connect (default {@code 0600}: only this user;
 *     {@link Builder#socketFileMode(int)} and {@link Builder#socketFileGroup(String)} open it to
 *     a group or to everyone). Then each connection's uid ({@code SO_PEERCRED}) is checked
 *     against the allow-list (default: this process's uid); others get an ERROR
 *     {@code NOT_ALLOWED} and are closed. To admit another user, allow its uid <em>and</em>
 *     give it write access to the file.</li>
 * <li>A dead server's leftover socket is replaced, a live one is not ({@link FdServerSocket}).</li>
 * <li>Each ATTACH exports a fresh descriptor ({@link VirtualMemoryBuffer#exportDescriptor()};
 *     in version 2 only the chunks the connection does not hold, {@link
 *     VirtualMemoryBuffer#exportChunks(int...)}, none when it holds them all), sends it, then
 *     closes the server's copies of the fds; the server keeps no fd.</li>
 * <li>A lease is counted per (connection, attach) until the client sends RELEASE or its
 *     connection ends, whatever the reason (a killed consumer frees its leases).</li>
 * <li>{@link #unpublish(String)} never blocks: DROP notices are queued without waiting
 *     (best-effort) and sent by each connection's own thread.</li>
 * <li>A bad frame gets an ERROR; a client whose stream cannot be trusted is disconnected;
 *     nothing a client sends stops the server serving the others.</li>
 * <li>Limits ({@link ConnectionLimits}, each set on the {@link Builder}): connections at once
 *     (more get ERROR {@code TOO_MANY_CONNECTIONS}), leases per connection (an ATTACH beyond
 *     gets {@code TOO_MANY_LEASES}), a handshake timeout (no HELLO in time: ERROR
 *     {@code TIMEOUT}, closed) and an idle timeout for connections that hold no lease (a
 *     connection that holds one is never cut for silence).</li>
 * </ul>
 *
 * <p><b>Protocol versions.</b> Version 1 and version 2 are served side by side, chosen by each
 * client's HELLO ({@link Builder#maxProtocolVersion(int)} limits it). On a version-2
 * connection the server names each physical allocation it sends with an id of that
 * connection and sends its fd only the first time (or after the client's FORGET of it): a
 * consumer that keeps the memory mapped attaches again with no fd and the server exports
 * nothing. When the producer really releases an allocation a version-2 consumer holds, the
 * server sends an EVICT; until the consumer's FORGET, {@link #stats()} counts it as
 * "released, still mapped": the physical memory stays alive while any process maps it.
 * {@link Builder#registerMBean(boolean)} shows the same in JMX ({@link SharingServerMXBean}).
 *
 * <p>The server does not own published buffers. Each lease holds a {@link BufferLease} on
 * the published buffer, so the owner's {@code close()} refuses while a consumer holds it
 * (the message names the consumer; {@code closeWhenUnused()} closes it after the last
 * release). An ATTACH of a buffer the owner closed is answered with ERROR {@code INTERNAL}.
 * Thread-safe.
 */
public final class SharingServer implements AutoCloseable {
    /**
     * The logger, looked up when a record is written, not when this class initializes: a
     * public entry point's first use at the fd limit must not touch logging before the
     * first-use check ({@code org.cuvmm.internal.FirstUse}), since logging's first use there
     * breaks it, and {@code java.security}, for the life of the JVM (an independent probe).
     */
    private static System.Logger logger() {
        return System.getLogger(SharingServer.class.getName());
    }

    private final FdServerSocket listenSocket;
    private final Set<Integer> allowedUids;
    private final ConnectionLimits limits;
    private final IdleWatchdog watchdog;
    private final ConcurrentHashMap<String, Publication> published = new ConcurrentHashMap<>();
    private final Set<ServerConnection> connections = ConcurrentHashMap.newKeySet();
    private final CopyOnWriteArrayList<SharingListener> listeners = new CopyOnWriteArrayList<>();
    private final AtomicLong nextLeaseId = new AtomicLong(1);
    /** Leases granted and not yet ended (changed only at grant, after the queueing succeeded, and at release). */
    private final AtomicInteger grantedLeases = new AtomicInteger();
    private final AtomicLong nextConnectionId = new AtomicLong(1);
    /** fds queued in DESCRIPTORs ({@link SharingStats#fdsSent()}). */
    private final AtomicLong fdsSent = new AtomicLong();
    private final AtomicBoolean closed = new AtomicBoolean();
    /** Counted down when the first {@link #close()} has finished (later calls wait for it). */
    private final java.util.concurrent.CountDownLatch closeDone = new java.util.concurrent.CountDownLatch(1);
    /** Default of {@link Builder#maxIdsPerConnection(int)}. */
    public static final int DEFAULT_MAX_IDS_PER_CONNECTION = 4096;
    /** The most {@link #close()} waits for the accept and connection threads, in all. */
    static final long CLOSE_WAIT_MILLIS = 10_000;
    /**
     * The most {@link #close()} waits (within its {@link #CLOSE_WAIT_MILLIS}) for the connections'
     * sender threads to send what is queued without fds (DROPs) before it closes their sockets.
     */
    static final long CLOSE_FLUSH_MILLIS = 1_000;
    /** Test seam: the wait {@link #close()} uses ({@link #CLOSE_WAIT_MILLIS} unless a test shortens it). */
    static volatile long closeWaitMillis = CLOSE_WAIT_MILLIS;
    /**
     * Test seam, for tests only (null by default: a step then costs one volatile read). Asked
     * on the connection's reader at each step of a version-2 ATTACH that comes after its ids
     * were assigned: {@code "export"} (before the export), {@code "frame"} (export made, its
     * fds open, before the DESCRIPTOR is built) and {@code "queue"} (under the publication's
     * monitor, before the DESCRIPTOR is queued: must not block). True fails that step as the
     * real failure would: the first two as a failed export, the last as a full or closed send
     * queue (ERROR {@code INTERNAL} both). The predicate may also act (unpublish, say).
     */
    static volatile java.util.function.Predicate<String> failAttachAt;
    /**
     * Test seam, for tests only (null by default). Run on the connection's reader right after
     * an ATTACH's DESCRIPTOR was queued, under the publication's monitor: from there on a
     * writer may take and send it.
     */
    static volatile Runnable afterDescriptorQueued;
    private final Thread acceptThread;
    /**
     * The accept thread's reserve fd ({@link #openAcceptReserve}), opened by {@code build()}
     * before it binds, so that a process that reaches its fd limit right after {@code build()}
     * returns still has it (null only where {@code /dev/null} cannot be opened for another
     * reason); the accept thread owns it from its start (its loop closes it when it ends).
     * Closed by {@code build()} when the thread never started.
     */
    private final java.io.FileInputStream initialAcceptReserve;
    private final int maxIdsPerConnection;
    private final int maxProtocolVersion;
    /**
     * The core's release notice (EVICTs for allocations version-2 consumers hold), registered
     * at the first version-2 HELLO, so a server with no version-2 client costs the core
     * nothing; closed by {@link #close()}. Guarded by {@link #releaseLock}, which is held only
     * to register (no driver call, no I/O) and to take it for closing.
     */
    private AutoCloseable releaseRegistration;
    private final Object releaseLock = new Object();
    /** The bean's name while registered, else null; taken once by {@link #unregisterMBean()}. */
    private final java.util.concurrent.atomic.AtomicReference<javax.management.ObjectName> registeredName =
            new java.util.concurrent.atomic.AtomicReference<>();

    private SharingServer(Builder b, FdServerSocket socket, Set<Integer> allowedUids,
                          java.io.FileInputStream acceptReserve) {
        ErrorPathClasses.load(); // before any connection can need an ERROR at the fd limit
        this.listenSocket = socket;
        this.allowedUids = Collections.unmodifiableSet(new TreeSet<>(allowedUids));
        this.limits = new ConnectionLimits(b.maxConnections, b.maxLeasesPerConnection, b.handshakeTimeout,
                b.idleTimeout);
        this.watchdog = new IdleWatchdog(limits, socket.path().toString());
        listeners.addAll(b.listeners);
        this.maxIdsPerConnection = b.maxIdsPerConnection;
        this.maxProtocolVersion = b.maxProtocolVersion;
        this.acceptThread = new Thread(this::acceptLoop, "cuvmm-ipc-accept " + socket.path());
        acceptThread.setDaemon(true);
        this.initialAcceptReserve = acceptReserve;
    }

    /** A builder for a server listening at {@code socketPath}. */
    public static Builder builder(Path socketPath) { return new Builder(socketPath); }

    /** Options of a {@link SharingServer}. */
    public static final class Builder {
        private final Path path;
        private final Set<Integer> allowedUids = new TreeSet<>();
        private boolean uidsSet;
        private int maxConnections = ConnectionLimits.DEFAULT_MAX_CONNECTIONS;
        private int maxLeasesPerConnection = ConnectionLimits.DEFAULT_MAX_LEASES;
        private Duration handshakeTimeout = ConnectionLimits.DEFAULT_HANDSHAKE_TIMEOUT;
        private Duration idleTimeout = ConnectionLimits.DEFAULT_IDLE_TIMEOUT;
        private int fileMode = FdServerSocket.DEFAULT_FILE_MODE;
        private String fileGroup;
        private int backlog = FdServerSocket.DEFAULT_BACKLOG;
        private int maxIdsPerConnection = DEFAULT_MAX_IDS_PER_CONNECTION;
        private int maxProtocolVersion = Protocol.LATEST_VERSION;
        private final List<SharingListener> listeners = new ArrayList<>();
        private boolean registerMBean;

        private Builder(Path path) {
            this.path = FdSocket.checkPath(path);
        }

        /**
         * Replaces the allow-list with these uids (default: this process's effective uid only),
         * dropping what {@link #alsoAllowUids} added before. An empty list admits nobody.
         *
         * @throws IllegalArgumentException for a negative uid (nothing is changed)
         */
        public Builder allowUids(int... uids) {
            checkUids("allowUids", uids);
            allowedUids.clear();
            for (int u : uids) allowedUids.add(u);
            uidsSet = true;
            return this;
        }

        /**
         * Adds these uids to the allow-list, keeping what it holds: with no {@link #allowUids}
         * call, this process's effective uid and these. The usual way to admit another user
         * (who also needs the socket file opened to it: {@link #socketFileMode}).
         *
         * @throws IllegalArgumentException for a negative uid (nothing is added)
         */
        public Builder alsoAllowUids(int... uids) {
            checkUids("alsoAllowUids", uids);
            for (int u : uids) allowedUids.add(u);
            return this;
        }

        private static void checkUids(String method, int[] uids) {
            Checks.notNull("uids", uids);
            for (int u : uids) {
                if (u < 0) throw new IllegalArgumentException(method + ": uid " + u + " (expected: uids >= 0)");
            }
        }

        /**
         * Most connections served at once (default {@value ConnectionLimits#DEFAULT_MAX_CONNECTIONS});
         * more are sent ERROR {@code TOO_MANY_CONNECTIONS} and closed.
         */
        public Builder maxConnections(int n) {
            maxConnections = ConnectionLimits.checkAtLeastOne("maxConnections", n);
            return this;
        }

        /**
         * Most leases one connection may hold at once (default {@value ConnectionLimits#DEFAULT_MAX_LEASES});
         * an ATTACH beyond is answered with ERROR {@code TOO_MANY_LEASES} (the connection stays).
         */
        public Builder maxLeasesPerConnection(int n) {
            maxLeasesPerConnection = ConnectionLimits.checkAtLeastOne("maxLeasesPerConnection", n);
            return this;
        }

        /**
         * How long a connection may take from accept to HELLO (default 10 s; {@link Duration#ZERO}:
         * no limit). Past it the server sends ERROR {@code TIMEOUT} and closes the connection.
         */
        public Builder handshakeTimeout(Duration d) {
            handshakeTimeout = ConnectionLimits.checkTimeout("handshakeTimeout", d);
            return this;
        }

        /**
         * How long a connection that holds no lease may send nothing (default 5 min;
         * {@link Duration#ZERO}: no limit). Past it the server sends ERROR {@code TIMEOUT} and
         * closes the connection. A connection holding a lease is never timed out: a consumer
         * that maps memory and only reads it sends no frames.
         */
        public Builder idleTimeout(Duration d) {
            idleTimeout = ConnectionLimits.checkTimeout("idleTimeout", d);
            return this;
        }

        /**
         * The socket file's mode (default {@code 0600}): {@code 0660} or {@code 0666} let the
         * group or everyone connect, which another uid on {@link #allowUids} needs. Checked by
         * {@link FdServerSocket#checkFileMode(int)}.
         *
         * @throws IllegalArgumentException for a mode other than 0600, 0660, 0606 or 0666
         */
        public Builder socketFileMode(int mode) {
            fileMode = FdServerSocket.checkFileMode(mode);
            return this;
        }

        /**
         * The socket file's group (default: left as created, this process's group). With mode
         * {@code 0660}, members of that group can connect. {@link #build()} fails when the
         * group does not exist or this process may not give the file to it, and when the mode
         * gives the group no access (0600 or 0606: a group would then admit nobody).
         */
        public Builder socketFileGroup(String group) {
            Checks.notNull("group", group);
            if (group.isEmpty()) throw new IllegalArgumentException("socketFileGroup: \"\" (expected: a group name)");
            fileGroup = group;
            return this;
        }

        /**
         * The listen backlog: connections the kernel queues before they are accepted (default
         * {@value FdServerSocket#DEFAULT_BACKLOG}, capped by the kernel at
         * {@code net.core.somaxconn}). A client's non-blocking connect fails with
         * {@code EAGAIN} while it is full.
         */
        public Builder backlog(int n) {
            backlog = FdServerSocket.checkBacklog(n);
            return this;
        }

        /**
         * Most allocation ids one protocol-version-2 connection may hold at once (default
         * {@value SharingServer#DEFAULT_MAX_IDS_PER_CONNECTION}), released ones awaiting the
         * client's FORGET included: an ATTACH whose DESCRIPTOR would need more is answered with
         * ERROR {@code TOO_MANY_IDS} (the connection stays; the client FORGETs some and retries).
         */
        public Builder maxIdsPerConnection(int n) {
            maxIdsPerConnection = ConnectionLimits.checkAtLeastOne("maxIdsPerConnection", n);
            return this;
        }

        /**
         * The newest protocol version served (default {@value Protocol#LATEST_VERSION}; 1 serves
         * version 1 only: a version-2 HELLO is then answered with ERROR {@code BAD_VERSION}, as a
         * version-1 server does, and the client may say HELLO again in version 1).
         */
        public Builder maxProtocolVersion(int version) {
            if (version < Protocol.VERSION || version > Protocol.LATEST_VERSION) {
                throw new IllegalArgumentException("maxProtocolVersion: " + version + " (expected: "
                        + Protocol.VERSION + " to " + Protocol.LATEST_VERSION + ")");
            }
            maxProtocolVersion = version;
            return this;
        }

        /**
         * Adds a listener the server calls from its first connection on (connections, leases,
         * errors: {@link SharingListener}, which says on which threads); may be called more
         * than once, each listener called in the order added. Same as {@link
         * SharingServer#addListener} right after {@code build()}, without missing an early event.
         *
         * @throws NullPointerException when {@code l} is null (the message names {@code listener})
         */
        public Builder listener(SharingListener l) {
            listeners.add(Checks.notNull("listener", l));
            return this;
        }

        /**
         * Registers a {@link SharingServerMXBean} (connections, leases, ids, and the memory
         * "released, still mapped by N consumers") with the platform MBean server under {@link
         * SharingServer#objectName()}, unregistered by {@link SharingServer#close()}. Default
         * false: no JMX at all (the platform MBean server is never touched). {@link #build()}
         * throws {@code IllegalStateException} when another bean holds that name.
         */
        public Builder registerMBean(boolean register) {
            registerMBean = register;
            return this;
        }

        /**
         * Binds the socket and starts accepting.
         *
         * @throws IllegalArgumentException when a {@link #socketFileGroup} is set with a mode
         *     that gives the group no access (0600, 0606)
         * @throws IllegalStateException with {@link #registerMBean(boolean) registerMBean(true)},
         *     when a bean is already registered under the name (nothing is left bound)
         * @throws IOException when a live server answers at the path, or binding fails (also
         *     for the JVM's first socket at the open-file limit, see {@link FdSocket#connect};
         *     and with {@link #registerMBean(boolean) registerMBean(true)} when the JVM's first
         *     platform MBean server would be made at that limit)
         * @throws IllegalArgumentException when the system property {@code
         *     cuvmm.ipc.deferConsumption} is neither {@code true} nor {@code false} (checked
         *     here; a value set to something else later makes connections read plainly)
         */
        public SharingServer build() throws IOException {
            FdSocket.deferConsumptionAllowed(); // a bad value is refused here, not on each connection
            if (fileGroup != null && (fileMode & 0060) == 0) {
                // A group on a file it cannot write admits nobody: say so rather than ignore it.
                throw new IllegalArgumentException("socketFileGroup: '" + fileGroup + "' with socketFileMode "
                        + String.format("0%o", fileMode) + " gives the group no access (expected: socketFileMode 0660 "
                        + "or 0666 with a group)");
            }
            // Left at its default: this process's euid, and what alsoAllowUids added. Into a
            // copy: the builder keeps what its caller set, for a later build().
            Set<Integer> uids = new TreeSet<>(allowedUids);
            NativeIo.load(); // before geteuid, jnr's first use: refused at the fd limit, not broken for good
            if (!uidsSet) uids.add(NativeIo.posix().geteuid());
            if (registerMBean) {
                // Before anything is made: nothing to undo (FirstUse.prepareManagement says why).
                String shortage = org.cuvmm.internal.FirstUse.prepareManagement();
                if (shortage != null) {
                    throw new IOException("cannot build the server at " + path + " with registerMBean(true): the "
                            + "process is at its open-file limit (RLIMIT_NOFILE): " + shortage + "; close fds or "
                            + "raise the limit (ulimit -n), or build with registerMBean(false). Nothing was bound or "
                            + "registered, and the JDK's management library was not loaded (a load that ran out of "
                            + "fds would disable JMX for the JVM)");
                }
            }
            // The accept reserve before the socket: a build that left none would serve until the
            // limit and then leave connections unanswered (an independent probe, at 1 fd free).
            java.io.FileInputStream reserve = openAcceptReserveForBuild(path);
            FdServerSocket s;
            SharingServer server;
            try {
                s = FdServerSocket.bind(path, fileMode, fileGroup, backlog);
            } catch (IOException | RuntimeException | Error e) {
                closeQuietly(reserve);
                throw e;
            }
            try {
                server = new SharingServer(this, s, uids, reserve);
            } catch (RuntimeException | Error e) {
                closeQuietly(reserve);
                s.close();
                throw e;
            }
            try {
                if (registerMBean) server.registerMBean();
                server.acceptThread.start();
            } catch (RuntimeException | Error e) {
                // Nothing accepted yet: releases the socket, its file and the bean (the caller
                // never gets this server, so nothing else could close it).
                if (server.acceptThread.getState() == Thread.State.NEW) closeQuietly(server.initialAcceptReserve);
                server.close();
                throw e;
            }
            return server;
        }
    }

    // ---------------------------------------------------------------- owner API

    /**
     * Publishes {@code buffer} as {@code name}: from now on clients can attach to it.
     *
     * @throws IllegalArgumentException for a name that is empty or over 255 bytes of UTF-8,
     *     a buffer that cannot be exported (its resource's handle type is not POSIX_FD, it is
     *     empty, it covers imported memory, or it has more than 253 chunks)
     * @throws IllegalStateException when the name is already published, the buffer is
     *     closed, or the server is closed
     */
    public void publish(String name, VirtualMemoryBuffer buffer) {
        checkName(name);
        Checks.notNull("buffer", buffer);
        requireOpen();
        if (buffer.isClosed()) throw new IllegalStateException("publish '" + name + "': " + buffer + " is closed");
        if (!buffer.resource().isIpcEnabled()) {
            throw new IllegalArgumentException("publish '" + name + "': " + buffer + " belongs to a resource with handle "
                    + "type " + buffer.resource().options().handleType() + " (expected: " + HandleType.POSIX_FD
                    + ", so it can be exported)");
        }
        if (buffer.size() == 0) throw new IllegalArgumentException("publish '" + name + "': the buffer is empty");
        if (buffer.isImported()) {
            throw new IllegalArgumentException(org.cuvmm.internal.ErrorMessages.importedCannotBeExported(
                    "publish '" + name + "': " + buffer, ""));
        }
        if (buffer.chunkCount() > Protocol.MAX_FDS_PER_FRAME) {
            throw new IllegalArgumentException("publish '" + name + "': " + buffer + " has " + buffer.chunkCount()
                    + " chunks (expected: at most " + Protocol.MAX_FDS_PER_FRAME + ", the fds one frame can carry)");
        }
        Publication p = new Publication(name, buffer);
        Runnable seam = beforePublishPut;
        if (seam != null) seam.run();
        if (published.putIfAbsent(name, p) != null) {
            throw new IllegalStateException("publish '" + name + "': the name is already published; unpublish it first");
        }
        // A close() that began after requireOpen() may have cleared the names before this put:
        // looked at again, so no name stays published on a closed server (close() sets the
        // flag before it clears; a contract probe).
        if (closed.get()) {
            published.remove(name, p);
            requireOpen();
        }
    }

    /** Test seam: run by {@link #publish} after its checks, right before the name is put (a test closes the server there). Null: nothing. */
    static volatile Runnable beforePublishPut;

    /**
     * Withdraws {@code name}: new ATTACHes fail with UNKNOWN_NAME, and every client holding a
     * lease on it is sent a DROP notice. Never blocks: a notice that cannot be queued at once
     * (the connection's send queue is full) is sent as soon as room frees, unless its lease is
     * released first; a client that stopped reading gets it only if it reads again. Leases
     * stay counted until released.
     *
     * @return false when {@code name} was not published
     */
    public boolean unpublish(String name) {
        Checks.notNull("name", name);
        Publication p = published.remove(name);
        if (p == null) return false;
        for (Publication.Lease l : p.withdraw()) {
            if (!l.connection().drop(l.id(), name)) {
                log(System.Logger.Level.INFO, "DROP of '" + name + "' lease " + l.id() + " not delivered to "
                        + l.connection() + " (the connection is ending)", null);
            }
        }
        return true;
    }

    /** True when {@code name} is published. */
    public boolean isPublished(String name) { return published.containsKey(Checks.notNull("name", name)); }

    /** The published names, sorted. */
    public Set<String> publishedNames() { return Collections.unmodifiableSet(new TreeSet<>(published.keySet())); }

    /**
     * Leases held on the buffer published as {@code name} (0 when none is). A lease leaves the
     * count only after its hold on the buffer ended: while {@code name} stays published, once
     * this reads 0 every lease counted before has let go of the buffer, so its
     * {@code close()} is not refused for those. An
     * {@code ATTACH} being answered at that moment already holds the buffer before it is
     * counted. To close a buffer its consumers may still hold: {@link #unpublish} it (no new
     * lease starts; this then reads 0 at once, the name being gone), then close it with
     * {@code closeWhenUnused()}, or wait for the buffer's own {@code leaseCount()} to read 0.
     */
    public int leaseCount(String name) {
        Publication p = published.get(Checks.notNull("name", name));
        return p == null ? 0 : p.leaseCount();
    }

    /**
     * Every lease held by every client, on published and withdrawn buffers alike: leases
     * granted (their DESCRIPTOR queued) and not yet ended. An ATTACH being answered that
     * fails is never counted, so each value read is a true count. A lease leaves the count only
     * after its hold on the buffer ended (see {@link #leaseCount(String)}).
     */
    public int totalLeaseCount() { return grantedLeases.get(); }

    /** Connections being served now. */
    public int connectionCount() { return connections.size(); }

    /** The socket file's absolute path. */
    public Path socketPath() { return listenSocket.path(); }

    /**
     * The name of this server's {@link SharingServerMXBean}: {@code
     * org.cuvmm:type=SharingServer,name=<the socket path, quoted>}; registered only when the
     * builder asked for it ({@link Builder#registerMBean(boolean)}).
     */
    public javax.management.ObjectName objectName() {
        try {
            return new javax.management.ObjectName(org.cuvmm.pool.VirtualMemoryPool.JMX_DOMAIN
                    + ":type=SharingServer,name=" + javax.management.ObjectName.quote(socketPath().toString()));
        } catch (javax.management.MalformedObjectNameException e) {
            throw new IllegalStateException("socket path " + socketPath() + " makes no ObjectName: " + e, e);
        }
    }

    private void registerMBean() {
        javax.management.ObjectName name = objectName();
        try {
            java.lang.management.ManagementFactory.getPlatformMBeanServer().registerMBean(
                    new javax.management.StandardMBean(new SharingServerMXBeanImpl(this), SharingServerMXBean.class,
                            true), name);
        } catch (javax.management.InstanceAlreadyExistsException e) {
            throw new IllegalStateException("registerMBean: " + name + " is already registered (expected: no other "
                    + "registered bean for this socket path; close the server that registered it first)", e);
        } catch (javax.management.JMException e) {
            throw new IllegalStateException("registering " + name + " failed: " + e, e);
        }
        registeredName.set(name);
    }

    /** Never throws: a failure is logged (close goes on). No JMX call when nothing was registered. */
    private void unregisterMBean() {
        javax.management.ObjectName name = registeredName.getAndSet(null);
        if (name == null) return;
        try {
            java.lang.management.ManagementFactory.getPlatformMBeanServer().unregisterMBean(name);
        } catch (javax.management.JMException | RuntimeException | LinkageError e) {
            log(System.Logger.Level.WARNING, "unregistering " + name + " failed: " + e, e);
        }
    }

    /** Most allocation ids one version-2 connection may hold ({@link Builder#maxIdsPerConnection(int)}). */
    public int maxIdsPerConnection() { return maxIdsPerConnection; }

    /** The newest protocol version served ({@link Builder#maxProtocolVersion(int)}). */
    public int maxProtocolVersion() { return maxProtocolVersion; }

    /**
     * A snapshot of what each connection holds (leases, allocation ids) and of the
     * allocations the producer released that consumers still map ({@link SharingStats}: the
     * physical memory stays alive while any process maps it). Locks each connection's id
     * table briefly; no I/O.
     */
    public SharingStats stats() {
        List<SharingStats.ConnectionStats> conns = new ArrayList<>();
        java.util.Map<Long, long[]> released = new java.util.TreeMap<>(); // allocation id -> [bytes, consumers]
        List<ServerConnection> sorted = new ArrayList<>(connections);
        sorted.sort(java.util.Comparator.comparingLong(c -> c.id));
        for (ServerConnection c : sorted) {
            ConnectionIds ids = c.ids;
            int held = 0;
            int rel = 0;
            long relBytes = 0;
            if (ids != null) {
                held = ids.held();
                for (long[] r : ids.releasedHeld()) {
                    rel++;
                    relBytes += r[1];
                    released.computeIfAbsent(r[0], k -> new long[] {r[1], 0})[1]++;
                }
            }
            conns.add(new SharingStats.ConnectionStats(c.id, c.peer, c.clientName(), c.version(), c.leases.size(),
                    held, rel, relBytes));
        }
        List<SharingStats.ReleasedAllocation> list = new ArrayList<>();
        long bytes = 0;
        for (java.util.Map.Entry<Long, long[]> e : released.entrySet()) {
            list.add(new SharingStats.ReleasedAllocation(e.getKey(), e.getValue()[0], (int) e.getValue()[1]));
            bytes += e.getValue()[0];
        }
        return new SharingStats(conns, list, bytes, fdsSent.get());
    }

    /** The limits this server enforces on its clients. */
    public ConnectionLimits limits() { return limits; }

    /** Watchdog checks run so far (tests wait on it rather than on the clock). */
    long watchdogChecks() { return watchdog.checks.get(); }

    /** Checks waiting in the watchdog's queue (tests). */
    int watchdogQueued() { return watchdog.queued(); }

    /** The uids allowed to connect. */
    public Set<Integer> allowedUids() { return allowedUids; }

    /**
     * Adds a listener; events from then on reach it ({@link SharingListener}: on the server's
     * threads, after the listeners added before it). Thread-safe; a listener may add or remove
     * listeners.
     *
     * @throws NullPointerException when {@code l} is null (the message names {@code listener})
     */
    public void addListener(SharingListener l) { listeners.add(Checks.notNull("listener", l)); }

    /** Removes {@code l} (no effect when it is not added, or null); an event already being delivered may still reach it. Thread-safe. */
    public void removeListener(SharingListener l) { listeners.remove(l); }

    /** True once {@link #close()} began: no connection is accepted and nothing can be published from then on. */
    public boolean isClosed() { return closed.get(); }

    /**
     * Stops accepting, deletes the socket file, closes every connection (their leases end
     * with reason SERVER_CLOSED; frames without fds already queued, such as the DROPs of an
     * {@link #unpublish} just before, are sent first, unless the client stops reading for
     * 1 s; a DROP still parked because its client's queue was
     * full is not) and waits for the connection threads, at most
     * 10 s in all however many connections there are (one deadline
     * shared by every wait). Published buffers are not closed (they are the caller's).
     * Idempotent; a call made while another thread is closing waits (bounded the same way)
     * for that close to finish, so that once any {@code close()} returns the leases have
     * ended (unless the deadline passed).
     */
    @Override
    public void close() {
        if (!closed.compareAndSet(false, true)) {
            try {
                closeDone.await(closeWaitMillis + 1000, java.util.concurrent.TimeUnit.MILLISECONDS);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            return;
        }
        try {
            unregisterMBean();
            listenSocket.close();
            watchdog.close();
            AutoCloseable notices;
            synchronized (releaseLock) {
                notices = releaseRegistration;
                releaseRegistration = null;
            }
            try {
                if (notices != null) notices.close();
            } catch (Exception e) {
                log(System.Logger.Level.WARNING, "unregistering the release notice failed: " + e, e);
            }
            long deadline = System.nanoTime() + java.util.concurrent.TimeUnit.MILLISECONDS.toNanos(closeWaitMillis);
            try {
                joinUntil(acceptThread, deadline);
                // Each connection ends as one that ends on its own does (ServerConnection.end()):
                // its sender thread sends what is queued without fds (a DROP that unpublish just
                // offered, a reply) and then closes the socket. Closing the socket at once lost
                // such a DROP whenever its writer had not sent it yet (cuvmm serve unpublishes
                // right before it closes). A writer still blocked after the grace (a client that
                // does not read) has its socket closed under it below.
                for (ServerConnection c : connections) c.out.finish();
                long flushDeadline = Math.min(deadline, System.nanoTime()
                        + java.util.concurrent.TimeUnit.MILLISECONDS.toNanos(Math.min(CLOSE_FLUSH_MILLIS, closeWaitMillis / 2)));
                for (ServerConnection c : connections) c.out.joinUntil(flushDeadline);
                for (ServerConnection c : connections) c.close();
                for (ServerConnection c : new ArrayList<>(connections)) c.joinUntil(deadline);
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
            published.clear();
        } finally {
            closeDone.countDown();
        }
    }

    /**
     * Joins {@code t} until {@code deadline} ({@link System#nanoTime()}); returns at once once it
     * has passed, or when {@code t} is this thread: {@link #close()} called from a listener runs
     * on a connection's reader (or the accept thread), which ends after the listener returns
     * (joining itself waited the whole close timeout, 10 s: an independent probe).
     */
    static void joinUntil(Thread t, long deadline) throws InterruptedException {
        if (t == Thread.currentThread()) return;
        long left = deadline - System.nanoTime();
        if (left > 0) t.join(Math.max(1, java.util.concurrent.TimeUnit.NANOSECONDS.toMillis(left)));
    }

    @Override
    public String toString() {
        return "SharingServer[" + listenSocket.path() + ", " + published.size() + " published, " + connections.size()
                + " connections" + (closed.get() ? ", closed" : "") + "]";
    }

    // ---------------------------------------------------------------- connections

    /** How often one repeated accept failure is logged (see {@link #acceptLoop}). */
    private static final long ACCEPT_FAILURE_LOG_NANOS = java.util.concurrent.TimeUnit.SECONDS.toNanos(10);

    private void acceptLoop() {
        AcceptFailures failures = new AcceptFailures();
        java.io.FileInputStream reserve = initialAcceptReserve;
        try {
            while (!closed.get()) {
                // A reserve lost (taken back by the refusal, or not reopened because another
                // thread took the fd) is opened again as soon as an fd is free.
                if (reserve == null) reserve = openAcceptReserve();
                FdSocket s = null;
                try {
                    try {
                        s = listenSocket.accept();
                    } catch (ClosedChannelException e) {
                        break;
                    } catch (IOException e) {
                        if (closed.get()) break;
                        if (reserve != null && isFdLimit(e)) {
                            // Linux's accept fails with EMFILE before it takes a connection off
                            // the queue (whether one waits or not): without this the client's
                            // HELLO waited unanswered for its whole timeout (an independent probe).
                            closeQuietly(reserve);
                            reserve = null;
                            s = acceptWithReserveGivenUp(failures);
                            if (s == null) continue;
                            // Still at the limit only if the reserve cannot be had back now: the
                            // wait for this connection may have been long, and fds freed or the
                            // limit raised meanwhile (a review: a server that met the limit once
                            // refused the next connection, whenever it came).
                            reserve = openAcceptReserve();
                            if (reserve == null) {
                                FdSocket refused = s;
                                s = null;
                                refuseAtFdLimit(refused, failures);
                                continue;
                            }
                        } else {
                            // EMFILE and friends: do not spin, and do not flood the log either (a
                            // server at its fd limit failed every 50 ms: about 1,200 lines a minute).
                            String line = failures.lineFor(String.valueOf(e.getMessage()));
                            if (line != null) log(System.Logger.Level.WARNING, "accept on " + listenSocket.path()
                                    + " failed: " + line, null);
                            sleepQuietly(50);
                            continue;
                        }
                    }
                    admit(s);
                } catch (Throwable t) {
                    // Anything else (an Error from a class or a resource that cannot load at the fd
                    // limit, a connection's threads that cannot start): this is the only thread that
                    // accepts, so it ends only with the server (an independent probe saw it die for
                    // good on an Error). Throttled as accept failures are.
                    if (s != null) s.close();
                    if (closed.get()) break;
                    String line = failures.lineFor(String.valueOf(t));
                    if (line != null) log(System.Logger.Level.ERROR, "accepting a connection on " + listenSocket.path()
                            + " failed (the server goes on accepting): " + line, t);
                    sleepQuietly(50);
                }
            }
        } finally {
            closeQuietly(reserve);
        }
    }

    /**
     * The accept thread's reserve: one fd ({@code /dev/null}) it holds to give up at the fd
     * limit, so that it can still take one connection off the queue and refuse it
     * ({@link #refuseAtFdLimit}). Null when none can be opened now (the loop tries again
     * after each failed accept).
     */
    private static java.io.FileInputStream openAcceptReserve() {
        try {
            return new java.io.FileInputStream("/dev/null");
        } catch (IOException | RuntimeException e) {
            return null;
        }
    }

    /**
     * {@link #openAcceptReserve} for {@code build()}: at the fd limit the build fails here,
     * before it binds, rather than serve without a reserve; null (no reserve, as before) only
     * where {@code /dev/null} cannot be opened for another reason.
     */
    private static java.io.FileInputStream openAcceptReserveForBuild(Path path) throws IOException {
        try {
            return new java.io.FileInputStream("/dev/null");
        } catch (java.io.FileNotFoundException e) {
            // /dev/null is there, so the open failed for want of an fd (not matched by words:
            // strerror's text follows the locale).
            if (!new java.io.File("/dev/null").exists()) return null;
            throw NativeIo.explainedFdShortage("cannot bind " + path + ": no file descriptor is free for the server's "
                    + "accept reserve (the one fd it gives up at the limit to refuse a connection)", e);
        }
    }

    private static void closeQuietly(java.io.Closeable c) {
        if (c == null) return;
        try {
            c.close();
        } catch (IOException ignored) {
            // /dev/null: its close does not fail, and the fd is released either way
        }
    }

    /** Whether accept failed for want of an fd ({@code EMFILE}, or {@code ENFILE} system-wide). */
    private static boolean isFdLimit(IOException e) {
        return String.valueOf(e.getMessage()).contains("Too many open files");
    }

    /**
     * At the fd limit, with the reserve given up: waits for the next connection (the reserve's
     * fd number is free for it). Null when the accept failed (logged, throttled; the loop goes
     * on) or the server closed.
     */
    private FdSocket acceptWithReserveGivenUp(AcceptFailures failures) {
        try {
            return listenSocket.accept();
        } catch (IOException e) {
            if (closed.get()) return null;
            String line = failures.lineFor(String.valueOf(e.getMessage()));
            if (line != null) log(System.Logger.Level.WARNING, "accept on " + listenSocket.path() + " failed: " + line,
                    null);
            sleepQuietly(50);
            return null;
        }
    }

    /**
     * Sends connection {@code s}, accepted at the fd limit, ERROR {@code TOO_MANY_CONNECTIONS}
     * (request id 0) naming the limit, and closes it, without reading its HELLO, as the
     * connection limit's refusal does; closed whatever fails. Its listeners hear {@code refused}.
     */
    private void refuseAtFdLimit(FdSocket s, AcceptFailures failures) {
        String why = "the server is at its open-file limit (" + NativeIo.openFileLimitText() + ") and cannot take "
                + "another connection; try again later (the server's owner can raise the limit, ulimit -n, or close "
                + "connections)";
        PeerCredentials peer = null;
        try {
            peer = s.peerCredentials();
        } catch (IOException | RuntimeException e) {
            // refused all the same; its listeners just do not hear of it
        } finally {
            refuse(s, ErrorCode.TOO_MANY_CONNECTIONS, why); // closes s
        }
        String line = failures.lineFor("refused a connection: at the open-file limit");
        if (line != null) log(System.Logger.Level.WARNING, "accept on " + listenSocket.path() + ": " + line + " ("
                + NativeIo.openFileLimitText() + ")", null);
        if (peer != null) {
            PeerCredentials p = peer;
            fire(l -> l.refused(p, why));
        }
    }

    /**
     * The accept loop's log throttle: the same failure is logged again at most every 10 s,
     * with how often it repeated meanwhile. The last failure is kept across successes: at the
     * fd limit accepts can alternate with EMFILE, and each would otherwise be logged at once.
     */
    private static final class AcceptFailures {
        private String last;
        private long lastLogged;
        private int repeats;

        /** The line to log for failure {@code what} now, or null when it is a repeat to count only. */
        String lineFor(String what) {
            long now = System.nanoTime();
            if (what.equals(last) && now - lastLogged < ACCEPT_FAILURE_LOG_NANOS) {
                repeats++;
                return null;
            }
            String line = what + (repeats > 0 && what.equals(last) ? " (and " + repeats + " more times since the last "
                    + "report)" : "");
            last = what;
            lastLogged = now;
            repeats = 0;
            return line;
        }
    }

    /**
     * The receive slice of a connection whose reads defer consumption: an idle connection's
     * reader takes what it peeked off the queue after at most this long, then waits in {@code
     * poll} (one wake-up per idle spell, none after).
     */
    static final int DEFERRED_SLICE_MS = 20;

    private void admit(FdSocket s) {
        PeerCredentials peer;
        try {
            peer = s.peerCredentials();
        } catch (IOException e) {
            s.close();
            return;
        }
        if (!allowedUids.contains(peer.uid())) {
            String why = "uid " + peer.uid() + " is not allowed to use this server (allowed uids: " + allowedUids
                    + "); ask its owner to add yours";
            refuse(s, ErrorCode.NOT_ALLOWED, why);
            fire(l -> l.refused(peer, why));
            return;
        }
        if (connections.size() >= limits.maxConnections()) {
            String why = "too many connections (the server serves at most " + limits.maxConnections()
                    + "); try again later";
            refuse(s, ErrorCode.TOO_MANY_CONNECTIONS, why);
            fire(l -> l.refused(peer, why));
            return;
        }
        boolean defer;
        try {
            defer = FdSocket.deferConsumptionAllowed();
        } catch (IllegalArgumentException e) {
            defer = false; // build() checked the value; one set wrong since then reads plainly
        }
        if (defer) {
            // Reads peek and take their bytes off the queue later (FdSocket): the client's
            // reader is not woken by each request read. The slice bounds how long an idle
            // connection holds peeked bytes (FdSocket#deferConsumption says why).
            try {
                s.setReceiveSlice(DEFERRED_SLICE_MS);
                s.deferConsumption();
            } catch (IOException e) {
                s.close();
                return;
            }
        }
        ServerConnection c = new ServerConnection(this, nextConnectionId.getAndIncrement(), s, peer);
        connections.add(c);
        if (closed.get()) {
            connections.remove(c);
            s.close();
            return;
        }
        fire(l -> l.connected(peer)); // never throws: a listener's failure is logged
        try {
            c.start();
        } catch (Throwable t) {
            // Its threads could not all start: not counted against the limit for good, its
            // sender (if it started) woken to end, and the listeners told it is gone.
            connections.remove(c);
            c.out.finish();
            fire(l -> l.disconnected(peer, ""));
            throw t;
        }
        watchdog.watch(c);
    }

    /** One ERROR on a fresh socket (its send buffer is empty: this does not block), then close. */
    private static void refuse(FdSocket s, ErrorCode code, String why) {
        try {
            FrameIO.write(s, new Messages.Error(code, why), 0, null);
        } catch (IOException | RuntimeException ignored) {
            // the peer has gone: nothing to tell
        } finally {
            s.close();
        }
    }

    void attach(ServerConnection c, int requestId, String name) {
        Publication p = published.get(name);
        if (p == null) {
            c.reply(requestId, ErrorCode.UNKNOWN_NAME, "no buffer is published as '" + name + "' (published: "
                    + publishedNames() + ")");
            return;
        }
        if (c.leases.size() >= limits.maxLeasesPerConnection()) {
            int holding = c.leases.size();
            c.reply(requestId, ErrorCode.TOO_MANY_LEASES, "this connection holds " + holding + " lease"
                    + (holding == 1 ? "" : "s") + ", the most one connection may hold on this server; release some "
                    + "first (RELEASE)");
            return;
        }
        // Wait for room outside the publication's lock, so unpublish never waits behind a slow client.
        c.out.awaitRoom(2);
        // The hold and the export (a driver call) are made outside the publication's lock;
        // withdrawal is re-checked under it, and what was made is undone if it came first.
        long id = nextLeaseId.getAndIncrement();
        BufferLease held;
        BufferDescriptor d = null;
        byte[] frame;
        Publication.Lease lease;
        SendQueue.Item item;
        try {
            // Held first: from here the owner's close() refuses, naming this consumer.
            // The holder's text is made only when a message names it (a refused close): no
            // string built per round (issue 11).
            held = p.buffer.leaseDescribedBy(() -> "consumer " + c.describe() + ", lease " + id + " of '" + name + "' on "
                    + listenSocket.path());
        } catch (RuntimeException e) {
            refuseAttach(c, requestId, name, p, "lease", e);
            return;
        }
        ConnectionIds ids = c.ids;
        ConnectionIds.Assignment assigned = null;
        try {
            if (ids == null) {
                d = p.export();
                frame = c.encode(new Messages.Descriptor(id, Protocol.HANDLE_TYPE_POSIX_FD, d.size(), d.sizes()),
                        requestId);
            } else {
                // Version 2: fds (and the export's driver calls) only for allocations this
                // connection does not hold yet.
                VirtualMemoryBuffer b = p.buffer;
                Publication.ChunkLayout layout = p.layout(); // read once per publication
                long[] sizes = layout.sizes();
                int n = sizes.length;
                assigned = ids.assign(layout.allocationIds(), sizes);
                if (assigned == null) {
                    p.endHold(held);
                    int fresh = ids.freshNeeded(layout.allocationIds());
                    int heldIds = ids.held();
                    c.reply(requestId, ErrorCode.TOO_MANY_IDS, "attach '" + name + "' needs " + fresh
                            + " new allocation id" + (fresh == 1 ? "" : "s") + " (the buffer has " + n
                            + " chunk" + (n == 1 ? "" : "s") + ", each named by an id) but this connection holds "
                            + heldIds + " id" + (heldIds == 1 ? "" : "s") + " and may hold at most "
                            + maxIdsPerConnection + " on this server; "
                            + "FORGET ids no longer needed first");
                    return;
                }
                int[] flags = new int[n];
                int[] needed = new int[assigned.fdCount()];
                for (int i = 0, k = 0; i < n; i++) {
                    if (assigned.sendFd()[i]) {
                        flags[i] = Protocol.CHUNK_FLAG_FD;
                        needed[k++] = i;
                    }
                }
                injectFailure("export");
                if (needed.length > 0) d = p.exportChunks(needed);
                injectFailure("frame");
                frame = c.encode(new Messages.DescriptorV2(id, Protocol.HANDLE_TYPE_POSIX_FD, b.size(), sizes,
                        assigned.ids(), flags), requestId);
            }
            lease = new Publication.Lease(id, p, c, held);
            item = new SendQueue.Item(frame, d == null ? null : d.fds(), d, lease); // onSent: lease.run()
        } catch (RuntimeException | Error e) {
            // Nothing was queued: the fds, the fresh ids and the hold go (the ATTACH gives no id).
            // An Error too: it ends the connection (the reader's catch), and the hold would
            // otherwise make the owner's close() refuse for ever.
            if (d != null) d.close();
            if (assigned != null) ids.rollback(assigned);
            p.endHold(held);
            if (e instanceof Error) throw e;
            refuseAttach(c, requestId, name, p, "export", e);
            return;
        }
        int count = 0;
        ErrorCode failure = null;
        String why = null;
        synchronized (p) {
            if (!p.addLeaseUnlessWithdrawn(lease)) {
                failure = ErrorCode.UNKNOWN_NAME;
                why = withdrawn(name);
            } else if (!c.addLeaseUnlessEnding(id, lease)) {
                // The watchdog is cutting this connection (it held no lease): no lease on it.
                p.forgetLease(lease);
                failure = ErrorCode.TIMEOUT;
                why = "the connection is being closed by the server's idle or handshake timeout";
            } else {
                // Counted and queued (tryOffer never blocks nor closes anything) under the lock
                // unpublish takes: a DROP then always follows the DESCRIPTOR of its lease. The
                // server-wide counts move inside tryOffer (descriptorQueued), before any writer
                // can take the DESCRIPTOR: counted after it, a DESCRIPTOR already being sent was
                // not counted yet (DescriptorCountedTest).
                if (!(assigned != null && injected("queue")) && c.out.tryOffer(item)) {
                    Runnable queued = afterDescriptorQueued;
                    if (queued != null) queued.run();
                    count = p.leaseCount();
                } else {
                    c.leases.remove(id);
                    p.forgetLease(lease);
                    failure = ErrorCode.INTERNAL;
                    why = "the server's send queue for this connection is full or closed";
                }
            }
        }
        // Sends the DESCRIPTOR on this thread when nothing else is being sent (or hands it to
        // the connection's sender thread); releases it if the writer died meanwhile.
        c.out.flush();
        if (failure != null) {
            if (d != null) d.close(); // never queued
            if (assigned != null) ids.rollback(assigned);
            p.endHold(held);
            // The watchdog's cut closes the send queue right behind its TIMEOUT (id 0): no
            // reply of this ATTACH's own, which only a race with that close could have let
            // out, before the connection's TIMEOUT (PROTOCOL.md section 8).
            if (failure != ErrorCode.TIMEOUT) c.reply(requestId, failure, why);
            return;
        }
        if (listeners.isEmpty()) return; // no event object per round when nobody listens
        LeaseEvent e = new LeaseEvent(name, lease.id(), c.peer, c.clientName(), LeaseEvent.Reason.ATTACHED, count);
        fire(l -> l.attached(e));
    }

    /**
     * A connection's send queue took a DESCRIPTOR (its {@link SendQueue#onQueued}, under the
     * queue's lock, before any writer can take it): the lease it grants is counted, and its fds.
     */
    void descriptorQueued(SendQueue.Item descriptor) {
        grantedLeases.incrementAndGet();
        int[] fds = descriptor.fds();
        if (fds != null) fdsSent.addAndGet(fds.length);
    }

    /**
     * Answers an ATTACH whose hold or export failed: UNKNOWN_NAME when the owner withdrew the
     * name meanwhile (then closed the buffer, say: the failure is the withdrawal's, as the
     * later check of section 13.7 would have said), else INTERNAL with the failure's text (an
     * independent soak probe saw INTERNAL "buffer is closed" for an ATTACH racing unpublish).
     * {@code step} says which step failed: "lease" (the buffer could not be held: closed, say)
     * or "export" (an independent client read a closed buffer's refusal as a failed export).
     */
    private static void refuseAttach(ServerConnection c, int requestId, String name, Publication p, String step,
                                     Throwable e) {
        if (p.isWithdrawn()) {
            c.reply(requestId, ErrorCode.UNKNOWN_NAME, withdrawn(name));
        } else {
            c.reply(requestId, ErrorCode.INTERNAL, "cannot " + step + " '" + name + "': " + e.getMessage());
        }
    }

    /** UNKNOWN_NAME's text for a name withdrawn during its ATTACH (PROTOCOL.md section 4, code 8). */
    private static String withdrawn(String name) {
        return "'" + name + "' was withdrawn by its owner";
    }

    /** {@link #failAttachAt}: true when a test fails {@code step}. */
    private static boolean injected(String step) {
        java.util.function.Predicate<String> f = failAttachAt;
        return f != null && f.test(step);
    }

    /** {@link #failAttachAt}: throws at {@code step} when a test asks for it. */
    private static void injectFailure(String step) {
        if (injected(step)) throw new IllegalStateException("failure injected by a test at '" + step + "'");
    }

    void release(ServerConnection c, int requestId, long leaseId) {
        Publication.Lease pending = c.leases.get(leaseId);
        if (pending != null) awaitSent(c, pending);
        // Looked up, not removed: only this connection's reader removes its leases (here and in
        // releaseLeases), so nothing else can end this one meanwhile.
        Publication.Lease lease = c.leases.get(leaseId);
        if (lease == null) {
            c.reply(requestId, ErrorCode.UNKNOWN_LEASE, "lease " + Long.toUnsignedString(leaseId)
                    + " is not held by this connection (never granted, already released, or another connection's)");
            return;
        }
        // Before the RELEASED is queued: a DROP of this lease not sent by then never goes
        // (the writer asks dropWanted() as it takes it), so none follows the RELEASED.
        lease.markReleasedByClient();
        int left = endLease(c, leaseId, lease);
        c.send(requestId, new Messages.Released(leaseId));
        if (listeners.isEmpty()) return;
        LeaseEvent e = new LeaseEvent(lease.publication().name, leaseId, c.peer, c.clientName(),
                LeaseEvent.Reason.RELEASED, left);
        fire(l -> l.released(e));
    }

    /**
     * Ends {@code lease} of {@code c} (only the connection's reader calls this): its hold on
     * the buffer first, then the counts, in that order so that a count of 0 (total, the
     * publication's, or the connection's in {@code stats()}) means no lease holds the buffer.
     * A hold whose end throws (the owner's {@code closeWhenUnused} teardown failing here) is
     * logged: the lease is over and uncounted all the same, and the caller goes on (RELEASED
     * is sent, the other leases of an ending connection end). Returns the leases left on
     * the publication.
     */
    private int endLease(ServerConnection c, long leaseId, Publication.Lease lease) {
        try {
            return lease.publication().removeLease(lease);
        } catch (RuntimeException t) {
            log(System.Logger.Level.WARNING, "ending lease " + Long.toUnsignedString(leaseId) + " of '"
                    + lease.publication().name + "' for " + c + " failed", t);
            return lease.publication().leaseCount();
        } finally {
            c.leases.remove(leaseId);
            grantedLeases.decrementAndGet();
        }
    }

    /**
     * A RELEASE may arrive before its lease's DESCRIPTOR has left (a client that pipelines
     * ATTACH and RELEASE, predicting the id): the lease must not end while fds for it can
     * still be sent, so the reader waits until the writer sent it or stopped (then it never
     * will). Like a reply's {@code put}, this slows down only a client that does not read.
     */
    private static void awaitSent(ServerConnection c, Publication.Lease lease) {
        try {
            while (!lease.awaitSent(50)) {
                if (c.out.isDead()) return;
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }

    /**
     * FORGET (version 2): all or nothing. Every id held: forgotten, answered with FORGOTTEN;
     * else ERROR {@code UNKNOWN_ID} naming the first id not held, nothing forgotten.
     */
    void forget(ServerConnection c, int requestId, long[] idList) {
        long bad = c.ids.forget(idList);
        if (bad != 0) {
            c.reply(requestId, ErrorCode.UNKNOWN_ID, "id " + Long.toUnsignedString(bad) + " is not held by this "
                    + "connection (never given to it, or already forgotten); nothing was forgotten");
            return;
        }
        c.send(requestId, new Messages.Forgotten(idList.length));
    }

    /**
     * Registers for the core's release notice unless done (called by a connection's reader at
     * a version-2 HELLO, before its HELLO_OK: every allocation it will hold is released after
     * this, so none is missed). Not after {@link #close()}.
     */
    void ensureReleaseNotices() {
        synchronized (releaseLock) {
            if (releaseRegistration == null && !closed.get()) {
                releaseRegistration = CoreSupport.addReleaseListener(this::allocationReleased);
            }
        }
    }

    /**
     * The core's release notice: allocation {@code allocationId} was really released. Each
     * version-2 connection that holds it is sent an EVICT (offered without blocking: this
     * runs on the core's notice thread {@code cuvmm-release-notices}, see {@code
     * Driver.addAllocationReleaseListener}, which must not block). Quick: a short lock per
     * connection.
     */
    private void allocationReleased(long allocationId) {
        for (ServerConnection c : connections) {
            ConnectionIds ids = c.ids;
            if (ids == null) continue;
            long id = ids.released(allocationId);
            if (id != 0) c.evict(new long[] {id});
        }
    }

    /** The connection's reader has stopped: its leases end. */
    void releaseLeases(ServerConnection c) {
        LeaseEvent.Reason reason = closed.get() ? LeaseEvent.Reason.SERVER_CLOSED : LeaseEvent.Reason.DISCONNECTED;
        for (long id : c.leases.keys()) {
            Publication.Lease lease = c.leases.get(id); // removed after the hold ended, as in release()
            if (lease == null) continue;
            int left = endLease(c, id, lease); // a failure is logged: the other leases still end
            LeaseEvent e = new LeaseEvent(lease.publication().name, id, c.peer, c.clientName(), reason, left);
            fire(l -> l.released(e));
        }
    }

    /** The connection's threads are done and its socket is closed. */
    void connectionEnded(ServerConnection c) {
        watchdog.unwatch(c);
        connections.remove(c);
        fire(l -> l.disconnected(c.peer, c.clientName()));
    }

    void fireError(ServerConnection c, ErrorCode code, String message, boolean sentByClient) {
        fire(l -> l.error(c.peer, c.clientName(), code, message, sentByClient));
    }

    private void fire(java.util.function.Consumer<SharingListener> event) {
        for (SharingListener l : listeners) {
            try {
                event.accept(l);
            } catch (RuntimeException | Error e) {
                // An Error too (an assertion, a class that cannot load at the fd limit): a
                // listener runs on the server's own threads, which must go on.
                log(System.Logger.Level.WARNING, "a SharingListener threw " + e, e);
            }
        }
    }

    /** Test seam: run by {@link #log} before it logs (tests make it throw, as a broken logger does). Null: nothing. */
    static volatile Runnable beforeLog;

    /**
     * Logs, and never throws: a log line that cannot be written must not stop the thread that
     * writes it (an independent probe at the fd limit: java.util.logging's formatter, loading
     * the time-zone data for the first time, threw an Error on EMFILE and the accept thread
     * died for good). What cannot be logged goes to standard error, unformatted, or nowhere.
     */
    void log(System.Logger.Level level, String message, Throwable t) {
        try {
            Runnable seam = beforeLog;
            if (seam != null) seam.run();
            if (t == null) logger().log(level, message);
            else logger().log(level, message, t);
        } catch (Throwable logFailed) {
            try {
                System.err.println("cuvmm-ipc " + level + ": " + message + (t == null ? "" : " (" + t + ")")
                        + " [the logger failed: " + logFailed + "]");
            } catch (Throwable ignored) {
                // nowhere left to say it
            }
        }
    }

    private void requireOpen() {
        if (closed.get()) throw new IllegalStateException("the server at " + listenSocket.path() + " is closed");
    }

    /** The UTF-8 byte count of {@code s}, counted without encoding it (an unpaired surrogate counts as '?', as getBytes writes it). */
    static int utf8Length(String s) {
        int n = 0;
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            if (c < 0x80) {
                n++;
            } else if (c < 0x800) {
                n += 2;
            } else if (Character.isHighSurrogate(c) && i + 1 < s.length() && Character.isLowSurrogate(s.charAt(i + 1))) {
                n += 4;
                i++;
            } else if (Character.isSurrogate(c)) {
                n++; // encoded as '?'
            } else {
                n += 3;
            }
        }
        return n;
    }

    static void checkName(String name) {
        Checks.notNull("name", name);
        int n = utf8Length(name);
        if (n < 1 || n > Protocol.MAX_NAME_BYTES) {
            throw new IllegalArgumentException("name: \"" + Messages.truncate(name, 64) + "\" is " + n
                    + " bytes of UTF-8 (expected: 1 to " + Protocol.MAX_NAME_BYTES + ")");
        }
    }

    private static void sleepQuietly(long ms) {
        try {
            Thread.sleep(ms);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
    }
}
