package org.cuvmm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.Map;

import org.cuvmm.internal.jni.NativeRangeHandle;
import org.cuvmm.testing.LiveObjects;
import org.junit.jupiter.api.Test;

/**
 * {@link NativeRangeHandle#newReference}: the handle a shared view gets (issue 11: made
 * without JavaCPP's deallocator machinery). It must hold the range exactly like a
 * JavaCPP-allocated copy, drop it exactly once, and fail like any deallocated JavaCPP pointer
 * (an exception, never a crash) when used afterwards.
 */
class RangeReferenceTest {
    @Test
    void aReferenceKeepsTheRangeUntilItIsDeallocatedOnce() {
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0)) {
            Map<String, Long> before = LiveObjects.now();
            NativeRangeHandle range = resource.allocateRange(resource.granularity());
            assertTrue(range.exclusive(), "a fresh range has one holder");
            NativeRangeHandle ref = NativeRangeHandle.newReference(range);
            assertTrue(ref.same_range(range), "the reference names the same range");
            assertEquals(range.address(), ref.address());
            assertEquals(range.size(), ref.size());
            assertFalse(range.exclusive(), "the reference is a second holder");

            range.deallocate(); // the first holder goes; the reference keeps the memory
            assertEquals(resource.granularity(), ref.size(), "the range lives on through the reference");
            assertTrue(ref.exclusive(), "the reference is now the only holder");

            ref.deallocate();
            ref.deallocate(); // a second call is harmless (nothing dropped twice)
            ref.close();
            LiveObjects.assertBack(before, "after the reference was deallocated");
            NullPointerException e = assertThrows(NullPointerException.class, ref::address,
                    "a deallocated reference must refuse native calls, as any deallocated JavaCPP pointer");
            assertTrue(e.getMessage() != null && e.getMessage().contains("NULL"), e.getMessage());
        }
    }

    @Test
    void closeDropsAReferenceLikeDeallocate() {
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0)) {
            Map<String, Long> before = LiveObjects.now();
            NativeRangeHandle range = resource.allocateRange(resource.granularity());
            NativeRangeHandle ref = NativeRangeHandle.newReference(range);
            ref.close();
            assertTrue(range.exclusive(), "close() dropped the reference");
            range.deallocate();
            LiveObjects.assertBack(before, "after both handles went");
        }
    }

    @Test
    void aReferenceToAnEmptyHandleIsRefused() {
        NativeRangeHandle empty = new NativeRangeHandle();
        try {
            IllegalStateException e = assertThrows(IllegalStateException.class,
                    () -> NativeRangeHandle.newReference(empty));
            assertTrue(e.getMessage().contains("empty"), e.getMessage());
        } finally {
            empty.deallocate();
        }
    }

    @Test
    void aReferenceToADeallocatedHandleIsRefusedWithoutACrash() {
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0)) {
            NativeRangeHandle range = resource.allocateRange(resource.granularity());
            range.deallocate();
            assertThrows(NullPointerException.class, () -> NativeRangeHandle.newReference(range));
        }
    }
}
