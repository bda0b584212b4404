package org.cuvmm.pool;

import org.cuvmm.Stream;
import org.cuvmm.internal.BufferRecycler;
import org.cuvmm.internal.StreamOrderedRecycler;
import org.cuvmm.internal.jni.NativeRangeHandle;

/**
 * One native range a pool made, for its whole life: created on a miss, handed out and taken
 * back any number of times, released by eviction, trim or pool close. A slot is also the
 * {@link BufferRecycler} of every buffer made over its range, so a steady-state allocation
 * creates no pool object besides the {@code VirtualMemoryBuffer} itself.
 *
 * <p>Owns {@link #range} from creation until {@link LifetimePool#release} deallocates it; while
 * a buffer is live the buffer uses it, and the buffer's close (or cleaner) hands it back
 * through {@link #recycle}. Every slot not yet released is held by its {@link LifetimePool}
 * (not only by the buffer), so a leaked buffer's range is never freed behind the pool's back
 * by JavaCPP's own deallocator: the buffer's {@link LeakWatch} brings it back instead.
 *
 * <p>State, in {@code state} ({@link PoolSlotFields}):
 * <pre>
 *   miss: TAKEN --wrap--> LIVE --buffer closed or leaked--> RETURNING --push--> IDLE --take--> TAKEN --wrap--> LIVE ...
 *                                                               |                 \--evict / trim--> DEAD
 *                                                               \--not kept (over the cap, pool closed, exported leak,
 *                                                                  memory still shared by an alias or view)--> DEAD
 * </pre>
 * IDLE slots are on exactly one free list; the moves into and out of IDLE happen under that
 * list's lock. {@code LIVE -> RETURNING} is a CAS, so a second recycle of the same range is
 * detected and ignored.
 */
final class PoolSlot extends PoolSlotFields implements StreamOrderedRecycler {
    PoolSlot(LifetimePool home, NativeRangeHandle range, int sizeIdx, long classSize) {
        super(home, range, sizeIdx, classSize);
    }

    /** The buffer was closed (its Release runs this): the watch is dropped first, then the range comes back. */
    @Override
    public void recycle(NativeRangeHandle returned, boolean leaked) {
        dropWatch();
        home.recycle(this, returned, leaked);
    }

    /** The buffer was closed with {@code close(stream)}: the range comes back in that stream's order. */
    @Override
    public void recycle(NativeRangeHandle returned, Stream stream) {
        dropWatch();
        home.recycleOnStream(this, returned, stream);
    }

    // Padding after the fields (those of PoolSlotFields): slots sit side by side in the heap,
    // and two threads working on two slots must not write to one line or line pair.
    @SuppressWarnings("unused")
    private long q00, q01, q02, q03, q04, q05, q06, q07, q08, q09, q10, q11, q12, q13, q14, q15;

    @Override
    public String toString() {
        return "PoolSlot[" + home.lifetime().key() + ", class " + sizeIdx + " (" + classSize + " bytes), state "
                + state() + "]";
    }
}
