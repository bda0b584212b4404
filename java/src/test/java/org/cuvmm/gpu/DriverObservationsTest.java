package org.cuvmm.gpu;

import static org.cuvmm.gpu.DriverObservationLog.record;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.cuvmm.gpu.PresetsDriver.check;
import static org.cuvmm.gpu.PresetsDriver.name;

import java.io.IOException;
import java.io.UncheckedIOException;
import java.nio.channels.FileChannel;
import java.nio.channels.Pipe;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.util.ArrayDeque;
import java.util.ArrayList;
import java.util.Deque;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.TreeSet;

import org.bytedeco.cuda.cudart.CUmemAccessDesc_v1;
import org.bytedeco.cuda.cudart.CUmemAllocationProp_v1;
import org.bytedeco.cuda.cudart.CUmemLocation_v1;
import org.bytedeco.cuda.global.cudart;
import org.bytedeco.javacpp.BytePointer;
import org.bytedeco.javacpp.LongPointer;
import org.bytedeco.javacpp.Pointer;
import org.bytedeco.javacpp.SizeTPointer;
import org.cuvmm.Driver;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.MethodOrderer;
import org.junit.jupiter.api.Order;
import org.junit.jupiter.api.Tag;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.TestMethodOrder;

/**
 * Observes, on the real NVIDIA driver, the behaviours the driver audit
 * ({@code DRIVER_AUDIT.md} part C, "first GPU run should cover") marks unknown: A7, B20, B21,
 * B33, B34, B45, B50, and A4's cross-device rule (A3 is {@code CudaContractTest.closeOnAFreshThreadTearsDownCleanly}).
 * Each test makes the raw driver calls through the JavaCPP CUDA presets (cuvmm's API does not
 * expose these misuses), RECORDS what the driver did (CUresult names, addresses, sizes) and
 * passes whenever the process survives with one of the plausible outcomes: the point is the
 * record, not one expected answer.
 *
 * <p>Records: one line per observation, prefixed with the audit entry ("B21 ..."), printed
 * and appended to the file named by the system property {@code cuvmm.gpu.observations}
 * ({@link DriverObservationLog}; set by {@code scripts/gpu-check}'s run.sh, whose summary
 * prints them under "What the driver did", and "not observed: why" for each entry whose test
 * skipped or failed).
 *
 * <p>Nothing here copies from or to memory the current device cannot access (audit A4/B49: on
 * a GPU that faults the context for the rest of the process), except B50, which is that very
 * question: it runs only when the environment variable {@code CUVMM_GPU_OBSERVE_FAULTING=1}
 * asks for it (then select this class alone), on two devices, ordered last; otherwise it
 * skips and says why. Skipped, with the driver's reason, where the selected driver is not cuda.
 */
@Tag("gpu")
@TestMethodOrder(MethodOrderer.OrderAnnotation.class)
class DriverObservationsTest {
    private Driver driver;
    private long g;
    private boolean contextRetained;
    /** Undo steps of the current probe (unmap, release, free), run newest first. */
    private final Deque<Runnable> undo = new ArrayDeque<>();
    /** Size of each allocation the current probe created, by handle (cuMemMap maps it whole). */
    private final Map<Long, Long> sizes = new HashMap<>();

    @BeforeEach
    void open() {
        driver = GpuSupport.assumeCuda();
        PresetsDriver.retainPrimaryContext("so nothing was observed");
        contextRetained = true;
        g = Cu.granularity(0);
    }

    @AfterEach
    void close() {
        while (!undo.isEmpty()) undo.pop().run();
        if (contextRetained) PresetsDriver.releasePrimaryContext();
    }

    /** A7: does cuMemGetAddressRange report the mapping (chunk) or the whole reservation? */
    @Test
    @Order(1)
    void a7AddressRangeOfChunk2OfAMovedBuffer() {
        // A MOVED buffer's layout: one reservation, two mappings (chunk 1: g, chunk 2: 2g).
        long base = reserve(3 * g);
        map(base, create(g, 0));
        long chunk2 = base + g;
        map(chunk2, create(2 * g, 0));
        setAccess(base, 3 * g, 0);
        long[] range = new long[1];
        int rc;
        String got;
        try (SizeTPointer size = new SizeTPointer(1)) {
            rc = cudart.cuMemGetAddressRange(range, size, chunk2 + g);
            got = rc != cudart.CUDA_SUCCESS ? "" : describeRange(range[0], size.get(), base, chunk2, 2 * g, 3 * g);
        }
        record("A7", "cuMemGetAddressRange(chunk 2 + g) of a 2-mapping reservation: " + got + name(rc));
        long start = Cu.longAttribute(cudart.CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, chunk2 + g);
        long size = Cu.longAttribute(cudart.CU_POINTER_ATTRIBUTE_RANGE_SIZE, chunk2 + g);
        record("A7", "CU_POINTER_ATTRIBUTE_RANGE_START_ADDR/SIZE(chunk 2 + g): "
                + describeRange(start, size, base, chunk2, 2 * g, 3 * g) + "CUDA_SUCCESS");
        assertTrue(rc == cudart.CUDA_SUCCESS && range[0] <= chunk2 + g, "cuMemGetAddressRange on a mapped address");
    }

    /** B20: is an alignment below the granularity honoured, and does cuMemMap then take the base? */
    @Test
    @Order(2)
    void b20AlignmentBelowTheGranularity() {
        long align = 64 * 1024;
        Assumptions.assumeTrue(align < g, () -> "the granularity " + g + " is not above 64 KiB");
        StringBuilder bases = new StringBuilder();
        long misaligned = 0;
        int rc = cudart.CUDA_SUCCESS;
        for (int i = 0; i < 4 && rc == cudart.CUDA_SUCCESS; i++) {
            // Size g + align: a range the driver could place off the granularity if it honours align.
            long[] ptr = new long[1];
            rc = cudart.cuMemAddressReserve(ptr, g + align, align, 0, 0);
            if (rc != cudart.CUDA_SUCCESS) break;
            long p = ptr[0];
            undo.push(() -> cudart.cuMemAddressFree(p, g + align));
            bases.append(bases.length() == 0 ? "" : ", ").append(hex(p))
                    .append(p % g == 0 ? " (granule-aligned)" : " (NOT granule-aligned)");
            if (p % g != 0 && misaligned == 0) misaligned = p;
        }
        record("B20", "cuMemAddressReserve(size g+64 KiB, alignment 64 KiB < granularity " + g + "): "
                + (bases.length() == 0 ? "" : "bases " + bases + "; ") + name(rc));
        if (misaligned != 0) {
            long handle = create(g, 0);
            int mapRc = cudart.cuMemMap(misaligned, g, 0, handle, 0);
            long at = misaligned;
            if (mapRc == cudart.CUDA_SUCCESS) undo.push(() -> cudart.cuMemUnmap(at, g));
            record("B20", "cuMemMap(g) at the non-granule-aligned base " + hex(misaligned) + ": " + name(mapRc));
        }
    }

    /** B21: a hint whose range is occupied: placed elsewhere, or an error? */
    @Test
    @Order(3)
    void b21HintRangeOccupied() {
        long taken = reserve(2 * g);
        long[] ptr = new long[1];
        int rc = cudart.cuMemAddressReserve(ptr, 2 * g, 0, taken, 0);
        String where = "";
        if (rc == cudart.CUDA_SUCCESS) {
            long p = ptr[0];
            undo.push(() -> cudart.cuMemAddressFree(p, 2 * g));
            where = (p == taken ? "placed AT the occupied hint " + hex(p) + " (overlap!)"
                    : "placed elsewhere (" + hex(p) + ", hint " + hex(taken) + ")") + ", ";
        }
        record("B21", "cuMemAddressReserve(2g, hint = an occupied reservation): " + where + name(rc));
        if (rc == cudart.CUDA_SUCCESS) assertTrue(ptr[0] != taken, "a second reservation at an occupied address");
    }

    /** B33: one cuMemSetAccess across two adjacent, fully mapped reservations. */
    @Test
    @Order(4)
    void b33SetAccessAcrossTwoAdjacentReservations() {
        long[] pair = adjacentReservations(2 * g);
        map(pair[0], create(2 * g, 0));
        map(pair[1], create(2 * g, 0));
        int rc = setAccessRc(pair[0], 4 * g, 0);
        record("B33", "cuMemSetAccess(device 0, RW) over two adjacent reservations " + hex(pair[0]) + " and "
                + hex(pair[1])
                + " (2g each, each fully mapped): " + name(rc) + accessAfter(rc, pair[0], pair[1]));
    }

    /** B34: cuMemSetAccess on the first half of one mapping. */
    @Test
    @Order(5)
    void b34SetAccessOnPartOfOneMapping() {
        long base = reserve(2 * g);
        map(base, create(2 * g, 0));
        int rc = setAccessRc(base, g, 0);
        record("B34", "cuMemSetAccess(device 0, RW) on the first g of one 2g mapping: " + name(rc)
                + accessAfter(rc, base, base + g));
    }

    /** B45: import of fds that are not CUDA allocations. Never asserts the code (audit). */
    @Test
    @Order(6)
    void b45ImportOfANonCudaFd() throws IOException {
        List<String> seen = new ArrayList<>();
        Path dir = Files.createTempDirectory("cuvmm-b45");
        try {
            Set<String> before = Fds.pipes();
            Pipe pipe = Pipe.open();
            try (Pipe.SourceChannel source = pipe.source(); Pipe.SinkChannel sink = pipe.sink()) {
                seen.add(importFd("a pipe", Fds.newPipe(before)));
            }
            Path file = Files.write(dir.resolve("regular"), new byte[(int) g]);
            seen.add(importFd("a regular file of g bytes", Fds.openedAs(file)));
            Path shm = Path.of("/dev/shm");
            if (Files.isDirectory(shm) && Files.isWritable(shm)) {
                Path foreign = Files.createTempFile(shm, "cuvmm-b45", "");
                try {
                    Files.write(foreign, new byte[(int) g]);
                    seen.add(importFd("a foreign tmpfs (shm) file of g bytes", Fds.openedAs(foreign)));
                } finally {
                    Files.deleteIfExists(foreign);
                }
            }
            seen.add(importFd("fd -1 (not an open fd)", new Fds.Held(-1, null)));
        } finally {
            try (var s = Files.list(dir)) {
                for (Path p : (Iterable<Path>) s::iterator) Files.deleteIfExists(p);
            }
            Files.deleteIfExists(dir);
        }
        record("B45", "cuMemImportFromShareableHandle(POSIX_FD) of " + String.join("; ", seen));
    }

    /**
     * A4, cross-device: cuvmm runs a DtoD between devices on the destination's device, which it
     * requires to hold READ on the source (cuda.h says nothing of which device copies, nor of
     * access, for cuMemcpyDtoD). Here the source is device 1's memory that device 0 was granted
     * access to, the copy runs with device 0 (the destination's) current: safe, no fault.
     * Records the result and whether the bytes arrived (a failure here contradicts what cuvmm
     * relies on: docs/VMM_DESIGN.md, "Driver behaviour cuvmm relies on").
     */
    @Test
    @Order(7)
    void a4CrossDeviceCopyOnTheDestinationsDevice() {
        GpuSupport.assumePeers(driver, 0, 1);
        long n = Math.max(g, Cu.granularity(1));
        long src = reserve(n);
        map(src, create(n, 1));
        setAccess(src, n, 1);
        setAccess(src, n, 0);
        long dst = reserve(n);
        map(dst, create(n, 0));
        setAccess(dst, n, 0);
        check(cudart.cuMemsetD8(src, (byte) 0x5a, 4096), "cuMemsetD8(source, on device 0)");
        check(cudart.cuMemsetD8(dst, (byte) 0, 4096), "cuMemsetD8(destination)");
        int rc = cudart.cuMemcpyDtoD(dst, src, 4096);
        int sync = cudart.cuCtxSynchronize();
        String bytes = "not read";
        if (rc == cudart.CUDA_SUCCESS && sync == cudart.CUDA_SUCCESS) {
            try (BytePointer host = new BytePointer(4096)) {
                check(cudart.cuMemcpyDtoH(host, dst, 4096), "cuMemcpyDtoH(destination)");
                int wrong = 0;
                for (int i = 0; i < 4096; i++) if (host.get(i) != (byte) 0x5a) wrong++;
                bytes = wrong == 0 ? "all 4096 bytes arrived" : wrong + " of 4096 bytes wrong";
            }
        }
        record("A4", "cuMemcpyDtoD(4 KiB) on device 0 (the destination's) from device 1's memory that device 0 may "
                + "access: " + name(rc) + "; cuCtxSynchronize: " + name(sync) + "; " + bytes);
    }

    /**
     * B50: DtoD where the current device (0) has no access to the source (device 1's memory,
     * accessible to device 1 only). On a GPU this may fault device 0's context for the rest of
     * the process (sticky), so it runs only on request, last.
     */
    @Test
    @Order(99)
    void b50CopyFromMemoryTheCurrentDeviceCannotAccess() {
        Assumptions.assumeTrue("1".equals(System.getenv("CUVMM_GPU_OBSERVE_FAULTING")), "not run by default: a copy "
                + "the current device cannot access may fault the primary context for the rest of the process "
                + "(audit A4/B49); to observe it: CUVMM_GPU_OBSERVE_FAULTING=1 run.sh "
                + "--select-class=org.cuvmm.gpu.DriverObservationsTest");
        GpuSupport.assumePeers(driver, 0, 1);
        long n = Math.max(g, Cu.granularity(1));
        long src = reserve(n);
        map(src, create(n, 1));
        setAccess(src, n, 1);
        long dst = reserve(n);
        map(dst, create(n, 0));
        setAccess(dst, n, 0);
        int rc = cudart.cuMemcpyDtoD(dst, src, 4096);
        int sync = cudart.cuCtxSynchronize();
        int after = cudart.cuCtxSynchronize();
        record("B50", "cuMemcpyDtoD(4 KiB) on device 0 from device 1's memory that only device 1 may access: "
                + name(rc)
                + "; cuCtxSynchronize: " + name(sync) + "; again: " + name(after)
                + (after != cudart.CUDA_SUCCESS ? " (sticky: the context is lost for this process)" : ""));
    }

    // ---- probe helpers: each registers its undo step ----

    private long reserve(long size) {
        long[] ptr = new long[1];
        check(cudart.cuMemAddressReserve(ptr, size, 0, 0, 0), "cuMemAddressReserve(" + size + ")");
        long p = ptr[0];
        undo.push(() -> cudart.cuMemAddressFree(p, size));
        return p;
    }

    private long create(long size, int device) {
        long[] handle = new long[1];
        try (CUmemAllocationProp_v1 prop = Cu.prop(device)) {
            check(cudart.cuMemCreate(handle, size, prop, 0), "cuMemCreate(" + size + ", device " + device + ")");
        }
        long h = handle[0];
        sizes.put(h, size);
        undo.push(() -> cudart.cuMemRelease(h));
        return h;
    }

    private void map(long at, long handle) {
        long size = sizes.get(handle);
        check(cudart.cuMemMap(at, size, 0, handle, 0), "cuMemMap(" + hex(at) + ", " + size + ")");
        undo.push(() -> cudart.cuMemUnmap(at, size));
    }

    private void setAccess(long at, long size, int device) {
        check(setAccessRc(at, size, device), "cuMemSetAccess(" + hex(at) + ", " + size + ", device " + device + ")");
    }

    private static int setAccessRc(long at, long size, int device) {
        try (CUmemAccessDesc_v1 desc = new CUmemAccessDesc_v1()) {
            desc.zero();
            desc.location().type(cudart.CU_MEM_LOCATION_TYPE_DEVICE).id(device);
            desc.flags(cudart.CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
            return cudart.cuMemSetAccess(at, size, desc, 1);
        }
    }

    /** Two reservations of {@code size} each, the second right after the first, or a skip. */
    private long[] adjacentReservations(long size) {
        long[] probe = new long[1];
        check(cudart.cuMemAddressReserve(probe, 2 * size, 0, 0, 0), "cuMemAddressReserve(probe)");
        check(cudart.cuMemAddressFree(probe[0], 2 * size), "cuMemAddressFree(probe)");
        long first = reserveAt(size, probe[0]);
        long second = reserveAt(size, first + size);
        Assumptions.assumeTrue(second == first + size, () -> "could not place two adjacent reservations: "
                + hex(first) + " and " + hex(second) + " (hint " + hex(first + size) + " not honoured)");
        return new long[] {first, second};
    }

    /** A reservation with a hint; a skip (with the CUresult) where the driver refuses the hint (A1). */
    private long reserveAt(long size, long hint) {
        long[] ptr = new long[1];
        int rc = cudart.cuMemAddressReserve(ptr, size, 0, hint, 0);
        Assumptions.assumeTrue(rc == cudart.CUDA_SUCCESS, () -> "cuMemAddressReserve(" + size + ", hint " + hex(hint)
                + ") failed: " + name(rc) + ", so no adjacent reservations");
        long p = ptr[0];
        undo.push(() -> cudart.cuMemAddressFree(p, size));
        return p;
    }

    /** After a successful cuMemSetAccess: device 0's access at each address, as cuMemGetAccess says. */
    private static String accessAfter(int rc, long... at) {
        if (rc != cudart.CUDA_SUCCESS) return "";
        StringBuilder s = new StringBuilder("; cuMemGetAccess(device 0) then:");
        for (long a : at) s.append(' ').append(hex(a)).append('=').append(Cu.accessName(a, 0));
        return s.toString();
    }

    private static String describeRange(long start, long size, long reservation, long chunk, long chunkSize,
            long total) {
        String what = start == chunk && size == chunkSize ? "the mapping (chunk 2)"
                : start == reservation && size == total ? "the whole reservation" : "neither chunk nor reservation";
        return what + " [" + hex(start) + ", +" + size + "], ";
    }

    /** The fd, imported; a handle that comes back anyway is released at once. */
    private String importFd(String what, Fds.Held fd) {
        try (fd) {
            long[] handle = new long[1];
            Pointer os = new Pointer() {
                {
                    address = fd.number;
                }
            };
            int rc = cudart.cuMemImportFromShareableHandle(handle, os, cudart.CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
            String released = "";
            if (rc == cudart.CUDA_SUCCESS) {
                released = " (handle released: " + name(cudart.cuMemRelease(handle[0])) + ")";
            }
            return what + ": " + name(rc) + released;
        }
    }

    private static String hex(long a) {
        return "0x" + Long.toHexString(a);
    }

    /** Raw fd numbers of Java-opened files, found through /proc/self/fd (Java hides them). */
    private static final class Fds {
        private Fds() {}

        /** An fd number and what keeps it open (closed by {@link #close()}). */
        static final class Held implements AutoCloseable {
            final int number;
            private final AutoCloseable owner;

            Held(int number, AutoCloseable owner) {
                this.number = number;
                this.owner = owner;
            }

            @Override
            public void close() {
                try {
                    if (owner != null) owner.close();
                } catch (Exception e) {
                    throw new IllegalStateException("closing fd " + number, e);
                }
            }
        }

        static Set<Integer> open() {
            Set<Integer> fds = new HashSet<>();
            try (var s = Files.list(Path.of("/proc/self/fd"))) {
                s.forEach(p -> fds.add(Integer.parseInt(p.getFileName().toString())));
            } catch (IOException e) {
                throw new UncheckedIOException(e);
            }
            return fds;
        }

        /** The pipes open now, as their /proc/self/fd targets ("pipe:[inode]"). */
        static Set<String> pipes() {
            Set<String> pipes = new HashSet<>();
            for (int fd : open()) {
                String t = target(fd);
                if (t.startsWith("pipe:")) pipes.add(t);
            }
            return pipes;
        }

        /**
         * The lowest fd of a pipe not among {@code before} (the pipe the caller holds keeps it
         * open). By the pipe, not by the fd number: another pipe of this process closed
         * meanwhile (the JDK's process launcher holds one for a moment after a child exits) may
         * have freed the very number the new pipe took, and a number already seen was then
         * taken for an old fd (the test skipped, "no pipe fd found", in one CI run).
         */
        static Held newPipe(Set<String> before) {
            for (int fd : new TreeSet<>(open())) {
                String t = target(fd);
                if (t.startsWith("pipe:") && !before.contains(t)) return new Held(fd, null);
            }
            Assumptions.abort("no pipe fd found in /proc/self/fd");
            return null;
        }

        /** Opens {@code file} read-write and finds its fd by its /proc/self/fd link. */
        static Held openedAs(Path file) throws IOException {
            FileChannel ch = FileChannel.open(file, StandardOpenOption.READ, StandardOpenOption.WRITE);
            String real = file.toRealPath().toString();
            for (int fd : open()) {
                if (target(fd).equals(real)) return new Held(fd, ch);
            }
            ch.close();
            Assumptions.abort("the fd of " + real + " was not found in /proc/self/fd");
            return null;
        }

        private static String target(int fd) {
            try {
                return Files.readSymbolicLink(Path.of("/proc/self/fd/" + fd)).toString();
            } catch (IOException e) {
                return "";
            }
        }
    }

    /** The presets, touched only once the cuda driver is known to run. */
    private static final class Cu {
        private Cu() {}

        static CUmemAllocationProp_v1 prop(int device) {
            CUmemAllocationProp_v1 prop = new CUmemAllocationProp_v1();
            prop.zero();
            prop.type(cudart.CU_MEM_ALLOCATION_TYPE_PINNED);
            prop.location().type(cudart.CU_MEM_LOCATION_TYPE_DEVICE).id(device);
            return prop;
        }

        static long granularity(int device) {
            try (CUmemAllocationProp_v1 prop = prop(device); SizeTPointer out = new SizeTPointer(1)) {
                check(cudart.cuMemGetAllocationGranularity(out, prop, cudart.CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
                        "cuMemGetAllocationGranularity(device " + device + ")");
                return out.get();
            }
        }

        static long longAttribute(int attribute, long address) {
            try (BytePointer out = new BytePointer(8)) {
                out.zero();
                check(cudart.cuPointerGetAttribute(out, attribute, address),
                        "cuPointerGetAttribute(" + attribute + ")");
                return out.getLong(0);
            }
        }

        static String accessName(long address, int device) {
            try (CUmemLocation_v1 location = new CUmemLocation_v1()) {
                location.zero();
                location.type(cudart.CU_MEM_LOCATION_TYPE_DEVICE).id(device);
                long[] flags = new long[1];
                int rc = cudart.cuMemGetAccess(flags, location, address);
                if (rc != cudart.CUDA_SUCCESS) return name(rc);
                if (flags[0] == cudart.CU_MEM_ACCESS_FLAGS_PROT_READWRITE) return "RW";
                if (flags[0] == cudart.CU_MEM_ACCESS_FLAGS_PROT_READ) return "R";
                return flags[0] == 0 ? "none" : "flags " + flags[0];
            }
        }
    }
}
