package org.cuvmm;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNotSame;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import static org.cuvmm.CudaCorePort.bytes;
import static org.cuvmm.CudaCorePort.counters;
import static org.cuvmm.CudaCorePort.freeRegion;
import static org.cuvmm.CudaCorePort.read;
import static org.cuvmm.CudaCorePort.reserveAt;
import static org.cuvmm.CudaCorePort.resource;

import java.io.BufferedReader;
import java.io.File;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.Writer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HashSet;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.TimeUnit;

import org.cuvmm.testing.ChildJvm;
import org.cuvmm.testing.LiveObjects;
import org.junit.jupiter.api.Test;

/**
 * A port of cuda.core's VirtualMemoryResource tests (NVIDIA/cuda-python, cuda_core):
 * {@code tests/test_memory.py} ({@code test_vmm_allocator_*}),
 * {@code tests/memory/test_resource_live_count.py} ({@code test_va_reservation_*}),
 * {@code tests/memory_ipc/test_vmm_ipc.py} (all classes), plus the behaviours the
 * docstrings of {@code cuda/core/_memory/_virtual_memory_resource.pyx} promise.
 *
 * <p>Name mapping: {@code buf.size} after allocate -> {@code mappedSize()} (design, "Where
 * cuvmm and cuda.core differ"); {@code buf.ipc_descriptor} -> {@code exportDescriptor()};
 * {@code Buffer.from_ipc_descriptor(mr, desc)} -> {@code mr.importBuffer(desc)};
 * {@code VirtualMemoryIPCBufferDescriptor.from_fds} -> {@code BufferDescriptor.fromFds};
 * {@code config=} -> {@code VirtualMemoryResourceOptions}; cuMemsetD8/cuMemcpyDtoH ->
 * {@code fill}/{@code copyTo}; {@code _is_mapped(ptr)} -> the host driver's live mapping
 * count. ValueError/TypeError -> IllegalArgumentException, RuntimeError (state) ->
 * IllegalStateException, CUDAError -> CudaException. Cross-process children are child JVMs
 * that receive the fds by reopening /proc/PARENT/fd/N before the JVM starts.
 *
 * <p>Not ported: {@code allocate(size, stream=)} and {@code from_ipc_descriptor(..., stream=)}
 * (cuvmm's resource calls are synchronous and take no stream; the design's "Where cuvmm and
 * cuda.core differ" says what to use instead), pickling, DLPack and the raw deallocate path.
 * Written by an independent helper from cuda.core's test files and docstrings.
 */
class CudaCoreVmmPortTest {
    private static final HexFormat HEX = HexFormat.of();

    // ---------------------------------------------------------------- helpers

    /**
     * cuda.core's {@code mr.allocate(1)}, whose buffer then has the rounded size (one granule) and
     * is filled and read as such. {@code allocate(1)} here gives {@code size() == 1}, and the
     * bytes past it cannot be copied or filled (see {@link #allocateOneThenUseTheRoundedSize()}),
     * so the port asks for one granule.
     */
    private static VirtualMemoryBuffer allocate1(VirtualMemoryResource mr) {
        return mr.allocate(mr.granularity());
    }

    private static void fill(VirtualMemoryBuffer b, int value, long offset, long size) {
        b.fill(offset, size, (byte) value);
    }

    private static void fill(VirtualMemoryBuffer b, int value) {
        fill(b, value, 0, b.mappedSize());
    }

    /**
     * cuda.core's {@code _open_fds()}. On the host driver the memory handles are memfds, and only
     * those are counted (a child process's pipes, closed by the GC at any time, would make a
     * count of every fd flaky).
     */
    private static int openFds() {
        return hostBacked() ? (int) TestSupport.memfdFds() : TestSupport.openFds();
    }

    /** The host driver, or the cuda driver over the host library (the build's cuda pass). */
    private static boolean hostBacked() {
        return TestSupport.onHostDriver() || Driver.get().isHostLibrary();
    }

    private static String fdTarget(int fd) {
        try {
            return Files.readSymbolicLink(Path.of("/proc/self/fd/" + fd)).toString();
        } catch (IOException gone) {
            return null;
        }
    }

    /** An open fd of this process that is not a memory handle (a pipe of the JVM or a plain file). */
    private static int plainFileFd(List<java.io.Closeable> toClose) throws IOException {
        Path file = Files.createTempFile("cuda-core-port", ".bin");
        java.io.RandomAccessFile raf = new java.io.RandomAccessFile(file.toFile(), "rw");
        raf.setLength(2L << 20);
        toClose.add(raf);
        toClose.add(() -> Files.deleteIfExists(file));
        String target = file.toRealPath().toString();
        return TestSupport.fdTargets().entrySet().stream().filter(e -> e.getValue().equals(target))
                .mapToInt(e -> Integer.parseInt(e.getKey())).findFirst()
                .orElseThrow(() -> new AssertionError("no fd for " + target));
    }

    // ------------------------------------------------- cross-process child (cuda.core's mp.Process)

    /**
     * The child of the cross-process ports. Its fds 100.. were opened by the launching shell on
     * /proc/PARENT/fd/N (the same memfds). Args: writeChunk writeValue size chunkSize...
     * Prints one line per chunk with its first 16 bytes, then RELEASED true|false.
     */
    public static final class ImportChild {
        public static void main(String[] args) {
            int writeChunk = Integer.parseInt(args[0]);
            int writeValue = Integer.parseInt(args[1]);
            long size = Long.parseLong(args[2]);
            long[] sizes = new long[args.length - 3];
            int[] fds = new int[sizes.length];
            for (int i = 0; i < sizes.length; i++) {
                sizes[i] = Long.parseLong(args[3 + i]);
                fds[i] = 100 + i;
            }
            try (VirtualMemoryResource mr = resource(0)) {
                long mappingsBefore = counters().hostMappings();
                VirtualMemoryBuffer imported;
                try (BufferDescriptor desc = BufferDescriptor.adoptFds(fds, sizes, HandleType.POSIX_FD, size)) {
                    imported = mr.importBuffer(desc);
                }
                System.out.println("IMPORTED " + imported.isImported() + " " + imported.size() + " " + imported.origin());
                long offset = 0;
                for (int i = 0; i < sizes.length; i++) {
                    System.out.println("CHUNK " + i + " " + HEX.formatHex(read(imported, offset, 16)));
                    if (i == writeChunk) fill(imported, writeValue, offset, sizes[i]);
                    offset += sizes[i];
                }
                imported.close();
                System.out.println("RELEASED " + (counters().hostMappings() == mappingsBefore));
            }
            System.out.println("DONE");
        }
    }

    /** Runs {@link ImportChild} on {@code desc}'s fds; returns its output lines. */
    private static List<String> runImportChild(BufferDescriptor desc, int writeChunk, int writeValue) throws Exception {
        List<String> out = new ArrayList<>();
        desc.useFds(fds -> {
            StringBuilder shell = new StringBuilder();
            long me = ProcessHandle.current().pid();
            for (int i = 0; i < fds.length; i++) {
                shell.append("exec ").append(100 + i).append("<>/proc/").append(me).append("/fd/").append(fds[i]).append("; ");
            }
            shell.append("exec \"$@\"");
            List<String> args = new ArrayList<>(List.of(Integer.toString(writeChunk), Integer.toString(writeValue),
                    Long.toString(desc.size())));
            for (long s : desc.sizes()) args.add(Long.toString(s));
            File log = File.createTempFile("cuda-core-port-child", ".log");
            Process p = null;
            try {
                p = ChildJvm.start(ImportChild.class, log, List.of("bash", "-c", shell.toString(), "bash"),
                        childJvmArgs(), args.toArray(new String[0]));
                assertTrue(p.waitFor(120, TimeUnit.SECONDS), "child finished");
                String text = ChildJvm.read(log);
                assertEquals(0, p.exitValue(), "child exited with " + p.exitValue() + ":\n" + text);
                out.addAll(text.lines().toList());
            } catch (InterruptedException e) {
                throw new AssertionError(e);
            } finally {
                if (p != null && p.isAlive()) p.destroyForcibly(); // a hung child must not outlive the test
                log.delete();
            }
        });
        return out;
    }

    private static List<String> childJvmArgs() {
        List<String> a = new ArrayList<>(List.of("-Dcuvmm.host.devices=2"));
        String cache = System.getProperty("org.bytedeco.javacpp.cachedir");
        if (cache != null) a.add("-Dorg.bytedeco.javacpp.cachedir=" + cache);
        return a;
    }

    private static String line(List<String> out, String prefix) {
        return out.stream().filter(l -> l.startsWith(prefix)).findFirst()
                .orElseThrow(() -> new AssertionError("no line " + prefix + " in " + out));
    }

    // =========================================================== tests/test_memory.py

    /** test_vmm_allocator_basic_allocation (posix_fd; use_device_object is moot in Java). */
    @Test
    void vmmAllocatorBasicAllocation() {
        try (VirtualMemoryResource vmm = resource(0)) {
            VirtualMemoryBuffer buffer = vmm.allocate(4096);
            assertTrue(buffer.size() >= 4096, "may be aligned up");
            assertTrue(buffer.mappedSize() >= 4096);
            assertEquals(0, buffer.resource().device(), "buffer.device_id == device.device_id");
            assertEquals(vmm, buffer.resource(), "buffer.memory_resource == vmm_mr");
            buffer.close();
            assertTrue(buffer.isClosed());
            List<VirtualMemoryBuffer> buffers = new ArrayList<>();
            for (int i = 0; i < 5; i++) {
                VirtualMemoryBuffer b = vmm.allocate(1024L * (i + 1));
                buffers.add(b);
                assertTrue(b.size() >= 1024L * (i + 1));
            }
            buffers.forEach(VirtualMemoryBuffer::close);
        }
    }

    /**
     * test_vmm_allocator_policy_configuration: skipped by cuda.core where the device has no
     * GPUDirect RDMA (the host driver reports none); run here as written when it has.
     */
    @Test
    void vmmAllocatorPolicyConfiguration() {
        assumeTrue(Driver.get().device(0).supportsGpuDirectRdma(), "needs a device with GPUDirect RDMA (cuda.core skips too)");
        VirtualMemoryResourceOptions custom = VirtualMemoryResourceOptions.builder().allocationType(AllocationType.PINNED)
                .locationType(LocationType.DEVICE).granularity(GranularityKind.MINIMUM).gpuDirectRdma(true)
                .handleType(HandleType.POSIX_FD).peers().selfAccess(AccessMode.READ_WRITE).peerAccess(AccessMode.READ_WRITE).build();
        policyConfiguration(custom);
    }

    /**
     * The same test with gpu_direct_rdma=False, so that the rest of it (custom config, a grow
     * whose config gives read-only self access) runs on the host driver.
     */
    @Test
    void vmmAllocatorPolicyConfigurationWithoutRdma() {
        VirtualMemoryResourceOptions custom = VirtualMemoryResourceOptions.builder().allocationType(AllocationType.PINNED)
                .locationType(LocationType.DEVICE).granularity(GranularityKind.MINIMUM).gpuDirectRdma(false)
                .handleType(HandleType.POSIX_FD).peers().selfAccess(AccessMode.READ_WRITE).peerAccess(AccessMode.READ_WRITE).build();
        policyConfiguration(custom);
    }

    private static void policyConfiguration(VirtualMemoryResourceOptions custom) {
        try (VirtualMemoryResource vmm = VirtualMemoryResource.create(0, custom)) {
            assertEquals(custom, vmm.options(), "vmm_mr.config == custom_config");
            assertEquals(custom.gpuDirectRdma(), vmm.options().gpuDirectRdma());
            assertEquals(GranularityKind.MINIMUM, vmm.options().granularity());
            VirtualMemoryBuffer buffer = vmm.allocate(8192);
            assertTrue(buffer.size() >= 8192);
            assertEquals(0, buffer.resource().device());
            VirtualMemoryResourceOptions newConfig = VirtualMemoryResourceOptions.builder().allocationType(AllocationType.PINNED)
                    .locationType(LocationType.DEVICE).granularity(GranularityKind.RECOMMENDED).gpuDirectRdma(false)
                    .handleType(HandleType.POSIX_FD).peers().selfAccess(AccessMode.READ).peerAccess(AccessMode.READ).build();
            long grownTo = Math.max(16384, buffer.mappedSize() + 1); // the grow must add a chunk for the config to apply
            VirtualMemoryBuffer modified = vmm.modifyAllocation(buffer, grownTo, newConfig);
            assertTrue(modified.size() >= 16384);
            // Newest cuda.core (_virtual_memory_resource.pyx): "Configuration for the new physical memory
            // chunk only. Existing chunks keep the access they were created with, and the resource's own
            // configuration is unchanged." (The older test asserted vmm_mr.config == new_config.)
            assertEquals(custom, vmm.options(), "the resource's own configuration is unchanged");
            assertEquals(AccessMode.READ_WRITE, modified.access(0, 0), "existing chunk keeps its access");
            assertEquals(AccessMode.READ, modified.access(0, modified.chunkCount() - 1), "new chunk has the grow's self_access r");
            modified.close();
            buffer.close();
        }
    }

    /** test_vmm_allocator_grow_allocation. */
    @Test
    void vmmAllocatorGrowAllocation() {
        try (VirtualMemoryResource vmm = resource(0)) {
            VirtualMemoryBuffer buffer = vmm.allocate(2L << 20);
            long originalSize = buffer.mappedSize();
            VirtualMemoryBuffer grown = vmm.modifyAllocation(buffer, 4L << 20);
            assertTrue(grown.size() >= 4L << 20);
            assertTrue(grown.size() > originalSize);
            assertNotEquals(0, grown.address(), "a pointer was assigned");
            VirtualMemoryBuffer same = vmm.modifyAllocation(grown, 4L << 20);
            assertEquals(grown.size(), same.size(), "growing to the same size");
            VirtualMemoryBuffer smaller = vmm.modifyAllocation(grown, 2L << 20);
            // cuda.core: smaller_buffer.size == grown_buffer.size. Documented difference (design,
            // "Where cuvmm and cuda.core differ"): the alias has the smaller logical size and the
            // same mapping.
            assertEquals(grown.mappedSize(), smaller.mappedSize(), "a smaller request unmaps nothing");
            smaller.close();
            same.close();
            grown.close();
            buffer.close();
        }
    }

    /** test_vmm_allocator_rdma_unsupported_exception: refused when the resource is made. */
    @Test
    void vmmAllocatorRdmaUnsupportedException() {
        assumeTrue(!Driver.get().device(0).supportsGpuDirectRdma(), "needs a device without GPUDirect RDMA");
        VirtualMemoryResourceOptions options = VirtualMemoryResourceOptions.builder().gpuDirectRdma(true).build();
        IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> VirtualMemoryResource.create(0, options));
        assertTrue(e.getMessage().contains("GPUDirect RDMA") && e.getMessage().contains("not supported"), e.getMessage());
    }

    // ================================================ tests/memory/test_resource_live_count.py

    /** test_va_reservation_is_counted_until_freed. */
    @Test
    void vaReservationIsCountedUntilFreed() {
        try (VirtualMemoryResource vmm = resource(0)) {
            long before = counters().liveReservations();
            long hostBefore = counters().hostReservations();
            VirtualMemoryBuffer buf = vmm.allocate(4096);
            assertTrue(counters().liveReservations() >= before + 1);
            if (TestSupport.onHostDriver()) assertTrue(counters().hostReservations() >= hostBefore + 1);
            buf.close();
            assertEquals(before, counters().liveReservations());
            if (TestSupport.onHostDriver()) assertEquals(hostBefore, counters().hostReservations());
        }
    }

    // ======================================= _virtual_memory_resource.pyx (documented behaviours)

    /** allocate(0): "an empty buffer with a non-owning handle"; nothing reserved or mapped. */
    @Test
    void allocateZeroIsAnEmptyBufferWithoutDriverCalls() {
        try (VirtualMemoryResource vmm = resource(0)) {
            long calls = counters().totalCalls();
            try (VirtualMemoryBuffer empty = vmm.allocate(0)) {
                assertEquals(0, empty.size());
                assertEquals(0, empty.mappedSize());
                assertEquals(0, empty.address());
                assertEquals(calls, counters().totalCalls(), "no driver call");
            }
        }
    }

    /** allocate: "rounded up to the allocation granularity" (Buffer.size: documented difference, mappedSize here). */
    @Test
    void allocateRoundsUpToTheGranularity() {
        try (VirtualMemoryResource vmm = resource(0); VirtualMemoryBuffer b = vmm.allocate(1)) {
            assertEquals(vmm.granularity(), b.mappedSize());
            assertEquals(1, b.chunkCount());
            assertEquals(vmm.granularity(), b.chunkSize(0));
        }
    }

    /**
     * allocate: "Raises CUDAError If any CUDA driver API call fails during allocation. Nothing
     * is left allocated when this method raises." Triggered with twice the device's memory:
     * cuMemCreate cannot commit more physical memory than the device has (CUDA_ERROR_OUT_OF_MEMORY).
     */
    @Test
    void allocateMoreThanTheDeviceHasRaisesAndLeavesNothing() {
        Device d = Driver.get().device(0);
        try (VirtualMemoryResource vmm = resource(0)) {
            long allocations = counters().liveAllocations();
            long reservations = counters().liveReservations();
            long request = 2 * d.totalMemory();
            VirtualMemoryBuffer b = null;
            try {
                b = vmm.allocate(request);
            } catch (CudaException e) {
                assertEquals("CUDA_ERROR_OUT_OF_MEMORY", e.resultName(), e.getMessage());
            }
            try {
                assertEquals(null, b, "allocate(" + request + ") succeeded on " + d + " (" + d.totalMemory()
                        + " bytes): a device cannot back twice its memory");
            } finally {
                if (b != null) b.close();
            }
            assertEquals(allocations, counters().liveAllocations(), "nothing is left allocated");
            assertEquals(reservations, counters().liveReservations(), "nothing is left reserved");
        }
    }

    /** VirtualMemoryResource(device_id): an ordinal that is not a device is refused. */
    @Test
    void resourceOnAMissingDeviceIsRefused() {
        int n = Driver.get().deviceCount();
        assertThrows(IllegalArgumentException.class, () -> VirtualMemoryResource.create(n));
        assertThrows(IllegalArgumentException.class, () -> VirtualMemoryResource.create(-1));
    }

    /** VirtualMemoryBuffer.close: "if not self._h_ptr: return": a second close does nothing. */
    @Test
    void closeIsIdempotent() {
        try (VirtualMemoryResource vmm = resource(0)) {
            long allocations = counters().liveAllocations();
            VirtualMemoryBuffer b = vmm.allocate(1);
            b.close();
            b.close();
            assertTrue(b.isClosed());
            assertEquals(allocations, counters().liveAllocations());
        }
    }

    /** modify_allocation: "TypeError: If buf did not come from this resource." */
    @Test
    void modifyAllocationRefusesABufferOfAnotherResource() {
        try (VirtualMemoryResource a = resource(0); VirtualMemoryResource b = resource(0); VirtualMemoryBuffer buf = a.allocate(1)) {
            long calls = counters().totalCalls();
            assertThrows(IllegalArgumentException.class, () -> b.modifyAllocation(buf, 2 * b.granularity()));
            assertEquals(calls, counters().totalCalls(), "refused before any driver call");
        }
    }

    /** modify_allocation: Buffer_check_open(buf). */
    @Test
    void modifyAllocationRefusesAClosedBuffer() {
        try (VirtualMemoryResource vmm = resource(0)) {
            VirtualMemoryBuffer buf = vmm.allocate(1);
            buf.close();
            assertThrows(IllegalStateException.class, () -> vmm.modifyAllocation(buf, 2 * vmm.granularity()));
        }
    }

    /** modify_allocation: "An empty buffer maps nothing; the request is a fresh allocation." */
    @Test
    void modifyAllocationOfAnEmptyBufferIsAFreshAllocation() {
        try (VirtualMemoryResource vmm = resource(0); VirtualMemoryBuffer empty = vmm.allocate(0);
             VirtualMemoryBuffer grown = vmm.modifyAllocation(empty, 3)) {
            assertEquals(BufferOrigin.ALLOCATED, grown.origin());
            assertEquals(vmm.granularity(), grown.mappedSize());
            fill(grown, 0x12, 0, 3);
            assertArrayEquals(bytes(0x12, 3), read(grown, 0, 3));
        }
    }

    /**
     * modify_allocation: in place ("the returned buffer has the same pointer") or moved ("a new
     * one and the existing contents are reachable through both"); both alias the input, whose
     * memory "is freed when the last of the two closes".
     */
    @Test
    void modifyAllocationGrowsInPlaceOrMovesAndAliases() {
        long hint = freeRegion(64L << 20);
        try (VirtualMemoryResource vmm = resource(0, VirtualMemoryResourceOptions.builder().addressHint(hint))) {
            long g = vmm.granularity();
            long allocations = counters().liveAllocations();
            VirtualMemoryBuffer buf = allocate1(vmm);
            assertEquals(hint, buf.address(), "the hint was honoured");
            fill(buf, 0x21);
            VirtualMemoryBuffer inPlace = vmm.modifyAllocation(buf, 2 * g);
            assertEquals(BufferOrigin.GROWN_IN_PLACE, inPlace.origin());
            assertEquals(buf.address(), inPlace.address());
            assertArrayEquals(bytes(0x21, 16), read(inPlace, 0, 16));
            VirtualMemoryBuffer decoy = reserveAt(inPlace.address() + inPlace.mappedSize(), g);
            assertNotNull(decoy, "a decoy right after the buffer");
            VirtualMemoryBuffer moved = vmm.modifyAllocation(inPlace, 3 * g);
            decoy.close();
            assertEquals(BufferOrigin.MOVED, moved.origin());
            assertNotEquals(inPlace.address(), moved.address());
            assertEquals(3 * g, moved.mappedSize());
            assertArrayEquals(bytes(0x21, 16), read(moved, 0, 16), "contents reachable through both");
            fill(moved, 0x22, 0, 16);
            assertArrayEquals(bytes(0x22, 16), read(buf, 0, 16), "the same physical memory");
            buf.close();
            inPlace.close();
            assertEquals(allocations + 3, counters().liveAllocations(), "the moved buffer still holds all three chunks");
            assertArrayEquals(bytes(0x22, 16), read(moved, 0, 16));
            moved.close();
            assertEquals(allocations, counters().liveAllocations(), "freed when the last buffer closes");
        }
    }

    /** modify_allocation: "CUDAError If a driver call fails. buf is untouched when this method raises." */
    @Test
    void modifyAllocationFailureLeavesTheBufferUntouched() {
        try (VirtualMemoryResource vmm = resource(0); VirtualMemoryBuffer buf = allocate1(vmm)) {
            fill(buf, 0x5C);
            long allocations = counters().liveAllocations();
            long reservations = counters().liveReservations();
            long mappings = counters().liveMappings();
            CudaException e = assertThrows(CudaException.class, () -> vmm.modifyAllocation(buf, 1L << 50));
            assertEquals("CUDA_ERROR_OUT_OF_MEMORY", e.resultName(), e.getMessage());
            assertEquals(allocations, counters().liveAllocations());
            assertEquals(reservations, counters().liveReservations());
            assertEquals(mappings, counters().liveMappings());
            assertEquals(1, buf.chunkCount());
            assertArrayEquals(bytes(0x5C, 16), read(buf, 0, 16));
            try (VirtualMemoryBuffer grown = vmm.modifyAllocation(buf, 2 * vmm.granularity())) {
                assertArrayEquals(bytes(0x5C, 16), read(grown, 0, 16), "and still grows");
            }
        }
    }

    /** is_host_accessible / device_id for host-located memory; host memory may not be exportable. */
    @Test
    void hostLocatedResource() {
        assumeTrue(Driver.get().device(0).supportsHostVirtualMemory(), "needs host VMM");
        Map<String, Long> before = LiveObjects.now();
        try (VirtualMemoryResource host = resource(0, VirtualMemoryResourceOptions.builder().locationType(LocationType.HOST)
                .handleType(HandleType.NONE)); VirtualMemoryBuffer b = host.allocate(1)) {
            assertTrue(host.isHostAccessible());
            assertFalse(host.isIpcEnabled());
            fill(b, 0x31, 0, 1);
            assertEquals(0x31, b.asByteBuffer().get(0));
        }
        // The view pins the memory until collected: an fd-counting test after this one would see it go.
        LiveObjects.awaitBackAfterViewsAreCollected(before);
        // "host-located virtual memory cannot have an exportable handle type; pass handle_type=None" (ValueError)
        assertThrows(IllegalArgumentException.class, () -> VirtualMemoryResourceOptions.builder()
                .locationType(LocationType.HOST).handleType(HandleType.POSIX_FD).build());
    }

    /** addr_hint: "A virtual address hint to try to reserve at"; addr_align: "Alignment for the VA reservation". */
    @Test
    void addressHintAndAlignment() {
        long hint = freeRegion(8L << 20);
        try (VirtualMemoryResource r = resource(0, VirtualMemoryResourceOptions.builder().addressHint(hint));
             VirtualMemoryBuffer b = r.allocate(1)) {
            assertEquals(hint, b.address());
        }
        // addr_align below the granularity (cuda.core users pass addr_align=4096)
        try (VirtualMemoryResource r = resource(0, VirtualMemoryResourceOptions.builder().addressAlignment(4096));
             VirtualMemoryBuffer b = r.allocate(1)) {
            assertEquals(0, b.address() % 4096);
        }
        long align = 64L << 20;
        try (VirtualMemoryResource r = resource(0, VirtualMemoryResourceOptions.builder().addressAlignment(align))) {
            for (int i = 0; i < 3; i++) {
                try (VirtualMemoryBuffer b = r.allocate(1)) {
                    assertEquals(0, b.address() % align, "aligned to addr_align");
                }
            }
        }
    }

    /** granularity: "Controls granularity query and size rounding" (minimum and recommended). */
    @Test
    void granularityKinds() {
        for (GranularityKind k : GranularityKind.values()) {
            try (VirtualMemoryResource r = resource(0, VirtualMemoryResourceOptions.builder().granularity(k));
                 VirtualMemoryBuffer b = r.allocate(r.granularity() + 1)) {
                assertTrue(r.granularity() > 0);
                assertEquals(2 * r.granularity(), b.mappedSize(), k.toString());
            }
        }
    }

    /** peers / peer_access: "Extra device IDs that should be granted access in addition to device". */
    @Test
    void peersAreGrantedPeerAccess() {
        assumeTrue(Driver.get().deviceCount() >= 2 && Driver.get().canAccessPeer(0, 1), "needs two peer devices");
        try (VirtualMemoryResource none = resource(0); VirtualMemoryBuffer b = none.allocate(1)) {
            assertEquals(AccessMode.READ_WRITE, b.access(0));
            assertEquals(AccessMode.NONE, b.access(1));
        }
        try (VirtualMemoryResource rw = resource(0, VirtualMemoryResourceOptions.builder().peers(1)); VirtualMemoryBuffer b = rw.allocate(1)) {
            assertEquals(AccessMode.READ_WRITE, b.access(1));
        }
        try (VirtualMemoryResource r = resource(0, VirtualMemoryResourceOptions.builder().peers(1).peerAccess(AccessMode.READ));
             VirtualMemoryBuffer b = r.allocate(1)) {
            assertEquals(AccessMode.READ_WRITE, b.access(0));
            assertEquals(AccessMode.READ, b.access(1));
        }
    }

    /** self_access=None: _fill_access adds no descriptor for the owner; the allocation is made all the same. */
    @Test
    void selfAccessNoneAllocates() {
        assumeTrue(Driver.get().deviceCount() >= 2 && Driver.get().canAccessPeer(0, 1), "needs two peer devices");
        try (VirtualMemoryResource r = resource(0, VirtualMemoryResourceOptions.builder().selfAccess(AccessMode.NONE).peers(1));
             VirtualMemoryBuffer b = r.allocate(1)) {
            assertEquals(AccessMode.NONE, b.access(0));
            assertEquals(AccessMode.READ_WRITE, b.access(1));
        }
        try (VirtualMemoryResource r = resource(0, VirtualMemoryResourceOptions.builder().selfAccess(AccessMode.NONE));
             VirtualMemoryBuffer b = r.allocate(1)) {
            assertEquals(AccessMode.NONE, b.access(0), "no device may access it");
        }
    }

    // ================================================= tests/memory_ipc/test_vmm_ipc.py

    /** test_is_ipc_enabled[posix_fd, none, host, host_numa-posix_fd]. */
    @Test
    void isIpcEnabled() {
        try (VirtualMemoryResource r = resource(0)) {
            assertTrue(r.isIpcEnabled());
        }
        try (VirtualMemoryResource r = resource(0, VirtualMemoryResourceOptions.builder().handleType(HandleType.NONE))) {
            assertFalse(r.isIpcEnabled());
        }
        Device d = Driver.get().device(0);
        if (d.supportsHostVirtualMemory()) {
            try (VirtualMemoryResource r = resource(0, VirtualMemoryResourceOptions.builder().locationType(LocationType.HOST)
                    .handleType(HandleType.NONE))) {
                assertFalse(r.isIpcEnabled());
            }
        }
        if (d.supportsHostNumaVirtualMemory()) {
            try (VirtualMemoryResource r = resource(0, VirtualMemoryResourceOptions.builder().locationType(LocationType.HOST_NUMA)
                    .locationId(0).handleType(HandleType.POSIX_FD))) {
                assertTrue(r.isIpcEnabled());
            }
        }
    }

    /**
     * test_is_ipc_enabled[fabric]: cuda.core builds the resource and reports False. Documented
     * difference: refused where the device has no fabric support.
     */
    @Test
    void isIpcEnabledFabric() {
        VirtualMemoryResourceOptions o = VirtualMemoryResourceOptions.builder().handleType(HandleType.FABRIC).build();
        if (Driver.get().device(0).supportsFabricHandles()) {
            try (VirtualMemoryResource r = VirtualMemoryResource.create(0, o)) {
                assertFalse(r.isIpcEnabled());
            }
        } else {
            assertThrows(IllegalArgumentException.class, () -> VirtualMemoryResource.create(0, o));
        }
    }

    /** TestVmmIpcDescriptor.test_descriptor_round_trip (older test_vmm_ipc.py), in a child JVM. */
    @Test
    void descriptorRoundTrip() throws Exception {
        try (VirtualMemoryResource mr = resource(0)) {
            assertTrue(mr.isIpcEnabled());
            VirtualMemoryBuffer buf = allocate1(mr);
            fill(buf, 0xAB);
            try (BufferDescriptor desc = buf.exportDescriptor()) {
                assertEquals(buf.size(), desc.size());
                assertFalse(buf.isImported(), "not buf.is_mapped");
                List<String> out = runImportChild(desc, 0, 0x5A);
                assertEquals("IMPORTED true " + buf.size() + " IMPORTED", line(out, "IMPORTED"));
                assertEquals("CHUNK 0 " + HEX.formatHex(bytes(0xAB, 16)), line(out, "CHUNK 0"));
                assertEquals("RELEASED true", line(out, "RELEASED"));
            }
            assertArrayEquals(bytes(0x5A, 16), read(buf, 0, 16));
            buf.close();
        }
    }

    /** TestVmmIpcDescriptor.test_grown_buffer_imports_as_one_range (older test_vmm_ipc.py), in a child JVM. */
    @Test
    void grownBufferImportsAsOneRange() throws Exception {
        try (VirtualMemoryResource mr = resource(0)) {
            VirtualMemoryBuffer first = mr.allocate(1);
            long gran = first.mappedSize();
            VirtualMemoryBuffer grown = mr.modifyAllocation(first, 2 * gran);
            assertEquals(2 * gran, grown.size());
            fill(grown, 0x11, 0, gran);
            fill(grown, 0x22, gran, gran);
            try (BufferDescriptor desc = grown.exportDescriptor()) {
                assertEquals(2 * gran, desc.size());
                assertEquals(2, desc.sizes().length);
                List<String> out = runImportChild(desc, -1, 0);
                assertEquals("CHUNK 0 " + HEX.formatHex(bytes(0x11, 16)), line(out, "CHUNK 0"));
                assertEquals("CHUNK 1 " + HEX.formatHex(bytes(0x22, 16)), line(out, "CHUNK 1"));
                assertTrue(line(out, "IMPORTED").startsWith("IMPORTED true " + 2 * gran));
            }
            first.close();
            grown.close();
        }
    }

    /** TestManyChunkBuffer.test_main: three allocations, the last placed by a relocating grow. */
    @Test
    void manyChunkBuffer() throws Exception {
        // Placed in a free region so that the decoy after the buffer can be placed (cuda.core skips otherwise).
        try (VirtualMemoryResource mr = resource(0, VirtualMemoryResourceOptions.builder().addressHint(freeRegion(64L << 20)))) {
            List<VirtualMemoryBuffer> buffers = new ArrayList<>();
            List<Integer> fds = new ArrayList<>();
            try {
                VirtualMemoryBuffer buf = mr.allocate(1);
                buffers.add(buf);
                long gran = buf.mappedSize();
                buf = mr.modifyAllocation(buf, 2 * gran);
                buffers.add(buf);
                VirtualMemoryBuffer decoy = reserveAt(buf.address() + buf.mappedSize(), gran);
                assumeTrue(decoy != null, "the driver did not grant a reservation right after the buffer");
                VirtualMemoryBuffer moved;
                try {
                    moved = mr.modifyAllocation(buf, 3 * gran);
                } finally {
                    decoy.close();
                }
                buffers.add(moved);
                assertNotEquals(buf.address(), moved.address());
                assertEquals(3 * gran, moved.size());
                int[] values = {0x11, 0x22, 0x33};
                for (int i = 0; i < 3; i++) fill(moved, values[i], i * gran, gran);
                int fdsBefore = openFds();
                try (BufferDescriptor desc = moved.exportDescriptor()) {
                    assertEquals(3 * gran, desc.size());
                    assertArrayEquals(new long[] {gran, gran, gran}, desc.sizes());
                    assertEquals(fdsBefore + 3, openFds());
                    for (int fd : desc.fds()) fds.add(fd);
                    List<String> out = runImportChild(desc, 2, 0x44);
                    for (int i = 0; i < 3; i++) {
                        assertEquals("CHUNK " + i + " " + HEX.formatHex(bytes(values[i], 16)), line(out, "CHUNK " + i));
                    }
                    assertEquals("RELEASED true", line(out, "RELEASED"));
                }
                assertArrayEquals(bytes(0x44, 16), read(moved, 2 * gran, 16));
                assertEquals(fdsBefore, openFds(), "the descriptor was the only holder of the fds");
            } finally {
                for (VirtualMemoryBuffer b : buffers) b.close();
            }
        }
    }

    /**
     * TestImportOnSecondDevice.test_main (in this process: importing one's own export is an
     * import too). cuda.core raises ValueError naming the devices; cuvmm throws CudaException
     * CUDA_ERROR_INVALID_DEVICE (documented difference).
     */
    @Test
    void importOnSecondDevice() {
        assumeTrue(Driver.get().deviceCount() >= 2, "needs two devices");
        try (VirtualMemoryResource mr1 = resource(1); VirtualMemoryBuffer buf = allocate1(mr1)) {
            fill(buf, 0x5A);
            try (BufferDescriptor desc = buf.exportDescriptor()) {
                long mappings = counters().hostMappings();
                try (VirtualMemoryResource mr0 = resource(0)) {
                    CudaException e = assertThrows(CudaException.class, () -> mr0.importBuffer(desc));
                    assertEquals("CUDA_ERROR_INVALID_DEVICE", e.resultName());
                    assertTrue(e.getMessage().contains("device 1") && e.getMessage().contains("device 0"), e.getMessage());
                }
                assertEquals(mappings, counters().hostMappings(), "refused before mapping anything");
                try (VirtualMemoryBuffer imported = mr1.importBuffer(desc)) {
                    assertEquals(1, imported.resource().device(), "imported.device_id == dev1");
                    assertEquals(AccessMode.READ_WRITE, imported.access(1));
                    assertEquals(AccessMode.NONE, imported.access(0), "access_without_peers == (3, 0)");
                    assertArrayEquals(bytes(0x5A, 16), read(imported, 0, 16));
                }
                if (Driver.get().canAccessPeer(1, 0)) {
                    try (VirtualMemoryResource peered = resource(1, VirtualMemoryResourceOptions.builder().peers(0));
                         VirtualMemoryBuffer imported = peered.importBuffer(desc)) {
                        assertEquals(AccessMode.READ_WRITE, imported.access(1));
                        assertEquals(AccessMode.READ_WRITE, imported.access(0), "access_with_peers == (3, 3)");
                        assertArrayEquals(bytes(0x5A, 16), read(imported, 0, 16));
                    }
                }
            }
        }
    }

    /** TestDescriptorValidation.test_rejected_before_import: each malformed field fails before memory is mapped. */
    @Test
    void descriptorValidationRejectedBeforeImport() throws Exception {
        try (VirtualMemoryResource mr = resource(0); VirtualMemoryBuffer buf = allocate1(mr)) {
            long gran = buf.mappedSize();
            try (BufferDescriptor desc = buf.exportDescriptor()) {
                int[] fds = desc.fds();
                long mappings = counters().hostMappings();
                long reservations = counters().liveReservations();
                // handle type does not match (cuvmm refuses FABRIC when the descriptor is built: documented)
                assertThrows(IllegalArgumentException.class, () -> BufferDescriptor.fromFds(fds, desc.sizes(), HandleType.FABRIC, gran));
                // malformed: more sizes than handles
                assertThrows(IllegalArgumentException.class, () -> BufferDescriptor.fromFds(fds, new long[] {gran, gran}, HandleType.POSIX_FD, gran));
                // positive multiple: chunk size 0
                assertThrows(IllegalArgumentException.class, () -> BufferDescriptor.fromFds(fds, new long[] {0}, HandleType.POSIX_FD, 0));
                // positive multiple: gran + 1 (builds; refused by the import)
                try (BufferDescriptor odd = BufferDescriptor.fromFds(fds, new long[] {gran + 1}, HandleType.POSIX_FD, gran + 1)) {
                    IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> mr.importBuffer(odd));
                    assertTrue(e.getMessage().contains("positive multiple"), e.getMessage());
                }
                // exceeds the exported allocations
                assertThrows(IllegalArgumentException.class, () -> BufferDescriptor.fromFds(fds, desc.sizes(), HandleType.POSIX_FD, 2 * gran));
                // no exported allocations
                assertThrows(IllegalArgumentException.class, () -> BufferDescriptor.fromFds(new int[0], new long[0], HandleType.POSIX_FD, gran));
                assertEquals(mappings, counters().hostMappings());
                assertEquals(reservations, counters().liveReservations());
                // a file descriptor that is not a CUDA allocation: the driver refuses it, and the error says where
                List<java.io.Closeable> toClose = new ArrayList<>();
                try {
                    int plain = plainFileFd(toClose);
                    try (BufferDescriptor notCuda = BufferDescriptor.fromFds(new int[] {plain}, desc.sizes(), HandleType.POSIX_FD, gran)) {
                        CudaException e = assertThrows(CudaException.class, () -> mr.importBuffer(notCuda));
                        assertEquals("importing chunk 1 of 1", e.step(), e.getMessage());
                        assertTrue(e.getMessage().contains("while importing chunk 1 of 1"), e.getMessage());
                    }
                } finally {
                    for (java.io.Closeable c : toClose) c.close();
                }
                assertEquals(mappings, counters().hostMappings());
                assertEquals(reservations, counters().liveReservations(), "the failed import released its reservation");
                // The buffer is untouched and the genuine descriptor still imports.
                fill(buf, 0x66);
                try (VirtualMemoryBuffer alias = mr.importBuffer(desc)) {
                    assertArrayEquals(bytes(0x66, 16), read(alias, 0, 16));
                }
            }
            // A handle that was closed on this side (cuda.core: ValueError "closed").
            BufferDescriptor closed = buf.exportDescriptor();
            int[] stale = closed.fds();
            long[] sizes = closed.sizes();
            closed.close();
            assertThrows(IllegalStateException.class, () -> mr.importBuffer(closed), "a closed descriptor");
            if (fdTarget(stale[0]) == null) {
                assertThrows(IllegalArgumentException.class, () -> BufferDescriptor.fromFds(stale, sizes, HandleType.POSIX_FD, gran));
            }
        }
    }

    /**
     * TestDescriptorValidation.test_wrong_chunk_size_fails_at_map_and_rolls_back: a chunk size
     * that does not match its allocation fails in the driver's map; earlier chunks are undone.
     * cuda.core gives the importer an address hint to observe the rollback at that address.
     */
    @Test
    void wrongChunkSizeFailsAtMapAndRollsBack() {
        try (VirtualMemoryResource mr = resource(0)) {
            VirtualMemoryBuffer first = mr.allocate(1);
            long gran = first.mappedSize();
            VirtualMemoryBuffer buf = mr.modifyAllocation(first, 2 * gran);
            try (BufferDescriptor desc = buf.exportDescriptor()) {
                assertArrayEquals(new long[] {gran, gran}, desc.sizes());
                long probe = freeRegion(3 * gran);
                try (VirtualMemoryResource importer = resource(0, VirtualMemoryResourceOptions.builder().addressHint(probe))) {
                    long mappings = counters().hostMappings();
                    long reservations = counters().hostReservations();
                    long allocations = counters().hostAllocations();
                    try (BufferDescriptor forged = BufferDescriptor.fromFds(desc.fds(), new long[] {gran, 2 * gran}, HandleType.POSIX_FD, 3 * gran)) {
                        CudaException e = assertThrows(CudaException.class, () -> importer.importBuffer(forged));
                        assertEquals("cuMemMap", e.call(), e.getMessage());
                        assertTrue(e.getMessage().contains("chunk 2 of 2"), e.getMessage());
                        assertTrue(e.getMessage().contains(Long.toString(2 * gran)),
                                "the chunk's size is named (cuda.core: '(" + 2 * gran + " bytes)'): " + e.getMessage());
                    }
                    assertEquals(mappings, counters().hostMappings(), "chunk 1 was mapped and has been undone");
                    assertEquals(reservations, counters().hostReservations(), "the importer's reservation was released");
                    assertEquals(allocations, counters().hostAllocations(), "the imported handles were released");
                    // cuda.core: "the importer's address reservation was not released", seen by
                    // reserving the whole range at the hint again (a host-backed driver honours it).
                    VirtualMemoryBuffer again = reserveAt(probe, 3 * gran);
                    if (hostBacked()) assertNotNull(again, "the importer's address reservation was not released");
                    if (again != null) again.close();
                    // The exporter's memory is intact and the genuine descriptor still imports.
                    fill(buf, 0x77, gran, gran);
                    try (VirtualMemoryBuffer alias = importer.importBuffer(desc)) {
                        assertArrayEquals(bytes(0x77, 16), read(alias, gran, 16));
                    }
                }
            }
            first.close();
            buf.close();
        }
    }

    /**
     * From the same cuda.core test: "The importer is given an address hint so that the
     * rollback is observable" ({@code importer = _resource(device, addr_hint=probe)};
     * {@code honored = int(alias.handle) == probe}): cuda.core's import reserves at the
     * importing resource's addr_hint, as its allocate does.
     */
    @Test
    void importHonoursTheImportersAddressHint() {
        try (VirtualMemoryResource mr = resource(0); VirtualMemoryBuffer buf = allocate1(mr);
             BufferDescriptor desc = buf.exportDescriptor()) {
            long probe = freeRegion(8 * mr.granularity());
            try (VirtualMemoryResource importer = resource(0, VirtualMemoryResourceOptions.builder().addressHint(probe));
                 VirtualMemoryBuffer alias = importer.importBuffer(desc)) {
                assertEquals(probe, alias.address(), "the import was placed at the importer's addr_hint (0x"
                        + Long.toHexString(probe) + "), got 0x" + Long.toHexString(alias.address()));
            }
        }
    }

    /**
     * cuda.core's tests allocate(1) and then fill and read the buffer as one granule
     * ({@code _fill(buf, 0xAB)} writes {@code buf.size} bytes, {@code _read(buf, 0, 16)}). Here
     * {@code size()} is what was asked (a documented difference): the granule is mapped
     * ({@code mappedSize()}) but copies and fills reach {@code size()} bytes only, so a port
     * asks for the granule ({@code allocate(granularity())}) or takes an alias of the whole
     * mapping ({@code modifyAllocation(buf, mappedSize())}, no driver call), as the design says.
     */
    @Test
    void allocateOneThenUseTheRoundedSize() {
        try (VirtualMemoryResource mr = resource(0); VirtualMemoryBuffer buf = mr.allocate(1)) {
            long gran = buf.mappedSize();
            assertEquals(mr.granularity(), gran);
            assertEquals(1, buf.size());
            assertThrows(IndexOutOfBoundsException.class, () -> fill(buf, 0xAB, 0, gran), "past size(): refused");
            long calls = counters().totalCalls();
            try (VirtualMemoryBuffer whole = mr.modifyAllocation(buf, gran)) {
                assertEquals(calls, counters().totalCalls(), "an alias of what is mapped: no driver call");
                fill(whole, 0xAB, 0, gran);
                assertArrayEquals(bytes(0xAB, 16), read(whole, 0, 16));
            }
            try (VirtualMemoryBuffer granule = allocate1(mr)) {
                fill(granule, 0xCD);
                assertArrayEquals(bytes(0xCD, 16), read(granule, 0, 16));
            }
        }
    }

    /** TestReexport.test_export_and_pickling_raise_before_any_driver_call (the export half). */
    @Test
    void reexportRaisesBeforeAnyDriverCall() {
        try (VirtualMemoryResource mr = resource(0)) {
            VirtualMemoryBuffer buf = allocate1(mr);
            long gran = buf.mappedSize();
            BufferDescriptor desc = buf.exportDescriptor();
            VirtualMemoryBuffer imported = mr.importBuffer(desc);
            assertTrue(imported.isImported(), "imported.is_mapped");
            Map<String, VirtualMemoryBuffer> buffers = new java.util.LinkedHashMap<>();
            buffers.put("import", imported);
            buffers.put("alias", mr.modifyAllocation(imported, imported.size()));
            VirtualMemoryBuffer grow = mr.modifyAllocation(imported, 2 * gran);
            buffers.put("grow", grow);
            VirtualMemoryBuffer decoy = reserveAt(grow.address() + grow.mappedSize(), gran);
            if (decoy != null) {
                try {
                    buffers.put("move", mr.modifyAllocation(grow, grow.mappedSize() + gran));
                } finally {
                    decoy.close();
                }
                assertNotEquals(grow.address(), buffers.get("move").address());
            }
            try {
                for (Map.Entry<String, VirtualMemoryBuffer> e : buffers.entrySet()) {
                    long exports = counters().calls("cuMemExportToShareableHandle");
                    IllegalStateException x = assertThrows(IllegalStateException.class, () -> e.getValue().exportDescriptor(), e.getKey());
                    String m = x.getMessage();
                    assertTrue(m.contains("imported from another process"), e.getKey() + ": " + m);
                    assertTrue(m.contains("cannot be exported again"), e.getKey() + ": " + m);
                    assertTrue(m.toLowerCase().contains("forward the") && m.contains("copy the data"), e.getKey() + ": " + m);
                    assertEquals(exports, counters().calls("cuMemExportToShareableHandle"), e.getKey() + ": before any driver call");
                }
                fill(buf, 0x3C);
                try (VirtualMemoryBuffer alias = mr.importBuffer(desc)) {
                    assertArrayEquals(bytes(0x3C, 16), read(alias, 0, 16), "the original descriptor still serves");
                }
            } finally {
                List<VirtualMemoryBuffer> all = new ArrayList<>(buffers.values());
                java.util.Collections.reverse(all);
                all.forEach(VirtualMemoryBuffer::close);
                buf.close();
                desc.close();
            }
        }
    }

    /** TestReexport.test_grow_cannot_change_handle_type (ValueError "handle_type"). */
    @Test
    void growCannotChangeHandleType() {
        try (VirtualMemoryResource mr = resource(0); VirtualMemoryBuffer buf = mr.allocate(1)) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> mr.modifyAllocation(buf,
                    2 * buf.mappedSize(), VirtualMemoryResourceOptions.builder().handleType(HandleType.NONE).build()));
            assertTrue(e.getMessage().contains("handleType"), e.getMessage());
        }
        try (VirtualMemoryResource priv = resource(0, VirtualMemoryResourceOptions.builder().handleType(HandleType.NONE));
             VirtualMemoryBuffer buf = priv.allocate(1)) {
            IllegalArgumentException e = assertThrows(IllegalArgumentException.class, () -> priv.modifyAllocation(buf,
                    2 * buf.mappedSize(), VirtualMemoryResourceOptions.defaults()));
            assertTrue(e.getMessage().contains("handleType"), e.getMessage());
        }
    }

    /** TestFileDescriptorLifetime.test_exporter_holds_none_without_a_descriptor. */
    @Test
    void exporterHoldsNoneWithoutADescriptor() {
        try (VirtualMemoryResource mr = resource(0)) {
            VirtualMemoryBuffer first = mr.allocate(1);
            long gran = first.mappedSize();
            VirtualMemoryBuffer buf = mr.modifyAllocation(first, 2 * gran);
            int fds0 = openFds();
            BufferDescriptor desc = buf.exportDescriptor();
            assertArrayEquals(new long[] {gran, gran}, desc.sizes());
            assertEquals(fds0 + 2, openFds());
            BufferDescriptor again = buf.exportDescriptor();
            assertNotSame(desc, again);
            Set<Integer> a = new HashSet<>();
            for (int fd : desc.fds()) a.add(fd);
            for (int fd : again.fds()) assertFalse(a.contains(fd), "disjoint fds");
            assertEquals(fds0 + 4, openFds());
            again.close();
            assertEquals(fds0 + 2, openFds());
            int[] numbers = desc.fds();
            Object[] inodes = Arrays.stream(numbers).mapToObj(CudaCorePort::fdInode).toArray();
            desc.close();
            assertEquals(fds0, openFds(), "the buffer alone must hold no file descriptors");
            for (int i = 0; i < numbers.length; i++) {
                Object now = CudaCorePort.fdInode(numbers[i]);
                assertTrue(now == null || !now.equals(inodes[i]), "fd " + numbers[i] + " closed");
            }
            buf.close();
            first.close();
        }
    }

    /**
     * TestFileDescriptorLifetime.test_importer_holds_none_after_the_import: "The import adds no
     * file descriptors, and releasing the received descriptor closes its own." Documented
     * difference: on the host driver an import holds one fd per chunk until it is closed.
     */
    @Test
    void importerHoldsNoneAfterTheImport() {
        try (VirtualMemoryResource mr = resource(0)) {
            VirtualMemoryBuffer first = mr.allocate(1);
            long gran = first.mappedSize();
            VirtualMemoryBuffer buf = mr.modifyAllocation(first, 2 * gran);
            fill(buf, 0x5B);
            BufferDescriptor desc = buf.exportDescriptor();
            mr.importBuffer(desc).close(); // lazy initialization first, as cuda.core does
            int withDescriptor = openFds();
            VirtualMemoryBuffer imported = mr.importBuffer(desc);
            int afterImport = openFds();
            int held = hostBacked() ? 2 : 0; // design: "An import holds one fd per chunk on the host driver"
            assertEquals(withDescriptor + held, afterImport);
            desc.close();
            assertEquals(afterImport - 2, openFds(), "releasing the received descriptor closes its own");
            assertArrayEquals(bytes(0x5B, 16), read(imported, 0, 16), "the import, not the descriptor, holds the memory");
            imported.close();
            assertEquals(withDescriptor - 2, openFds());
            buf.close();
            first.close();
        }
    }

    /**
     * TestFileDescriptorLimit.test_export_near_the_limit, in a child JVM whose soft
     * RLIMIT_NOFILE this test lowers with prlimit: room for two more descriptors, so a
     * three-allocation export cannot complete; it fails with a readable error and no leak.
     */
    @Test
    void exportNearTheLimit() throws Exception {
        assumeTrue(Files.isExecutable(Path.of("/usr/bin/prlimit")), "prlimit is not installed");
        List<String> cmd = new ArrayList<>(List.of(Path.of(System.getProperty("java.home"), "bin", "java").toString()));
        cmd.addAll(childJvmArgs());
        cmd.addAll(List.of("-cp", System.getProperty("java.class.path"), LimitChild.class.getName()));
        Process p = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        String failed;
        String ok;
        try (BufferedReader out = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8));
             Writer in = new java.io.OutputStreamWriter(p.getOutputStream(), StandardCharsets.UTF_8)) {
            readUntil(out, "READY");
            Set<Integer> open = new HashSet<>();
            try (java.util.stream.Stream<Path> s = Files.list(Path.of("/proc/" + p.pid() + "/fd"))) {
                s.forEach(f -> open.add(Integer.parseInt(f.getFileName().toString())));
            }
            int lowestFree = 0;
            while (open.contains(lowestFree)) lowestFree++;
            String oldSoft = run("prlimit", "--pid", String.valueOf(p.pid()), "--nofile", "--raw", "--noheadings", "--output=SOFT");
            run("prlimit", "--pid", String.valueOf(p.pid()), "--nofile=" + (lowestFree + 2) + ":");
            in.write("go\n");
            in.flush();
            failed = readUntil(out, "FAILED ", "EXPORTED ");
            run("prlimit", "--pid", String.valueOf(p.pid()), "--nofile=" + oldSoft + ":");
            in.write("go\n");
            in.flush();
            String fds = readUntil(out, "FDS ");
            String[] parts = fds.split(" ");
            if (failed.startsWith("FAILED ")) {
                assertTrue(failed.contains("file descriptor limit"), failed);
                assertEquals(parts[1], parts[2], "a failed export must close the descriptors it already took: " + fds);
            } else {
                assertEquals("EXPORTED 3", failed, "acceptable only if the driver did not need one descriptor per allocation");
            }
            ok = readUntil(out, "OK", "ERROR");
        } finally {
            boolean finished = p.waitFor(60, TimeUnit.SECONDS);
            if (!finished) p.destroyForcibly(); // a hung child must not outlive the test
            assertTrue(finished, "child finished");
        }
        assertEquals(0, p.exitValue());
        assertEquals("OK", ok);
    }

    /** The child of {@link #exportNearTheLimit()}. */
    public static final class LimitChild {
        public static void main(String[] args) throws Exception {
            BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
            try (VirtualMemoryResource mr = resource(0)) {
                VirtualMemoryBuffer first = mr.allocate(1);
                long gran = first.mappedSize();
                VirtualMemoryBuffer second = mr.modifyAllocation(first, 2 * gran);
                VirtualMemoryBuffer buf = mr.modifyAllocation(second, 3 * gran);
                int[] values = {0x61, 0x62, 0x63};
                for (int i = 0; i < 3; i++) fill(buf, values[i], i * gran, gran);
                int before = TestSupport.openFds();
                System.out.println("READY");
                in.readLine();
                String result;
                try (BufferDescriptor d = buf.exportDescriptor()) {
                    result = "EXPORTED " + d.chunkCount();
                } catch (CudaException e) {
                    result = "FAILED " + e.getMessage().replace('\n', ' ');
                }
                System.out.println(result);
                in.readLine();
                System.out.println("FDS " + before + " " + TestSupport.openFds());
                try (BufferDescriptor d = buf.exportDescriptor(); VirtualMemoryBuffer imported = mr.importBuffer(d)) {
                    boolean same = d.chunkCount() == 3;
                    for (int i = 0; i < 3; i++) same &= Arrays.equals(bytes(values[i], 16), read(imported, i * gran, 16));
                    System.out.println(same ? "OK" : "ERROR content");
                }
                buf.close();
                second.close();
                first.close();
            }
        }
    }

    private static String readUntil(BufferedReader out, String... prefixes) throws IOException {
        StringBuilder seen = new StringBuilder();
        for (String l; (l = out.readLine()) != null; ) {
            for (String p : prefixes) if (l.startsWith(p)) return l;
            seen.append(l).append('\n');
        }
        throw new AssertionError("child ended before " + Arrays.toString(prefixes) + ":\n" + seen);
    }

    private static String run(String... cmd) throws Exception {
        Process pl = new ProcessBuilder(cmd).redirectErrorStream(true).start();
        String out = new String(pl.getInputStream().readAllBytes(), StandardCharsets.UTF_8).trim();
        assertTrue(pl.waitFor(30, TimeUnit.SECONDS));
        assertEquals(0, pl.exitValue(), out);
        return out;
    }

    /** TestRawFileDescriptorTransport.test_round_trip_with_os_dup. */
    @Test
    void rawFdRoundTripWithDup() {
        try (VirtualMemoryResource mr = resource(0)) {
            VirtualMemoryBuffer first = mr.allocate(1);
            long gran = first.mappedSize();
            VirtualMemoryBuffer buf = mr.modifyAllocation(first, 2 * gran);
            fill(buf, 0x71, 0, gran);
            fill(buf, 0x72, gran, gran);
            int fds0 = openFds();
            Map<String, String> before = TestSupport.fdTargets();
            BufferDescriptor desc = buf.exportDescriptor();
            assertEquals(HandleType.POSIX_FD, desc.handleType());
            assertArrayEquals(new long[] {gran, gran}, desc.sizes());
            assertEquals(2 * gran, desc.size());
            // A transport of our own: duplicate the integers (fromFds dups; takeFds hands them over), then let the descriptor go.
            int[] wire = BufferDescriptor.fromFds(desc.fds(), desc.sizes(), HandleType.POSIX_FD, desc.size()).takeFds();
            long[] sizes = desc.sizes();
            long size = desc.size();
            desc.close();
            assertEquals(fds0 + 2, openFds(), "fds now: " + TestSupport.fdTargets() + " before: " + before);
            BufferDescriptor rebuilt = BufferDescriptor.fromFds(wire, sizes, HandleType.POSIX_FD, size);
            assertEquals(fds0 + 4, openFds(), "fromFds duplicates the integers it is given");
            BufferDescriptor.adoptFds(wire, sizes, HandleType.POSIX_FD, size).close(); // the caller keeps ownership of its own
            assertEquals(fds0 + 2, openFds());
            assertEquals(HandleType.POSIX_FD, rebuilt.handleType());
            assertArrayEquals(new long[] {gran, gran}, rebuilt.sizes());
            assertEquals(2 * gran, rebuilt.size());
            VirtualMemoryBuffer imported = mr.importBuffer(rebuilt);
            assertArrayEquals(bytes(0x71, 16), read(imported, 0, 16));
            assertArrayEquals(bytes(0x72, 16), read(imported, gran, 16));
            rebuilt.close();
            imported.close();
            assertEquals(fds0, openFds());
            buf.close();
            first.close();
        }
    }

    /** TestRawFileDescriptorTransport.test_from_fds_shares_handle_objects_and_rejects_bad_input. */
    @Test
    void fromFdsRejectsBadInput() {
        try (VirtualMemoryResource mr = resource(0); VirtualMemoryBuffer buf = allocate1(mr);
             BufferDescriptor desc = buf.exportDescriptor()) {
            long gran = buf.mappedSize();
            try (BufferDescriptor shared = BufferDescriptor.fromFds(desc.fds(), desc.sizes(), HandleType.POSIX_FD, desc.mappedSize())) {
                assertEquals(gran, shared.size());
                mr.importBuffer(shared).close();
            }
            IllegalArgumentException e;
            e = assertThrows(IllegalArgumentException.class, () -> BufferDescriptor.fromFds(desc.fds(), new long[0], HandleType.POSIX_FD, 0));
            assertTrue(e.getMessage().contains("one size per"), e.getMessage());
            e = assertThrows(IllegalArgumentException.class, () -> BufferDescriptor.fromFds(desc.fds(), new long[] {0}, HandleType.POSIX_FD, 0));
            assertTrue(e.getMessage().contains("> 0") || e.getMessage().contains("positive"), e.getMessage());
            e = assertThrows(IllegalArgumentException.class, () -> BufferDescriptor.fromFds(desc.fds(), desc.sizes(), HandleType.POSIX_FD, gran + 1));
            assertTrue(e.getMessage().contains("sum of sizes"), e.getMessage());
            e = assertThrows(IllegalArgumentException.class, () -> BufferDescriptor.fromFds(desc.fds(), desc.sizes(), HandleType.NONE, gran));
            assertTrue(e.getMessage().contains("handleType"), e.getMessage());
            // cuda.core: OSError for an int that is not an open fd
            assertThrows(IllegalArgumentException.class, () -> BufferDescriptor.fromFds(new int[] {1 << 20}, desc.sizes(), HandleType.POSIX_FD, gran));
            // cuda.core: builds with handle_type="fabric" and refuses at import; cuvmm refuses when building (documented)
            assertThrows(IllegalArgumentException.class, () -> BufferDescriptor.fromFds(desc.fds(), desc.sizes(), HandleType.FABRIC, gran));
        }
    }

    /** TestEmptyBuffer.test_round_trip: an empty buffer exports no allocations and imports as an empty buffer. */
    @Test
    void emptyBufferRoundTrip() {
        try (VirtualMemoryResource mr = resource(0); VirtualMemoryBuffer empty = mr.allocate(0)) {
            try (BufferDescriptor desc = empty.exportDescriptor()) {
                assertEquals(0, desc.size());
                assertEquals(0, desc.sizes().length);
                assertEquals(0, desc.fds().length);
                try (VirtualMemoryBuffer alias = mr.importBuffer(desc)) {
                    assertEquals(0, alias.size());
                    assertFalse(alias.isClosed());
                }
            }
            // The Java transport for an empty descriptor
            try (BufferDescriptor rebuilt = BufferDescriptor.fromFds(new int[0], new long[0], HandleType.POSIX_FD, 0);
                 VirtualMemoryBuffer alias = mr.importBuffer(rebuilt)) {
                assertEquals(0, alias.size());
            }
        }
    }

    /** TestSameProcess.test_import_in_same_process_aliases_memory. */
    @Test
    void importInSameProcessAliasesMemory() {
        try (VirtualMemoryResource mr = resource(0)) {
            long mappings0 = counters().hostMappings();
            VirtualMemoryBuffer buf = allocate1(mr);
            VirtualMemoryBuffer alias;
            try (BufferDescriptor desc = buf.exportDescriptor()) {
                alias = mr.importBuffer(desc);
            }
            assertTrue(alias.isImported());
            assertNotEquals(buf.address(), alias.address());
            fill(buf, 0x33);
            assertArrayEquals(bytes(0x33, 16), read(alias, 0, 16));
            fill(alias, 0x44);
            assertArrayEquals(bytes(0x44, 16), read(buf, 0, 16));
            buf.close();
            if (TestSupport.onHostDriver()) assertEquals(mappings0 + 1, counters().hostMappings(), "the import keeps the memory alive");
            assertArrayEquals(bytes(0x44, 16), read(alias, 0, 16));
            alias.close();
            if (TestSupport.onHostDriver()) assertEquals(mappings0, counters().hostMappings());
        }
    }

    /** TestSameProcess.test_descriptor_owns_its_file_descriptors (pickling is Python's). */
    @Test
    void descriptorOwnsItsFileDescriptors() {
        try (VirtualMemoryResource mr = resource(0); VirtualMemoryBuffer buf = allocate1(mr)) {
            BufferDescriptor desc = buf.exportDescriptor();
            int fd = desc.fds()[0];
            Object inode = CudaCorePort.fdInode(fd);
            assertNotNull(inode, "open");
            assertTrue(fdTarget(fd).contains("memfd:") || !TestSupport.onHostDriver(), fdTarget(fd));
            desc.close(); // the buffer keeps no descriptor, so this closes the fd
            Object now = CudaCorePort.fdInode(fd);
            assertTrue(now == null || !now.equals(inode), "closed");
            assertThrows(IllegalStateException.class, desc::fds);
        }
    }

    /** TestSameProcess.test_errors (the VMM cases; the pool-descriptor and stub cases have no Java counterpart). */
    @Test
    void ipcErrors() {
        try (VirtualMemoryResource shared = resource(0);
             VirtualMemoryResource priv = resource(0, VirtualMemoryResourceOptions.builder().handleType(HandleType.NONE))) {
            assertFalse(priv.isIpcEnabled());
            try (VirtualMemoryBuffer buf = allocate1(priv)) {
                long calls = counters().totalCalls();
                assertThrows(IllegalStateException.class, buf::exportDescriptor, "not IPC-enabled");
                assertEquals(calls, counters().totalCalls());
            }
            try (VirtualMemoryBuffer buf = allocate1(shared); BufferDescriptor desc = buf.exportDescriptor()) {
                long calls = counters().totalCalls();
                assertThrows(IllegalStateException.class, () -> priv.importBuffer(desc), "not IPC-enabled");
                assertEquals(calls, counters().totalCalls());
            }
        }
    }
}
