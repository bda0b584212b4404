package org.cuvmm;

import static org.junit.jupiter.api.Assertions.*;

import org.junit.jupiter.api.Test;

/** BufferDescriptor's javadoc, read as a user would: the promises no other test checks. */
class BufferDescriptorJavadocContractTest {
    private static void assertNames(Throwable e, String... parts) {
        String m = e.getMessage();
        assertNotNull(m, e + " has no message");
        for (String p : parts) assertTrue(m.contains(p), "message lacks '" + p + "': " + m);
    }

    /**
     * fromFds/adoptFds: a null argument is refused with NullPointerException naming it (the
     * javadoc said "IllegalArgumentException ... for any bad input"; it now says NPE for null).
     */
    @Test
    void nullArgumentsAreNullPointerExceptionsNamingThem() {
        long[] sizes = {2L << 20};
        int[] fds = {0};
        assertNames(assertThrows(NullPointerException.class,
                () -> BufferDescriptor.fromFds(null, sizes, HandleType.POSIX_FD, 1)), "fds");
        assertNames(assertThrows(NullPointerException.class,
                () -> BufferDescriptor.fromFds(fds, null, HandleType.POSIX_FD, 1)), "sizes");
        assertNames(assertThrows(NullPointerException.class,
                () -> BufferDescriptor.fromFds(fds, sizes, null, 1)), "handleType");
        assertNames(assertThrows(NullPointerException.class,
                () -> BufferDescriptor.adoptFds(null, sizes, HandleType.POSIX_FD, 1)), "fds");
    }

    /** fromFds: IAE naming the argument and value for each bad (non-null) input. */
    @Test
    void badInputsAreNamed() {
        assertNames(assertThrows(IllegalArgumentException.class,
                () -> BufferDescriptor.fromFds(new int[] {0}, new long[] {1}, HandleType.NONE, 1)), "handleType", "NONE");
        assertNames(assertThrows(IllegalArgumentException.class,
                () -> BufferDescriptor.fromFds(new int[] {0, 1}, new long[] {1}, HandleType.POSIX_FD, 1)), "fds", "sizes");
        assertNames(assertThrows(IllegalArgumentException.class,
                () -> BufferDescriptor.fromFds(new int[] {0}, new long[] {0}, HandleType.POSIX_FD, 0)), "sizes[0]", "0");
        assertNames(assertThrows(IllegalArgumentException.class,
                () -> BufferDescriptor.fromFds(new int[] {0}, new long[] {4}, HandleType.POSIX_FD, 5)), "size", "5");
        assertNames(assertThrows(IllegalArgumentException.class,
                () -> BufferDescriptor.fromFds(new int[] {0, 1}, new long[] {Long.MAX_VALUE, 1}, HandleType.POSIX_FD, 1)),
                "sizes");
        assertNames(assertThrows(IllegalArgumentException.class,
                () -> BufferDescriptor.fromFds(new int[] {-1}, new long[] {4}, HandleType.POSIX_FD, 4)), "fds[0]", "-1");
    }

    /** An exported descriptor: parts, copies, takeFds then closed, close a no-op after it. */
    @Test
    void exportedDescriptorParts() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer b = r.allocate(3)) {
            BufferDescriptor d = b.exportDescriptor();
            try {
                assertEquals(3, d.size());
                assertEquals(HandleType.POSIX_FD, d.handleType());
                assertEquals(b.exportedChunkCount(), d.chunkCount());
                assertEquals(r.granularity(), d.mappedSize());
                long[] sizes = d.sizes();
                sizes[0] = 1;
                assertEquals(r.granularity(), d.sizes()[0], "sizes() is a copy");
                int[] seen = new int[1];
                d.useFds(fds -> { seen[0] = fds[0]; fds[0] = -5; });
                assertEquals(seen[0], d.fds()[0], "useFds hands a fresh array");
                try (BufferDescriptor dup = BufferDescriptor.fromFds(d.fds(), d.sizes(), d.handleType(), d.size())) {
                    assertNotEquals(d.fds()[0], dup.fds()[0], "fromFds duplicates");
                }
            } finally {
                d.close();
            }
            d.close();
            assertTrue(d.isClosed());
            assertThrows(IllegalStateException.class, d::fds);
            assertThrows(IllegalStateException.class, d::takeFds);
            assertThrows(IllegalStateException.class, () -> d.useFds(fds -> fail("ran on a closed descriptor")));
        }
    }
}
