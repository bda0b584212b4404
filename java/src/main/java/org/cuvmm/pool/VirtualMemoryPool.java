package org.cuvmm.pool;

import java.lang.management.ManagementFactory;
import java.lang.ref.Reference;
import java.lang.ref.ReferenceQueue;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.ThreadLocalRandom;
import java.util.concurrent.atomic.AtomicInteger;

import javax.management.InstanceAlreadyExistsException;
import javax.management.JMException;
import javax.management.MBeanServer;
import javax.management.MalformedObjectNameException;
import javax.management.ObjectName;
import javax.management.StandardMBean;

import org.cuvmm.BufferOrigin;
import org.cuvmm.CudaException;
import org.cuvmm.Stream;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.internal.Checks;
import org.cuvmm.internal.NativeCalls;

/**
 * Reuses the memory of closed buffers, so that a program allocating and freeing buffers of
 * repeated sizes makes no driver call after warming up. A pool hands out ordinary
 * {@link VirtualMemoryBuffer}s ({@link BufferOrigin#POOLED}); closing one returns its memory
 * to the pool, mapped and with its pages materialized, instead of unmapping and releasing it.
 *
 * <p>A pool keeps two lifetimes apart, each with its own free lists, retention cap and
 * accounting:
 *
 * <table class="striped">
 * <caption>Lifetimes</caption>
 * <thead>
 * <tr><th scope="col">Lifetime</th><th scope="col">Allocated by</th>
 *     <th scope="col">Memory returns to the pool when</th><th scope="col">For</th></tr>
 * </thead>
 * <tbody>
 * <tr><th scope="row">{@link PoolLifetime#LOCAL}</th><td>{@link #allocate(long)}</td>
 *     <td>the buffer is closed, unless it was ever exported (then its memory is released:
 *     an importer may still map it, and nothing says when it stops)</td>
 *     <td>buffers used only in this process</td></tr>
 * <tr><th scope="row">{@link PoolLifetime#EXPORTED}</th><td>{@link #allocateExported(long)}</td>
 *     <td>the owner has closed the buffer (usually {@link VirtualMemoryBuffer#closeWhenUnused()})
 *     <em>and</em> every {@linkplain VirtualMemoryBuffer#lease(String) lease} held for a consumer is
 *     gone</td><td>buffers shared with other processes</td></tr>
 * </tbody>
 * </table>
 *
 * <p>Requests are rounded up to a {@linkplain SizeClasses size class} (a multiple of the
 * resource's granularity); the buffer's {@link VirtualMemoryBuffer#size() size()} is the size
 * asked for, its {@link VirtualMemoryBuffer#mappedSize() mappedSize()} the class size, and a
 * reused buffer keeps its class. An allocation takes, in this order: the most recently freed
 * idle buffer of its class; an idle buffer of the smallest larger class within
 * {@link SizeClasses#MAX_REUSE_RATIO} times its class size; new memory from the resource.
 *
 * <pre>{@code
 * try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
 *      VirtualMemoryPool pool = VirtualMemoryPool.builder()
 *              .resource(resource)
 *              .name("inference")
 *              .retentionCap(PoolLifetime.LOCAL, 8L << 30)   // keep at most 8 GiB idle
 *              .registerMBeans(true)                          // visible in JConsole
 *              .build()) {
 *     for (int round = 0; round < rounds; round++) {
 *         try (VirtualMemoryBuffer scratch = pool.allocate(64 << 20)) {
 *             // ... after the first round: no driver call, no page fault
 *         }
 *     }
 *     VirtualMemoryBuffer output = pool.allocateExported(outputSize);
 *     BufferLease lease = output.lease("consumer pid 4242");   // one per consumer that imported it
 *     output.closeWhenUnused();   // back to the exported pool once every lease is closed
 * }
 * }</pre>
 *
 * <p><b>Retention.</b> Each lifetime keeps at most its {@linkplain #retentionCap retention cap}
 * of idle capacity; a release that goes over it evicts the least-recently-freed idle buffers
 * (their memory is unmapped and released). {@link #setRetentionCap} evicts at once when
 * lowered; {@link #trim()} releases every idle buffer. Live and leased buffers are never
 * evicted: the pool only ever sees memory whose buffer is closed.
 *
 * <p><b>Accounting.</b> {@link #stats(PoolLifetime)} returns live, retained and peak-live
 * bytes and counts, hits, misses and evictions; retained memory is never reported as live.
 * With {@link Builder#registerMBeans(boolean)} each lifetime is also a
 * {@link VirtualMemoryPoolMXBean} named {@code org.cuvmm:type=VirtualMemoryPool,name=<name>,lifetime=<local|exported>}.
 *
 * <p><b>Leaks.</b> Every pooled buffer is watched by its pool (a weak reference the pool
 * holds, no {@link java.lang.ref.Cleaner} registration). When one becomes unreachable without
 * being closed, the warning of {@link org.cuvmm.LeakDetection} is logged (and counted in
 * {@link org.cuvmm.LeakDetection#reportedLeaks()}), {@link PoolStats#leaks()} grows by one, and
 * its memory comes back through the pool's accounting like a close: live count and bytes go
 * down, and the memory is kept for reuse, except that a leaked exported buffer is released
 * instead (a consumer whose lease was lost with it may still map it). The leak is found after
 * a garbage collection found the buffer unreachable, at the pool's next miss, {@link #trim},
 * {@link #setRetentionCap}, {@link #stats} call, bean read or {@link #close}, on the thread
 * making that call (an open pool starts no thread; a pool closed while buffers are live starts
 * one, which takes back their leaks and ends when none is live). It is counted then; its
 * memory comes back then too when no stream work was recorded on the buffer, else only once
 * that work has completed, on cuvmm's release thread, or, when that thread cannot be
 * started, on the calling thread after waiting for the work (until then it stays live: neither
 * reused nor released under a queued copy or fill). The pool holds every range it made until it
 * releases it, so a leaked buffer's memory is never freed behind its back while the pool is
 * reachable. A pool dropped without {@link #close()} is the exception: once the pool itself
 * is unreachable, so are its slots and watches; its leaked (and idle) memory is then freed by
 * JavaCPP's deallocator with no warning and no count. Close every pool. One buffer in {@link Builder#leakSampleRate(int) leakSampleRate}
 * (64 by default) also records where it was allocated, when allocation sites are captured
 * ({@value org.cuvmm.LeakDetection#CAPTURE_PROPERTY}).
 *
 * <p><b>Streams.</b> {@link #allocate(long, Stream)} and {@link #allocateExported(long, Stream)}
 * allocate in a stream's order, and {@link VirtualMemoryBuffer#close(Stream)} of a pooled buffer
 * frees in a stream's order (as {@code cudaMallocAsync}/{@code cudaFreeAsync}, RMM's pool and
 * cuda.core's {@code allocate(size, stream)}/{@code deallocate(stream)} do):
 * <ul>
 * <li><em>Free.</em> {@code close(stream)} never blocks and returns the memory to the pool at
 *     once, tagged with an event the pool records on {@code stream} ({@code cuEventRecord}):
 *     the memory is free from that point of the stream on. The stream first waits
 *     ({@code cuStreamWaitEvent}) for the work the buffer recorded on other streams (its
 *     {@code *Async} operations, {@link VirtualMemoryBuffer#recordUse(Stream)}); work the
 *     buffer did not record, on another stream than {@code stream}, must be ordered before
 *     the free by the caller, as for {@code cudaFreeAsync}. From then on the memory counts as
 *     <em>retained</em>, not live.</li>
 * <li><em>Reuse on the same stream</em> (or on a stream already made to wait for the free):
 *     at once, with no driver call; stream order makes it safe. An allocation looks at up to 8
 *     idle buffers of its class (newest first, in its own free list) for one it can take
 *     without a call before it takes the newest. The buffer carries the free's event as a
 *     use recorded on that stream (no driver call), so its synchronous operations (on cuvmm's
 *     own stream) and {@code close()} also wait for the previous owner's pending work.</li>
 * <li><em>Reuse on another stream</em>: the allocating stream is made to wait for the free's
 *     event ({@code cuStreamWaitEvent}), counted in {@link PoolStats#streamWaits()}. Chosen
 *     over polling the event ({@code cuEventQuery}) because it is always exactly one call that
 *     never blocks the caller and never depends on timing: polling costs a call too, and when
 *     the free has not completed it would either add the wait anyway (two calls) or skip the
 *     memory and allocate new memory (a driver allocation for work that only had to be
 *     ordered). A wait on an event that already completed costs the stream nothing. The
 *     price: the allocating stream may start its work later than it could, when the freeing
 *     stream lags behind.</li>
 * <li><em>Reuse without a stream</em> ({@link #allocate(long)}, {@link #allocateExported(long)}):
 *     the caller may use the memory from the host at once, so the calling thread waits for a
 *     pending free's event ({@code cuEventSynchronize}), counted in {@link PoolStats#hostWaits()}.</li>
 * <li><em>{@code close()} without a stream</em> of a buffer with recorded stream work waits
 *     for that work before the memory returns (see {@link VirtualMemoryBuffer#close()}); an
 *     earlier stream-ordered free of the same memory that may still be pending keeps its tag,
 *     so the rules above still apply to it.</li>
 * <li><em>Events.</em> Each pooled range gets one event (timing disabled) on its first
 *     stream-ordered free and re-records it on every later one, so steady state creates none
 *     ({@link PoolStats#eventsCreated()} is at most the number of ranges, times the devices
 *     whose streams free them: frees on another device's stream take that device's event,
 *     made once); they are destroyed when the range is released. A free on a stream not yet ordered after an earlier pending free
 *     of the same memory first makes that stream wait for it (counted in
 *     {@code streamWaits}), so one event always covers all the memory's pending work.</li>
 * <li><em>Release.</em> Eviction, {@link #trim()}, {@link #setRetentionCap} and
 *     {@link #close()} never release memory a pending stream-ordered free still covers: memory
 *     whose event has not completed ({@code cuEventQuery}) is handed to cuvmm's release thread
 *     ("cuvmm-stream-release"), which releases it once the event completed
 *     ({@link PoolStats#deferredReleases()}); it is no longer counted as retained, and
 *     {@code trim()} counts it as released. None of these calls blocks on a stream, unless
 *     that thread cannot be started (for example {@code OutOfMemoryError}: "unable to create
 *     native thread"): then the calling thread waits for the event and releases the memory
 *     itself, and logs why.</li>
 * </ul>
 * Steady state, counted on the host driver: a same-stream allocate+free makes one driver call
 * ({@code cuEventRecord}), a cross-stream one two ({@code cuStreamWaitEvent}, {@code cuEventRecord});
 * each also checks that the device's context is current ({@code cuCtxGetCurrent}, as every
 * cuvmm operation does). No event is created, also when the buffer records uses of its own
 * (its {@code *Async} operations): those events come from a per-device cache. An allocation on a stream of another device than
 * the memory's is allowed (the event lives on the stream's device).
 *
 * <p>Thread-safe, with no lock shared by all threads on the allocate and release paths (see
 * the design document, "The pool"). Closing a pool releases its idle memory and stops
 * allocation; buffers still live stay valid, and their memory is released when they are
 * closed. The pool never closes its resource.
 *
 * <p><b>Aliases.</b> An alias ({@link VirtualMemoryResource#modifyAllocation}), a grown buffer
 * or a {@link VirtualMemoryBuffer#asByteBuffer() ByteBuffer view} of a pooled buffer shares its
 * memory. When the pooled buffer is closed while such a holder still shares the memory, the
 * pool does not reuse it (that would give two owners the same bytes): it drops its own
 * reference and forgets the slot, and the memory is unmapped and released when the last
 * holder is closed. So aliases that outlive a pooled buffer are safe, but they cost the pool
 * that slot: the next allocation of its class is a miss.
 */
public final class VirtualMemoryPool implements AutoCloseable {
    /** The JMX domain of the pool beans. */
    public static final String JMX_DOMAIN = "org.cuvmm";
    /**
     * The logger, looked up when a record is written, not when this class initializes: a
     * public entry point's first use at the fd limit must not touch logging before the
     * first-use check ({@code org.cuvmm.internal.FirstUse}), since logging's first use there
     * breaks it, and {@code java.security}, for the life of the JVM (an independent probe).
     */
    private static System.Logger logger() {
        return System.getLogger("org.cuvmm.pool");
    }
    private static final AtomicInteger POOL_NUMBER = new AtomicInteger();

    private final String name;
    private final VirtualMemoryResource resource;
    private final SizeClasses sizeClasses;
    private final int leakSampleRate;
    private final LifetimePool local;
    private final LifetimePool exported;
    private final List<ObjectName> registered = new ArrayList<>();
    /** Watches ({@link LeakWatch}) of this pool's buffers found unreachable; see {@link #drainLeaks()}. */
    private final ReferenceQueue<VirtualMemoryBuffer> leakQueue = new ReferenceQueue<>();
    private volatile boolean closed;
    /** True while this closed pool's leak thread runs ({@link #watchLeaksAfterClose}): at most one. */
    private final java.util.concurrent.atomic.AtomicBoolean leakWatcher = new java.util.concurrent.atomic.AtomicBoolean();

    private VirtualMemoryPool(Builder b) {
        this.name = b.name != null ? b.name : "pool-" + POOL_NUMBER.incrementAndGet();
        this.resource = b.resource;
        this.sizeClasses = SizeClasses.forGranularity(b.resource.granularity());
        this.leakSampleRate = b.leakSampleRate;
        this.local = new LifetimePool(this, PoolLifetime.LOCAL, sizeClasses, b.localCapBytes);
        this.exported = new LifetimePool(this, PoolLifetime.EXPORTED, sizeClasses, b.exportedCapBytes);
    }

    /** A builder; {@link Builder#resource} is the one required setting. */
    public static Builder builder() { return new Builder(); }

    /**
     * A process-local buffer of {@code reqSize} bytes: idle memory of its size class (or of a
     * slightly larger class) when there is some, else new memory from the resource. Closing
     * the buffer returns its memory to the {@link PoolLifetime#LOCAL} pool, unless the buffer
     * (or an alias of it) was ever exported ({@link VirtualMemoryBuffer#exportDescriptor()},
     * {@code exportChunks}, or publishing it): that memory is released instead of reused,
     * since another process may still map it (share buffers through {@link
     * #allocateExported(long)}, whose leases say when consumers are done).
     * {@code allocate(0)} returns the resource's empty buffer (no memory, not pooled).
     * Idle memory whose stream-ordered free ({@code close(stream)}) may still be pending is
     * handed out after the calling thread waits for that free's event
     * ({@code cuEventSynchronize}, as {@link org.cuvmm.Event#synchronize()}: a driver wait that
     * an interrupt does not end; the interrupt flag is left as it was). To never wait for a
     * pending free, use {@link #allocate(long, Stream)}, which orders that wait on the stream
     * instead (a miss still makes its driver calls on the calling thread).
     *
     * @param reqSize the size in bytes ({@code size()} of the result)
     * @return an open buffer whose {@code mappedSize()} is its size class
     * @throws IllegalArgumentException when {@code reqSize} is negative or larger than
     *     {@link SizeClasses#maxClassSize()}
     * @throws IllegalStateException when this pool is closed, when new memory is needed (or
     *     {@code reqSize} is 0: the empty buffer comes from the resource) and the resource is
     *     closed, or when called from a host function (no CUDA call may be made there; refused
     *     up front, whether or not the call would reach the driver)
     * @throws CudaException when new memory is needed and the driver fails (on
     *     {@code CUDA_ERROR_OUT_OF_MEMORY} the pool first trims its idle memory and retries once)
     */
    public VirtualMemoryBuffer allocate(long reqSize) {
        return allocate(local, reqSize, null);
    }

    /**
     * {@link #allocate(long)} in {@code stream}'s order: the buffer may be used by work queued on
     * {@code stream} from now on (and, on the host, once that stream has reached this point).
     * Reused memory freed with {@link VirtualMemoryBuffer#close(Stream)} on the same stream is
     * handed out with no driver call; memory whose stream-ordered free on another stream may
     * still be pending makes {@code stream} wait for that free's event first (one
     * {@code cuStreamWaitEvent}; the caller never blocks). Close the buffer with
     * {@code close(stream)} to give the memory back in stream order. See "Streams".
     * The previous owner's work that may still be pending counts as work recorded on the new
     * buffer on {@code stream} (no driver call): its synchronous operations, which run on
     * cuvmm's own stream, and its {@code close()} wait for it too.
     *
     * @param reqSize the size in bytes ({@code size()} of the result)
     * @param stream the stream the buffer is first used on
     * @return an open buffer whose {@code mappedSize()} is its size class
     * @throws NullPointerException when {@code stream} is null
     * @throws IllegalArgumentException as {@link #allocate(long)}
     * @throws IllegalStateException when {@code stream} is closed, or as {@link #allocate(long)}
     * @throws CudaException when the driver refuses the wait (the memory stays in the pool), or
     *     as {@link #allocate(long)}
     */
    public VirtualMemoryBuffer allocate(long reqSize, Stream stream) {
        return allocate(local, reqSize, requireOpen(stream));
    }

    /**
     * A buffer to share with other processes, of {@code reqSize} bytes, from the
     * {@link PoolLifetime#EXPORTED} pool. Lease it once per consumer
     * ({@link VirtualMemoryBuffer#lease(String)}; the sharing server does) and give it up with
     * {@link VirtualMemoryBuffer#closeWhenUnused()}: its memory returns to the pool only when
     * the owner has closed it and every lease is closed, so memory a consumer still maps is
     * never handed out again. {@code allocateExported(0)} returns the resource's empty buffer.
     *
     * @param reqSize the size in bytes ({@code size()} of the result)
     * @return an open, exportable buffer whose {@code mappedSize()} is its size class
     * @throws IllegalArgumentException when {@code reqSize} is negative or larger than
     *     {@link SizeClasses#maxClassSize()}
     * @throws IllegalStateException when this pool is closed, when the resource cannot export
     *     (handle type not {@code POSIX_FD}), or when new memory is needed (or {@code reqSize}
     *     is 0: the empty buffer comes from the resource) and the resource is closed, or when
     *     called from a host function (as {@link #allocate(long)})
     * @throws CudaException when new memory is needed and the driver fails (on
     *     {@code CUDA_ERROR_OUT_OF_MEMORY} the pool first trims its idle memory and retries once)
     */
    public VirtualMemoryBuffer allocateExported(long reqSize) {
        checkExportable();
        return allocate(exported, reqSize, null);
    }

    /**
     * {@link #allocateExported(long)} in {@code stream}'s order, with the reuse rules of
     * {@link #allocate(long, Stream)}. Its memory returns to the pool as after
     * {@link #allocateExported(long)}: with {@link VirtualMemoryBuffer#close(Stream)} (in stream
     * order) when no lease holds it, else with {@link VirtualMemoryBuffer#closeWhenUnused()}
     * (host order, once the last lease is gone and the recorded stream work completed). Before a
     * consumer in another process uses the memory, the owner must have waited for its own stream
     * work (as for any exported buffer): the consumer's streams are not ordered with ours.
     *
     * @throws NullPointerException when {@code stream} is null
     * @throws IllegalStateException when {@code stream} is closed, or as {@link #allocateExported(long)}
     * @throws CudaException as {@link #allocate(long, Stream)}
     */
    public VirtualMemoryBuffer allocateExported(long reqSize, Stream stream) {
        checkExportable();
        return allocate(exported, reqSize, requireOpen(stream));
    }

    private void checkExportable() {
        if (!resource.isIpcEnabled()) {
            throw new IllegalStateException("allocateExported: pool " + name + " allocates from a resource with handle "
                    + "type " + resource.options().handleType() + " (expected: POSIX_FD; build the pool over a resource "
                    + "created with VirtualMemoryResourceOptions.builder().handleType(HandleType.POSIX_FD))");
        }
    }

    private static Stream requireOpen(Stream stream) {
        Checks.notNull("stream", stream);
        if (stream.isClosed()) {
            throw new IllegalStateException("stream: " + stream + " is closed (expected: an open stream to allocate on)");
        }
        return stream;
    }

    private VirtualMemoryBuffer allocate(LifetimePool lifetimePool, long reqSize, Stream stream) {
        Checks.nonNegative("reqSize", reqSize);
        // Up front: a miss (or a leak taken back on the way) calls the driver; refuse whether or not it would.
        NativeCalls.refuseInsideHostFunction("VirtualMemoryPool.allocate");
        if (closed) {
            throw new IllegalStateException("pool " + name + " is closed; allocate from an open pool, or from the "
                    + "resource directly");
        }
        if (reqSize == 0) return resource.allocate(0);
        VirtualMemoryBuffer b = lifetimePool.allocate(reqSize, stream, sampleForAllocationSite());
        // A close() that ran while this allocation was inside the driver counted no live
        // buffer, so it started no leak thread; this one is counted live now (the counter
        // written, then `closed` read: the close wrote `closed`, then read the counters, so
        // one of the two sees the other). Found by an independent probe.
        if (closed) watchLeaksAfterClose();
        return b;
    }

    /** One allocation in leakSampleRate records its site (when sites are captured at all). */
    private boolean sampleForAllocationSite() {
        int rate = leakSampleRate;
        return rate == 1 || (rate > 1 && ThreadLocalRandom.current().nextInt(rate) == 0);
    }

    /**
     * Releases every idle buffer of both lifetimes (unmap, release, free in the driver);
     * live and leased buffers are untouched. A closed buffer whose memory the pool keeps is
     * idle by the time {@link #stats} no longer counts it as live, also while its
     * {@code close()} has not yet returned on another thread: a trim called after that reading
     * releases the memory, unless an allocation took it again or the retention cap evicted it
     * meanwhile.
     *
     * @return the capacity released, in bytes
     * @throws IllegalStateException when called from a host function (no CUDA call may be made there)
     */
    public long trim() {
        NativeCalls.refuseInsideHostFunction("VirtualMemoryPool.trim");
        drainLeaks();
        return local.trim() + exported.trim();
    }

    /**
     * Releases every idle buffer of one lifetime, as {@link #trim()} does.
     *
     * @return the capacity released, in bytes
     * @throws NullPointerException when {@code lifetime} is null
     * @throws IllegalStateException when called from a host function (no CUDA call may be made there)
     */
    public long trim(PoolLifetime lifetime) {
        LifetimePool p = of(lifetime);
        NativeCalls.refuseInsideHostFunction("VirtualMemoryPool.trim");
        drainLeaks();
        return p.trim();
    }

    /**
     * The most idle capacity {@code lifetime} keeps, in bytes; {@link Long#MAX_VALUE} when
     * unbounded.
     *
     * @throws NullPointerException when {@code lifetime} is null
     */
    public long retentionCap(PoolLifetime lifetime) {
        return of(lifetime).retentionCap();
    }

    /**
     * Sets the most idle capacity {@code lifetime} keeps. When the idle capacity is above the
     * new cap, the least-recently-freed idle buffers are released at once until it fits. A
     * single buffer larger than the cap is released when it is closed instead of kept.
     *
     * @param capBytes the cap in bytes, 0 (keep nothing idle) to {@link Long#MAX_VALUE} (unbounded)
     * @return the capacity released now, in bytes
     * @throws IllegalArgumentException when {@code capBytes} is negative
     * @throws NullPointerException when {@code lifetime} is null
     * @throws IllegalStateException when called from a host function (as {@link #trim()}: the
     *     release it may make is a CUDA call)
     */
    public long setRetentionCap(PoolLifetime lifetime, long capBytes) {
        NativeCalls.refuseInsideHostFunction("VirtualMemoryPool.setRetentionCap");
        LifetimePool p = of(lifetime);
        Checks.nonNegative("capBytes", capBytes);
        drainLeaks();
        return p.setRetentionCap(capBytes);
    }

    /**
     * A snapshot of {@code lifetime}'s accounting.
     *
     * @throws NullPointerException when {@code lifetime} is null
     */
    public PoolStats stats(PoolLifetime lifetime) {
        LifetimePool p = of(lifetime);
        drainLeaks();
        return p.snapshot();
    }

    /**
     * Returns when every release this pool handed to cuvmm's release thread so far has run (the
     * thread has no pending task: it runs them as their events complete, in any order); for
     * tests. Bounded: throws after {@code seconds}.
     */
    void awaitDeferredReleases(long seconds) throws InterruptedException {
        if (!org.cuvmm.internal.BufferAccess.get().awaitReleasesIdle(seconds * 1000)) {
            throw new IllegalStateException("the release thread did not drain in " + seconds + " s");
        }
    }

    /** The queue every {@link LeakWatch} of this pool is registered with. */
    ReferenceQueue<VirtualMemoryBuffer> leakQueue() { return leakQueue; }

    /**
     * Takes back every buffer of this pool the garbage collector has found unreachable since
     * the last call ({@link LifetimePool#leaked}: warned, counted, recycled). Called on the slow
     * paths only: a miss, {@link #trim}, {@link #setRetentionCap}, {@link #stats}, the beans'
     * reads and {@link #close}. Any thread may call it, several at once; never throws.
     *
     * @return the number of leaks taken back (watches of buffers closed in time are not counted)
     */
    int drainLeaks() {
        int n = 0;
        for (Reference<? extends VirtualMemoryBuffer> r; (r = leakQueue.poll()) != null; ) {
            LeakWatch w = (LeakWatch) r;
            if (w.slot.home.leaked(w.slot, w)) n++;
        }
        return n;
    }

    /** The size classes requests are rounded up to. */
    public SizeClasses sizeClasses() { return sizeClasses; }

    public String name() { return name; }

    /** The resource new memory comes from. */
    public VirtualMemoryResource resource() { return resource; }

    /**
     * One pooled buffer in this many records where it was allocated, for the leak warning
     * (when {@value org.cuvmm.LeakDetection#CAPTURE_PROPERTY} is true); 0 when none does.
     * Every pooled buffer is watched for leaks whatever this is.
     */
    public int leakSampleRate() { return leakSampleRate; }

    /**
     * The JMX name of {@code lifetime}'s bean:
     * {@code org.cuvmm:type=VirtualMemoryPool,name=<name>,lifetime=<local|exported>} (the name
     * is quoted when it holds characters an object name cannot). The bean exists only when
     * the pool was built with {@link Builder#registerMBeans(boolean) registerMBeans(true)}
     * and is not yet closed.
     *
     * @throws NullPointerException when {@code lifetime} is null
     */
    public ObjectName objectName(PoolLifetime lifetime) {
        Checks.notNull("lifetime", lifetime);
        String value = name;
        if (!value.matches("[A-Za-z0-9._\\-]+")) value = ObjectName.quote(value);
        try {
            return new ObjectName(JMX_DOMAIN + ":type=VirtualMemoryPool,name=" + value + ",lifetime=" + lifetime.key());
        } catch (MalformedObjectNameException e) {
            throw new IllegalStateException("pool name " + name + " makes no valid JMX object name", e);
        }
    }

    public boolean isClosed() { return closed; }

    /**
     * Stops allocation, releases every idle buffer and unregisters the beans. Buffers still
     * live stay valid; their memory is released, not kept, when they are closed. Idempotent;
     * never throws (failures are logged). Called from a host function (where no CUDA call may
     * be made), the pool is closed at once and a thread of its own ("cuvmm-pool-close")
     * releases the idle memory and unregisters the beans.
     */
    @Override
    public void close() {
        synchronized (registered) {
            if (closed) return;
            closed = true;
        }
        if (NativeCalls.insideHostFunction()) {
            startDaemon("cuvmm-pool-close " + name, this::releaseAfterClose,
                    "its idle memory stays until trim() is called, and its beans stay registered");
            return;
        }
        releaseAfterClose();
    }

    /**
     * Starts a daemon thread that inherits neither the caller's thread-locals nor its context
     * class loader (so it pins no application's loader; see the design's leak tracking). A
     * thread that cannot start is logged with {@code otherwise}, what then happens instead.
     */
    private boolean startDaemon(String threadName, Runnable work, String otherwise) {
        try {
            Thread t = new Thread(null, work, threadName, 0, false);
            t.setDaemon(true);
            t.setContextClassLoader(null);
            t.start();
            return true;
        } catch (OutOfMemoryError | RuntimeException e) {
            logger().log(System.Logger.Level.WARNING, "pool " + name + ": cannot start " + threadName + " (" + e + "); "
                    + otherwise, e);
            return false;
        }
    }

    /** The release work of {@link #close()}: takes back the leaks found so far, then everything idle. */
    private void releaseAfterClose() {
        try {
            trim();
        } catch (RuntimeException e) {
            logger().log(System.Logger.Level.WARNING, "pool " + name + ": releasing its idle memory at close failed", e);
        }
        unregisterMBeans();
        watchLeaksAfterClose();
    }

    private long liveBuffers() {
        return stats(PoolLifetime.LOCAL).liveCount() + stats(PoolLifetime.EXPORTED).liveCount();
    }

    /**
     * Buffers still live at close are released when they are closed; one leaked instead would
     * be taken back only by a later call on the pool ({@link #stats}), which a closed pool may
     * never get. So a pool closed with live buffers starts one daemon thread that waits for
     * their leaks and takes them back (warned, counted, released), and ends once none is live.
     */
    private void watchLeaksAfterClose() {
        // At most one such thread: the close and any allocation that raced it may both ask.
        if (liveBuffers() == 0 || !leakWatcher.compareAndSet(false, true)) return;
        boolean started = startDaemon("cuvmm-pool-leaks " + name, () -> {
            boolean watching = true; // this thread holds leakWatcher
            try {
                while (watching) {
                    while (liveBuffers() > 0) {
                        // Looks again every 100 ms: the thread ends soon after the last live buffer
                        // is closed (nothing wakes it then), so a check of the process's threads
                        // right after that sees it gone.
                        Reference<? extends VirtualMemoryBuffer> r = leakQueue.remove(100);
                        if (r == null) continue;
                        LeakWatch w = (LeakWatch) r;
                        w.slot.home.leaked(w.slot, w);
                        drainLeaks();
                    }
                    // Off, then one more look: an allocation that raced the close and went live
                    // after the look above found this thread still on and started none.
                    leakWatcher.set(false);
                    watching = false; // not held from here until the compare-and-set below succeeds
                    watching = liveBuffers() > 0 && leakWatcher.compareAndSet(false, true);
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            } catch (RuntimeException e) {
                logger().log(System.Logger.Level.WARNING, "pool " + name + ": taking back a leaked buffer after close failed",
                        e);
            } finally {
                if (watching) leakWatcher.set(false); // ended by an exception or Error: a later need starts another
            }
        }, "a buffer leaked after the close is taken back only at a later stats() call");
        if (!started) leakWatcher.set(false);
    }

    @Override
    public String toString() {
        return "VirtualMemoryPool[" + name + ", " + sizeClasses.count() + " classes of " + sizeClasses.granularity()
                + "-byte granules" + (closed ? ", closed" : "") + "]";
    }

    LifetimePool of(PoolLifetime lifetime) {
        Checks.notNull("lifetime", lifetime);
        return lifetime == PoolLifetime.LOCAL ? local : exported;
    }

    private void registerMBeans() {
        MBeanServer server = ManagementFactory.getPlatformMBeanServer();
        synchronized (registered) {
            for (PoolLifetime lifetime : PoolLifetime.values()) {
                ObjectName objectName = objectName(lifetime);
                try {
                    server.registerMBean(new StandardMBean(new PoolMXBeanImpl(this, of(lifetime), objectName),
                            VirtualMemoryPoolMXBean.class, true), objectName);
                    registered.add(objectName);
                } catch (InstanceAlreadyExistsException e) {
                    unregisterMBeans();
                    throw new IllegalStateException("name: " + name + " (expected: a name no other registered pool "
                            + "uses; " + objectName + " is already registered)", e);
                } catch (JMException e) {
                    unregisterMBeans();
                    throw new IllegalStateException("registering " + objectName + " failed: " + e, e);
                }
            }
        }
    }

    private void unregisterMBeans() {
        synchronized (registered) {
            // Nothing registered (registerMBeans(false), the default): no JMX at all. The
            // platform MBean server loads a native library on first use, which a close at the
            // open-file limit cannot do (an independent probe: close() threw
            // UnsatisfiedLinkError for a pool that never registered anything).
            if (registered.isEmpty()) return;
            MBeanServer server;
            try {
                server = ManagementFactory.getPlatformMBeanServer();
            } catch (RuntimeException | LinkageError e) {
                String names = registered.toString();
                registered.clear(); // first: the log below may fail too
                logger().log(System.Logger.Level.WARNING, "pool " + name + ": unregistering " + names + " failed", e);
                return;
            }
            for (ObjectName objectName : registered) {
                try {
                    server.unregisterMBean(objectName);
                } catch (JMException | RuntimeException e) {
                    logger().log(System.Logger.Level.WARNING, "pool " + name + ": unregistering " + objectName + " failed",
                            e);
                }
            }
            registered.clear();
        }
    }

    /**
     * Settings of a {@link VirtualMemoryPool}, validated by {@link #build()}.
     *
     * <table class="striped">
     * <caption>Settings and defaults</caption>
     * <tr><th>setting</th><th>default</th></tr>
     * <tr><td>{@link #resource}</td><td>none: required</td></tr>
     * <tr><td>{@link #name}</td><td>"pool-N", N counting pools in this process</td></tr>
     * <tr><td>{@link #retentionCap}</td><td>{@link Long#MAX_VALUE} (unbounded) for both lifetimes</td></tr>
     * <tr><td>{@link #leakSampleRate}</td><td>64: one pooled buffer in 64 records its allocation site</td></tr>
     * <tr><td>{@link #registerMBeans}</td><td>false</td></tr>
     * </table>
     */
    public static final class Builder {
        /** Default of {@link #leakSampleRate(int)}: a stack trace per allocation costs far more than the allocation. */
        public static final int DEFAULT_LEAK_SAMPLE_RATE = 64;

        private VirtualMemoryResource resource;
        private String name;
        private long localCapBytes = Long.MAX_VALUE;
        private long exportedCapBytes = Long.MAX_VALUE;
        private int leakSampleRate = DEFAULT_LEAK_SAMPLE_RATE;
        private boolean registerMBeans;

        private Builder() {}

        /** The resource new memory comes from (required). The pool does not close it. */
        public Builder resource(VirtualMemoryResource resource) {
            this.resource = resource;
            return this;
        }

        /** The pool's name, in messages and JMX object names; null (the default) names it "pool-N". */
        public Builder name(String name) {
            this.name = name;
            return this;
        }

        /** The most idle capacity {@code lifetime} keeps, in bytes ({@link Long#MAX_VALUE}: unbounded). */
        public Builder retentionCap(PoolLifetime lifetime, long capBytes) {
            Checks.notNull("lifetime", lifetime);
            if (lifetime == PoolLifetime.LOCAL) localCapBytes = capBytes;
            else exportedCapBytes = capBytes;
            return this;
        }

        /**
         * Record where one pooled buffer in {@code rate} was allocated, so that its leak warning
         * names the site: 1 every buffer, 0 none. Sites are recorded only while
         * {@value org.cuvmm.LeakDetection#CAPTURE_PROPERTY} is true, and sampled because a stack
         * trace costs far more than a pooled allocation. Leaks themselves are detected, warned
         * and counted for every pooled buffer, whatever the rate.
         */
        public Builder leakSampleRate(int rate) {
            this.leakSampleRate = rate;
            return this;
        }

        /** Register one {@link VirtualMemoryPoolMXBean} per lifetime with the platform MBean server. */
        public Builder registerMBeans(boolean register) {
            this.registerMBeans = register;
            return this;
        }

        /**
         * @throws NullPointerException when no resource was set
         * @throws IllegalArgumentException when the name is blank, a cap is negative, or the
         *     sample rate is negative
         * @throws IllegalStateException when the resource is closed, or the beans are to be
         *     registered and another pool already registered this name, or the JVM's first
         *     platform MBean server would be made at the open-file limit (the message names
         *     RLIMIT_NOFILE; a later build tries again)
         */
        public VirtualMemoryPool build() {
            if (resource == null) {
                throw new NullPointerException("resource: null (expected: the VirtualMemoryResource the pool "
                        + "allocates from; set it with VirtualMemoryPool.builder().resource(resource))");
            }
            if (resource.isClosed()) {
                throw new IllegalStateException("resource: " + resource + " is closed (expected: an open resource)");
            }
            if (name != null && name.isBlank()) {
                throw new IllegalArgumentException("name: \"" + name + "\" (expected: a non-blank name, or none for "
                        + "pool-N)");
            }
            if (localCapBytes < 0) {
                throw new IllegalArgumentException("retentionCap(LOCAL): " + localCapBytes + " (expected: >= 0 bytes)");
            }
            if (exportedCapBytes < 0) {
                throw new IllegalArgumentException("retentionCap(EXPORTED): " + exportedCapBytes
                        + " (expected: >= 0 bytes)");
            }
            if (leakSampleRate < 0) {
                throw new IllegalArgumentException("leakSampleRate: " + leakSampleRate + " (expected: 1 to record the "
                        + "allocation site of every buffer, N of one in N, 0 of none)");
            }
            if (registerMBeans) {
                // Before the pool exists: nothing to undo (FirstUse.prepareManagement says why).
                String shortage = org.cuvmm.internal.FirstUse.prepareManagement();
                if (shortage != null) {
                    throw new IllegalStateException("registerMBeans: true, and the process is at its open-file limit "
                            + "(RLIMIT_NOFILE): " + shortage + "; close fds or raise the limit (ulimit -n), or build "
                            + "with registerMBeans(false). Nothing was made or registered, and the JDK's management "
                            + "library was not loaded (a load that ran out of fds would disable JMX for the JVM)");
                }
            }
            VirtualMemoryPool pool = new VirtualMemoryPool(this);
            if (registerMBeans) pool.registerMBeans();
            return pool;
        }
    }
}
