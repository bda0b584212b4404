package org.cuvmm;

import static org.junit.jupiter.api.Assertions.*;

import java.nio.ByteBuffer;

import org.junit.jupiter.api.Test;

/** PinnedHostBuffer's javadoc, read as a user would: the promises no other test checks. */
class PinnedHostBufferJavadocContractTest {
    private static void assertNames(Throwable e, String... parts) {
        String m = e.getMessage();
        assertNotNull(m, e + " has no message");
        for (String p : parts) assertTrue(m.contains(p), "message lacks '" + p + "': " + m);
    }

    /** allocate: IAE when size is not positive, naming size and value. */
    @Test
    void allocateRefusesNonPositiveSizes() {
        assertNames(assertThrows(IllegalArgumentException.class, () -> PinnedHostBuffer.allocate(0)), "size", "0");
        assertNames(assertThrows(IllegalArgumentException.class, () -> PinnedHostBuffer.allocate(-7)), "size", "-7");
    }

    /** allocate: size, not registered; asByteBuffer position 0, capacity size; close idempotent; address after close ISE. */
    @Test
    void allocatedMemory() {
        PinnedHostBuffer p = PinnedHostBuffer.allocate(100);
        try {
            assertEquals(100, p.size());
            assertFalse(p.isRegistered());
            assertFalse(p.isClosed());
            assertNotEquals(0, p.address());
            ByteBuffer v = p.asByteBuffer();
            assertTrue(v.isDirect());
            assertEquals(0, v.position());
            assertEquals(100, v.capacity());
            assertEquals(100, v.limit());
            v.put(0, (byte) 5);
            assertEquals(5, p.asByteBuffer().get(0));
        } finally {
            p.close();
        }
        p.close();
        assertTrue(p.isClosed());
        assertEquals(100, p.size(), "size() stays readable");
        assertThrows(IllegalStateException.class, p::address);
        assertThrows(IllegalStateException.class, p::asByteBuffer);
    }

    /** register: the bytes from position to limit; offsets count from the position; the ByteBuffer stays the caller's. */
    @Test
    void registerFromPositionToLimit() {
        ByteBuffer mine = ByteBuffer.allocateDirect(64 * 1024);
        mine.position(4096).limit(4096 + 8192);
        try (PinnedHostBuffer p = PinnedHostBuffer.register(mine)) {
            assertTrue(p.isRegistered());
            assertEquals(8192, p.size());
            ByteBuffer v = p.asByteBuffer();
            assertEquals(0, v.position());
            assertEquals(8192, v.capacity());
            v.put(0, (byte) 9);
            assertEquals(9, mine.get(4096), "offset 0 of the pinned buffer is the caller's position");
            assertEquals(4096, mine.position(), "the caller's buffer is not moved");
            assertEquals(4096 + 8192, mine.limit());
        }
        mine.put(4096, (byte) 1); // still the caller's, valid after close
        assertEquals(1, mine.get(4096));
    }

    /** register: IAE for null (NPE), a heap buffer, an empty one; each named. */
    @Test
    void registerRefusals() {
        assertNames(assertThrows(NullPointerException.class, () -> PinnedHostBuffer.register(null)), "buffer");
        assertNames(assertThrows(IllegalArgumentException.class, () -> PinnedHostBuffer.register(ByteBuffer.allocate(16))),
                "buffer", "direct");
        ByteBuffer empty = ByteBuffer.allocateDirect(16);
        empty.position(16);
        assertNames(assertThrows(IllegalArgumentException.class, () -> PinnedHostBuffer.register(empty)), "buffer");
    }

    /** register: "CudaException when ... the memory is registered already: CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED". */
    @Test
    void registeringTwiceIsAlreadyRegistered() {
        ByteBuffer mine = ByteBuffer.allocateDirect(8192);
        try (PinnedHostBuffer p = PinnedHostBuffer.register(mine)) {
            CudaException e = assertThrows(CudaException.class, () -> PinnedHostBuffer.register(mine.duplicate()));
            assertEquals("CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED", e.resultName(), e.getMessage());
            assertNames(e, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED");
            assertFalse(p.isClosed());
        }
        try (PinnedHostBuffer again = PinnedHostBuffer.register(mine)) {
            assertEquals(8192, again.size(), "close unregistered it: registering again works");
        }
    }

    /** An asynchronous copy through pinned memory, then close waits for it. */
    @Test
    void asyncCopyRoundTrip() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer b = r.allocate(4096);
             Stream s = Stream.create(0)) {
            PinnedHostBuffer src = PinnedHostBuffer.allocate(4096);
            PinnedHostBuffer dst = PinnedHostBuffer.allocate(4096);
            src.asByteBuffer().put(10, (byte) 42);
            b.copyFromAsync(0, src, 0, 4096, s);
            b.copyToAsync(0, dst, 0, 4096, s);
            src.close();
            dst.close(); // waits for the copy into it
            s.synchronize();
        }
    }
}
