package org.cuvmm;

import static org.cuvmm.BufferContractTest.assertNames;
import static org.cuvmm.TestSupport.MiB;
import static org.junit.jupiter.api.Assertions.*;

import java.nio.ByteBuffer;
import java.util.Set;

import org.junit.jupiter.api.Test;

/** Probe: the javadoc promises that FAIL (defects; see the report). */
class JavadocContractDefectsTest {
    @Test
    void readOnlyDestinationIsRefusedWithAMessageNamingIt() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer b = r.allocate(MiB)) {
            ByteBuffer ro = ByteBuffer.allocate(16).asReadOnlyBuffer();
            Throwable t = assertThrows(java.nio.ReadOnlyBufferException.class, () -> b.copyTo(0, ro));
            assertNames(t, "dst");
        }
    }

    /** A builder that refused a value keeps its previous state (a failed setter is not half applied). */
    @Test
    void aRefusedPeersSetLeavesTheBuilderUnchanged() {
        VirtualMemoryResourceOptions.Builder b = VirtualMemoryResourceOptions.builder().peers(1);
        java.util.Set<Integer> bad = new java.util.LinkedHashSet<>();
        bad.add(null);
        assertThrows(IllegalArgumentException.class, () -> b.peers(bad));
        assertEquals(Set.of(1), b.build().peers(), "a refused peers(Set) cleared the builder's peers");
    }

    /**
     * The class javadoc: "close() is idempotent; any other use after close throws
     * IllegalStateException", and the design (access(): "closed first, whatever the
     * arguments"). A closed buffer must say it is closed, whatever else is wrong with the call.
     */
    @Test
    void aClosedBufferSaysClosedWhateverTheArguments() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
            VirtualMemoryBuffer b = r.allocate(MiB);
            b.close();
            org.junit.jupiter.api.function.Executable[] uses = {
                b::asByteBuffer,                                                 // device memory: UOE before closed
                () -> b.copyTo(0, java.nio.ByteBuffer.allocate(4).asReadOnlyBuffer()), // ReadOnlyBufferException
                () -> b.fill(0, 2 * MiB, (byte) 0),                              // IOOBE before closed
                () -> b.copyFrom(new byte[(int) (2 * MiB)]),                     // IOOBE before closed
                () -> r.modifyAllocation(b, -1),                                 // IAE before closed
            };
            StringBuilder wrong = new StringBuilder();
            for (int i = 0; i < uses.length; i++) {
                Throwable t = assertThrows(Throwable.class, uses[i]);
                if (!(t instanceof IllegalStateException)) wrong.append("\n use #").append(i).append(": ").append(t);
            }
            assertEquals("", wrong.toString(), "uses of a closed buffer that did not throw IllegalStateException");
        }
    }

    /**
     * VirtualMemoryResourceOptions#locationId: "NUMA node for HOST_NUMA; ignored for other
     * locations". modifyAllocation's javadoc refuses only "options that change the handle type
     * or location". A DEVICE-located grow whose options differ only in the ignored locationId
     * changes no location, yet it is refused, with a message that contradicts itself
     * ("options.locationType: DEVICE (expected: DEVICE ...)").
     */
    @Test
    void aGrowWithOptionsDifferingOnlyInTheIgnoredLocationIdIsAccepted() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer b = r.allocate(1)) {
            VirtualMemoryResourceOptions same = r.options().toBuilder().locationId(3).build();
            assertEquals(LocationType.DEVICE, same.locationType());
            VirtualMemoryBuffer grown = assertDoesNotThrow(() -> r.modifyAllocation(b, 2 * r.granularity(), same));
            grown.close();
        }
        VirtualMemoryResourceOptions odd = VirtualMemoryResourceOptions.builder().locationId(1).build();
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0, odd); VirtualMemoryBuffer b = r.allocate(1)) {
            VirtualMemoryBuffer grown = assertDoesNotThrow(() -> r.modifyAllocation(b, 2 * r.granularity(),
                    VirtualMemoryResourceOptions.defaults()));
            grown.close();
        }
    }

    /**
     * close(Stream) javadoc: "Like close(): idempotent". A second close(stream) of a buffer
     * already closed throws once the stream is closed, and so does close(stream) of a closed
     * buffer from a host function: a repeated close (a try-with-resources plus an explicit
     * stream-ordered close, say) must be a no-op.
     */
    @Test
    void closeStreamIsIdempotentWhateverTheStream() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
            VirtualMemoryBuffer b = r.allocate(MiB);
            Stream s = Stream.create(0);
            b.close(s);
            s.synchronize();
            s.close();
            assertTrue(b.isClosed());
            assertDoesNotThrow(() -> b.close(s), "second close(stream) of a closed buffer");
        }
    }

    /** As above, from a host function: close(stream) of an already closed buffer must be a no-op. */
    @Test
    void closeStreamOfAClosedBufferFromAHostFunctionIsANoOp() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
            try (Stream t = Stream.create(0)) {
                VirtualMemoryBuffer c = r.allocate(MiB);
                c.close();
                java.util.concurrent.atomic.AtomicReference<Throwable> inside = new java.util.concurrent.atomic.AtomicReference<>();
                t.launchHostFunction(() -> {
                    try {
                        c.close(t);
                    } catch (Throwable x) {
                        inside.set(x);
                    }
                });
                t.synchronize();
                assertNull(inside.get(), "close(stream) of an already closed buffer from a host function threw");
            }
        }
    }
}
