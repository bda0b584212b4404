package org.cuvmm.internal;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.internal.jni.NativeRangeHandle;
import org.cuvmm.pool.VirtualMemoryPool;
import org.junit.jupiter.api.Test;

/**
 * The bridge is public on the class path, so it guards itself: a class that is not cuvmm's own
 * (this test, loaded from test-classes) can neither install a bridge nor get the installed one.
 */
class BufferAccessGuardTest {
    @Test
    void aForeignInstallIsRefusedAndTheRealBridgeStays() {
        BufferAccess.Bridge fake = new BufferAccess.Bridge() {
            @Override
            public NativeRangeHandle allocateRange(VirtualMemoryResource resource, long size) {
                throw new AssertionError("the foreign bridge was used");
            }

            @Override
            public VirtualMemoryBuffer wrap(VirtualMemoryResource resource, NativeRangeHandle range, long size,
                                            BufferRecycler recycler) {
                throw new AssertionError("the foreign bridge was used");
            }

            @Override
            public Throwable captureSite() { return null; }

            @Override
            public void reportLeak(long address, long size, String pool, Throwable site) {}

            @Override
            public Object streamKey(org.cuvmm.Stream stream) { throw new AssertionError("the foreign bridge was used"); }

            @Override
            public void afterEvents(String what, java.util.List<org.cuvmm.Event> events, Runnable action) {
                throw new AssertionError("the foreign bridge was used");
            }

            @Override
            public boolean awaitReleasesIdle(long millis) { throw new AssertionError("the foreign bridge was used"); }

            @Override
            public void seedStreamUse(VirtualMemoryBuffer buffer, org.cuvmm.Stream stream, org.cuvmm.Event event) {
                throw new AssertionError("the foreign bridge was used");
            }

            @Override
            public Object recordedUsesToken(VirtualMemoryBuffer buffer) {
                throw new AssertionError("the foreign bridge was used");
            }

            @Override
            public void afterRecordedUses(Object token, Runnable action) {
                throw new AssertionError("the foreign bridge was used");
            }
        };
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(resource).build()) {
            pool.allocate(1).close(); // the real bridge is installed
            IllegalCallerException e = assertThrows(IllegalCallerException.class, () -> BufferAccess.install(fake));
            assertTrue(e.getMessage().startsWith("BufferAccess.install: caller " + BufferAccessGuardTest.class.getName()),
                    e.getMessage());
            try (VirtualMemoryBuffer b = pool.allocate(1)) { // still served by cuvmm's own bridge
                assertNotNull(b);
                assertEquals(1, b.size());
            }
        }
    }

    @Test
    void aForeignGetIsRefused() {
        IllegalCallerException e = assertThrows(IllegalCallerException.class, () -> BufferAccess.get());
        assertTrue(e.getMessage().startsWith("BufferAccess.get: caller " + BufferAccessGuardTest.class.getName()), e.getMessage());
    }
}
