package org.cuvmm.pool;

import java.util.ArrayList;
import java.util.List;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicLongArray;
import java.util.concurrent.atomic.AtomicReferenceArray;
import java.util.concurrent.atomic.LongAdder;
import java.util.concurrent.locks.ReentrantLock;

import org.cuvmm.CudaException;
import org.cuvmm.Event;
import org.cuvmm.Stream;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.internal.BufferAccess;
import org.cuvmm.internal.NativeCalls;
import org.cuvmm.internal.jni.NativeRangeHandle;

/**
 * One lifetime of a {@link VirtualMemoryPool} (the "arena"): free lists per size class,
 * retention cap with least-recently-freed eviction, trim, and accounting.
 *
 * <h2>Structures and locks</h2>
 * <ul>
 * <li>Per size class, {@code stripes} free lists ({@link FreeListStripe}): a doubly linked list of
 *     idle {@link PoolSlot}s, newest first, guarded by the stripe's own lock (a padded field,
 *     not the object's monitor: see {@link FreeListStripe} for why). A thread
 *     pushes to and pops from "its" stripe (a round-robin index given to each thread on first
 *     use) and looks at the class's other stripes only when its own is empty, so threads
 *     working on the same class do not meet on one lock. The locks guard list links only:
 *     no driver call, allocation or logging happens while one is held.</li>
 * <li>A bitmask of classes that may have idle buffers ({@link #nonEmptyHint}), so the
 *     larger-class search and eviction look only at non-empty classes. It is a hint: a push
 *     sets its class's bit after linking, a search that finds a class empty clears the bit
 *     and then re-checks the class (both sides use volatile accesses, so a bit can be
 *     wrongly set, never wrongly clear once both finish).</li>
 * <li>{@link #evictionLock}: taken only when the retained capacity exceeds the cap (and by
 *     {@link #setRetentionCap}); it serializes the choice of victims. Victims are released
 *     after it is unlocked.</li>
 * <li>Accounting: no counter shared by all threads is written on the hot path. Live
 *     bytes, live count, requested bytes and hits go to the thread's {@link AccountingCell}
 *     (one padded line per stripe index); totals are sums over the cells. Retained capacity
 *     is not counted on the hot path at all: it is the footprint (the capacity of every slot
 *     not yet released, {@link #footprintBytes}, written only when memory is created or
 *     released) minus the live capacity, bounded by what the free lists hold (their counts,
 *     summed on the slow paths only: {@link #retained}). The two checks that need a total skip the sum
 *     when a bound settles them: live capacity never exceeds the footprint, so an allocation
 *     cannot set a new peak while the footprint is at most the peak, and a release cannot
 *     exceed the cap while the footprint is at most the cap. In steady state both usually
 *     hold, and an allocate/release pair writes only the thread's own cell, stripe and
 *     slot. Rare events (misses, evictions, trims, leaks) use {@link LongAdder}s and
 *     atomics. A kept slot stops counting as live under its stripe's lock, right after it is
 *     linked ({@link #push}): once a reader sees the live count drop, {@link #trim} finds the
 *     slot, and no allocation counts it live while the return still does.</li>
 * </ul>
 *
 * <p>Expensive work ({@code cuMemCreate} and friends on a miss, unmap/release/free when a
 * range is released) always runs with no lock of the pool held.
 *
 * <h2>Streams</h2>
 * A stream-ordered free ({@link #recycleOnStream}) records the slot's own event on the stream
 * and tags the slot ({@code pending}, {@code recordedOn}, {@code waitedBy} in
 * {@link PoolSlotFields}); a taker not ordered after the tag waits for the event
 * ({@link #orderAfterFree}); {@link #release} hands a slot whose event has not completed to
 * cuvmm's release thread. The rules and their reasons: {@link VirtualMemoryPool}, "Streams".
 */
final class LifetimePool {
    private static final System.Logger LOG = System.getLogger("org.cuvmm.pool");
    private static final BufferAccess.Bridge BRIDGE = BufferAccess.get();
    /** CUresult CUDA_ERROR_OUT_OF_MEMORY: the one failure after which a trim and one retry can help. */
    private static final int CUDA_ERROR_OUT_OF_MEMORY = 2;
    /**
     * Test seam: run by {@link #allocate} once it has its memory, right before the buffer is
     * counted live (tests close the pool there, the window a close racing an allocation
     * hits). Null: nothing.
     */
    static volatile Runnable beforeCountedLive;
    /**
     * Test seam: run on the returning thread right after a returned slot's live count dropped
     * ({@link #countReturned}); for a kept slot that is under its stripe's lock, so the seam
     * must not touch that stripe itself (tests read the accounting and trim from another
     * thread there). Null: nothing.
     */
    static volatile Runnable afterLiveCountDroppedForTest;
    /**
     * Test seam: run on the returning thread by {@link #keep} for a slot it is about to link
     * (kept, not released), before the link; no lock of the pool is held (tests change the
     * retention cap there). Null: nothing.
     */
    static volatile Runnable beforePushForTest;
    /**
     * Test seam: run by {@link #allocate} right after the buffer is counted live, before the
     * peak check (tests read the accounting and close another buffer there). Null: nothing.
     */
    static volatile Runnable afterCountedLiveForTest;
    /**
     * Test seam: run by {@link #liveCount()} (a reader's sum, never the hot path) after it read
     * cell {@code i}, with {@code i}. Null: nothing.
     */
    static volatile java.util.function.IntConsumer afterCellReadForTest;
    /** Stripes per class: the CPU count rounded up to a power of two, at most this many. */
    private static final int MAX_STRIPES = 64;
    private static final AtomicInteger NEXT_PROBE = new AtomicInteger();
    /** Each thread's stripe index (before masking), given round-robin on first use. */
    private static final ThreadLocal<Integer> PROBE = ThreadLocal.withInitial(NEXT_PROBE::getAndIncrement);
    /** Slots of a stripe an allocation looks at for one it can use without a driver call. */
    private static final int PREFERENCE_SCAN = 8;

    private final VirtualMemoryPool pool;
    private final PoolLifetime lifetime;
    private final SizeClasses classes;
    private final int stripeMask;
    /** sizeIdx -> that class's stripes, created on the class's first release. */
    private final AtomicReferenceArray<FreeListStripe[]> freeLists;
    /** Bit sizeIdx set: class sizeIdx may have idle buffers (see the class comment). */
    private final AtomicLongArray nonEmptyHint;

    /** Stripe index -> the hot counters of the threads with that index. */
    private final AccountingCell[] cells;
    private final AtomicLong peakLiveBytes = new AtomicLong();
    /**
     * Capacity of every slot not yet released (live, idle, or in between). Retained is at most
     * footprint - live, and at most what the free lists hold ({@link #retained}).
     */
    private final AtomicLong footprintBytes = new AtomicLong();
    /** Slots not yet released. Retained count is at most slots - live count ({@link #retained}). */
    private final AtomicLong slots = new AtomicLong();
    private final LongAdder misses = new LongAdder();
    private final LongAdder evictions = new LongAdder();
    private final LongAdder evictedBytes = new LongAdder();
    private final LongAdder trimmedBytes = new LongAdder();
    private final LongAdder leaks = new LongAdder();
    private final LongAdder streamWaits = new LongAdder();
    private final LongAdder hostWaits = new LongAdder();
    private final LongAdder eventsCreated = new LongAdder();
    private final LongAdder deferredReleases = new LongAdder();
    /**
     * Every slot not yet released (live, idle, or in between), added on a miss and removed
     * by {@link #forget}. It keeps each slot, its range and its buffer's {@link LeakWatch}
     * reachable from the pool rather than only from the buffer, so a leaked buffer's range is
     * not freed behind the pool's back by JavaCPP's deallocator, and its watch is enqueued.
     * Touched only on a miss and when memory is released, never on the hot path.
     */
    private final Set<PoolSlot> allSlots = ConcurrentHashMap.newKeySet();
    private volatile long retentionCapBytes;
    private final ReentrantLock evictionLock = new ReentrantLock();

    LifetimePool(VirtualMemoryPool pool, PoolLifetime lifetime, SizeClasses classes, long retentionCapBytes) {
        this.pool = pool;
        this.lifetime = lifetime;
        this.classes = classes;
        this.retentionCapBytes = retentionCapBytes;
        int cpus = Math.min(MAX_STRIPES, Math.max(1, Runtime.getRuntime().availableProcessors()));
        int stripes = cpus == 1 ? 1 : Integer.highestOneBit(cpus - 1) << 1;
        this.stripeMask = stripes - 1;
        this.cells = new AccountingCell[stripes];
        for (int i = 0; i < stripes; i++) cells[i] = new AccountingCell();
        this.freeLists = new AtomicReferenceArray<>(classes.count());
        this.nonEmptyHint = new AtomicLongArray((classes.count() + 63) >>> 6);
    }

    PoolLifetime lifetime() { return lifetime; }

    // ---- allocate ----

    /**
     * A buffer of {@code reqSize} (1 to the largest class) bytes: an idle buffer of its class,
     * else of the smallest larger class within the reuse limit, else new memory. Every buffer
     * is watched for a leak; {@code recordSite}: also record where it was allocated (when
     * {@link org.cuvmm.LeakDetection} captures sites).
     */
    VirtualMemoryBuffer allocate(long reqSize, Stream stream, boolean recordSite) {
        int sizeIdx = classes.sizeIdx(reqSize);
        int probe = PROBE.get();
        Object key = stream == null ? null : BRIDGE.streamKey(stream);
        boolean hit = true;
        boolean largerClass = false;
        PoolSlot slot = takeIdle(sizeIdx, probe, key);
        if (slot == null) {
            slot = takeLarger(sizeIdx, probe, key);
            if (slot != null) {
                largerClass = true;
            } else {
                // Before making new memory, take back what leaked: a leaked slot of this class
                // is reused instead (the slow path is the only place the leak queue is read).
                if (pool.drainLeaks() > 0) slot = takeIdle(sizeIdx, probe, key);
                if (slot == null) {
                    slot = newSlot(sizeIdx);
                    hit = false;
                    misses.increment();
                }
            }
        }
        if (hit && !FreeListStripe.readyFor(slot, key)) orderAfterFree(slot, stream, key, probe);
        Runnable seam = beforeCountedLive;
        if (seam != null) seam.run();
        cells[probe & stripeMask].allocated(slot.classSize, reqSize, hit, largerClass);
        seam = afterCountedLiveForTest;
        if (seam != null) seam.run();
        // live <= footprint, so no new peak is possible while the footprint is at most the peak.
        // Read now, not at the increment: a buffer returned meanwhile and not kept has left both
        // live and the footprint, so a live total that held for an instant can be missed here.
        // Whoever read that total (stats(), the bean's MemoryUsed) raised the peak to it itself.
        if (footprintBytes.get() > peakLiveBytes.get()) raisePeak(sumLiveBytes());
        slot.markLive(reqSize);
        VirtualMemoryBuffer buffer;
        try {
            // No cleaner registration: the pool watches the buffer itself (LeakWatch).
            buffer = BRIDGE.wrap(pool.resource(), slot.range, reqSize, slot);
        } catch (RuntimeException | Error e) {
            recycle(slot, slot.range, false); // no buffer owns the range: take it back
            throw e;
        }
        try {
            slot.setWatch(new LeakWatch(buffer, slot, recordSite ? BRIDGE.captureSite() : null, pool.leakQueue(),
                    BRIDGE.recordedUsesToken(buffer)));
        } catch (RuntimeException | Error e) {
            buffer.close(); // returns the slot
            throw e;
        }
        // The previous owner's work on `stream` may still be pending (a same-stream hit makes no
        // wait): the buffer's synchronous operations run on cuvmm's own stream and close() waits
        // for recorded uses only, so record that work as a use of the new buffer (no driver call).
        if (hit && stream != null && slot.pending && slot.event != null) BRIDGE.seedStreamUse(buffer, stream, slot.event);
        return buffer;
    }

    /**
     * A taken slot whose last stream-ordered free may still be pending, for an allocation that
     * is not yet ordered after it: the allocating {@code stream} waits for the free's event
     * ({@code cuStreamWaitEvent}: one call, the caller never blocks), or, for a host-ordered
     * allocation ({@code stream} null), the calling thread does ({@code cuEventSynchronize}).
     * On failure the slot goes back to the free list and the exception is thrown.
     */
    private void orderAfterFree(PoolSlot slot, Stream stream, Object key, int probe) {
        try {
            if (stream != null) {
                stream.waitFor(slot.event);
                slot.waitedBy = key;
                streamWaits.increment();
            } else {
                slot.event.synchronize();
                slot.pending = false;
                slot.recordedOn = null;
                slot.waitedBy = null;
                hostWaits.increment();
            }
        } catch (RuntimeException | Error e) {
            push(slot, probe & stripeMask, null);
            if (pool.isClosed()) trim(); // as in keep(): a trim of a closing pool may have missed it
            throw e;
        }
    }

    /**
     * An idle slot of class {@code sizeIdx}, own stripe first; null when none. Within a stripe,
     * the newest slot that an allocation ordered by {@code key} can use without a driver call
     * (see {@link FreeListStripe#popPreferred}), else the newest.
     */
    private PoolSlot takeIdle(int sizeIdx, int probe, Object key) {
        FreeListStripe[] stripes = freeLists.get(sizeIdx);
        if (stripes == null) return null;
        for (int i = 0; i < stripes.length; i++) {
            FreeListStripe st = stripes[(probe + i) & stripeMask];
            if (st.count == 0) continue;
            PoolSlot s;
            st.lock();
            try {
                s = st.popPreferred(key, PREFERENCE_SCAN);
            } finally {
                st.unlock();
            }
            if (s != null) return s;
        }
        return null;
    }

    /** An idle slot of the smallest non-empty class above {@code sizeIdx} within the reuse limit. */
    private PoolSlot takeLarger(int sizeIdx, int probe, Object key) {
        int limitIdx = classes.reuseLimitIdx(sizeIdx);
        for (int idx = nextHinted(sizeIdx + 1, limitIdx); idx >= 0; idx = nextHinted(idx + 1, limitIdx)) {
            PoolSlot s = takeIdle(idx, probe, key);
            if (s != null) return s;
            clearHint(idx);
        }
        return null;
    }

    private PoolSlot newSlot(int sizeIdx) {
        long classSize = classes.classSize(sizeIdx);
        if (pool.resource().isClosed()) { // named here: the resource's own refusal names neither pool nor remedy
            throw new IllegalStateException("pool " + pool.name() + " (" + lifetime.key() + "): its resource "
                    + pool.resource() + " is closed, and a " + classSize + "-byte buffer needs new memory (expected: "
                    + "close the pool before its resource, or build a new pool over an open resource)");
        }
        NativeRangeHandle range;
        try {
            range = BRIDGE.allocateRange(pool.resource(), classSize);
        } catch (CudaException e) {
            // Out of memory while idle memory is held (in either lifetime): give it back, retry once.
            if (e.code() != CUDA_ERROR_OUT_OF_MEMORY || pool.trim() == 0) throw e;
            range = BRIDGE.allocateRange(pool.resource(), classSize);
        }
        PoolSlot slot = new PoolSlot(this, range, sizeIdx, classSize);
        allSlots.add(slot);
        slots.incrementAndGet();
        footprintBytes.addAndGet(classSize); // before live grows: retained never dips below 0 meanwhile
        return slot;
    }

    private void raisePeak(long live) {
        long peak;
        while (live > (peak = peakLiveBytes.get())) {
            if (peakLiveBytes.compareAndSet(peak, live)) return;
        }
    }

    // ---- release ----

    /**
     * The garbage collector found the buffer that {@code w} watches unreachable (called by
     * {@link VirtualMemoryPool#drainLeaks}): unless it was closed or its slot handed out again
     * since, warn with {@link org.cuvmm.LeakDetection}'s report and recycle the slot as leaked,
     * once the stream work recorded on the buffer has completed (at once when there is none;
     * else cuvmm's release thread does it, so a caller never waits here, unless that thread
     * cannot be started: then this thread waits and recycles, logged). Never throws.
     *
     * @return true when this was a leak (counted; the slot recycled now or after its work), false when {@code w} was stale
     */
    boolean leaked(PoolSlot slot, LeakWatch w) {
        if (!slot.claimWatch(w)) return false;
        try {
            // reqSize: written before setWatch's release store, read after the claim's CAS.
            BRIDGE.reportLeak(slot.range.address(), slot.reqSize, "pool " + pool.name() + " (" + lifetime.key() + ")",
                    w.site);
        } catch (Throwable t) {
            LOG.log(System.Logger.Level.ERROR, "pool " + pool.name() + " (" + lifetime.key() + "): reporting the leak of "
                    + slot + " failed", t);
        }
        leaks.increment(); // counted when found, though the slot may come back later (below)
        // Only after the stream work recorded on the buffer: at once when there is none, else
        // on cuvmm's release thread (this may be an allocating caller: it waits here only when
        // that thread cannot be started, and the bridge logs that).
        try {
            BRIDGE.afterRecordedUses(w.recordedUses, () -> recycle(slot, slot.range, true));
        } catch (Throwable t) {
            // Not handed to the release thread: the slot stays out (its memory kept) rather
            // than come back under work that may still be queued.
            LOG.log(System.Logger.Level.ERROR, "pool " + pool.name() + " (" + lifetime.key() + "): taking back the "
                    + "leaked " + slot + " after its stream work failed; its memory stays allocated", t);
        }
        return true;
    }

    /**
     * A buffer over {@code slot} was closed (or, {@code leaked}, found unreachable: see
     * {@link #leaked}): keep the slot idle, or release its range. Never throws.
     */
    void recycle(PoolSlot slot, NativeRangeHandle returned, boolean leaked) {
        try {
            if (returned != slot.range || !slot.beginReturn()) {
                LOG.log(System.Logger.Level.ERROR, "pool " + pool.name() + " (" + lifetime.key() + "): " + slot
                        + " was returned twice or with a foreign range; ignored");
                return;
            }
            keep(slot, returned, leaked);
        } catch (Throwable t) {
            LOG.log(System.Logger.Level.ERROR, "pool " + pool.name() + " (" + lifetime.key() + "): returning " + slot
                    + " failed", t);
        }
    }

    /**
     * A buffer over {@code slot} was closed with {@code close(stream)}: record the slot's event on
     * {@code stream} (the free's position in stream order), then keep the slot idle or release
     * its range as {@link #recycle} does. Never throws, never blocks on the stream, except when
     * the driver refuses to order the free: then this thread waits for the stream (late, never
     * early) and says why in the log.
     */
    void recycleOnStream(PoolSlot slot, NativeRangeHandle returned, Stream stream) {
        try {
            if (returned != slot.range || !slot.beginReturn()) {
                LOG.log(System.Logger.Level.ERROR, "pool " + pool.name() + " (" + lifetime.key() + "): " + slot
                        + " was returned twice or with a foreign range; ignored");
                return;
            }
            try {
                markFreedOn(slot, stream);
            } catch (RuntimeException | Error e) {
                LOG.log(System.Logger.Level.WARNING, "pool " + pool.name() + " (" + lifetime.key() + "): the free of "
                        + slot + " could not be ordered on " + stream + " (" + e.getMessage()
                        + "); waiting for the stream here instead", e);
                try {
                    stream.synchronize();
                } catch (RuntimeException x) {
                    LOG.log(System.Logger.Level.WARNING, "pool " + pool.name() + ": waiting for " + stream + " failed ("
                            + x.getMessage() + ")", x);
                }
            }
            keep(slot, returned, false);
        } catch (Throwable t) {
            LOG.log(System.Logger.Level.ERROR, "pool " + pool.name() + " (" + lifetime.key() + "): returning " + slot
                    + " failed", t);
        }
    }

    /**
     * Records the slot's event on {@code stream} (created on the slot's first stream-ordered
     * free on each device, then re-recorded: {@code cuEventRecord} is the one driver call of a
     * steady-state free). When an earlier free's record may still be pending and {@code stream}
     * is not ordered after it, {@code stream} first waits for it, so the new record covers the
     * older work too. A free on another device than the last one's sets the last event aside
     * ({@link PoolSlot#eventsOfOtherDevices}) and takes that device's, made once.
     */
    private void markFreedOn(PoolSlot slot, Stream stream) {
        Object key = BRIDGE.streamKey(stream);
        Event e = slot.event;
        if (e == null || e.device() != stream.device()) {
            Event[] others = slot.eventsOfOtherDevices;
            Event next = others == null || stream.device() >= others.length ? null : others[stream.device()];
            boolean made = next == null;
            if (made) next = Event.builder(stream.device()).timing(false).build();
            if (e != null) {
                // As on one device (below): only a stream not yet ordered after the pending record
                // waits, and the wait is counted. This branch waited whenever the record was
                // pending, also on the stream that had waited for it at its allocation, and never
                // counted: frees alternating between two devices made two waits a round where one
                // is needed, and streamWaits showed one (an independent probe, CrossDeviceFreeWaitTest).
                try {
                    if (slot.pending && key != slot.recordedOn && key != slot.waitedBy) {
                        stream.waitFor(e);
                        streamWaits.increment();
                    }
                } catch (RuntimeException | Error x) {
                    if (made) closeQuietly(next);
                    throw x;
                }
                if (others == null) slot.eventsOfOtherDevices = others = new Event[org.cuvmm.Driver.get().deviceCount()];
                others[e.device()] = e;
                slot.pending = false;
            }
            if (others != null) others[stream.device()] = null;
            slot.event = e = next;
            if (made) eventsCreated.increment();
        } else if (slot.pending && key != slot.recordedOn && key != slot.waitedBy) {
            stream.waitFor(e);
            streamWaits.increment();
        }
        e.record(stream);
        slot.pending = true;
        slot.recordedOn = key;
        slot.waitedBy = null;
    }

    private void closeQuietly(Event e) {
        try {
            e.close();
        } catch (RuntimeException x) {
            LOG.log(System.Logger.Level.WARNING, "pool " + pool.name() + ": closing " + e + " failed: " + x, x);
        }
    }

    /** The rest of a return, after {@link PoolSlot#beginReturn()}: keep the slot idle or release it. */
    private void keep(PoolSlot slot, NativeRangeHandle returned, boolean leaked) {
        int stripe = PROBE.get() & stripeMask; // one thread-local lookup for the cell and the free list
        AccountingCell cell = cells[stripe];
        // A leaked exported buffer is not reused: a consumer whose lease was lost with it
        // may still map the memory (rule 5). Neither is memory that an alias, a grow or a
        // ByteBuffer view of the closed buffer still maps: handing it out again would let
        // two owners write the same bytes. Nor local memory that was ever exported: another
        // process may map it, and only the exported lifetime's leases say when it is done
        // (found by an independent probe: its importer read the next owner's data). Release
        // our reference instead.
        boolean closed = pool.isClosed();
        if (closed || (leaked && lifetime == PoolLifetime.EXPORTED)
                || !returned.reusable(lifetime == PoolLifetime.LOCAL)) {
            countReturned(cell, slot);
            slot.setState(PoolSlot.DEAD);
            if (closed) trimmedBytes.add(slot.classSize);
            forget(slot);
            release(slot);
            return;
        }
        if (slot.classSize > retentionCapBytes) { // could never be retained: release now
            countReturned(cell, slot);
            slot.setState(PoolSlot.DEAD);
            evictions.increment();
            evictedBytes.add(slot.classSize);
            forget(slot);
            release(slot);
            return;
        }
        Runnable seam = beforePushForTest;
        if (seam != null) seam.run();
        push(slot, stripe, cell); // counts the return once the slot is linked
        // The cap is read after the push, not before: a setRetentionCap that lowered it in
        // between looked at the free lists before this slot was linked (or while it still
        // counted as live) and so did not evict it; this read sees its new cap (both are
        // volatile: the cap's write comes before its look, our drop before this read), and
        // the check below evicts. Read before the push, the old cap left the slot retained
        // above the new one (an independent probe, RetainedWithinCapTest).
        long cap = retentionCapBytes;
        // retained <= footprint - live <= footprint: the sum is needed only when the footprint exceeds the cap.
        long footprint = footprintBytes.get();
        if (footprint > cap && footprint - sumLiveBytes() > cap) evictToCap();
        if (pool.isClosed()) trim(); // the pool closed while we pushed: its trim may have missed this slot
    }

    /**
     * Links {@code slot} to stripe {@code stripe} of its class. {@code returnedFrom}: the slot
     * comes back from a live buffer, and its live count drops in that cell, under the lock,
     * after the link (null: a slot taken and never counted live, as in {@link #orderAfterFree}).
     * So a thread that saw the count drop and then trims finds the slot: the link's volatile
     * {@code count} store comes before the drop, so {@link #trim} does not skip the stripe, and
     * its lock waits for this one. And an allocation can take the slot only after the unlock,
     * once it no longer counts as live: it is never counted live twice (which would also raise
     * {@link #peakLiveBytes} for good). Same atomics as counting before the push; the critical
     * section holds the cell's three adds (on the thread's own line) as well.
     */
    private void push(PoolSlot slot, int stripe, AccountingCell returnedFrom) {
        FreeListStripe st = stripes(slot.sizeIdx)[stripe];
        long now = System.nanoTime();
        st.lock();
        try {
            st.pushNewest(slot, now);
            if (returnedFrom != null) countReturned(returnedFrom, slot);
        } finally {
            st.unlock();
        }
        setHint(slot.sizeIdx);
    }

    /** The buffer over {@code slot} is no longer live: its live count and bytes drop in {@code cell}. */
    private static void countReturned(AccountingCell cell, PoolSlot slot) {
        cell.released(slot.classSize, slot.reqSize);
        Runnable seam = afterLiveCountDroppedForTest;
        if (seam != null) seam.run();
    }

    private FreeListStripe[] stripes(int sizeIdx) {
        FreeListStripe[] stripes = freeLists.get(sizeIdx);
        if (stripes != null) return stripes;
        FreeListStripe[] created = new FreeListStripe[stripeMask + 1];
        for (int i = 0; i < created.length; i++) created[i] = new FreeListStripe();
        return freeLists.compareAndSet(sizeIdx, null, created) ? created : freeLists.get(sizeIdx);
    }

    /**
     * Releases least-recently-freed idle buffers until the retained capacity is at most the
     * cap (or nothing idle is left). Victims are chosen under {@link #evictionLock} and released
     * after it. Returns the capacity released.
     */
    private long evictToCap() {
        List<PoolSlot> victims = null;
        long bytes = 0;
        evictionLock.lock();
        try {
            PoolSlot v;
            while (retainedBytes() > retentionCapBytes && (v = removeOldest()) != null) {
                if (victims == null) victims = new ArrayList<>();
                victims.add(v);
                bytes += v.classSize;
            }
        } finally {
            evictionLock.unlock();
        }
        if (victims == null) return 0;
        evictions.add(victims.size());
        evictedBytes.add(bytes);
        for (PoolSlot v : victims) release(v);
        return bytes;
    }

    /** Unlinks the idle slot freed longest ago, across all classes and stripes; null when none. */
    private PoolSlot removeOldest() {
        for (int attempt = 0; attempt < 4; attempt++) {
            FreeListStripe best = oldestStripe(true);
            if (best == null) best = oldestStripe(false);
            if (best == null) return null;
            PoolSlot s;
            best.lock();
            try {
                s = best.popOldest();
            } finally {
                best.unlock();
            }
            if (s != null) {
                forget(s); // retained shrinks now, before the victim is released outside the lock
                return s;
            }
            // emptied by a concurrent taker: look again
        }
        return null;
    }

    /** The stripe whose oldest slot was freed first; only hinted classes when {@code hinted}. */
    private FreeListStripe oldestStripe(boolean hinted) {
        FreeListStripe best = null;
        long bestAt = 0;
        for (int idx = 0; idx < classes.count(); idx++) {
            if (hinted) {
                idx = nextHinted(idx, classes.count() - 1);
                if (idx < 0) break;
            }
            FreeListStripe[] stripes = freeLists.get(idx);
            if (stripes == null) continue;
            for (FreeListStripe st : stripes) {
                if (st.count == 0) continue;
                long at = st.oldestFreedAtNanos;
                if (best == null || at - bestAt < 0) {
                    best = st;
                    bestAt = at;
                }
            }
        }
        return best;
    }

    /** Releases every idle buffer; returns the capacity released. */
    long trim() {
        List<PoolSlot> released = new ArrayList<>();
        long bytes = 0;
        for (int idx = 0; idx < classes.count(); idx++) {
            FreeListStripe[] stripes = freeLists.get(idx);
            if (stripes == null) continue;
            for (FreeListStripe st : stripes) {
                if (st.count == 0) continue;
                PoolSlot s;
                st.lock();
                try {
                    s = st.detachAll();
                } finally {
                    st.unlock();
                }
                while (s != null) {
                    PoolSlot older = s.older;
                    s.older = null;
                    s.newer = null;
                    s.setState(PoolSlot.DEAD);
                    released.add(s);
                    bytes += s.classSize;
                    s = older;
                }
            }
        }
        if (released.isEmpty()) return 0;
        for (PoolSlot s : released) forget(s);
        trimmedBytes.add(bytes);
        for (PoolSlot s : released) release(s);
        return bytes;
    }

    /** Sets the cap; evicts at once when idle capacity exceeds it. Returns the capacity released. */
    long setRetentionCap(long capBytes) {
        retentionCapBytes = capBytes;
        return evictToCap();
    }

    long retentionCap() { return retentionCapBytes; }

    /** Removes a slot that is neither live nor listed from the footprint (before {@link #release}). */
    private void forget(PoolSlot slot) {
        footprintBytes.addAndGet(-slot.classSize);
        slots.decrementAndGet();
        allSlots.remove(slot);
    }

    /**
     * Drops the pool's reference to the range: unmap, release, free in the driver, then closes
     * the slot's event. Never throws and never blocks: when a stream-ordered free's work may
     * still be pending ({@code cuEventQuery} says not ready), the release is handed to cuvmm's
     * release thread, which waits for the event first ({@link #deferredReleases}); only when
     * that thread cannot be started does this thread wait for the event and release (logged
     * by the bridge). On a
     * host-function thread, where no CUDA call may be made, every release is handed over, the
     * event query included: the pool's calls that are allowed there (a buffer's return,
     * {@code stats()}, which takes back leaks, {@code close()}) reach here.
     */
    private void release(PoolSlot slot) {
        Event e = slot.event;
        if (NativeCalls.insideHostFunction()) {
            try {
                deferredReleases.increment();
                BRIDGE.afterEvents("pool " + pool.name() + ": " + slot,
                        e != null && slot.pending ? java.util.List.of(e) : java.util.List.of(), () -> dropRange(slot, e));
            } catch (Throwable t) { // never throws: the pool's loops (trim, eviction) go on to the other slots
                LOG.log(System.Logger.Level.ERROR, "pool " + pool.name() + ": handing the release of " + slot
                        + " over from a host function failed (" + t + "); its memory stays until the process ends", t);
            }
            return;
        }
        if (e != null && slot.pending && !isDone(e)) {
            try {
                deferredReleases.increment();
                BRIDGE.afterEvents("pool " + pool.name() + ": " + slot, java.util.List.of(e), () -> dropRange(slot, e));
                return;
            } catch (Throwable t) {
                LOG.log(System.Logger.Level.ERROR, "pool " + pool.name() + ": deferring the release of " + slot
                        + " failed (" + t + "); waiting for its stream work here", t);
                try {
                    e.synchronize();
                } catch (RuntimeException x) {
                    LOG.log(System.Logger.Level.WARNING, "pool " + pool.name() + ": waiting for " + e + " failed", x);
                }
            }
        }
        dropRange(slot, e);
    }

    /** Deallocates the slot's range, then closes its event {@code e} and those of its frees on other devices. */
    private void dropRange(PoolSlot slot, Event e) {
        deallocate(slot);
        if (e != null) closeQuietly(e);
        Event[] others = slot.eventsOfOtherDevices;
        if (others == null) return;
        slot.eventsOfOtherDevices = null;
        for (Event o : others) if (o != null) closeQuietly(o);
    }

    /** The event's last record completed; false when not, or when the query fails (then the release thread waits). */
    private static boolean isDone(Event e) {
        try {
            return e.isDone();
        } catch (RuntimeException x) {
            return false;
        }
    }

    private void deallocate(PoolSlot slot) {
        try {
            slot.range.deallocate();
        } catch (Throwable t) {
            LOG.log(System.Logger.Level.ERROR, "pool " + pool.name() + " (" + lifetime.key() + "): releasing " + slot
                    + " failed", t);
        }
    }

    // ---- the non-empty hint ----

    /** The lowest hinted class in [from, to], or -1. */
    private int nextHinted(int from, int to) {
        if (from > to) return -1;
        int word = from >>> 6;
        long bits = nonEmptyHint.get(word) & (-1L << from); // the shift uses from's low 6 bits
        int lastWord = to >>> 6;
        for (;;) {
            if (bits != 0) {
                int idx = (word << 6) + Long.numberOfTrailingZeros(bits);
                return idx <= to ? idx : -1;
            }
            if (++word > lastWord) return -1;
            bits = nonEmptyHint.get(word);
        }
    }

    private void setHint(int sizeIdx) {
        int word = sizeIdx >>> 6;
        long bit = 1L << sizeIdx;
        long v;
        while (((v = nonEmptyHint.get(word)) & bit) == 0) {
            if (nonEmptyHint.compareAndSet(word, v, v | bit)) return;
        }
    }

    private void clearHint(int sizeIdx) {
        int word = sizeIdx >>> 6;
        long bit = 1L << sizeIdx;
        long v;
        while (((v = nonEmptyHint.get(word)) & bit) != 0) {
            if (nonEmptyHint.compareAndSet(word, v, v & ~bit)) break;
        }
        if (classNonEmpty(sizeIdx)) setHint(sizeIdx); // a push raced with the clear
    }

    private boolean classNonEmpty(int sizeIdx) {
        FreeListStripe[] stripes = freeLists.get(sizeIdx);
        if (stripes == null) return false;
        for (FreeListStripe st : stripes) {
            if (st.count != 0) return true;
        }
        return false;
    }

    // ---- accounting ----

    PoolStats snapshot() {
        long live = liveCount();
        long liveCapacity = liveBytes(); // raises the peak to it: read before the peak below
        return new PoolSnapshot(pool.name(), lifetime, live, liveCapacity, liveRequestedBytes(),
                peakLiveBytes.get(), retained(slots.get() - live, false),
                retained(footprintBytes.get() - liveCapacity, true),
                retentionCapBytes, hits(), largerClassHits(), misses.sum(), evictions.sum(), evictedBytes.sum(),
                trimmedBytes.sum(),
                leaks.sum(), streamWaits.sum(), hostWaits.sum(), eventsCreated.sum(), deferredReleases.sum());
    }

    private long sumLiveBytes() {
        long sum = 0;
        for (AccountingCell c : cells) sum += c.liveBytes();
        return sum;
    }

    /**
     * The live count, for a reader. The cells are read one after another: a buffer allocated on
     * a cell already read and closed on one not yet read counts -1 in this sum, so a live count
     * of -1 (and live bytes below 0) could be read with at most one buffer live (an independent
     * probe, LiveSumTest). Such a sum is at most that buffer off, so 0 is as good a reading;
     * no reader is shown a figure below 0. (Internal checks use the sums unclamped.)
     */
    long liveCount() {
        long sum = 0;
        for (int i = 0; i < cells.length; i++) {
            sum += cells[i].liveCount();
            java.util.function.IntConsumer seam = afterCellReadForTest;
            if (seam != null) seam.accept(i);
        }
        return Math.max(0, sum);
    }

    /** The index of the calling thread's accounting cell (and stripe); for tests. */
    int cellOfThisThread() { return PROBE.get() & stripeMask; }

    /** Accounting cells (and stripes per class); for tests. */
    int cellCount() { return cells.length; }

    /**
     * The live capacity, for a reader (stats, the bean's MemoryUsed); the peak is raised to it.
     * An allocation checks the peak after its increment, and a buffer returned in between and
     * not kept (over the cap, say) leaves the live total and the footprint before that check,
     * so the allocation can miss a total that held only for that instant (the footprint then no
     * longer exceeds the peak). Unread, such an instant is as if the return had come first. Read,
     * it made a later, quiet snapshot's peak lower than a live total it had reported (an
     * independent probe, PeakLiveTest): the reader raises the peak to what it reports.
     */
    long liveBytes() {
        long v = Math.max(0, sumLiveBytes()); // never below 0: see liveCount()
        raisePeak(v);
        return v;
    }

    long liveRequestedBytes() {
        long sum = 0;
        for (AccountingCell c : cells) sum += c.liveRequestedBytes();
        return Math.max(0, sum); // never below 0: see liveCount()
    }

    long peakLiveBytes() { return peakLiveBytes.get(); }

    /** Idle slots: slots not live and linked on a free list (see {@link #retained}). */
    long retainedCount() { return retained(slots.get() - liveCount(), false); }

    /** Idle capacity: capacity neither live nor between lists, and linked on a free list (see {@link #retained}). */
    long retainedBytes() { return retained(footprintBytes.get() - sumLiveBytes(), true); }

    /**
     * What is retained, given {@code notLive} (slots, or capacity when {@code bytes}, not yet
     * released and not counted live): at most that, and at most what the free lists hold.
     * Neither bound alone is enough. Not live and not released also takes in a slot between
     * lists: a miss's new memory from its creation until it counts as live, a returned slot
     * the pool does not keep from its live count's drop until it is forgotten, a slot just
     * taken for reuse. Counted as retained, that memory made a pool with cap 0 read 1 retained
     * buffer during every miss and every close (above its cap, though it never keeps one), and
     * made a release that raced a miss evict idle memory the cap allowed (an independent probe,
     * RetainedWithinCapTest). The free lists alone would count a slot twice for an instant:
     * {@link #push} links it before its live count drops. The smaller of the two is never
     * live and never between lists.
     */
    private long retained(long notLive, boolean bytes) {
        long listed = 0;
        for (int idx = 0; idx < classes.count(); idx++) {
            FreeListStripe[] stripes = freeLists.get(idx);
            if (stripes == null) continue;
            long n = 0;
            for (FreeListStripe st : stripes) n += st.count;
            listed += bytes ? n * classes.classSize(idx) : n;
        }
        return Math.max(0, Math.min(notLive, listed));
    }

    long hits() {
        long sum = 0;
        for (AccountingCell c : cells) sum += c.hits();
        return sum;
    }

    long largerClassHits() {
        long sum = 0;
        for (AccountingCell c : cells) sum += c.largerClassHits();
        return sum;
    }
    long misses() { return misses.sum(); }
    long evictions() { return evictions.sum(); }
    long evictedBytes() { return evictedBytes.sum(); }
    long trimmedBytes() { return trimmedBytes.sum(); }
    long leaks() { return leaks.sum(); }
    long streamWaits() { return streamWaits.sum(); }
    long hostWaits() { return hostWaits.sum(); }
    long eventsCreated() { return eventsCreated.sum(); }
    long deferredReleases() { return deferredReleases.sum(); }

    /** Slots whose buffer is live; for tests. */
    List<PoolSlot> liveSlots() {
        List<PoolSlot> out = new ArrayList<>();
        for (PoolSlot s : allSlots) {
            if (s.state() == PoolSlot.LIVE) out.add(s);
        }
        return out;
    }

    /** Idle slots of class {@code sizeIdx}, newest first within each stripe; for tests. */
    List<PoolSlot> idleSlots(int sizeIdx) {
        List<PoolSlot> out = new ArrayList<>();
        FreeListStripe[] stripes = freeLists.get(sizeIdx);
        if (stripes == null) return out;
        for (FreeListStripe st : stripes) {
            st.lock();
            try {
                for (PoolSlot s = st.newest; s != null; s = s.older) out.add(s);
            } finally {
                st.unlock();
            }
        }
        return out;
    }
}
