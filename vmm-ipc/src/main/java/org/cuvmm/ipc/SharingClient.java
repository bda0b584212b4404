package org.cuvmm.ipc;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.file.Path;
import java.time.Duration;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CopyOnWriteArrayList;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.ThreadPoolExecutor;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.function.Consumer;

import org.cuvmm.BufferDescriptor;
import org.cuvmm.HandleType;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.internal.Checks;

/**
 * Attaches to buffers a {@link SharingServer} publishes (docs/PROTOCOL.md).
 *
 * <pre>{@code
 * try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
 *      SharingClient client = SharingClient.connect(Path.of("/run/me/cuvmm.sock"));
 *      Attachment a = client.attach("weights", resource)) {
 *     a.buffer().copyTo(0, bytes, 0, bytes.length);
 * }
 * }</pre>
 *
 * <p><b>Threads.</b> One thread at a time reads the socket: the holder of the client's read
 * token, which dispatches every frame it reads (replies by request id, DROP, EVICT) and
 * never writes. A thread that made a request reads its own reply when the token is free (it
 * <i>leads</i>: no other thread wakes to hand the reply over); while another thread leads it
 * waits for that thread to complete its reply or to give the token up. The client's reader
 * thread reads only once 1 ms has passed since the last request sent or reply read by a
 * caller (then it waits in {@code recvmsg} for DROP, EVICT and replies nobody waits for): a
 * DROP or EVICT that arrives while no thread leads is read about 1 ms after the last
 * request (plus scheduling), and at most about 17 ms after the last of a long series of
 * requests (the reader thread looks less often while callers keep it out: docs/PROTOCOL.md
 * section 12); a leading thread reads it at once. A leading thread waits for the next frame
 * in the {@code recvmsg} itself, in slices of 20 ms (the socket's {@code SO_RCVTIMEO}; no
 * {@code poll} before it), so its timeout holds and an interrupt is seen within about one slice (20 ms plus the kernel's tick; a signal ends a slice early), and reads a frame's rest until its timeout at most: when the server stops in the
 * middle of a frame past it, the connection ends (every request fails saying so). {@link
 * #close()} from another thread ends its wait when it closes the connection: after it has
 * released the open attachments (on a server that stopped answering that costs one
 * timeout), and not while aliases or views keep leases (see there); {@link #closeNow()}
 * ends it at once. DROP listeners run on a separate event thread (so they may close
 * attachments), which also sends what must not block its caller (releases from aliases and
 * the cleaner, FORGETs, answers to bad frames). Both threads end with the connection; {@link
 * #close()} may keep it open while aliases or views of attached buffers still map memory
 * (see there). An ERROR from the server becomes a {@link SharingException} carrying the
 * server's code and message. Thread-safe: requests from several threads are matched to
 * replies by request id (docs/PROTOCOL.md section 12, "Threads").
 *
 * <p><b>Protocol version and the import cache.</b> The client says HELLO in version 2 and
 * falls back to version 1 when the server answers {@code BAD_VERSION} ({@link
 * Builder#protocolVersion(int)} forces one). In version 2 the server sends each physical
 * allocation's fd once per connection; the client's {@link ImportCache} keeps what it
 * imported mapped (bounded: {@link Builder#cacheMaxEntries(int)}, {@link
 * Builder#cacheMaxBytes(long)}, LRU) and serves a repeat attach of the same allocations as a
 * shared view: no fd, no driver call on either side. Leases keep their meaning: the
 * attachment's buffer may be used only while its lease is held; a cached idle mapping is
 * not a lease. When the producer releases an allocation (EVICT) the client unmaps it once no
 * lease of its own maps it and tells the server (FORGET).
 */
public final class SharingClient implements AutoCloseable {
    /**
     * The logger, looked up when a record is written, not when this class initializes: a
     * public entry point's first use at the fd limit must not touch logging before the
     * first-use check ({@code org.cuvmm.internal.FirstUse}), since logging's first use there
     * breaks it, and {@code java.security}, for the life of the JVM (an independent probe).
     */
    private static System.Logger logger() {
        return System.getLogger(SharingClient.class.getName());
    }
    private static final int EVENT_THREAD_IDLE_S = 5;
    /**
     * The socket's receive slice ({@code SO_RCVTIMEO}): the longest single wait of a leading
     * caller in {@code recvmsg}, so the bound on how late it sees an interrupt.
     */
    private static final int LEAD_SLICE_MS = 20;

    private final FdSocket socket;
    private final Path path;
    /** Request id -> its reply's future (no boxing per request: {@link LongMap}). */
    private final LongMap<CompletableFuture<Frame>> pending = new LongMap<>();
    /** Lease id -> open attachment. */
    private final LongMap<Attachment> attachments = new LongMap<>();
    /** Leases granted and not yet given back: attachments open, or closed while an alias or view maps the memory. */
    private final LongMap<Boolean> unreleased = new LongMap<>();
    /**
     * DROPs that found no attachment for their lease ({@link #dropped}), oldest first: one
     * whose attach() read its DESCRIPTOR but has not registered the attachment yet claims it in
     * {@link #register}; one for a lease already closed (or never granted) is never claimed.
     * At most {@link #MAX_UNCLAIMED_DROPS}, the oldest evicted first: clearing the whole set
     * when it grew past the bound also threw away the newest DROP, the one an in-flight attach
     * was about to claim, so that attachment was never marked dropped nor its listeners told
     * (UnclaimedDropTest). Guarded by {@link #dropClaims}, as is every access.
     */
    private final LinkedHashSet<Long> unclaimedDrops = new LinkedHashSet<>();
    /**
     * {@link #unclaimedDrops}' bound. An in-flight attach's DROP is evicted only when this many
     * more DROPs that find no attachment are read after it before that attach registers (its
     * import, between reading the DESCRIPTOR and registering, is the window); a stale one costs
     * a boxed id until it is evicted.
     */
    static final int MAX_UNCLAIMED_DROPS = 10_000;
    /**
     * Leases whose attachment was closed while an alias or view kept the lease: a DROP for one
     * is notified with a null attachment ({@link DropNotice}), not parked as unclaimed. Empty
     * in the usual round (the close unmaps, nothing is put).
     */
    private final LongMap<Attachment> closedButHeld = new LongMap<>();
    /** Guards the look-up of a DROP's attachment against its registration ({@link #register}). */
    private final Object dropClaims = new Object();
    private final CopyOnWriteArrayList<Consumer<DropNotice>> dropListeners = new CopyOnWriteArrayList<>();
    private final AtomicInteger nextRequestId = new AtomicInteger(1);
    private final Thread reader;
    /**
     * Who reads the socket: a caller waiting for its reply, or the reader thread (class
     * javadoc). In this class's comments "the reader" is whoever holds it when a frame is read.
     */
    private final ReadToken token = new ReadToken();
    /**
     * Set when a leading caller met a fatal bad frame: the reader thread drains the socket
     * (a caller must not block on that). Written before {@link ReadToken#urgent()}.
     */
    private volatile boolean drainRequested;
    /** Replies the requesting thread read itself (it led), and replies another thread read and handed over. */
    private final java.util.concurrent.atomic.LongAdder repliesReadByCaller = new java.util.concurrent.atomic.LongAdder();
    private final java.util.concurrent.atomic.LongAdder repliesHandedOver = new java.util.concurrent.atomic.LongAdder();
    /**
     * The event thread: DROP listeners and the releases that must not block their caller.
     * Created with the client (no lock on first use: the cleaner calls in, and this object's
     * monitor is public); its one thread starts on demand, ends after {@link
     * #EVENT_THREAD_IDLE_S} idle seconds, and the executor is shut down when the connection
     * ends, so no thread outlives the connection.
     */
    private final ThreadPoolExecutor events;
    private volatile IOException failure;
    private volatile boolean closed;
    private volatile Duration timeout = Duration.ofSeconds(30);
    /** {@link #timeout} in nanoseconds, set with it: no Duration conversion per request. */
    private volatile long timeoutNanos = timeout.toNanos();
    private int serverVersion;
    private int serverMaxFds;
    /** The connection's version: 0 until HELLO_OK (set by the reader, before it reads on), then 1 or 2. */
    private volatile int version;
    /** The version of the HELLO in flight: the reader accepts 1 to this until HELLO_OK. */
    private volatile int helloVersion = Protocol.LATEST_VERSION;
    private final ImportCache cache;
    /**
     * Test seam (package-private, tests only): runs on the requesting thread right after its
     * wait for a reply timed out, before the request gives up its future, so a test can
     * deliver the reply inside that window. Null in production.
     */
    volatile Consumer<CompletableFuture<Frame>> afterTimeoutHook;
    /**
     * Test seam (package-private, tests only): runs at the start of {@link #dispatch} on the
     * thread that read the frame (a test injects a failure there). Null in production.
     */
    volatile Consumer<Frame> dispatchHook;
    /**
     * Test seam (package-private, tests only): runs on an attaching thread after its import,
     * right before {@link #register} records the attachment, so a test can have a DROP for the
     * lease dispatched first (UnclaimedDropTest). Null in production.
     */
    static volatile Runnable beforeRegisterForTest;

    private SharingClient(FdSocket socket, Path path, int cacheMaxEntries, long cacheMaxBytes) {
        ErrorPathClasses.load(); // an ERROR read at the fd limit must not need a class file opened
        this.socket = socket;
        this.path = path;
        this.cache = new ImportCache(cacheMaxEntries, cacheMaxBytes, new ImportCache.Hooks() {
            @Override
            public void forgetLater(long[] ids) { SharingClient.this.forgetLater(ids); }

            @Override
            public void runLater(Runnable r) { SharingClient.this.runLater(r); }
        });
        this.reader = new Thread(this::readLoop, "cuvmm-ipc-client-read " + path);
        reader.setDaemon(true);
        String eventThreadName = "cuvmm-ipc-client-events " + path;
        this.events = new ThreadPoolExecutor(1, 1, EVENT_THREAD_IDLE_S, TimeUnit.SECONDS, new LinkedBlockingQueue<>(),
                r -> {
                    Thread t = new EventThread(r, eventThreadName, this);
                    t.setDaemon(true);
                    return t;
                });
        events.allowCoreThreadTimeOut(true);
    }

    /** The client's event thread (listeners, deferred sends), known by its owner. */
    private static final class EventThread extends Thread {
        final SharingClient owner;

        EventThread(Runnable r, String name, SharingClient owner) {
            super(r, name);
            this.owner = owner;
        }
    }

    /** True on this client's own event thread (a drop listener, a deferred send). */
    private boolean onEventThread() {
        return Thread.currentThread() instanceof EventThread t && t.owner == this;
    }

    /** A reply future of a request made on this client's event thread ({@link #rejected}). */
    private static final class EventThreadReply extends CompletableFuture<Frame> {}

    /** {@link #connect(Path, String)} with the client name {@code "java pid N"}. */
    public static SharingClient connect(Path socketPath) throws IOException {
        return builder(socketPath).build();
    }

    /**
     * Connects and says HELLO, with the {@link Builder}'s defaults: version 2 (falling back to
     * 1), an import cache of {@value ImportCache#DEFAULT_MAX_ENTRIES} entries and 1 GiB.
     *
     * @param clientName shown in the server's events, 0 to 255 bytes of UTF-8
     * @throws SharingException when the server refuses (e.g. NOT_ALLOWED: this uid is not on its allow-list)
     * @throws IOException when nothing listens at {@code socketPath}
     */
    public static SharingClient connect(Path socketPath, String clientName) throws IOException {
        return builder(socketPath).clientName(clientName).build();
    }

    /** A builder for a client of the server at {@code socketPath}. */
    public static Builder builder(Path socketPath) { return new Builder(socketPath); }

    /** Options of a {@link SharingClient}; {@link #build()} connects. */
    public static final class Builder {
        private final Path path;
        private String clientName = "java pid " + ProcessHandle.current().pid();
        private int protocolVersion;
        private int cacheMaxEntries = ImportCache.DEFAULT_MAX_ENTRIES;
        private long cacheMaxBytes = ImportCache.DEFAULT_MAX_BYTES;
        private Duration timeout = Duration.ofSeconds(30);

        private Builder(Path path) {
            this.path = FdSocket.checkPath(path);
        }

        /** Shown in the server's events and logs, 0 to 255 bytes of UTF-8 (default {@code "java pid N"}). */
        public Builder clientName(String name) {
            Checks.notNull("clientName", name);
            new Messages.Hello(name).encode(); // validates the name
            clientName = name;
            return this;
        }

        /**
         * The protocol version to speak: 0 (default) says HELLO in version 2 and falls back to
         * version 1 when the server answers ERROR {@code BAD_VERSION} (a version-1 server);
         * 1 or 2 forces that version ({@link #build()} then fails where the server does not
         * speak it).
         */
        public Builder protocolVersion(int version) {
            if (version != 0 && (version < Protocol.VERSION || version > Protocol.LATEST_VERSION)) {
                throw new IllegalArgumentException("protocolVersion: " + version + " (expected: 0 for the newest the "
                        + "server speaks, or " + Protocol.VERSION + " to " + Protocol.LATEST_VERSION + ")");
            }
            protocolVersion = version;
            return this;
        }

        /**
         * Most imported buffers the import cache keeps for reuse (default {@value
         * ImportCache#DEFAULT_MAX_ENTRIES}; 0 disables caching: every attach imports and every
         * release unmaps, as in version 1, and each id is forgotten at once). Version 2 only.
         * A bound on the entries kept (those attachments use count too, but only idle ones are
         * evicted to meet it), not on what is mapped: entries that attachments use are never
         * evicted by it and can keep the count over it, and an evicted entry is unmapped just
         * after it leaves the count ({@link ImportCache.Stats} says when).
         */
        public Builder cacheMaxEntries(int n) {
            if (n < 0) throw new IllegalArgumentException("cacheMaxEntries: " + n + " (expected: >= 0)");
            cacheMaxEntries = n;
            return this;
        }

        /**
         * Most bytes of imported buffers the import cache keeps for reuse (default 1 GiB; 0
         * disables caching). Version 2 only. As {@link #cacheMaxEntries}, a bound on what is kept,
         * not on what is mapped: entries in use can keep the count over it, and neither an evicted
         * entry that is still mapped nor an import the cache did not keep counts.
         */
        public Builder cacheMaxBytes(long n) {
            if (n < 0) throw new IllegalArgumentException("cacheMaxBytes: " + n + " (expected: >= 0)");
            cacheMaxBytes = n;
            return this;
        }

        /** How long a request waits for its reply (default 30 s); also {@link SharingClient#setTimeout}. */
        public Builder timeout(Duration d) {
            Checks.notNull("timeout", d);
            if (d.isNegative() || d.isZero()) throw new IllegalArgumentException("timeout: " + d + " (expected: > 0)");
            timeout = d;
            return this;
        }

        /**
         * Connects and says HELLO.
         *
         * @throws SharingException when the server refuses (e.g. NOT_ALLOWED: this uid is not on
         *     its allow-list; BAD_VERSION: a forced version it does not speak)
         * @throws IOException when nothing listens at the path; also when this is the JVM's
         *     first socket and the process is at its open-file limit (the message names
         *     RLIMIT_NOFILE; a later call tries again, see {@link FdSocket#connect})
         * @throws IllegalArgumentException when the system property {@code
         *     cuvmm.ipc.deferConsumption} is neither {@code true} nor {@code false}
         */
        public SharingClient build() throws IOException {
            Messages.Hello hello = new Messages.Hello(clientName);
            boolean defer = FdSocket.deferConsumptionAllowed(); // before connecting: a bad value opens nothing
            FdSocket s = FdSocket.connect(path);
            try {
                s.setReceiveSlice(LEAD_SLICE_MS); // a leader waits in recvmsg, a slice at a time
                if (defer) {
                    s.deferConsumption(); // peeks, taken off the queue later (FdSocket): the server's reader is not woken per reply
                }
            } catch (Throwable e) {
                s.close();
                throw e;
            }
            SharingClient c = new SharingClient(s, path, cacheMaxEntries, cacheMaxBytes);
            c.setTimeout(timeout);
            int first = protocolVersion == 0 ? Protocol.LATEST_VERSION : protocolVersion;
            c.helloVersion = first;
            c.reader.start();
            try {
                Frame ok;
                try {
                    ok = c.request(hello, FrameType.HELLO_OK, first);
                } catch (SharingException e) {
                    if (e.code() != ErrorCode.BAD_VERSION || protocolVersion != 0 || first == Protocol.VERSION) throw e;
                    // A version-1 server skipped the HELLO: say it again in version 1, same connection.
                    c.helloVersion = Protocol.VERSION;
                    ok = c.request(hello, FrameType.HELLO_OK, Protocol.VERSION);
                }
                Messages.HelloOk m = (Messages.HelloOk) ok.message;
                ok.close();
                if (m.version() != c.version) {
                    throw new SharingException(ErrorCode.BAD_PAYLOAD, "the server's HELLO_OK announces version "
                            + m.version() + " (expected: " + Protocol.VERSION + " to " + c.helloVersion
                            + ", the version of its header)");
                }
                c.serverVersion = m.version();
                c.serverMaxFds = m.maxFds();
                return c;
            } catch (IOException | RuntimeException e) {
                c.shutdownNow();
                throw e;
            }
        }
    }

    /** The protocol version the server announced (the connection's version: 1 or 2). */
    public int serverVersion() { return serverVersion; }

    /** The connection's protocol version (1 or 2). */
    public int protocolVersion() { return version; }

    /**
     * The import cache (version 2; on a version-1 connection it stays empty and its counts
     * stay 0, imports included). Its {@link ImportCache#stats()} give hits, misses, entries,
     * bytes and the fds kept.
     */
    public ImportCache importCache() { return cache; }

    /** The most fds per frame the server announced. */
    public int serverMaxFds() { return serverMaxFds; }

    /**
     * How long a request waits for its reply (default 30 s), counted from just before its
     * frame is sent. The send is within it too: the kernel takes a frame at once unless this
     * connection's socket buffer is full (the server stopped reading while hundreds of frames
     * were sent to it); then the send waits for room until the deadline at most, and a
     * request whose frame could not go at all fails with an {@code IOException} ("... could not
     * be sent within ...: the server is not reading"), the connection kept; a RELEASE (an
     * attachment's close) that cannot go, or a frame sent in part by then, ends the connection
     * (docs/PROTOCOL.md, section 12, "The client's sends").
     *
     * @throws IllegalArgumentException for a zero or negative {@code timeout}
     */
    public void setTimeout(Duration timeout) {
        Checks.notNull("timeout", timeout);
        if (timeout.isNegative() || timeout.isZero()) {
            throw new IllegalArgumentException("timeout: " + timeout + " (expected: > 0)");
        }
        this.timeout = timeout;
        this.timeoutNanos = saturatedNanos(timeout);
    }

    /** {@code d} in nanoseconds, Long.MAX_VALUE when it does not fit (a timeout of centuries). */
    private static long saturatedNanos(Duration d) {
        try {
            return d.toNanos();
        } catch (ArithmeticException e) {
            return Long.MAX_VALUE;
        }
    }

    /**
     * Adds {@code listener}, called on the client's event thread for each DROP notice, after
     * the listeners added before it (a DROP that an {@code attach} claims once the connection
     * has ended, and so the event thread, is delivered on that attaching thread). A listener
     * that throws is logged; the others still hear the notice.
     *
     * @throws NullPointerException when {@code listener} is null (the message names it)
     */
    public void addDropListener(Consumer<DropNotice> listener) { dropListeners.add(Checks.notNull("listener", listener)); }

    /** Removes {@code listener} (no effect when it was not added, or is null); a notice already being delivered may still reach it. */
    public void removeDropListener(Consumer<DropNotice> listener) { dropListeners.remove(listener); }

    /**
     * True while this client accepts requests: until {@link #close()} or {@link #closeNow()}
     * is called or the connection ends (closed by either side). False as soon as close() is
     * called, also while the connection drains in the background for the leases aliases or
     * views keep ({@link #pendingReleases()} says how many).
     */
    public boolean isConnected() { return failure == null && !closed; }

    /**
     * The leases this client holds and has not yet given back: one per open attachment, and
     * one per closed attachment whose memory an alias or view in this process still maps
     * (released when the last of them goes). After {@link #close()} the socket and the reader
     * thread stay until this reaches 0. 0 once the connection has ended (the server freed
     * them all).
     */
    public int pendingReleases() { return failure != null ? 0 : unreleased.size(); }

    /**
     * Attaches to the buffer published as {@code name}: receives its descriptor, imports it
     * into {@code resource} and returns it with its lease. On any failure every fd received
     * is closed and, when a lease was granted, it is released.
     *
     * @throws SharingException the server's ERROR (UNKNOWN_NAME, ...), a bad DESCRIPTOR, or
     *     an import that failed (code null; the cause is the core's exception). Version 2:
     *     on TOO_MANY_IDS the import cache first gives back its idle mappings (FORGET, awaited)
     *     and the attach is asked once more; TOO_MANY_IDS again is thrown. Likewise when
     *     this process ran out of fds receiving or importing the reply (the message names
     *     {@code RLIMIT_NOFILE}): the cache's idle entries, each holding an fd and a mapping,
     *     are given back and the attach is tried once more (version 1 keeps nothing: the
     *     failure stands)
     * @throws IOException the connection failed or the server did not answer in time; this
     *     client is closed ("the client is closed"), or was closed while the attach ran (what it
     *     had imported is closed and its lease released); or this thread was interrupted while
     *     it waited for the reply (a plain IOException saying so, the interrupt flag kept; a
     *     lease granted meanwhile is released)
     * @throws IllegalStateException when {@code resource} is closed (refused before any request)
     * @throws IllegalArgumentException for a name that is empty or over 255 bytes of UTF-8, or
     *     a resource whose handle type is not POSIX_FD (refused before any request; the
     *     message names the argument)
     * @throws NullPointerException when {@code name} or {@code resource} is null
     */
    public Attachment attach(String name, VirtualMemoryResource resource) throws IOException {
        SharingServer.checkName(name);
        Checks.notNull("resource", resource);
        if (resource.isClosed()) {
            // Up front: the import would fail after a whole round trip and a lease granted and
            // given back, reported as a SharingException with no code (an independent probe).
            throw new IllegalStateException("resource: " + resource + " is closed (expected: an open resource to "
                    + "import into)");
        }
        if (!resource.isIpcEnabled()) {
            throw new IllegalArgumentException("resource: " + resource + " (expected: handle type POSIX_FD, to import "
                    + "shared memory)");
        }
        try {
            return attachOnce(name, resource);
        } catch (SharingException e) {
            // Out of fds here: what the import cache keeps idle holds an fd per id (and a
            // mapping); closing attachments frees none of it, so without this a client at its
            // limit could not recover but by close() (an independent probe: 46 of 46 retries
            // failed after every attachment was closed). Give back the idle entries (FORGET,
            // awaited) and try once more; nothing idle: the failure stands.
            if (!outOfFds(e)) throw e;
            try {
                token.wakeReader(); // nobody leads for the FORGOTTEN awaited: the reader reads it a period on, not up to 16
                if (!cache.dropIdle(java.util.concurrent.TimeUnit.NANOSECONDS.toMillis(timeoutNanos))) throw e;
            } catch (InterruptedException x) {
                Thread.currentThread().interrupt();
                throw e;
            }
            try {
                return attachOnce(name, resource);
            } catch (IOException | RuntimeException again) {
                again.addSuppressed(e); // the first failure, which the retry answered
                throw again;
            }
        }
    }

    /**
     * True when {@code e} says this process ran out of fds: the kernel dropped the reply's fds
     * ({@code MSG_CTRUNC}) or the import could not duplicate one (the driver's message names
     * {@code RLIMIT_NOFILE} in both, from {@code NativeIo.openFileLimitText} and the core's
     * fd-limit hint).
     */
    private static boolean outOfFds(SharingException e) {
        for (Throwable t = e; t != null; t = t.getCause()) {
            if (t instanceof ProtocolException p && p.fdsDroppedHere) return true;
        }
        // Only a failure here (no code: the import): a server's ERROR can name RLIMIT_NOFILE
        // too (its own export at its limit), and giving back this side's cache would only make
        // it send those fds again (a review).
        if (e.code() != null) return false;
        for (Throwable t = e; t != null; t = t.getCause()) {
            String m = t.getMessage();
            if (m != null && m.contains("RLIMIT_NOFILE")) return true;
        }
        return false;
    }

    /** {@link #attach}'s request and import, after its argument checks. */
    private Attachment attachOnce(String name, VirtualMemoryResource resource) throws IOException {
        Frame f;
        try {
            f = request(new Messages.Attach(name), FrameType.DESCRIPTOR);
        } catch (SharingException e) {
            // Version 2: this connection holds as many ids as the server allows. Give back
            // what the cache keeps idle (FORGET, awaited) and ask once more.
            if (e.code() != ErrorCode.TOO_MANY_IDS) throw e;
            try {
                // Nobody leads for the FORGOTTEN dropIdle awaits (the event thread sends the
                // FORGET): the reader, maybe backed off by a long series, reads it a period
                // after this request, not up to 16 periods later (a review).
                token.wakeReader();
                // From the saturated nanos: a timeout of centuries (setTimeout accepts one)
                // overflowed Duration.toMillis() here (an independent probe: ArithmeticException).
                if (!cache.dropIdle(java.util.concurrent.TimeUnit.NANOSECONDS.toMillis(timeoutNanos))) throw e;
            } catch (InterruptedException x) {
                Thread.currentThread().interrupt();
                throw e;
            }
            f = request(new Messages.Attach(name), FrameType.DESCRIPTOR);
        }
        if (f.message instanceof Messages.DescriptorV2 d2) return attachV2(name, resource, f, d2);
        Messages.Descriptor d = (Messages.Descriptor) f.message;
        int[] fds = f.takeFds();
        if (!claimLease(d.leaseId())) {
            NativeIo.closeAll(fds);
            throw duplicateLease(name, d.leaseId());
        }
        Attachment a;
        try {
            try (BufferDescriptor desc = BufferDescriptor.fromFds(fds, d.chunkSizes(), HandleType.POSIX_FD, d.size())) {
                // The lease follows the mappings: the import's callback releases it (Attachment).
                a = new Attachment(this, name, d.leaseId(), whenUnmapped -> resource.importBuffer(desc, whenUnmapped));
            }
        } catch (RuntimeException e) {
            unreleased.remove(d.leaseId());
            releaseQuietly(d.leaseId());
            throw new SharingException(null, "attach '" + name + "': the server's descriptor (lease " + d.leaseId()
                    + ", chunks " + java.util.Arrays.toString(d.chunkSizes()) + ") could not be imported: "
                    + e.getMessage(), e);
        } finally {
            NativeIo.closeAll(fds); // fromFds duplicated them
        }
        return registered(name, d.leaseId(), a);
    }

    /**
     * Records that this client holds {@code leaseId}; false, recording nothing, when it already
     * does. Lease ids are unique for the life of the server (PROTOCOL.md section 3): a server
     * that gave one to two DESCRIPTORs made the second attachment replace the first in the
     * tables {@link #close()} walks, and the first stayed mapped after close() (an independent
     * probe, ClientDistrustsServerTest).
     */
    private boolean claimLease(long leaseId) {
        synchronized (unreleased) { // LongMap's own monitor: the check and the put are one step
            if (unreleased.containsKey(leaseId)) return false;
            unreleased.put(leaseId, Boolean.TRUE);
            return true;
        }
    }

    private static SharingException duplicateLease(String name, long leaseId) {
        return new SharingException(ErrorCode.BAD_PAYLOAD, "attach '" + name + "': the server's DESCRIPTOR gives lease "
                + Long.toUnsignedString(leaseId) + ", which this client already holds (lease ids are unique for the "
                + "life of the server); not imported, its fds closed");
    }

    /** Both versions: records the attachment under its lease; a close or DROP meanwhile is honoured. */
    private Attachment registered(String name, long leaseId, Attachment a) throws IOException {
        Runnable seam = beforeRegisterForTest;
        if (seam != null) seam.run();
        boolean droppedMeanwhile = register(leaseId, a);
        if (closed) {
            // close() ran meanwhile and may have listed the attachments before this put.
            IOException closedMeanwhile = new IOException("attach '" + name + "': the client was closed meanwhile (the "
                    + "attachment was closed and its lease released)");
            try {
                a.close();
            } catch (RuntimeException e) {
                // Its RELEASE went out unanswered in time, or was refused: still this attach's
                // failure is the close, thrown as the IOException the javadoc promises (the
                // UncheckedIOException escaped attach: an independent probe,
                // ClientFailurePathsProbeTest).
                closedMeanwhile.addSuppressed(e);
            }
            throw closedMeanwhile;
        }
        if (droppedMeanwhile) dropped(new Messages.Drop(leaseId, name));
        return a;
    }

    /**
     * Version 2: the reader already checked the DESCRIPTOR against the held ids, took its fds
     * into the cache and pinned its ids ({@link ImportCache#received}); the cache serves the
     * buffer (a view of a kept mapping, or an import from kept fds) and unpins.
     */
    private Attachment attachV2(String name, VirtualMemoryResource resource, Frame f, Messages.DescriptorV2 d)
            throws IOException {
        f.close();
        if (!claimLease(d.leaseId())) {
            cache.unpin(d.ids()); // as dispose() does: the fds stay with their held ids
            throw duplicateLease(name, d.leaseId());
        }
        Attachment a;
        try {
            a = new Attachment(this, name, d.leaseId(), whenUnmapped -> cache.open(d, resource, whenUnmapped));
        } catch (RuntimeException e) {
            unreleased.remove(d.leaseId());
            releaseQuietly(d.leaseId());
            throw new SharingException(null, "attach '" + name + "': the server's descriptor (lease " + d.leaseId()
                    + ", chunks " + java.util.Arrays.toString(d.chunkSizes()) + ", ids "
                    + java.util.Arrays.toString(d.ids()) + ") could not be imported: " + e.getMessage(), e);
        }
        return registered(name, d.leaseId(), a);
    }

    /**
     * Sends FORGET for {@code ids} from the event thread (at once when this is it) without
     * waiting; the reader hands the FORGOTTEN (or an ERROR) to the cache, and the end of the
     * connection does too.
     */
    private void forgetLater(long[] ids) {
        Runnable send = () -> {
            int id = nextId();
            CompletableFuture<Frame> reply = new CompletableFuture<>();
            reply.whenComplete((fr, ex) -> {
                if (fr != null) {
                    // Any other reply (a misbehaving server's DESCRIPTOR) is disposed of: its
                    // fds closed, its ids unpinned, its lease released.
                    if (fr.type == FrameType.FORGOTTEN || fr.type == FrameType.ERROR) fr.close();
                    else dispose(fr);
                    if (fr.type == FrameType.ERROR) {
                        logger().log(System.Logger.Level.WARNING, "FORGET of " + java.util.Arrays.toString(ids)
                                + " refused: " + ((Messages.Error) fr.message).message());
                    }
                }
                cache.forgotten(ids);
            });
            pending.put(id, reply);
            IOException f = failure;
            if (f != null) {
                pending.remove(id);
                reply.completeExceptionally(f);
                return;
            }
            try {
                writeWithin(new Messages.Forget(ids), id, wireVersion(), deadlineAfter(System.nanoTime(), timeoutNanos),
                        true);
            } catch (IOException | RuntimeException e) {
                pending.remove(id);
                reply.completeExceptionally(e);
            }
        };
        if (onEventThread() && !token.heldByCurrentThread()) {
            // Sent now: queued, it would wait behind the task running here, and a DROP listener
            // that attaches at the id limit waits in dropIdle for this FORGET's FORGOTTEN (it
            // waited the whole timeout, then failed TOO_MANY_IDS: an independent probe). Not
            // while this thread leads the read (a listener's request dispatching a rejected or
            // unrequested DESCRIPTOR): a reader blocked in sendmsg stopped reading, and a server
            // not reading then was never read again (a reviewer's EventThreadLeaderWritesTest).
            send.run();
            return;
        }
        try {
            events.execute(send);
        } catch (java.util.concurrent.RejectedExecutionException e) {
            cache.forgotten(ids); // the connection has ended: nothing is held any more
        }
    }

    /** Runs {@code r} on the event thread; here when the connection has ended (no event thread). */
    private void runLater(Runnable r) {
        try {
            events.execute(r);
        } catch (java.util.concurrent.RejectedExecutionException e) {
            r.run();
        }
    }

    /** The version frames carry: 1 until HELLO_OK, then the connection's. */
    private int wireVersion() {
        int v = version;
        return v == 0 ? Protocol.VERSION : v;
    }

    /**
     * The attachments not yet closed: a snapshot taken now, unmodifiable (as the server's
     * {@code publishedNames()}); later attaches and closes do not change it.
     */
    public java.util.List<Attachment> attachments() { return java.util.Collections.unmodifiableList(attachments.values()); }

    void forget(Attachment a) { attachments.remove(a.leaseId()); }

    /**
     * {@link #forget(Attachment)} of an attachment closed while an alias or view keeps its
     * lease: a DROP for that lease is still notified, with a null attachment. Recorded before
     * the attachment leaves {@link #attachments}, so {@link #dropped} finds it in one or the
     * other; dropped again if the last mapping went meanwhile ({@link #released} found none).
     */
    void forgetKeepingLease(Attachment a) {
        long id = a.leaseId();
        synchronized (dropClaims) {
            closedButHeld.put(id, a);
            attachments.remove(id);
        }
        if (a.isReleased()) closedButHeld.remove(id);
    }

    /** True once the connection has ended (either side closed it, or it failed): the server freed every lease. */
    boolean connectionEnded() { return failure != null; }

    /** Test seam (package-private, tests only): the futures of the requests now waiting for a reply. */
    List<CompletableFuture<Frame>> pendingReplies() { return pending.values(); }

    /**
     * Sends RELEASE and waits for RELEASED; also after {@link #close()}, while the connection
     * drains. Whatever the outcome the lease no longer counts, and after close() the last
     * lease ends the connection.
     */
    void release(long leaseId) throws IOException {
        try {
            request(new Messages.Release(leaseId), FrameType.RELEASED).close();
        } finally {
            released(leaseId);
        }
    }

    /** The lease no longer counts; after {@link #close()}, the last one ends the connection. */
    private void released(long leaseId) {
        unreleased.remove(leaseId);
        if (!closedButHeld.isEmpty()) closedButHeld.remove(leaseId);
        if (closed && unreleased.isEmpty()) shutdownNow();
    }

    /**
     * Releases a lease without blocking the caller (a thread closing an alias, the cleaner):
     * the event thread sends RELEASE, and the reader disposes of the RELEASED nobody waits
     * for. If the connection has ended, the server already freed the lease. After {@link
     * #close()}, the last such release closes the connection.
     */
    void releaseLater(long leaseId) {
        if (failure != null) {
            released(leaseId); // the connection's end freed it
            return;
        }
        try {
            events.execute(() -> {
                sendQuietly(new Messages.Release(leaseId), nextId());
                released(leaseId);
            });
        } catch (java.util.concurrent.RejectedExecutionException e) {
            released(leaseId); // shut down: the connection's end frees the lease
        }
    }

    private void releaseQuietly(long leaseId) {
        try {
            release(leaseId);
        } catch (IOException e) {
            logger().log(System.Logger.Level.DEBUG, "release of lease " + leaseId + " failed: " + e);
        }
    }

    /**
     * Sends {@code m} and waits for its reply of type {@code expected}; an ERROR reply becomes a SharingException.
     *
     * <p>This thread reads its own reply when it can ({@link #awaitReply}). A reply nobody
     * will read is disposed of exactly once: whichever of this thread (on timeout, interrupt
     * or any other early exit) and the thread that read the reply ({@link #dispatch}, by the
     * holder of the read token) loses the race for the future closes the frame's fds and, for
     * a DESCRIPTOR, releases its lease. This thread claims the future with {@code
     * completeExceptionally}; when that fails the reply was already completed, and the frame
     * is this thread's to dispose of.
     */
    private Frame request(Messages.Message m, FrameType expected) throws IOException {
        return request(m, expected, wireVersion());
    }

    /** {@code now} ({@link System#nanoTime()}) plus {@code nanos}, saturated (a huge timeout never wraps into the past). */
    private static long deadlineAfter(long now, long nanos) {
        long d = now + nanos;
        return d < now ? Long.MAX_VALUE : d;
    }

    private Frame request(Messages.Message m, FrameType expected, int frameVersion) throws IOException {
        int id;
        do {
            id = nextRequestId.getAndIncrement();
        } while (id == 0);
        CompletableFuture<Frame> reply = onEventThread() ? new EventThreadReply() : new CompletableFuture<>();
        pending.put(id, reply);
        boolean received = false;
        try {
            IOException f = failure;
            if (f != null) throw rethrow(f);
            // After close() the connection drains: only the RELEASEs of the leases it keeps go out.
            if (closed && !(m instanceof Messages.Release)) throw new IOException("the client is closed");
            // After the checks, right before the send: a refused request is no activity (a
            // thread retrying one in a loop would keep the reader out of the socket for good,
            // and a DROP, EVICT or the end of a draining connection would never be read).
            // One clock read before the send (issue 11) for the activity mark and the deadline;
            // one after it for the lead's start and the first read's slice decision, so that a
            // send that blocked is not taken for time still left (a review: a lead could start
            // a blocking read slice past its deadline).
            long now = System.nanoTime();
            token.noteRequest(now);
            try {
                // A RELEASE that cannot go ends the connection (then the server frees the lease):
                // failed alone, the lease would stay held there while this client let it go.
                writeWithin(m, id, frameVersion, deadlineAfter(now, timeoutNanos), m instanceof Messages.Release);
            } catch (IOException e) {
                if (e.getCause() instanceof FdSocket.SendTimeoutException) throw e; // writeWithin's own message
                // The server may have closed right after an ERROR (NOT_ALLOWED): report that.
                reader.join(1000);
                IOException why = failure;
                // A close() racing this send closed the socket: its ClosedChannelException has no
                // message ("failed: null", an independent probe).
                String reason = e.getMessage() != null ? e.getMessage() : closed ? "the client was closed meanwhile"
                        : e.toString();
                throw why instanceof SharingException ? rethrow(why) : new IOException(m.type() + " to " + path
                        + " failed: " + reason, e);
            }
            Frame r;
            try {
                r = awaitReply(reply, deadlineAfter(now, timeoutNanos), System.nanoTime());
                received = true;
            } catch (TimeoutException e) {
                Consumer<CompletableFuture<Frame>> hook = afterTimeoutHook;
                if (hook != null) hook.accept(reply);
                throw new IOException("no reply to " + m.type() + " from " + path + " within " + timeout);
            } catch (ExecutionException e) {
                Throwable c = e.getCause();
                throw c instanceof IOException io ? rethrow(io) : new IOException(c);
            }
            if (r.type == FrameType.ERROR) {
                r.close();
                Messages.Error err = (Messages.Error) r.message;
                ErrorCode code = err.errorCode();
                throw new SharingException(code, "server: " + err.message() + " (" + (code == null ? "code " + err.code()
                        : code) + ")");
            }
            if (r.type != expected) {
                dispose(r);
                throw new SharingException(ErrorCode.UNEXPECTED_FRAME, "the server answered " + m.type() + " with "
                        + r.type + " (expected: " + expected + ")");
            }
            return r;
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
            throw new IOException("interrupted while waiting for the reply to " + m.type(), e);
        } finally {
            // A received reply was removed by the dispatch that completed it (before completing).
            if (!received) pending.remove(id);
            // Claim the future; if the reader completed it meanwhile, its frame is ours to dispose of.
            if (!received && !reply.completeExceptionally(new IOException("the request gave up its reply"))
                    && !reply.isCompletedExceptionally()) {
                dispose(reply.join());
            }
        }
    }

    /**
     * Waits for {@code reply}: leads (reads the socket itself, dispatching every frame as the
     * reader thread would) while the read token is free, else waits as a follower for the
     * holder to complete it or to give the token up. The token is released before any
     * timeout or interrupt is reported, so a late reply can still be read and disposed of.
     */
    private Frame awaitReply(CompletableFuture<Frame> reply, long deadline, long now)
            throws InterruptedException, TimeoutException, ExecutionException {
        boolean readOwn = false;
        while (token.awaitTurn(reply, deadline, now)) {
            try {
                // The lead's start: `now` when granted at once, else the clock when granted
                // (a caller that waited as a follower must check its deadline afresh: its
                // first read must not block a whole slice past it; review of issue 11).
                readOwn = leadUntil(reply, deadline, token.leadStart());
            } finally {
                token.release();
            }
            if (reply.isDone()) break;
            now = System.nanoTime(); // the next turn's reading
            // Not done: the connection is ending and its failure is on its way; wait (bounded) for it.
        }
        Frame r = reply.get(); // done: completed, or failed with the connection
        (readOwn ? repliesReadByCaller : repliesHandedOver).increment();
        return r;
    }

    /**
     * Holding the read token: reads and dispatches frames until {@code reply} is done. True
     * when this thread's own read completed it. Waits for bytes in the {@code recvmsg} itself,
     * in slices of at most {@value #LEAD_SLICE_MS} ms ({@link FrameIO#readWithinSlice}), so an
     * interrupt is seen within one slice and the deadline is kept. A frame whose first bytes
     * arrived is read to its end, waiting for the rest until the deadline at most (an
     * interrupt is seen after it): when the server stops in the middle of a frame past this request's deadline, the
     * connection ends (a half-read frame cannot be resumed, by this thread or another) and
     * every waiting request fails saying the server stalled mid-frame. A RuntimeException
     * while dispatching a frame ends the connection too ({@link #readOne}); this thread's
     * request then fails with the IOException "the client's reader failed", as every other.
     */
    private boolean leadUntil(CompletableFuture<Frame> reply, long deadline, long now) throws InterruptedException,
            TimeoutException {
        // `now` was read just before this lead (its first frame reads no clock), then after each
        // frame that did not complete the reply (the one that did reads none: issue 11).
        if (reply.isDone()) return true;
        for (;;) {
            if (Thread.interrupted()) throw new InterruptedException();
            long left = deadline - now;
            if (left <= 0) throw new TimeoutException();
            // No poll first: the recvmsg itself waits, one slice at most (SO_RCVTIMEO), then
            // readOne returns true with nothing read and this loop checks again.
            boolean more;
            try {
                more = readOne(deadline, now);
            } catch (RuntimeException e) {
                return false; // readOne failed every request (this one's too) with the cause: reported from reply
            }
            if (!more) return reply.isDone() && !reply.isCompletedExceptionally();
            if (reply.isDone()) return true;
            now = System.nanoTime();
        }
    }

    /** The socket's call counts, as {@link FdSocket#ioCalls} gives them (tests, the benchmark). */
    long[] socketCalls() { return socket.ioCalls(); }

    /** Whether this client's socket defers consumption ({@link FdSocket#deferConsumption}; tests). */
    boolean defersConsumption() { return socket.isDeferringConsumption(); }

    /** Replies the requesting thread read itself; replies another thread (the reader, another caller) handed over. Tests. */
    long[] replyStats() { return new long[] {repliesReadByCaller.sum(), repliesHandedOver.sum()}; }

    /** The read token (tests). */
    ReadToken readToken() { return token; }

    /** How many DROPs are parked unclaimed now, {@link #MAX_UNCLAIMED_DROPS} at most (tests). */
    int unclaimedDropCount() {
        synchronized (dropClaims) {
            return unclaimedDrops.size();
        }
    }

    /**
     * Closes the fds of a reply nobody will use and, for a DESCRIPTOR, gives its lease back:
     * the RELEASE goes out from the event thread (this may run on the reader, which never writes).
     */
    private void dispose(Frame f) {
        f.close();
        if (f.message instanceof Messages.Descriptor d) sendLater(new Messages.Release(d.leaseId()), nextId());
        if (f.message instanceof Messages.DescriptorV2 d) {
            cache.unpin(d.ids());
            sendLater(new Messages.Release(d.leaseId()), nextId());
        }
    }

    /** A copy with this thread's stack, keeping the type and code. */
    private static IOException rethrow(IOException e) {
        if (e instanceof SharingException s) return new SharingException(s.code(), s.getMessage(), s);
        return new IOException(e.getMessage(), e);
    }

    /**
     * The reader thread: reads while no caller leads ({@link ReadToken#readerTurn()}); ends
     * with the connection. It drains the socket after a fatal bad frame a leading caller met.
     */
    private void readLoop() {
        try {
            while (token.readerTurn()) {
                boolean more;
                try {
                    if (drainRequested) {
                        drain();
                        return;
                    }
                    more = readOne(NO_DEADLINE, 0);
                } finally {
                    token.release();
                }
                if (!more) return;
            }
            // The connection ended while this thread waited for its turn (shutdownNow): fail
            // what still waits (a FORGET's reply nobody leads for).
            fail(closed ? new IOException("the client is closed") : new IOException("the connection to " + path
                    + " ended"));
        } catch (InterruptedException e) {
            fail(new IOException("the client's reader was interrupted", e));
        } finally {
            token.end();
        }
    }

    /** {@link #readOne}'s deadline for the reader thread: none (it blocks until a frame is complete). */
    private static final long NO_DEADLINE = Long.MIN_VALUE;

    /**
     * Reads and dispatches one frame; the caller holds the read token (the reader thread or a
     * leading caller). False when the connection has ended (every waiting request failed).
     * A leading caller passes its request's deadline: a frame not complete by then ends the
     * connection ({@link FrameIO#readWithinSlice}). A RuntimeException or Error from reading or
     * dispatching ends the connection ("the client's reader failed") and is rethrown. {@code
     * now}: the clock as the leading caller read it just before (unused with {@link #NO_DEADLINE}).
     */
    private boolean readOne(long deadline, long now) {
        try {
            Frame f;
            try {
                int v = version;
                int min = v == 0 ? Protocol.VERSION : v;
                int max = v == 0 ? helloVersion : v;
                f = deadline == NO_DEADLINE ? FrameIO.read(socket, min, max) : FrameIO.readWithinSlice(socket, min,
                        max, deadline, now);
            } catch (FrameIO.Stalled e) {
                if (!e.midFrame()) return true; // nothing read: still in step (the caller checks its deadline)
                fail(new IOException("connection to " + path + " ended: " + e.getMessage()
                        + "; closed the connection", e));
                return false;
            } catch (ProtocolException e) {
                rejected(e);
                if (e.fatal()) {
                    SharingException why = new SharingException(e.code(), "the server sent a bad frame: "
                            + e.getMessage());
                    if (Thread.currentThread() == reader) {
                        failAfterQueuedSends(why);
                    } else if (beginFatal(why)) {
                        // A caller does not drain: the reader thread does, once this caller lets go of the token.
                        drainRequested = true;
                        token.urgent();
                    }
                    return false;
                }
                return true;
            } catch (IOException e) {
                fail(closed ? new IOException("the client is closed") : new IOException("connection to " + path
                        + " lost: " + e.getMessage(), e));
                return false;
            }
            if (f == null) {
                fail(new IOException("the server at " + path + " closed the connection"));
                return false;
            }
            dispatch(f);
            return true;
        } catch (RuntimeException | Error t) {
            fail(new IOException("the client's reader failed: " + t, t));
            throw t;
        }
    }

    private void dispatch(Frame f) {
        Consumer<Frame> hook = dispatchHook;
        if (hook != null) hook.accept(f);
        // Only the HELLO_OK answering a HELLO this client is waiting for picks the version; an
        // unrequested one (any other request id) is disposed of below (ClientDistrustsServerTest).
        if (f.type == FrameType.HELLO_OK && version == 0 && pending.containsKey(f.requestId)) {
            // Before reading on: every later frame must carry this version.
            version = f.version;
            if (version == Protocol.VERSION) cache.versionOne(); // isEnabled(): version 1 never caches
        }
        if (f.type == FrameType.EVICT) {
            f.close();
            cache.evicted(((Messages.Evict) f.message).ids());
            return;
        }
        if (f.message instanceof Messages.DescriptorV2 d) {
            // Checked and pinned here, before the next frame (a FORGOTTEN or EVICT) is read.
            int[] fds = f.takeFds();
            try {
                cache.received(d, fds);
            } catch (ProtocolException e) {
                NativeIo.closeAll(fds);
                if (closed) {
                    // close() ended the cache (its ids are gone) while this ATTACH was in
                    // flight: the DESCRIPTOR naming held ids without their fds is no bad frame.
                    // Nobody will use it: give back its lease and fail its request as a closed
                    // client's (an independent probe: about half of the attaches racing a
                    // close() failed with "the server sent a bad frame", UNKNOWN_ID, and an
                    // ERROR blaming the server was sent).
                    f.close();
                    sendLater(new Messages.Release(d.leaseId()), nextId());
                    CompletableFuture<Frame> p = pending.remove(f.requestId);
                    if (p != null) {
                        p.completeExceptionally(new IOException("attach: the client was closed meanwhile (the server's "
                                + "DESCRIPTOR, lease " + d.leaseId() + ", was discarded and its lease released)"));
                        token.delivered();
                    }
                    return;
                }
                rejected(e.withRequestId(f.requestId).withDescriptor(d));
                return;
            }
        }
        if (f.type == FrameType.DROP) {
            f.close();
            dropped((Messages.Drop) f.message);
            return;
        }
        if (!f.type.fromServer()) {
            f.close();
            ProtocolException e = new ProtocolException(ErrorCode.UNEXPECTED_FRAME, f.requestId, f.type
                    + " is sent by clients, not servers");
            rejected(e);
            return;
        }
        if (f.type == FrameType.ERROR && f.requestId == 0) {
            f.close();
            Messages.Error err = (Messages.Error) f.message;
            ErrorCode code = err.errorCode();
            SharingException e = new SharingException(code, "server: " + err.message() + " (" + (code == null
                    ? "code " + err.code() : code) + ")");
            // With request id 0, FD_COUNT_MISMATCH is about a header the server could not trust
            // (more than 253 fds before its 16th byte): fatal, the server closes (PROTOCOL.md 2).
            // (A non-fatal one carries the refused frame's id, and this client sends no frame with id 0
            // that the server answers: its only id-0 frames are ERRORs, which are never answered.)
            if (code == null || code.fatal() || code == ErrorCode.FD_COUNT_MISMATCH) {
                fail(e);
            } else {
                logger().log(System.Logger.Level.WARNING, e.getMessage());
            }
            return;
        }
        CompletableFuture<Frame> p = pending.remove(f.requestId);
        if (p != null && p.complete(f)) {
            token.delivered();
            return;
        }
        // Nobody waits (the request gave up first): close its fds and give back its lease.
        dispose(f);
    }

    /**
     * A bad frame from the server: tell it why, release a lease it granted (both sent by the
     * event thread: the reader never writes), fail the waiting request. A fatal {@code e}
     * comes only from {@link #readOne}, which ends the connection right after ({@link
     * #beginFatal} or {@link #failAfterQueuedSends}) and so fails the request: here its
     * refusal is only recorded as the connection's failure. (The ProtocolExceptions the
     * dispatch passes here, the import cache's and UNEXPECTED_FRAME, are never fatal.)
     */
    private void rejected(ProtocolException e) {
        sendLater(new Messages.Error(e.code(), "client rejected a frame: " + e.getMessage()), e.requestId());
        if (e.leaseId() != 0) sendLater(new Messages.Release(e.leaseId()), nextId());
        // The server counts the new ids of a rejected DESCRIPTOR as held: forget them, or it
        // would never send their fds again on this connection (PROTOCOL.md 13.3).
        if (e.descriptor != null) cache.rejected(e.descriptor);
        if (e.requestId() == 0) return;
        if (e.fatal()) {
            // A fatal one ends the connection (readOne's beginFatal follows on this thread): its
            // refusal becomes the connection's failure, and beginFatal fails the request with it
            // once the connection is over (failure recorded, import cache ended), so that its
            // caller sees isConnected() false (an independent CI run saw it true) and the cache's
            // counts gone (an independent probe saw its idle entry, id and fd still counted).
            if (pending.containsKey(e.requestId())) recordFailure(refusal(e));
            return;
        }
        CompletableFuture<Frame> p = pending.remove(e.requestId());
        if (p != null) {
            SharingException refusal = refusal(e);
            // Failed from the event thread, after the ERROR, RELEASE and FORGET queued above are
            // written: a caller that attaches again at once must not have its ATTACH overtake the
            // FORGET, or the server would name those ids without their fds (an independent
            // probe saw that in about 30% of retries at the fd limit). At once instead for a
            // request made on the event thread itself (a drop listener's: it would wait behind
            // itself for its whole timeout; its sends queue behind it anyway).
            Runnable fail = () -> {
                p.completeExceptionally(refusal);
                token.delivered();
            };
            if (p instanceof EventThreadReply) fail.run();
            else runLater(fail);
        }
    }

    /**
     * What the request whose reply was the bad frame {@code e} fails with: the code of the
     * client's rejection, or null when the frame was sound and its fds were lost here (the
     * kernel dropped them at this process's fd limit: a local failure, as SharingException's
     * {@code code()} documents).
     */
    private static SharingException refusal(ProtocolException e) {
        if (e.fdsDroppedHere) {
            return new SharingException(null, "the fds of the server's reply could not be received here: "
                    + e.getMessage(), e);
        }
        return new SharingException(e.code(), "the server sent a bad frame: " + e.getMessage(), e);
    }

    private int nextId() {
        int id;
        do {
            id = nextRequestId.getAndIncrement();
        } while (id == 0);
        return id;
    }

    /**
     * Sends {@code m} from the event thread. The reader never writes: a blocking send there
     * would stop it reading, and a server that stops reading while its own sends to us wait
     * (its send queue full) would then never be read again: both sides blocked in send.
     * False when the connection has ended (nothing to send to).
     */
    private boolean sendLater(Messages.Message m, int requestId) {
        try {
            events.execute(() -> sendQuietly(m, requestId));
            return true;
        } catch (java.util.concurrent.RejectedExecutionException e) {
            logger().log(System.Logger.Level.DEBUG, m.type() + " not sent: the connection has ended");
            return false;
        }
    }

    /**
     * Sends one frame, waiting for room in the socket's send buffer until {@code deadline} at
     * most ({@link FdSocket#send(byte[], int, int, int[], long)}): a server that stops reading
     * cannot hold a caller past its timeout (it could, while a send blocked until the server
     * read again). A frame not sent at all leaves the stream in step: a request fails alone,
     * unless {@code endOnTimeout} (every RELEASE and FORGET: unsent, the server would keep a
     * lease or an id this client has let go; ending the connection frees them there). A frame
     * sent in part leaves the server holding half a frame: the connection ends either way.
     *
     * @throws IOException when the deadline passed: its message says what was (not) sent and
     *     whether the connection ended; its cause is the {@link FdSocket.SendTimeoutException}
     */
    private void writeWithin(Messages.Message m, int requestId, int frameVersion, long deadline, boolean endOnTimeout)
            throws IOException {
        byte[] frame = Frame.encode(m, requestId, frameVersion);
        try {
            socket.send(frame, 0, frame.length, Frame.NO_FDS, deadline);
        } catch (FdSocket.SendTimeoutException e) {
            boolean partial = e.bytesTransferred > 0;
            IOException why = new IOException(m.type() + " to " + path + (partial ? ": " + e.bytesTransferred + " of "
                    + frame.length + " bytes sent" : " could not be sent") + " within " + timeout + ": the server is "
                    + "not reading (this connection's send buffer stayed full)" + (partial || endOnTimeout
                    ? "; the connection is closed" + (partial ? " (the server holds part of a frame)" : "") : ""), e);
            if (partial || endOnTimeout) fail(why);
            throw why;
        }
    }

    private void sendQuietly(Messages.Message m, int requestId) {
        try {
            writeWithin(m, requestId, wireVersion(), deadlineAfter(System.nanoTime(), timeoutNanos), true);
        } catch (IOException | RuntimeException e) {
            logger().log(System.Logger.Level.DEBUG, "sending " + m.type() + " failed: " + e);
        }
    }

    /**
     * Makes {@code a} the attachment of {@code leaseId}; true when a DROP for it arrived first
     * (the reader parked it in {@link #unclaimedDrops}). One monitor with {@link #dropped}'s
     * look-up: as two separate steps, a DROP read between the reader's miss and its park was
     * lost (the put and the claim both ran in that gap), and the consumer waited for it forever
     * (PooledProducerTest, seen under load once version 2's cached attach made the gap short).
     * Nothing but map operations runs under it.
     */
    private boolean register(long leaseId, Attachment a) {
        synchronized (dropClaims) {
            attachments.put(leaseId, a);
            return !unclaimedDrops.isEmpty() && unclaimedDrops.remove(leaseId); // no boxing in the usual case
        }
    }

    private void dropped(Messages.Drop d) {
        Attachment a;
        Attachment closedHolding; // closed, while an alias or view keeps its lease
        synchronized (dropClaims) {
            a = attachments.get(d.leaseId());
            closedHolding = a == null ? closedButHeld.get(d.leaseId()) : null;
            if (a == null && closedHolding == null) {
                // Its attach() has not registered it yet, or it was closed (or never granted).
                // Bounded, the oldest out first: a stale DROP goes before a recent one, which
                // may be an in-flight attach's (a clear() lost that one too).
                if (unclaimedDrops.add(d.leaseId()) && unclaimedDrops.size() > MAX_UNCLAIMED_DROPS) {
                    java.util.Iterator<Long> oldest = unclaimedDrops.iterator();
                    oldest.next();
                    oldest.remove();
                }
                return;
            }
        }
        // a null: closed, while an alias or view keeps the lease (DropNotice: attachment null);
        // that attachment's isDropped() says so all the same (an independent probe read false).
        if (a != null) a.markDropped();
        else closedHolding.markDropped();
        DropNotice notice = new DropNotice(d.leaseId(), d.name(), a);
        if (dropListeners.isEmpty()) return;
        // On this thread when the event thread is gone: the DROP arrived, but attach() claimed
        // it (register) only after the reader had read the end of the stream and shut the
        // event thread down; skipping it then lost a DROP that did arrive.
        runLater(() -> {
            for (Consumer<DropNotice> l : dropListeners) {
                try {
                    l.accept(notice);
                } catch (RuntimeException | Error e) {
                    // An Error too, as the server treats its listeners: the other listeners still
                    // hear this DROP (an AssertionError skipped them: an independent probe).
                    logger().log(System.Logger.Level.WARNING, "a DROP listener threw " + e, e);
                }
            }
        });
    }

    private void fail(IOException why) {
        // The connection is over before any request fails: a caller woken by its failure finds
        // isConnected() false and the import cache ended (its idle entries unmapped, its ids
        // and fds let go), as ImportCache.Stats says: "the moment ... the connection ends". The
        // requests were failed first, and an independent probe's caller saw the idle entry,
        // its id and its fd still counted. The socket is closed before the cache ends: a
        // buffer close on the event thread that the cache waits for may be sending a FORGET.
        recordFailure(why);
        socket.close();
        cache.connectionEnded();
        failRequests(why);
        token.end();
        events.shutdown(); // what is queued still runs (DROP listeners); then the thread ends
    }

    private void failRequests(IOException why) {
        recordFailure(why);
        for (long id : pending.keys()) {
            CompletableFuture<Frame> p = pending.remove(id);
            if (p != null) p.completeExceptionally(failure);
        }
        token.delivered();
    }

    /**
     * Records why the connection ended: the first reason stands, except that the server's own
     * (a SharingException, with its code) replaces a plain I/O one. The check and the write are
     * not atomic: a close() at the same moment may win, and either reason is a true one.
     */
    private void recordFailure(IOException why) {
        if (failure == null || (why instanceof SharingException && !(failure instanceof SharingException))) {
            failure = why;
        }
    }

    /**
     * A fatal bad frame (on the reader): the ERROR saying why is queued on the event thread,
     * which closes the connection after sending it. Meanwhile the reader keeps reading and
     * discarding (closing any fds), so a server blocked sending to us can go on to read that
     * ERROR; the close (or the server's) ends the draining.
     */
    private void failAfterQueuedSends(IOException why) {
        if (beginFatal(why)) drain();
    }

    /**
     * The first half of {@link #failAfterQueuedSends}, on any thread: fails the requests, queues
     * the close after the ERROR. False when nothing could be queued (the socket is closed now:
     * no drain).
     */
    private boolean beginFatal(IOException why) {
        recordFailure(why);
        cache.connectionEnded(); // before the requests fail, as in fail()
        failRequests(why);
        boolean queued;
        try {
            events.execute(socket::close);
            queued = true;
        } catch (java.util.concurrent.RejectedExecutionException e) {
            queued = false;
        }
        events.shutdown();
        if (!queued) {
            socket.close();
            token.end();
        }
        return queued;
    }

    /** The second half, on the reader thread: reads and discards until the socket is closed. */
    private void drain() {
        try {
            for (;;) {
                try (ReceivedMessage m = socket.receive(4096)) {
                    if (m.endOfStream()) break;
                } catch (FdTransferException e) {
                    // its fds were closed; keep draining
                }
            }
        } catch (IOException closed) {
            // closed after the ERROR went out: done
        }
        socket.close();
        token.end();
    }

    /**
     * Closes every open attachment (each closes its buffer and releases its lease), unmaps
     * what the import cache keeps (a view still open keeps its own mapping until it goes),
     * then the connection. When an alias or view of an attached buffer still maps the memory, the
     * connection stays open in the background, so the server keeps that lease, and closes
     * once the last such lease is released (see {@link Attachment}); no new request can be
     * made meanwhile, but the RELEASE of each such lease still goes out when its last mapping
     * goes (an attachment closed after this, or one an {@code attach} racing this call
     * returned, included; such an {@code attach} closes what it made and throws).
     * Idempotent: a second call closes what the first could not.
     *
     * <p>So the socket and the reader thread stay alive until the last alias or view of an
     * attached buffer is gone ({@link #pendingReleases()} reaches 0): for a view that is
     * never collected, or an alias never closed, that is unbounded. The deferral is logged at
     * DEBUG. {@link #closeNow()} ends the connection at once instead.
     *
     * <p>Each open attachment's release waits for its RELEASED, as {@link Attachment#close()}
     * does, until one is not answered within the client's timeout: the RELEASEs of the rest
     * are then sent without waiting for replies, so a server that stopped answering costs one
     * timeout, not one per attachment.
     *
     * @throws IllegalStateException when an attachment's buffer is in use on another thread
     *     (or this thread was interrupted while another thread was closing that attachment):
     *     that attachment stays open and keeps its lease (and so the connection); close it,
     *     or this client, again later. No new request is accepted meanwhile
     * @throws UncheckedIOException when the server did not answer a release in time (the
     *     attachments are closed all the same; their leases end with the connection at the
     *     latest)
     */
    @Override
    public void close() {
        // First: no new request from here on, and an attach() finishing now closes what it made.
        closed = true;
        RuntimeException refused = null;
        // Each release waits for its RELEASED until one is not answered in time: the server
        // is not answering, and N attachments would take N timeouts. From there on the
        // RELEASEs are sent without waiting (the event thread), and the connection ends once
        // they are out.
        boolean waitForReplies = true;
        for (Attachment a : attachments.values()) {
            try {
                a.close(waitForReplies);
            } catch (UncheckedIOException e) {
                waitForReplies = false;
                if (refused == null) refused = e;
                else refused.addSuppressed(e);
            } catch (RuntimeException e) {
                if (refused == null) refused = e;
                else refused.addSuppressed(e);
            }
        }
        cache.connectionEnded(); // no new attach: what it keeps mapped goes now (views keep their own)
        if (unreleased.isEmpty() || failure != null) {
            shutdownNow();
        } else {
            logger().log(System.Logger.Level.DEBUG, () -> "close() of the client of " + path + ": " + unreleased.size()
                    + " lease(s) still mapped by aliases or views (or attachments that refused to close); the "
                    + "connection stays open until the last is released");
        }
        if (refused != null) throw refused;
    }

    /**
     * Ends the connection at once, whatever still maps the memory, then closes the buffers of
     * the open attachments (no RELEASE is sent: the server frees every lease of this
     * connection when it ends). An attachment whose buffer is in use on another thread stays
     * open; close it later. Idempotent; also ends the background draining of {@link #close()}.
     *
     * <p><b>Hazard:</b> the producer gets back memory that an alias or view in this process
     * may still map. It may reuse it (a pool hands it to its next buffer, another consumer
     * attaches it): reads through those aliases and views then see someone else's data and
     * writes corrupt it. Use it when the process stops using that memory anyway (shutdown)
     * or the server must not wait for it.
     */
    public void closeNow() {
        closed = true;
        shutdownNow();
        for (Attachment a : attachments.values()) {
            try {
                a.close();
            } catch (RuntimeException e) {
                logger().log(System.Logger.Level.DEBUG, "closeNow(): " + a + " stays open: " + e.getMessage());
            }
        }
    }

    private void shutdownNow() {
        closed = true;
        if (failure == null) failure = new IOException("the client is closed");
        socket.close();
        token.end(); // a reader waiting for its turn stops; a leading caller wakes from its recvmsg or poll (the close shuts the socket down)
        try {
            if (Thread.currentThread() != reader) reader.join(5000);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        events.shutdown();
        cache.connectionEnded();
    }

    @Override
    public String toString() {
        return "SharingClient[" + path + ", " + attachments.size() + " attachments" + (isConnected() ? "" : ", closed")
                + "]";
    }
}
