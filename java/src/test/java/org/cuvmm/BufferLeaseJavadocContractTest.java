package org.cuvmm;

import static org.junit.jupiter.api.Assertions.*;

import org.junit.jupiter.api.Test;

/** BufferLease's javadoc, read as a user would: the promises no other test checks. */
class BufferLeaseJavadocContractTest {
    /**
     * holder(): "as given to lease(String)"; buffer(); isReleased(): false while held, "True once
     * the lease has ended"; close(): "Ends the lease. Idempotent."
     */
    @Test
    void aLeaseEndsOnceAndSaysSo() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer b = r.allocate(1)) {
            BufferLease a = b.lease("consumer A");
            BufferLease c = b.lease("consumer C");
            assertEquals("consumer A", a.holder());
            assertSame(b, a.buffer());
            assertFalse(a.isReleased());
            assertEquals(2, b.leaseCount());
            a.close();
            assertTrue(a.isReleased());
            assertEquals(1, b.leaseCount());
            a.close(); // idempotent: must not end another lease's use
            assertTrue(a.isReleased());
            assertEquals(1, b.leaseCount(), "a second close of one lease ended another");
            assertFalse(c.isReleased());
            IllegalStateException refused = assertThrows(IllegalStateException.class, b::close);
            assertTrue(refused.getMessage().contains("consumer C"), refused.getMessage());
            assertFalse(refused.getMessage().contains("consumer A"), "an ended lease is still named: " + refused.getMessage());
            c.close();
            assertEquals("consumer A", a.holder(), "holder() after close");
        }
    }

    /**
     * Class: "{@link VirtualMemoryBuffer#close()} after this reads true is not refused for this
     * lease"; the buffer stays usable while a lease refuses its close.
     */
    @Test
    void afterReleasedTheOwnersCloseSucceeds() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
            VirtualMemoryBuffer b = r.allocate(4);
            BufferLease lease = b.lease("l");
            assertThrows(IllegalStateException.class, b::close);
            assertFalse(b.isClosed());
            b.fill((byte) 7); // "the buffer stays usable"
            lease.close();
            assertTrue(lease.isReleased());
            b.close();
            assertTrue(b.isClosed());
        }
    }

    /**
     * Class: ending the last lease runs the buffer's pending close (closeWhenUnused); the lease
     * is released and no longer counted.
     */
    @Test
    void theLastLeaseRunsThePendingClose() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
            VirtualMemoryBuffer b = r.allocate(4);
            BufferLease one = b.lease("one");
            BufferLease two = b.leaseDescribedBy(() -> "two");
            b.closeWhenUnused();
            assertFalse(b.isClosed());
            assertTrue(b.isClosePending());
            one.close();
            assertFalse(b.isClosed(), "closed while a lease was still held");
            two.close();
            assertTrue(two.isReleased());
            assertTrue(b.isClosed());
            assertEquals(0, b.leaseCount());
            two.close(); // idempotent after the deferred close ran
        }
    }

    /**
     * closeWhenUnused(): "Until the close runs the buffer is open ...: new leases can still be
     * taken on it, and each one puts the close off until it ends."
     */
    @Test
    void aLeaseTakenWhileTheCloseIsPendingPutsItOff() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
            VirtualMemoryBuffer b = r.allocate(4);
            BufferLease first = b.lease("first");
            b.closeWhenUnused();
            BufferLease late = b.lease("late");
            first.close();
            assertFalse(b.isClosed(), "closed while the lease taken after closeWhenUnused was held");
            assertTrue(b.isClosePending());
            late.close();
            assertTrue(b.isClosed());
            assertThrows(IllegalStateException.class, () -> b.lease("after"));
        }
    }

    /**
     * holder(): "a supplier that throws or returns null gives a fixed text naming that: this
     * never throws" (an Error from the supplier too).
     */
    @Test
    void holderNeverThrowsEvenForAnError() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer b = r.allocate(1)) {
            try (BufferLease bad = b.leaseDescribedBy(() -> { throw new AssertionError("described badly"); })) {
                String h = bad.holder();
                assertTrue(h.startsWith("(holder description unavailable: "), h);
                assertTrue(h.contains("described badly"), h);
                assertTrue(bad.toString().contains(h), bad.toString());
            }
        }
    }

    /** lease(String): "@throws IllegalStateException when the buffer is closed" (both forms). */
    @Test
    void noLeaseOfAClosedBuffer() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
            VirtualMemoryBuffer b = r.allocate(1);
            b.close();
            assertThrows(IllegalStateException.class, () -> b.lease("late"));
            assertThrows(IllegalStateException.class, () -> b.leaseDescribedBy(() -> "late"));
        }
    }

    /** A failure whose own description fails: getMessage() (so toString()) throws. */
    static final class Undescribable extends RuntimeException {
        @Override public String getMessage() { throw new IllegalStateException("no message for you"); }
    }

    /**
     * holder(): "a supplier that throws ... gives a fixed text naming that: this never throws,
     * so a refused close still says why it refused" -- also when what the supplier threw
     * cannot be turned into text.
     */
    @Test
    void holderNeverThrowsEvenWhenTheFailureCannotDescribeItself() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer b = r.allocate(1)) {
            try (BufferLease bad = b.leaseDescribedBy(() -> { throw new Undescribable(); })) {
                String h = bad.holder();
                assertTrue(h.startsWith("(holder description unavailable: "), h);
                assertTrue(h.contains(Undescribable.class.getName()), h);
                IllegalStateException refused = assertThrows(IllegalStateException.class, b::close);
                assertTrue(refused.getMessage().contains("(holder description unavailable: "), refused.getMessage());
                assertFalse(b.isClosed());
            }
        }
    }
}
