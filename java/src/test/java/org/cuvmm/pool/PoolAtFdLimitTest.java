package org.cuvmm.pool;

import static org.junit.jupiter.api.Assertions.assertEquals;

import java.io.FileInputStream;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import org.cuvmm.BufferLease;
import org.cuvmm.HandleType;
import org.cuvmm.Stream;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.VirtualMemoryResourceOptions;
import org.cuvmm.testing.LiveObjects;
import org.cuvmm.testing.OpenFds;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.Timeout;

/** Probe: a pool's paths (miss, stream free, lease end, trim, close) with no fd left. */
class PoolAtFdLimitTest {
    @Test
    @Timeout(60)
    void poolPathsWithNoFdLeft() throws Exception {
        Map<String, Long> live = LiveObjects.now();
        Map<String, String> fds = OpenFds.byNumber();
        List<String> thrown = new ArrayList<>();
        VirtualMemoryResourceOptions opts = VirtualMemoryResourceOptions.builder().handleType(HandleType.POSIX_FD).build();
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0, opts)) {
            long g = resource.granularity();
            Stream s = Stream.create(0);
            Stream s2 = Stream.create(0);
            VirtualMemoryPool pool = VirtualMemoryPool.builder().resource(resource).build();
            // warm: a few idle buffers of each lifetime, some freed in stream order
            VirtualMemoryBuffer e1 = pool.allocateExported(g);
            VirtualMemoryBuffer e2 = pool.allocateExported(2 * g, s);
            e2.fillAsync(0, e2.size(), (byte) 1, s);
            VirtualMemoryBuffer l1 = pool.allocate(g, s);
            VirtualMemoryBuffer l2 = pool.allocate(3 * g);
            l1.fillAsync(0, l1.size(), (byte) 2, s);
            BufferLease lease = e1.lease("probe consumer");
            e1.exportDescriptor().close();
            List<FileInputStream> hog = OpenFds.takeAll();
            try {
                e1.closeWhenUnused();
                l1.close(s2);       // first stream-ordered free: makes an event
                e2.close(s);
                lease.close();      // returns e1 to the exported pool
                try (VirtualMemoryBuffer miss = pool.allocate(5 * g)) {
                    thrown.add("miss allocate succeeded: " + miss);
                } catch (RuntimeException x) {
                    thrown.add("miss allocate: " + x);
                }
                try (VirtualMemoryBuffer missE = pool.allocateExported(7 * g)) {
                    thrown.add("miss allocateExported succeeded");
                } catch (RuntimeException x) {
                    thrown.add("miss allocateExported: " + x);
                }
                try {
                    VirtualMemoryBuffer hit = pool.allocate(g, s); // reuse of l1 on another stream: a wait
                    hit.close(s);
                } catch (RuntimeException x) {
                    thrown.add("hit allocate: " + x);
                }
                l2.close();
                try {
                    pool.trim(PoolLifetime.EXPORTED);
                } catch (RuntimeException x) {
                    thrown.add("trim: " + x);
                }
                pool.close();
            } finally {
                for (FileInputStream f : hog) f.close();
            }
            s.synchronize();
            s2.synchronize();
            pool.awaitDeferredReleases(30);
            PoolStats sl = pool.stats(PoolLifetime.LOCAL);
            PoolStats se = pool.stats(PoolLifetime.EXPORTED);
            System.err.println("probe fd: " + thrown + "\n" + sl + "\n" + se);
            assertEquals(0, sl.liveCount(), sl.toString());
            assertEquals(0, se.liveCount(), se.toString());
            assertEquals(0, sl.retainedCount(), sl.toString());
            assertEquals(0, se.retainedCount(), se.toString());
            s.close();
            s2.close();
        }
        for (String t : thrown) {
            if (t.contains("Exception") && !t.contains("expected") && !t.toLowerCase().contains("file")) {
                throw new AssertionError("message names no remedy/cause: " + t);
            }
        }
        LiveObjects.assertBack(live, "after the fd-limit probe");
        OpenFds.assertNoNewFds(fds, "after the fd-limit probe");
    }
}
