package org.cuvmm;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.FileInputStream;
import java.util.List;
import java.util.Map;

import org.cuvmm.testing.ChildJvm;
import org.cuvmm.testing.OpenFds;
import org.junit.jupiter.api.Test;

/**
 * Closing works with no fd to spare: a process at its open-file limit must still be able to
 * give its buffers, streams, events and pinned memory back. The classes a close needs are
 * loaded with the objects, not at the first close (an independent probe: the first close at
 * the limit threw NoClassDefFoundError for AcquireState$CloseResult, since loading a class
 * from a classes directory opens a file). In a child JVM, whose fds this test exhausts.
 */
class CloseAtFdLimitTest {
    /** Child: makes one of each, takes every free fd, closes them all, reports, gives the fds back. */
    public static final class Child {
        public static void main(String[] args) throws Exception {
            // Made first, and nothing closed before the limit: whatever a close needs is loaded
            // by then or never (args: which kinds to make, so each is tried on its own too).
            String kinds = args.length > 0 ? args[0] : "rbvsepdo";
            VirtualMemoryResource r = VirtualMemoryResource.create(0);
            VirtualMemoryBuffer b = r.allocate(2L << 20);
            VirtualMemoryBuffer view = kinds.contains("v") ? b.share(() -> { }) : null;
            Stream s = kinds.contains("s") ? Stream.create(0) : null;
            Event e = kinds.contains("e") ? Event.create(0) : null;
            PinnedHostBuffer p = kinds.contains("p") ? PinnedHostBuffer.allocate(4096) : null;
            BufferDescriptor d = kinds.contains("d") ? b.exportDescriptor() : null;
            org.cuvmm.pool.VirtualMemoryPool pool = kinds.contains("o")
                    ? org.cuvmm.pool.VirtualMemoryPool.builder().resource(r).name("at-limit").build() : null;
            VirtualMemoryBuffer pooled = pool == null ? null : pool.allocate(1L << 20);
            List<FileInputStream> hog = OpenFds.takeAll();
            String result;
            try {
                if (pooled != null) pooled.close();
                if (pool != null) pool.close();
                if (d != null) d.close();
                if (p != null) p.close();
                if (e != null) e.close();
                if (s != null) s.close();
                if (view != null) view.close();
                b.close();
                r.close();
                result = "CLOSED ALL";
            } catch (Throwable t) {
                result = "CLOSE FAILED " + t;
                t.printStackTrace(System.out);
            }
            for (FileInputStream f : hog) f.close();
            System.out.println("HELD " + hog.size());
            System.out.println(result);
        }
    }

    @Test
    void everyKindClosesWithNoFdToSpare() throws Exception {
        for (String kinds : new String[] {"rb", "rbv", "rbs", "rbe", "rbp", "rbd", "rbo", "rbvsepdo"}) {
            ChildJvm.Result r = ChildJvm.run(Child.class, List.of(), Map.of(), kinds);
            assertEquals(0, r.exitCode(), kinds + ": " + r);
            assertTrue(r.output().contains("HELD "), kinds + ": " + r);
            assertFalse(r.output().contains("NoClassDefFoundError"), kinds + ": " + r);
            assertTrue(r.output().contains("CLOSED ALL"), kinds + ": " + r);
        }
    }
}
