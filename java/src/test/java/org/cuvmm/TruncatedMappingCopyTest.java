package org.cuvmm;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.RandomAccessFile;
import java.nio.ByteBuffer;
import java.nio.MappedByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.Arrays;
import java.util.List;
import java.util.Map;

import org.bytedeco.javacpp.BytePointer;
import org.cuvmm.internal.FileMappings;
import org.cuvmm.testing.ChildJvm;
import org.cuvmm.testing.LiveObjects;
import org.cuvmm.testing.TestData;
import org.junit.jupiter.api.Test;

/**
 * Copies to and from a file mapping ({@code FileChannel.map}) are made by the JDK through
 * cuvmm's staging pieces, where a fault in the mapping is the JDK's InternalError: a file
 * truncated under the mapping fails the copy with an IllegalStateException naming the
 * argument. A native read of it crashed the JVM (SIGBUS in the copy; an independent probe, 3 in
 * 3). Other direct buffers keep their one-call path ({@link DirectBufferCopyPathTest}): every
 * direct buffer is a MappedByteBuffer by type, and only the JDK's private fd tells a file
 * mapping apart. The crash cases run in a child JVM.
 */
class TruncatedMappingCopyTest {
    static final int SIZE = 8 << 20;
    static final int KEPT = 3 << 20; // what a partial truncation leaves: three staging pieces

    /** Child: both directions against mappings whose files were truncated; prints what each threw. */
    public static final class Child {
        public static void main(String[] args) throws Exception {
            Path f = Files.createTempFile("cuvmm-truncated", ".bin");
            try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
                 VirtualMemoryBuffer b = r.allocate(SIZE);
                 RandomAccessFile raf = new RandomAccessFile(f.toFile(), "rw");
                 FileChannel ch = raf.getChannel()) {
                byte[] data = TestData.pattern(SIZE, 5);
                raf.write(data);
                MappedByteBuffer m = ch.map(FileChannel.MapMode.READ_WRITE, 0, SIZE);
                // Warm: compiled code, where the JDK 17's own copies delivered a fault late.
                ByteBuffer small = m.slice(0, 4096);
                for (int i = 0; i < 20_000; i++) {
                    b.copyFrom(0, small.clear());
                    b.copyTo(0, small.clear());
                }
                raf.seek(0);
                raf.write(data, 0, 4096); // the round trips above wrote the buffer's bytes back
                ch.truncate(KEPT); // the pages past 3 MiB are gone
                b.fill((byte) 0);
                try {
                    b.copyFrom(0, m);
                    System.out.println("copyFrom: no error");
                } catch (IllegalStateException e) {
                    System.out.println("copyFrom: " + e.getMessage());
                }
                System.out.println("src position after the failed copy: " + m.position());
                byte[] back = new byte[SIZE];
                b.copyTo(back);
                System.out.println("the pieces before the fault arrived: "
                        + Arrays.equals(Arrays.copyOf(back, KEPT), Arrays.copyOf(data, KEPT)));
                System.out.println("nothing of the faulting piece or later arrived: "
                        + Arrays.equals(Arrays.copyOfRange(back, KEPT, SIZE), new byte[SIZE - KEPT]));

                ch.truncate(0);
                int failures = 0;
                for (int i = 0; i < 200; i++) { // each fails at once, in the call; none later
                    try {
                        b.copyTo(0, small.clear());
                    } catch (IllegalStateException e) {
                        failures++;
                    }
                    try {
                        b.copyFrom(0, small.clear());
                    } catch (IllegalStateException e) {
                        failures++;
                    }
                }
                System.out.println("warm failures: " + failures + " of 400");
                try {
                    b.copyTo(0, m.clear());
                    System.out.println("copyTo: no error");
                } catch (IllegalStateException e) {
                    System.out.println("copyTo: " + e.getMessage());
                }
                try {
                    b.copyFrom(0, m.clear().slice().asReadOnlyBuffer()); // a view of the mapping
                    System.out.println("copyFrom(view): no error");
                } catch (IllegalStateException e) {
                    System.out.println("copyFrom(view): " + e.getMessage());
                }
                b.fill((byte) 1); // the buffer is still usable
                b.copyFrom(0, ByteBuffer.allocateDirect(16));
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
        String expected = "(expected: a file mapping whose file still covers it; its page at index ";
        assertTrue(r.output().contains("copyFrom: src: "), r.toString());
        assertTrue(r.output().contains("copyTo: dst: "), r.toString());
        assertTrue(r.output().contains("copyFrom(view): src: "), r.toString());
        assertTrue(r.output().contains("its page at index " + KEPT + " is gone"), r.toString());
        assertEquals(3, r.output().split(java.util.regex.Pattern.quote(expected), -1).length - 1, r.toString());
        assertTrue(r.output().contains("src position after the failed copy: 0"), r.toString());
        assertTrue(r.output().contains("the pieces before the fault arrived: true"), r.toString());
        assertTrue(r.output().contains("nothing of the faulting piece or later arrived: true"), r.toString());
        assertTrue(r.output().contains("warm failures: 400 of 400"), r.toString());
        assertTrue(r.output().contains("SURVIVED"), r.toString());
        assertFalse(r.output().contains("InternalError"), r.toString());
    }

    @Test
    void anIntactMappingRoundTripsInPieces() throws Exception {
        Path f = Files.createTempFile("cuvmm-mapping", ".bin");
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer b = r.allocate(SIZE);
             RandomAccessFile raf = new RandomAccessFile(f.toFile(), "rw");
             FileChannel ch = raf.getChannel()) {
            byte[] data = TestData.pattern(SIZE, 9);
            raf.write(data);
            MappedByteBuffer m = ch.map(FileChannel.MapMode.READ_WRITE, 0, SIZE);
            DriverCounters c = TestSupport.counters();
            c.resetCalls();
            b.copyFrom(0, m);
            assertEquals(SIZE, m.position(), "src's position advanced");
            assertEquals(SIZE / (1 << 20), copies(c), "a file mapping is staged, one driver copy per MiB");
            byte[] back = new byte[SIZE];
            b.copyTo(back);
            assertArrayEquals(data, back);
            b.fill((byte) 3);
            c.resetCalls();
            b.copyTo(0, m.clear());
            assertEquals(SIZE / (1 << 20), copies(c), "a file mapping is staged, one driver copy per MiB");
            assertEquals(SIZE, m.position(), "dst's position advanced");
            assertEquals(3, m.get(SIZE - 1));
            assertEquals(3, m.get(0));
        } finally {
            Files.deleteIfExists(f);
        }
    }

    @Test
    void fileMappingsAreToldApartFromOtherDirectMemory() throws Exception {
        Map<String, Long> before = LiveObjects.now();
        Path f = Files.createTempFile("cuvmm-mapping", ".bin");
        try (RandomAccessFile raf = new RandomAccessFile(f.toFile(), "rw"); FileChannel ch = raf.getChannel()) {
            raf.setLength(1 << 16);
            MappedByteBuffer rw = ch.map(FileChannel.MapMode.READ_WRITE, 0, 1 << 16);
            MappedByteBuffer ro = ch.map(FileChannel.MapMode.READ_ONLY, 0, 1 << 16);
            for (ByteBuffer mapping : List.of(rw, ro, rw.slice(), rw.duplicate(), rw.asReadOnlyBuffer(),
                    rw.slice(100, 200))) {
                assertTrue(FileMappings.isFileMapping(mapping), mapping + " is a file mapping");
            }
            try (BytePointer native_ = new BytePointer(64);
                 VirtualMemoryResource host = VirtualMemoryResource.create(0, VirtualMemoryResourceOptions.builder()
                         .locationType(LocationType.HOST).handleType(HandleType.NONE).build());
                 VirtualMemoryBuffer hostBuffer = host.allocate(1 << 16)) {
                for (ByteBuffer other : List.of(ByteBuffer.allocateDirect(64), ByteBuffer.allocateDirect(64).slice(),
                        ByteBuffer.allocate(64), native_.asByteBuffer())) {
                    assertFalse(FileMappings.isFileMapping(other), other + " is not a file mapping");
                }
                assertFalse(viewIsFileMapping(hostBuffer), "an asByteBuffer view is not a file mapping");
            }
        } finally {
            Files.deleteIfExists(f);
        }
        LiveObjects.awaitBackAfterViewsAreCollected(before); // the asByteBuffer view pins its memory until collected
    }

    /** In a frame of its own, so that no dead local keeps the view (which pins the memory) reachable. */
    private static boolean viewIsFileMapping(VirtualMemoryBuffer b) {
        return FileMappings.isFileMapping(b.asByteBuffer());
    }

    private static long copies(DriverCounters c) {
        return c.calls().entrySet().stream().filter(e -> e.getKey().startsWith("cuMemcpy"))
                .mapToLong(Map.Entry::getValue).sum();
    }
}
