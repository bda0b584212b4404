package org.cuvmm;

import static org.cuvmm.TestSupport.MiB;
import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.Map;
import java.util.concurrent.TimeUnit;
import java.util.function.BooleanSupplier;

import org.cuvmm.testing.OpenFds;
import org.junit.jupiter.api.Test;

/**
 * Issue 8, item 12: a descriptor's fds are ints whose closing its cleaner owns. These tests
 * let the garbage collector run while raw fds are in use, and tell "still the same open file"
 * from "closed, or the number reused" by the link target and inode behind /proc/self/fd/N.
 *
 * <p>Proof that the collector really ran: a <em>canary</em> descriptor, exported from another
 * buffer and dropped at once, whose fds the cleaner must close during the same loop. Only
 * once the canary is gone does a test check its own fds.
 */
class DescriptorFdsTest {
    /** Odd sizes, so this class's leak reports are told apart from any other test's. */
    private static final long SIZE = 2 * MiB - 4321;
    private static final long CANARY_SIZE = 2 * MiB - 4322;
    private static final long TAKEN_SIZE = 2 * MiB - 4323;

    /** "link target, inode" of an open fd; null once it is closed. */
    private static String identity(int fd) {
        Path p = Path.of("/proc/self/fd/" + fd);
        try {
            return Files.readSymbolicLink(p) + " ino " + Files.getAttribute(p, "unix:ino");
        } catch (IOException closed) {
            return null;
        }
    }

    private static String[] identities(int[] fds) {
        return Arrays.stream(fds).mapToObj(DescriptorFdsTest::identity).toArray(String[]::new);
    }

    private static boolean sameFiles(int[] fds, String[] ids) {
        return Arrays.equals(identities(fds), ids);
    }

    /** Runs the collector (bounded: 20 s) until {@code done}; returns whether it became true. */
    private static boolean collectUntil(BooleanSupplier done) throws InterruptedException {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(20);
        while (!done.getAsBoolean() && System.nanoTime() < deadline) {
            System.gc();
            Thread.sleep(20); // pacing a poll: the cleaner thread offers no completion signal
        }
        return done.getAsBoolean();
    }

    /**
     * Exports a descriptor of {@code b} that nothing refers to and returns its fds' identities;
     * the cleaner closes them once the collector finds it.
     */
    private static int[] canaryFds(VirtualMemoryBuffer b, String[][] ids) {
        int[] fds = b.exportDescriptor().fds(); // unreachable from here: the documented misuse
        ids[0] = identities(fds);
        return fds;
    }

    /** Collects until the canary's fds are gone; fails if that never happens (collector not running). */
    private static void collectCanary(VirtualMemoryBuffer canarySource) throws InterruptedException {
        String[][] ids = new String[1][];
        int[] canary = canaryFds(canarySource, ids);
        for (String id : ids[0]) assertNotNull(id, "the canary's fds are open at first");
        assertTrue(collectUntil(() -> !sameFiles(canary, ids[0])),
                "the cleaner closed the unreachable canary descriptor's fds within 20 s");
    }

    @Test
    void useFdsKeepsAnOtherwiseUnreachableDescriptorsFdsOpenWhileTheCollectorRuns() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer b = r.allocate(SIZE);
             VirtualMemoryBuffer canarySource = r.allocate(CANARY_SIZE)) {
            int[][] seen = new int[1][];
            String[][] ids = new String[1][];
            // Nothing but useFds itself refers to this descriptor while the action runs.
            b.exportDescriptor().useFds(fds -> {
                seen[0] = fds;
                ids[0] = identities(fds);
                for (String id : ids[0]) assertNotNull(id, "open when the action starts");
                collectCanary(canarySource);
                assertArrayEquals(ids[0], identities(fds), "the same files, open, after the collector ran");
            });
            // After useFds returns the descriptor (never closed) is a leak like any other: the
            // cleaner closes its fds. Waiting for that also keeps its report inside this test.
            assertTrue(collectUntil(() -> !sameFiles(seen[0], ids[0])),
                    "the leaked descriptor's fds were closed by the cleaner after useFds returned");
        }
    }

    @Test
    void fdsOfADescriptorHeldInTryWithResourcesStayOpenWhileTheCollectorRuns() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer b = r.allocate(SIZE);
             VirtualMemoryBuffer canarySource = r.allocate(CANARY_SIZE)) {
            int[] fds;
            String[] ids;
            try (BufferDescriptor d = b.exportDescriptor()) {
                fds = d.fds();
                ids = identities(fds);
                collectCanary(canarySource);
                assertArrayEquals(ids, identities(fds), "the documented safe pattern: same files, open");
            }
            assertFalse(sameFiles(fds, ids), "close() closed them");
        }
    }

    /** The danger the javadoc of fds() names: it is real, so the documentation is needed. */
    @Test
    void fdsOfAnUnreachableDescriptorAreClosedByTheCollector() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer b = r.allocate(SIZE)) {
            int[] fds = b.exportDescriptor().fds(); // nothing refers to the descriptor any more
            String[] ids = identities(fds);
            for (String id : ids) assertNotNull(id);
            assertTrue(collectUntil(() -> !sameFiles(fds, ids)),
                    "the ints outlived their descriptor: the cleaner closed them under the caller");
        }
    }

    @Test
    void takeFdsHandsOwnershipToTheCaller() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer b = r.allocate(TAKEN_SIZE);
             VirtualMemoryBuffer canarySource = r.allocate(CANARY_SIZE)) {
            Map<String, Integer> baseline = OpenFds.byKind();
            int[] kept;
            String[] keptIds;
            BufferDescriptor d = b.exportDescriptor();
            kept = d.takeFds();
            keptIds = identities(kept);
            for (String id : keptIds) assertNotNull(id);
            assertTrue(d.isClosed(), "taking the fds closes the descriptor");
            assertTrue(assertThrows(IllegalStateException.class, d::fds).getMessage().contains("takeFds"));
            assertThrows(IllegalStateException.class, d::takeFds, "taken once only");
            assertThrows(IllegalStateException.class, () -> d.useFds(fds -> { throw new AssertionError("ran"); }));
            assertThrows(IllegalStateException.class, () -> r.importBuffer(d));
            d.close();
            d.close();
            assertArrayEquals(keptIds, identities(kept), "close() after takeFds leaves the caller's fds open");

            // Nor does the cleaner close taken fds: drop a descriptor after taking, collect.
            int[] dropped = b.exportDescriptor().takeFds();
            String[] droppedIds = identities(dropped);
            collectCanary(canarySource);
            assertArrayEquals(droppedIds, identities(dropped), "the cleaner left the taken fds alone");
            String tag = "size " + TAKEN_SIZE + "]";
            assertTrue(LeakDetection.recentReports().stream().noneMatch(t -> t.contains(tag)),
                    "a descriptor whose fds were taken is not reported as a leak: " + LeakDetection.recentReports());

            // The caller closes them: here by adopting them into a descriptor and closing that.
            BufferDescriptor.adoptFds(kept, d.sizes(), HandleType.POSIX_FD, d.size()).close();
            for (int fd : dropped) org.cuvmm.internal.jni.NativeApi.fd_close(fd);
            OpenFds.assertBack(baseline, "after the caller closed the fds it took");
        }
    }

    /**
     * adoptFds refuses an int given twice: the descriptor closes each entry once, so one
     * number adopted twice would be closed twice, the second time whatever file another
     * thread had opened under it (found by an independent probe: a FileChannel's fd closed
     * from under it). Refused before anything is owned: the caller still owns its fd.
     */
    @Test
    void adoptFdsRefusesTheSameFdTwice() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer b = r.allocate(SIZE)) {
            Map<String, Integer> baseline = OpenFds.byKind();
            int[] taken = b.exportDescriptor().takeFds();
            long g = r.granularity();
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> BufferDescriptor.adoptFds(
                    new int[] {taken[0], taken[0]}, new long[] {g, g}, HandleType.POSIX_FD, 2 * g));
            assertTrue(e.getMessage().startsWith("fds: [" + taken[0] + ", " + taken[0] + "] (expected: distinct fds"),
                    e.getMessage());
            assertTrue(org.cuvmm.testing.OpenFds.isOpen(taken[0]), "refused: the caller still owns its fd");
            BufferDescriptor.adoptFds(taken, new long[] {g}, HandleType.POSIX_FD, g).close();
            OpenFds.assertBack(baseline, "after a refused adoption and a good one");
        }
    }

    /**
     * A use refused because a takeFds won names takeFds, even when it lands between takeFds
     * closing the state word and recording the take (it said "is closed; its fds are gone").
     * The test hook runs useFds, fds() and toString-free checks exactly in that window.
     */
    @Test
    void aUseInTheWindowOfAWinningTakeFdsNamesTakeFds() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer b = r.allocate(SIZE)) {
            Map<String, Integer> baseline = OpenFds.byKind();
            BufferDescriptor d = b.exportDescriptor();
            String[] inWindow = new String[2];
            BufferDescriptor.takeWindowHook = () -> {
                inWindow[0] = assertThrows(IllegalStateException.class,
                        () -> d.useFds(fds -> { throw new AssertionError("ran"); })).getMessage();
                inWindow[1] = assertThrows(IllegalStateException.class, d::fds).getMessage();
            };
            int[] taken;
            try {
                taken = d.takeFds();
            } finally {
                BufferDescriptor.takeWindowHook = null;
            }
            for (String m : inWindow) assertTrue(m.contains("handed to the caller by takeFds"), m);
            BufferDescriptor.adoptFds(taken, d.sizes(), HandleType.POSIX_FD, d.size()).close();

            // A takeFds that loses to close() leaves the close's message.
            BufferDescriptor e = b.exportDescriptor();
            e.close();
            assertTrue(assertThrows(IllegalStateException.class, e::takeFds).getMessage().contains("is closed"));
            assertTrue(assertThrows(IllegalStateException.class, e::fds).getMessage().contains("is closed"));
            OpenFds.assertBack(baseline, "after the take and the close");
        }
    }

    @Test
    void useFdsDefersACloseUntilTheActionReturnsAndPassesItsExceptionThrough() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer b = r.allocate(SIZE)) {
            Map<String, Integer> baseline = OpenFds.byKind();
            BufferDescriptor d = b.exportDescriptor();
            int[][] seen = new int[1][];
            String[][] ids = new String[1][];
            d.useFds(fds -> {
                seen[0] = fds;
                ids[0] = identities(fds);
                d.close(); // as another thread might
                assertTrue(d.isClosed());
                assertArrayEquals(ids[0], identities(fds), "the close waits for the action");
                IllegalStateException inUse = assertThrows(IllegalStateException.class, d::takeFds);
                assertTrue(inUse.getMessage().contains("is closed"), inUse.getMessage());
            });
            assertFalse(sameFiles(seen[0], ids[0]), "closed when the action returned");
            assertThrows(IllegalStateException.class, () -> d.useFds(fds -> { throw new AssertionError("ran"); }));
            OpenFds.assertBack(baseline, "after the deferred close");

            try (BufferDescriptor e = b.exportDescriptor()) {
                IOException thrown = new IOException("transport failed");
                assertSame(thrown, assertThrows(IOException.class, () -> e.useFds(fds -> { throw thrown; })));
                assertFalse(e.isClosed(), "a failed action leaves the descriptor open");
                IllegalStateException inUse = assertThrows(IllegalStateException.class,
                        () -> e.useFds(fds -> e.takeFds()));
                assertTrue(inUse.getMessage().contains("in use"), inUse.getMessage());
                assertEquals(1, e.fds().length, "takeFds refused during useFds: the descriptor still owns its fds");
            }
            OpenFds.assertBack(baseline, "after the test");
        }
    }

    @Test
    void closeAfterFdsIsIdempotentAndAClosedDescriptorsFdsThrows() throws Exception {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0); VirtualMemoryBuffer b = r.allocate(SIZE)) {
            Map<String, Integer> baseline = OpenFds.byKind();
            BufferDescriptor d = b.exportDescriptor();
            int[] fds = d.fds();
            String[] ids = identities(fds);
            d.close();
            assertFalse(sameFiles(fds, ids), "closed by the first close()");
            d.close();
            d.close();
            IllegalStateException e = assertThrows(IllegalStateException.class, d::fds);
            assertTrue(e.getMessage().contains("is closed"), e.getMessage());
            assertThrows(IllegalStateException.class, () -> d.useFds(f -> { throw new AssertionError("ran"); }));
            assertThrows(IllegalStateException.class, d::takeFds);
            OpenFds.assertBack(baseline, "after close() three times");
        }
    }
}
