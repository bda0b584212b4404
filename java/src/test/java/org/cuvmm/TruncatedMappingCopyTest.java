package org.cuvmm;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.RandomAccessFile;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;

import org.cuvmm.testing.ChildJvm;
import org.junit.jupiter.api.Test;

/**
 * Copies to and from a {@link MappedByteBuffer} go through cuvmm's staging pieces, where the
 * JDK takes a fault in the mapping: a file truncated under the mapping fails the copy with an
 * IllegalStateException naming the argument. A direct native read of it crashed the JVM
 * (SIGBUS in the copy; an independent probe, 3 in 3). Runs in a child JVM, since the failure
 * is a crash; an intact mapping round-trips in this one.
 */
class TruncatedMappingCopyTest {
    static final int SIZE = 8 << 20;

    /** Child: both directions against a mapping whose file was truncated; prints what each threw. */
    public static final class Child {
        public static void main(String[] args) throws Exception {
            Path f = Files.createTempFile("cuvmm-truncated", ".bin");
            try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
                 VirtualMemoryBuffer b = r.allocate(SIZE);
                 RandomAccessFile raf = new RandomAccessFile(f.toFile(), "rw");
                 FileChannel ch = raf.getChannel()) {
                raf.setLength(SIZE);
                MappedByteBuffer m = ch.map(FileChannel.MapMode.READ_WRITE, 0, SIZE);
                ch.truncate(0);
                try {
                    b.copyFrom(0, m);
                    System.out.println("copyFrom: no error");
                } catch (IllegalStateException e) {
                    System.out.println("copyFrom: " + e.getMessage());
                }
                try {
                    b.copyTo(0, m.clear());
                    System.out.println("copyTo: no error");
                } catch (IllegalStateException e) {
                    System.out.println("copyTo: " + e.getMessage());
                }
                b.fill((byte) 1); // the buffer is still usable
            } finally {
                Files.deleteIfExists(f);
            }
            System.out.println("SURVIVED");
        }
    }

    @Test
    void aTruncatedMappingFailsTheCopyWithoutCrashing() throws Exception {
        ChildJvm.Result r = TestSupport.runChild(Child.class, List.of(), Map.of());
        assertEquals(0, r.exitCode(), r.toString());
        assertTrue(r.output().contains("copyFrom: src: "), r.toString());
        assertTrue(r.output().contains("copyTo: dst: "), r.toString());
        assertTrue(r.output().contains("(expected: a mapping whose file still covers it; the file was truncated"),
                r.toString());
        assertTrue(r.output().contains("SURVIVED"), r.toString());
    }

    @Test
    void anIntactMappingRoundTrips() throws Exception {
        Path f = Files.createTempFile("cuvmm-mapping", ".bin");
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer b = r.allocate(SIZE);
             RandomAccessFile raf = new RandomAccessFile(f.toFile(), "rw");
             FileChannel ch = raf.getChannel()) {
            byte[] data = org.cuvmm.testing.TestData.pattern(SIZE, 9);
            raf.write(data);
            MappedByteBuffer m = ch.map(FileChannel.MapMode.READ_WRITE, 0, SIZE);
            b.copyFrom(0, m);
            assertEquals(SIZE, m.position(), "src's position advanced");
            byte[] back = new byte[SIZE];
            b.copyTo(back);
            assertArrayEquals(data, back);
            b.fill((byte) 3);
            b.copyTo(0, m.clear());
            assertEquals(SIZE, m.position(), "dst's position advanced");
            assertEquals(3, m.get(SIZE - 1));
            assertEquals(3, m.get(0));
        } finally {
            Files.deleteIfExists(f);
        }
    }
}
