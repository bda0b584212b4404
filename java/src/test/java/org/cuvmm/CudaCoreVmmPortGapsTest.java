package org.cuvmm;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;
import static org.junit.jupiter.api.Assumptions.assumeTrue;

import static org.cuvmm.CudaCorePort.bytes;
import static org.cuvmm.CudaCorePort.counters;
import static org.cuvmm.CudaCorePort.freeRegion;
import static org.cuvmm.CudaCorePort.read;
import static org.cuvmm.CudaCorePort.reserveAt;
import static org.cuvmm.CudaCorePort.resource;

import java.io.File;
import java.io.IOException;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CyclicBarrier;
import java.util.concurrent.ExecutorService;
import java.util.concurrent.Executors;
import java.util.concurrent.Future;
import java.util.concurrent.TimeUnit;

import org.cuvmm.testing.ChildJvm;
import org.junit.jupiter.api.Test;

/**
 * The cuda.core VirtualMemoryResource tests (NVIDIA/cuda-python, cuda_core) and documented
 * behaviours that {@link CudaCoreVmmPortTest} and {@link CudaCoreVmmPortMoreTest} do not port,
 * or port only in part: from {@code tests/memory_ipc/test_vmm_ipc.py} the cross-process halves
 * (TestManyChunkBuffer's child checks and closed fds, TestImportOnSecondDevice's child,
 * TestFileDescriptorLifetime.test_process_argument_releases_with_the_process_object and the
 * child of test_importer_holds_none_after_the_import, TestRawFileDescriptorTransport's
 * round trip through another transport, test_resource_pickles_as_its_own_type's "a resource is
 * (device, options)"), the older file's test_buffer_pickles_through_queue; the scenarios that
 * {@code test_vmm_ipc.py} says run for VMM through the {@code VirtualMR} parameter of
 * {@code memory_ipc/} ({@code test_memory_ipc.py}'s TestIpcMempool and TestIPCMempoolMultiple,
 * {@code test_send_buffers.py}'s TestIpcSendBuffers, {@code test_leaks.py}'s test_pass_object);
 * and promises of {@code _virtual_memory_resource.pyx}'s docstrings and cuda.core's
 * {@code _cpp/rt/VMM_DESIGN.md} (concurrent grows of aliases, a move's reservation alignment,
 * a chunk's access surviving a move, any close order of aliases, the importer's access and
 * alignment, an open descriptor keeping the memory, an import of memory in another location).
 *
 * <p>Same name mapping as {@link CudaCoreVmmPortTest}. Cross-process children are child JVMs
 * that receive the fds by reopening /proc/PARENT/fd/N before the JVM starts (cuda.core's
 * multiprocessing transport has no Java counterpart). cuda.core's PatternGen (byte i is
 * {@code (seed + i) & 0xFF}) is {@link #pattern}.
 *
 * <p>Not applicable (no Java counterpart, not ported): pickling and multiprocessing.Queue
 * (TestReexport's pickling half and test_queue_feeder_reports_the_error_and_stays_usable,
 * the pickle halves of TestSameProcess.test_descriptor_owns_its_file_descriptors,
 * test_pass_object's exec_reduce_failure, a subclass surviving a pickle: the class is final),
 * DLPack (TestDLPackConsumer), Windows handle types (test_is_ipc_enabled[win32_kmt],
 * from_fds(handle_type="win32")), IPCAllocationHandle objects shared by from_fds, from_fds's
 * default arguments, and the pool-only cases of TestSameProcess.test_errors.
 */
class CudaCoreVmmPortGapsTest {
    private static final HexFormat HEX = HexFormat.of();
    private static final int NBYTES = 64; // memory_ipc's NBYTES

    // ---------------------------------------------------------------- helpers

    /** The host driver, or the cuda driver over the host library (the build's cuda pass). */
    private static boolean hostBacked() {
        return TestSupport.onHostDriver() || Driver.get().isHostLibrary();
    }

    /** cuda.core's {@code _open_fds()}; on a host-backed driver the memory handles (memfds) only. */
    static int openFds() {
        return hostBacked() ? (int) TestSupport.memfdFds() : TestSupport.openFds();
    }

    /** cuda.core's PatternGen: byte i is {@code (seed + i) & 0xFF}. */
    static byte[] pattern(int seed, int n) {
        byte[] b = new byte[n];
        for (int i = 0; i < n; i++) b[i] = (byte) (seed + i);
        return b;
    }

    private static String hex16(int value) {
        return HEX.formatHex(bytes(value, 16));
    }

    private static List<String> childJvmArgs() {
        List<String> a = new ArrayList<>(List.of("-Dcuvmm.host.devices=2"));
        String cache = System.getProperty("org.bytedeco.javacpp.cachedir");
        if (cache != null) a.add("-Dorg.bytedeco.javacpp.cachedir=" + cache);
        return a;
    }

    /** A started child and its log. */
    private record Started(Process process, File log) {}

    /** Starts {@link Child} with {@code fds} reopened as its fds 100.. (the same memfds). */
    private static Started start(int[] fds, String... args) throws IOException {
        StringBuilder shell = new StringBuilder();
        long me = ProcessHandle.current().pid();
        for (int i = 0; i < fds.length; i++) {
            shell.append("exec ").append(100 + i).append("<>/proc/").append(me).append("/fd/").append(fds[i]).append("; ");
        }
        shell.append("exec \"$@\"");
        File log = File.createTempFile("cuda-core-port-gaps-child", ".log");
        Process p = ChildJvm.start(Child.class, log, List.of("bash", "-c", shell.toString(), "bash"), childJvmArgs(), args);
        return new Started(p, log);
    }

    /** Waits for {@code s}; returns its exit code and output. */
    private static ChildJvm.Result finish(Started s) throws InterruptedException {
        try {
            assertTrue(s.process().waitFor(120, TimeUnit.SECONDS), "child finished");
            return new ChildJvm.Result(s.process().exitValue(), ChildJvm.read(s.log()));
        } finally {
            if (s.process().isAlive()) s.process().destroyForcibly(); // a hung child must not outlive the test
            try {
                s.process().getOutputStream().close(); // the child's stdin pipe: not left for the GC to close
            } catch (IOException ignored) {
                // closing a pipe the child no longer reads
            }
            s.log().delete();
        }
    }

    /** Runs {@link Child}, asserts it exited with 0, returns its output lines. */
    private static List<String> runChild(int[] fds, String... args) throws Exception {
        ChildJvm.Result r = finish(start(fds, args));
        assertEquals(0, r.exitCode(), "child exited with " + r);
        return r.output().lines().toList();
    }

    private static String line(List<String> out, String prefix) {
        return out.stream().filter(l -> l.startsWith(prefix)).findFirst()
                .orElseThrow(() -> new AssertionError("no line " + prefix + " in " + out));
    }

    private static String csv(long... values) {
        StringBuilder b = new StringBuilder();
        for (long v : values) b.append(b.length() == 0 ? "" : ",").append(v);
        return b.toString();
    }

    /** The args of {@link Child}'s "import" mode for {@code desc}. */
    private static String[] importArgs(String how, int device, BufferDescriptor desc, long writeOffset, long writeLen,
                                       int writeValue, long... readOffsets) {
        List<String> a = new ArrayList<>(List.of("import", how, Integer.toString(device), Long.toString(desc.size()),
                Long.toString(writeOffset), Long.toString(writeLen), Integer.toString(writeValue), csv(readOffsets)));
        for (long s : desc.sizes()) a.add(Long.toString(s));
        return a.toArray(new String[0]);
    }

    /** The args of {@link Child}'s "pattern" mode for {@code descs}, whose fds are passed in order. */
    private static String[] patternArgs(int expectSeed, int writeSeed, int writeIndex, List<BufferDescriptor> descs) {
        List<String> a = new ArrayList<>(List.of("pattern", Integer.toString(expectSeed), Integer.toString(writeSeed),
                Integer.toString(writeIndex), Integer.toString(descs.size())));
        for (BufferDescriptor d : descs) {
            a.add(Long.toString(d.size()));
            a.add(Integer.toString(d.chunkCount()));
            for (long s : d.sizes()) a.add(Long.toString(s));
        }
        return a.toArray(new String[0]);
    }

    private static int[] allFds(List<BufferDescriptor> descs) {
        return descs.stream().flatMapToInt(d -> Arrays.stream(d.fds())).toArray();
    }

    // ------------------------------------------------------------------ the child process

    /**
     * The other process of these ports. Its fds 100.. were opened by the launching shell on
     * /proc/PARENT/fd/N. Modes:
     * <ul>
     * <li>{@code import how device size writeOffset writeLen writeValue readOffsets sizes...}:
     *     builds the descriptor ({@code adopt}: adoptFds; {@code fromfds}: fromFds, which
     *     duplicates, then closes the received ints, as cuda.core's socket child does), imports it
     *     with a resource on {@code device}, prints what it sees, reads, writes, closes;</li>
     * <li>{@code counts size sizes...}: TestFileDescriptorLifetime's importer child;</li>
     * <li>{@code pattern expectSeed writeSeed writeIndex n (size count sizes...)*}: PatternGen's
     *     verify and fill on each imported descriptor (writeIndex -1: all);</li>
     * <li>{@code second size sizes...}: TestImportOnSecondDevice's child (memory on device 1);</li>
     * <li>{@code fail}: exits with 3 before touching anything (test_leaks' exec_launch_failure).</li>
     * </ul>
     */
    public static final class Child {
        public static void main(String[] args) throws Exception {
            switch (args[0]) {
                case "import" -> importMode(args);
                case "counts" -> countsMode(args);
                case "pattern" -> patternMode(args);
                case "second" -> secondMode(args);
                case "fail" -> System.exit(3);
                default -> throw new IllegalArgumentException(args[0]);
            }
            System.out.println("DONE");
        }

        private static int[] received(int from, int n) {
            int[] fds = new int[n];
            for (int i = 0; i < n; i++) fds[i] = 100 + from + i;
            return fds;
        }

        private static long[] sizes(String[] args, int from) {
            long[] s = new long[args.length - from];
            for (int i = 0; i < s.length; i++) s[i] = Long.parseLong(args[from + i]);
            return s;
        }

        private static void importMode(String[] args) {
            String how = args[1];
            int device = Integer.parseInt(args[2]);
            long size = Long.parseLong(args[3]);
            long writeOffset = Long.parseLong(args[4]);
            long writeLen = Long.parseLong(args[5]);
            int writeValue = Integer.parseInt(args[6]);
            String[] reads = args[7].isEmpty() ? new String[0] : args[7].split(",");
            long[] sizes = sizes(args, 8);
            int[] fds = received(0, sizes.length);
            try (VirtualMemoryResource mr = resource(device)) {
                long mappingsBefore = counters().hostMappings();
                BufferDescriptor desc;
                if (how.equals("fromfds")) {
                    int before = openFds();
                    desc = BufferDescriptor.fromFds(fds, sizes, HandleType.POSIX_FD, size);
                    int afterDup = openFds();
                    // cuda.core: "from_fds duplicated them; the received ones are ours to close"
                    BufferDescriptor.adoptFds(fds, sizes, HandleType.POSIX_FD, size).close();
                    int afterClose = openFds();
                    System.out.println("FROMFDS " + (afterDup - before) + " " + (afterClose - afterDup));
                } else {
                    desc = BufferDescriptor.adoptFds(fds, sizes, HandleType.POSIX_FD, size);
                }
                System.out.println("DESC " + desc.size() + " " + csv(desc.sizes()));
                VirtualMemoryBuffer imported;
                try (BufferDescriptor d = desc) {
                    imported = mr.importBuffer(d);
                }
                System.out.println("IMPORTED " + imported.isImported() + " " + imported.size() + " " + imported.origin()
                        + " device " + imported.resource().device());
                for (String r : reads) {
                    long off = Long.parseLong(r);
                    System.out.println("READ " + off + " " + HEX.formatHex(read(imported, off, 16)));
                }
                if (writeValue >= 0) imported.fill(writeOffset, writeLen, (byte) writeValue);
                imported.close();
                System.out.println("RELEASED " + (counters().hostMappings() == mappingsBefore));
            }
        }

        private static void countsMode(String[] args) {
            long size = Long.parseLong(args[1]);
            long[] sizes = sizes(args, 2);
            try (VirtualMemoryResource mr = resource(0)) {
                BufferDescriptor desc = BufferDescriptor.adoptFds(received(0, sizes.length), sizes, HandleType.POSIX_FD, size);
                mr.importBuffer(desc).close(); // "A first import lets the driver finish any lazy initialization"
                int withDescriptor = openFds();
                VirtualMemoryBuffer imported = mr.importBuffer(desc);
                int afterImport = openFds();
                desc.close();
                int afterRelease = openFds();
                String data = HEX.formatHex(read(imported, 0, 16));
                imported.close();
                int afterClose = openFds();
                System.out.println("COUNTS " + withDescriptor + " " + afterImport + " " + afterRelease + " " + afterClose);
                System.out.println("DATA " + data);
            }
        }

        private static void patternMode(String[] args) {
            int expectSeed = Integer.parseInt(args[1]);
            int writeSeed = Integer.parseInt(args[2]);
            int writeIndex = Integer.parseInt(args[3]);
            int n = Integer.parseInt(args[4]);
            int at = 5;
            int fd = 0;
            try (VirtualMemoryResource mr = resource(0)) {
                long mappingsBefore = counters().hostMappings();
                for (int k = 0; k < n; k++) {
                    long size = Long.parseLong(args[at++]);
                    int count = Integer.parseInt(args[at++]);
                    long[] sizes = new long[count];
                    for (int i = 0; i < count; i++) sizes[i] = Long.parseLong(args[at++]);
                    VirtualMemoryBuffer b;
                    try (BufferDescriptor d = BufferDescriptor.adoptFds(received(fd, count), sizes, HandleType.POSIX_FD, size)) {
                        b = mr.importBuffer(d);
                    }
                    fd += count;
                    System.out.println("ISIMPORTED " + k + " " + b.isImported() + " " + b.size());
                    if (expectSeed >= 0) {
                        byte[] got = new byte[(int) b.size()];
                        b.copyTo(0, got, 0, got.length);
                        System.out.println("VERIFY " + k + " " + Arrays.equals(pattern(expectSeed, got.length), got));
                    }
                    if (writeSeed >= 0 && (writeIndex < 0 || writeIndex == k)) {
                        b.copyFrom(0, pattern(writeSeed, (int) b.size()), 0, (int) b.size());
                    }
                    b.close();
                }
                System.out.println("RELEASED " + (counters().hostMappings() == mappingsBefore));
            }
        }

        private static void secondMode(String[] args) {
            long size = Long.parseLong(args[1]);
            long[] sizes = sizes(args, 2);
            try (BufferDescriptor desc = BufferDescriptor.adoptFds(received(0, sizes.length), sizes, HandleType.POSIX_FD, size)) {
                try (VirtualMemoryResource wrong = resource(0)) {
                    long mappings = counters().hostMappings();
                    try {
                        wrong.importBuffer(desc).close();
                        System.out.println("WRONG accepted");
                    } catch (RuntimeException e) {
                        System.out.println("WRONG " + e.getClass().getSimpleName() + " " + e.getMessage().replace('\n', ' '));
                    }
                    System.out.println("WRONG_MAPPED_NOTHING " + (counters().hostMappings() == mappings));
                }
                try (VirtualMemoryResource owner = resource(1); VirtualMemoryBuffer imported = owner.importBuffer(desc)) {
                    System.out.println("OWNER " + imported.resource().device() + " " + imported.access(1) + " "
                            + imported.access(0) + " " + HEX.formatHex(read(imported, 0, 16)));
                }
                if (Driver.get().canAccessPeer(0, 1)) {
                    try (VirtualMemoryResource peered = resource(1, VirtualMemoryResourceOptions.builder().peers(0));
                         VirtualMemoryBuffer imported = peered.importBuffer(desc)) {
                        System.out.println("PEERED " + imported.access(1) + " " + imported.access(0) + " "
                                + HEX.formatHex(read(imported, 0, 16)));
                    }
                }
            }
        }
    }

    // =========================================== tests/memory_ipc/test_vmm_ipc.py (newest)

    /**
     * TestManyChunkBuffer.test_main, the parts the older port leaves out: the child sees an
     * imported buffer ({@code imported.is_mapped}) of the whole three-chunk size
     * ({@code imported.size == 3 * gran}), and once the descriptor is released every exported
     * fd is closed ({@code os.fstat(fd)} raises): "The descriptor is the only holder of the file
     * descriptors; the buffer caches nothing."
     */
    @Test
    void manyChunkBufferChildSeesTheWholeRangeAndTheFdsClose() throws Exception {
        try (VirtualMemoryResource mr = resource(0, VirtualMemoryResourceOptions.builder().addressHint(freeRegion(64L << 20)))) {
            List<VirtualMemoryBuffer> buffers = new ArrayList<>();
            try {
                VirtualMemoryBuffer buf = mr.allocate(1);
                buffers.add(buf);
                long gran = buf.mappedSize();
                buf = mr.modifyAllocation(buf, 2 * gran);
                buffers.add(buf);
                VirtualMemoryBuffer decoy = reserveAt(buf.address() + buf.mappedSize(), gran);
                assumeTrue(decoy != null, "the driver did not grant a reservation right after the buffer (cuda.core skips too)");
                VirtualMemoryBuffer moved;
                try {
                    moved = mr.modifyAllocation(buf, 3 * gran);
                } finally {
                    decoy.close();
                }
                buffers.add(moved);
                assertNotEquals(buf.address(), moved.address());
                int[] values = {0x11, 0x22, 0x33};
                for (int i = 0; i < 3; i++) moved.fill(i * gran, gran, (byte) values[i]);
                BufferDescriptor desc = moved.exportDescriptor();
                int[] fds = desc.fds();
                Object[] inodes = Arrays.stream(fds).mapToObj(CudaCorePort::fdInode).toArray();
                List<String> out = runChild(fds, importArgs("adopt", 0, desc, 2 * gran, gran, 0x44, 0, gran, 2 * gran));
                desc.close();
                assertEquals("IMPORTED true " + 3 * gran + " IMPORTED device 0", line(out, "IMPORTED"),
                        "imported.is_mapped and imported.size == 3 * gran");
                for (int i = 0; i < 3; i++) {
                    assertEquals("READ " + i * gran + " " + hex16(values[i]), line(out, "READ " + i * gran + " "));
                }
                assertEquals("RELEASED true", line(out, "RELEASED"));
                assertArrayEquals(bytes(0x44, 16), read(moved, 2 * gran, 16));
                for (int i = 0; i < fds.length; i++) {
                    Object now = CudaCorePort.fdInode(fds[i]);
                    assertTrue(now == null || !now.equals(inodes[i]), "fd " + fds[i] + " is closed with the descriptor");
                }
            } finally {
                for (VirtualMemoryBuffer b : buffers) b.close();
            }
        }
    }

    /**
     * TestFileDescriptorLifetime.test_process_argument_releases_with_the_process_object: "A
     * buffer passed to a spawned Process imports there; its descriptor goes when the Process
     * object does." The child imports and closes ({@code _close_argument}); once the parent
     * lets the descriptor go it holds no more fds than before, and the buffer is intact.
     */
    @Test
    void processArgumentReleasesWithTheDescriptor() throws Exception {
        try (VirtualMemoryResource mr = resource(0); VirtualMemoryBuffer buf = mr.allocate(1)) {
            buf.fill((byte) 0x31);
            int fds0 = openFds();
            BufferDescriptor desc = buf.exportDescriptor();
            List<String> out;
            try {
                out = runChild(desc.fds(), importArgs("adopt", 0, desc, 0, 0, -1));
            } finally {
                desc.close();
            }
            assertEquals("RELEASED true", line(out, "RELEASED"));
            assertEquals(fds0, openFds(), "the descriptor was the only holder of the fds");
            assertArrayEquals(bytes(0x31, 1), read(buf, 0, 1));
        }
    }

    /**
     * TestFileDescriptorLifetime.test_importer_holds_none_after_the_import, in another process
     * as cuda.core runs it: after_import == with_descriptor, after_release == with_descriptor -
     * 2, after_close == after_release, data 0x5B. On a host-backed driver an import holds one
     * fd per chunk until it closes (design, "Where cuvmm and cuda.core differ"), so there
     * after_import is with_descriptor + 2 and after_close is with_descriptor - 2.
     */
    @Test
    void importerHoldsNoneAfterTheImportInAnotherProcess() throws Exception {
        try (VirtualMemoryResource mr = resource(0)) {
            VirtualMemoryBuffer first = mr.allocate(1);
            long gran = first.mappedSize();
            VirtualMemoryBuffer buf = mr.modifyAllocation(first, 2 * gran);
            try {
                buf.fill((byte) 0x5B);
                List<String> out;
                try (BufferDescriptor desc = buf.exportDescriptor()) {
                    List<String> a = new ArrayList<>(List.of("counts", Long.toString(desc.size())));
                    for (long s : desc.sizes()) a.add(Long.toString(s));
                    out = runChild(desc.fds(), a.toArray(new String[0]));
                }
                String[] c = line(out, "COUNTS ").split(" ");
                int withDescriptor = Integer.parseInt(c[1]);
                int afterImport = Integer.parseInt(c[2]);
                int afterRelease = Integer.parseInt(c[3]);
                int afterClose = Integer.parseInt(c[4]);
                int held = hostBacked() ? 2 : 0;
                assertEquals("DATA " + hex16(0x5B), line(out, "DATA"));
                assertEquals(withDescriptor + held, afterImport, "counts: " + Arrays.toString(c));
                assertEquals(afterImport - 2, afterRelease, "releasing the received descriptor closes its own");
                assertEquals(withDescriptor - 2, afterClose, "counts: " + Arrays.toString(c));
            } finally {
                buf.close();
                first.close();
            }
        }
    }

    /**
     * TestRawFileDescriptorTransport.test_round_trip_through_a_unix_socket: "A child receives
     * the file descriptors ... and rebuilds the descriptor itself": from_fds(fds, sizes,
     * handle_type, size) duplicates the received fds, the child closes the received ones, imports,
     * reads both chunks, writes 0x75 to the first, and reports the rebuilt sizes and size. The
     * transport here is fd inheritance (the java module has no SCM_RIGHTS socket); what is
     * ported is the rebuild in the receiving process.
     */
    @Test
    void roundTripRebuiltWithFromFdsInAnotherProcess() throws Exception {
        try (VirtualMemoryResource mr = resource(0)) {
            VirtualMemoryBuffer first = mr.allocate(1);
            long gran = first.mappedSize();
            VirtualMemoryBuffer buf = mr.modifyAllocation(first, 2 * gran);
            try {
                buf.fill(0, gran, (byte) 0x73);
                buf.fill(gran, gran, (byte) 0x74);
                List<String> out;
                try (BufferDescriptor desc = buf.exportDescriptor()) {
                    out = runChild(desc.fds(), importArgs("fromfds", 0, desc, 0, gran, 0x75, 0, gran));
                }
                assertEquals("FROMFDS 2 -2", line(out, "FROMFDS"), "from_fds duplicates; the received ones are the caller's to close");
                assertEquals("DESC " + 2 * gran + " " + gran + "," + gran, line(out, "DESC"), "sizes [gran, gran], size 2 * gran");
                assertEquals("READ 0 " + hex16(0x73), line(out, "READ 0 "));
                assertEquals("READ " + gran + " " + hex16(0x74), line(out, "READ " + gran + " "));
                assertArrayEquals(bytes(0x75, 16), read(buf, 0, 16));
                assertArrayEquals(bytes(0x74, 16), read(buf, gran, 16));
            } finally {
                buf.close();
                first.close();
            }
        }
    }

    /**
     * TestImportOnSecondDevice.test_main, the child half (the older port checks it in one
     * process): a resource for the wrong device refuses, naming the devices, before mapping
     * anything (cuda.core: ValueError "memory on device 1, but this resource maps memory on";
     * cuvmm: CudaException, documented); the owning device imports with access (rw, none) and
     * reads the data; with the other device as a peer the access is (rw, rw).
     */
    @Test
    void importOnSecondDeviceInAnotherProcess() throws Exception {
        assumeTrue(Driver.get().deviceCount() >= 2, "needs two devices (cuda.core's vmm_ipc_device_x2)");
        try (VirtualMemoryResource mr1 = resource(1); VirtualMemoryBuffer buf = mr1.allocate(mr1.granularity())) {
            buf.fill((byte) 0x5A);
            List<String> out;
            try (BufferDescriptor desc = buf.exportDescriptor()) {
                List<String> a = new ArrayList<>(List.of("second", Long.toString(desc.size())));
                for (long s : desc.sizes()) a.add(Long.toString(s));
                out = runChild(desc.fds(), a.toArray(new String[0]));
            }
            String wrong = line(out, "WRONG ");
            assertFalse(wrong.equals("WRONG accepted"), "a resource for device 0 imported memory of device 1");
            assertTrue(wrong.contains("device 0") && wrong.contains("device 1"), wrong);
            assertEquals("WRONG_MAPPED_NOTHING true", line(out, "WRONG_MAPPED_NOTHING"));
            assertEquals("OWNER 1 READ_WRITE NONE " + hex16(0x5A), line(out, "OWNER"), "access_without_peers == (3, 0)");
            if (Driver.get().canAccessPeer(0, 1)) {
                assertEquals("PEERED READ_WRITE READ_WRITE " + hex16(0x5A), line(out, "PEERED"), "access_with_peers == (3, 3)");
            }
        }
    }

    /**
     * test_resource_pickles_as_its_own_type: "A VirtualMemoryResource pickles as (device,
     * options)": {@code copy.device_id == mr.device_id}, {@code copy.config == mr.config}. In
     * Java the resource made again from its device and options, which serves as the importer
     * of the original's buffers (what pickling a buffer as (resource, descriptor) relies on).
     */
    @Test
    void resourceIsItsDeviceAndOptions() {
        try (VirtualMemoryResource mr = resource(0, VirtualMemoryResourceOptions.builder().handleType(HandleType.POSIX_FD).peers());
             VirtualMemoryResource copy = VirtualMemoryResource.create(mr.device(), mr.options())) {
            assertEquals(mr.device(), copy.device());
            assertEquals(mr.options(), copy.options());
            assertEquals(mr.granularity(), copy.granularity());
            try (VirtualMemoryBuffer buf = mr.allocate(mr.granularity()); BufferDescriptor desc = buf.exportDescriptor()) {
                buf.fill((byte) 0x2E);
                try (VirtualMemoryBuffer imported = copy.importBuffer(desc)) {
                    assertEquals(copy, imported.resource());
                    assertArrayEquals(bytes(0x2E, 16), read(imported, 0, 16));
                }
            }
        }
    }

    // =========================================== tests/memory_ipc/test_vmm_ipc.py (older)

    /**
     * TestVmmIpcDescriptor.test_buffer_pickles_through_queue (older file): the child gets a
     * VirtualMemoryBuffer that is an import ({@code imported.is_mapped}), whose resource is a
     * VirtualMemoryResource on the same device, reads 0x11 and writes 0x22, which the parent sees.
     */
    @Test
    void bufferSentToAnotherProcessImportsOnArrival() throws Exception {
        try (VirtualMemoryResource mr = resource(0); VirtualMemoryBuffer buf = mr.allocate(mr.granularity())) {
            buf.fill((byte) 0x11);
            List<String> out;
            try (BufferDescriptor desc = buf.exportDescriptor()) {
                out = runChild(desc.fds(), importArgs("adopt", 0, desc, 0, buf.size(), 0x22, 0));
            }
            assertEquals("IMPORTED true " + buf.size() + " IMPORTED device 0", line(out, "IMPORTED"));
            assertEquals("READ 0 " + hex16(0x11), line(out, "READ 0 "));
            assertArrayEquals(bytes(0x22, 16), read(buf, 0, 16));
        }
    }

    // ========================= memory_ipc/ scenarios run for VMM (test_vmm_ipc.py: "VirtualMR")

    /**
     * test_memory_ipc.py TestIpcMempool.test_main with a VMM resource: the parent's buffer is
     * not an import ({@code not buffer.is_mapped}); the child's is, verifies the seed-0 pattern
     * of NBYTES bytes and writes the seed-1 pattern, which the parent verifies.
     */
    @Test
    void ipcTestMainWithAVmmResource() throws Exception {
        try (VirtualMemoryResource mr = resource(0); VirtualMemoryBuffer buffer = mr.allocate(NBYTES)) {
            assertFalse(buffer.isImported(), "not buffer.is_mapped");
            buffer.copyFrom(pattern(0, NBYTES));
            List<String> out;
            try (BufferDescriptor desc = buffer.exportDescriptor()) {
                out = runChild(desc.fds(), patternArgs(0, 1, -1, List.of(desc)));
            }
            assertEquals("ISIMPORTED 0 true " + NBYTES, line(out, "ISIMPORTED 0"), "buffer.is_mapped in the child");
            assertEquals("VERIFY 0 true", line(out, "VERIFY 0"));
            assertEquals("RELEASED true", line(out, "RELEASED"));
            assertArrayEquals(pattern(1, NBYTES), read(buffer, 0, NBYTES));
        }
    }

    /**
     * test_memory_ipc.py TestIPCMempoolMultiple.test_main with a VMM resource: two buffers go
     * to two children at once; child 1 writes the seed-1 pattern to buffer 1, child 2 the
     * seed-2 pattern to buffer 2; both import both.
     */
    @Test
    void twoBuffersToTwoProcesses() throws Exception {
        try (VirtualMemoryResource mr = resource(0); VirtualMemoryBuffer b1 = mr.allocate(NBYTES);
             VirtualMemoryBuffer b2 = mr.allocate(NBYTES);
             BufferDescriptor d1 = b1.exportDescriptor(); BufferDescriptor d2 = b2.exportDescriptor()) {
            List<BufferDescriptor> descs = List.of(d1, d2);
            Started c1 = start(allFds(descs), patternArgs(-1, 1, 0, descs));
            Started c2 = start(allFds(descs), patternArgs(-1, 2, 1, descs));
            ChildJvm.Result r1 = finish(c1);
            ChildJvm.Result r2 = finish(c2);
            assertEquals(0, r1.exitCode(), r1.toString());
            assertEquals(0, r2.exitCode(), r2.toString());
            assertArrayEquals(pattern(1, NBYTES), read(b1, 0, NBYTES));
            assertArrayEquals(pattern(2, NBYTES), read(b2, 0, NBYTES));
        }
    }

    /** test_send_buffers.py TestIpcSendBuffers.test_main[nmrs=1]. */
    @Test
    void sendBuffersFromOneResource() throws Exception {
        sendBuffers(1);
    }

    /** test_send_buffers.py TestIpcSendBuffers.test_main[nmrs=3]: seven buffers from three resources to one child. */
    @Test
    void sendBuffersFromThreeResources() throws Exception {
        sendBuffers(3);
    }

    private static void sendBuffers(int nmrs) throws Exception {
        int ntasks = 7;
        List<VirtualMemoryResource> mrs = new ArrayList<>();
        List<VirtualMemoryBuffer> buffers = new ArrayList<>();
        List<BufferDescriptor> descs = new ArrayList<>();
        try {
            for (int i = 0; i < nmrs; i++) mrs.add(resource(0));
            for (int i = 0; i < ntasks; i++) {
                VirtualMemoryBuffer b = mrs.get(i % nmrs).allocate(NBYTES);
                buffers.add(b);
                b.copyFrom(pattern(0, NBYTES));
                descs.add(b.exportDescriptor());
            }
            List<String> out = runChild(allFds(descs), patternArgs(0, 1, -1, descs));
            for (int i = 0; i < ntasks; i++) assertEquals("VERIFY " + i + " true", line(out, "VERIFY " + i + " "));
            assertEquals("RELEASED true", line(out, "RELEASED"));
            for (VirtualMemoryBuffer b : buffers) assertArrayEquals(pattern(1, NBYTES), read(b, 0, NBYTES));
        } finally {
            descs.forEach(BufferDescriptor::close);
            buffers.forEach(VirtualMemoryBuffer::close);
            mrs.forEach(VirtualMemoryResource::close);
        }
    }

    /**
     * test_leaks.py test_pass_object[buffer, buffer_desc] x [exec_success, exec_launch_failure]
     * with a VMM resource: passing a buffer (its descriptor) or a descriptor alone (the buffer
     * already closed) to a child that succeeds or one that fails after it starts, twice each,
     * leaves no fd behind once the objects are released.
     */
    @Test
    void passingObjectsToChildrenLeaksNoFds() throws Exception {
        try (VirtualMemoryResource mr = resource(0)) {
            // By kind, waited for (OpenFds.assertBack): the JDK's process launch and reaper hold a
            // pipe of their own for a moment after a child exits (seen in the full suite: a read-only
            // pipe open at the final look, gone 100 ms later), which a one-time look took for a leak.
            Map<String, Integer> before = org.cuvmm.testing.OpenFds.byKind();
            int memfds = openFds();
            for (String object : List.of("buffer", "buffer_desc")) {
                for (boolean succeeds : new boolean[] {true, false}) {
                    for (int n = 0; n < 2; n++) {
                        VirtualMemoryBuffer buf = mr.allocate(NBYTES);
                        BufferDescriptor desc = buf.exportDescriptor();
                        if (object.equals("buffer_desc")) buf.close(); // only the descriptor goes to the child
                        try {
                            String[] args = succeeds ? importArgs("adopt", 0, desc, 0, 0, -1) : new String[] {"fail"};
                            ChildJvm.Result r = finish(start(desc.fds(), args));
                            if (succeeds) assertEquals(0, r.exitCode(), r.toString());
                            else assertNotEquals(0, r.exitCode(), r.toString());
                        } finally {
                            desc.close();
                            buf.close();
                        }
                        assertEquals(memfds, openFds(), object + (succeeds ? " exec_success" : " exec_launch_failure"));
                    }
                }
            }
            org.cuvmm.testing.OpenFds.assertBack(before, "after passing buffers and descriptors to children");
        }
    }

    // ====================== _virtual_memory_resource.pyx docstrings, cuda.core's VMM_DESIGN.md

    /**
     * modify_allocation: "Concurrent calls on buffers that alias one another are safe"
     * (VMM_DESIGN.md: "each reads an immutable range and writes only its own locals. Which call
     * extends in place and which one moves depends on what address space the driver has free").
     * Eight threads grow one buffer or an alias of it at once; every result sees the shared
     * first chunk, owns its added memory, and everything is released when all close.
     */
    @Test
    void concurrentGrowsOfAliasesAreSafe() throws Exception {
        int threads = 8;
        // Placed in a free region so that the range after the buffer is free for one grow to take.
        try (VirtualMemoryResource mr = resource(0, VirtualMemoryResourceOptions.builder().addressHint(freeRegion(64L << 20)))) {
            long g = mr.granularity();
            long allocations0 = counters().liveAllocations();
            long mappings0 = counters().liveMappings();
            long reservations0 = counters().liveReservations();
            VirtualMemoryBuffer base = mr.allocate(g);
            base.fill((byte) 0x5A);
            VirtualMemoryBuffer alias = mr.modifyAllocation(base, g);
            List<VirtualMemoryBuffer> results = new ArrayList<>();
            ExecutorService pool = Executors.newFixedThreadPool(threads);
            try {
                CyclicBarrier go = new CyclicBarrier(threads);
                List<Future<VirtualMemoryBuffer>> futures = new ArrayList<>();
                for (int i = 0; i < threads; i++) {
                    VirtualMemoryBuffer input = i % 2 == 0 ? base : alias;
                    long size = (2 + i % 3) * g;
                    futures.add(pool.submit(() -> {
                        go.await(60, TimeUnit.SECONDS);
                        return mr.modifyAllocation(input, size);
                    }));
                }
                for (Future<VirtualMemoryBuffer> f : futures) results.add(f.get(120, TimeUnit.SECONDS));
            } finally {
                pool.shutdownNow();
            }
            try {
                int inPlace = 0;
                for (int i = 0; i < threads; i++) {
                    VirtualMemoryBuffer r = results.get(i);
                    assertEquals((2 + i % 3) * g, r.size());
                    assertTrue(r.origin() == BufferOrigin.GROWN_IN_PLACE || r.origin() == BufferOrigin.MOVED, r.toString());
                    if (r.origin() == BufferOrigin.GROWN_IN_PLACE) inPlace++;
                    r.fill(g, r.size() - g, (byte) (i + 1));
                }
                assertTrue(inPlace <= 1, "one range after the buffer: at most one grow extends in place, " + inPlace + " did");
                for (int i = 0; i < threads; i++) {
                    VirtualMemoryBuffer r = results.get(i);
                    assertArrayEquals(bytes(0x5A, 16), read(r, 0, 16), "result " + i + " sees the shared chunk");
                    assertArrayEquals(bytes(i + 1, 16), read(r, r.size() - 16, 16), "result " + i + " owns what it added");
                }
                results.get(0).fill(0, 16, (byte) 0x6B);
                assertArrayEquals(bytes(0x6B, 16), read(base, 0, 16));
                assertArrayEquals(bytes(0x6B, 16), read(results.get(threads - 1), 0, 16));
            } finally {
                results.forEach(VirtualMemoryBuffer::close);
            }
            assertArrayEquals(bytes(0x6B, 16), read(alias, 0, 16));
            alias.close();
            base.close();
            assertEquals(allocations0, counters().liveAllocations());
            assertEquals(mappings0, counters().liveMappings());
            assertEquals(reservations0, counters().liveReservations());
        }
    }

    /**
     * modify_allocation's move: "Move: a new range ... addr_align = cfg.addr_align or gran"
     * (and addr_align: "Alignment for the VA reservation"): a moved buffer's new reservation is
     * aligned to the resource's addressAlignment, or to the per-call options' when given.
     */
    @Test
    void aMoveReservesWithTheAddressAlignment() {
        long align = 32L << 20;
        try (VirtualMemoryResource mr = resource(0, VirtualMemoryResourceOptions.builder().addressAlignment(align))) {
            long g = mr.granularity();
            for (long wanted : new long[] {align, 2 * align}) {
                try (VirtualMemoryBuffer buf = mr.allocate(g)) {
                    assertEquals(0, buf.address() % align);
                    buf.fill((byte) 0x4D);
                    VirtualMemoryBuffer decoy = reserveAt(buf.address() + buf.mappedSize(), g);
                    assumeTrue(decoy != null, "no decoy right after the buffer");
                    VirtualMemoryBuffer moved;
                    try {
                        moved = wanted == align ? mr.modifyAllocation(buf, 2 * g)
                                : mr.modifyAllocation(buf, 2 * g, mr.options().toBuilder().addressAlignment(wanted).build());
                    } finally {
                        decoy.close();
                    }
                    try (VirtualMemoryBuffer m = moved) {
                        assertEquals(BufferOrigin.MOVED, m.origin());
                        assertEquals(0, m.address() % wanted, "moved to 0x" + Long.toHexString(m.address())
                                + ", not a multiple of addr_align " + wanted);
                        assertArrayEquals(bytes(0x4D, 16), read(m, 0, 16));
                    }
                }
            }
        }
    }

    /**
     * VMM_DESIGN.md invariant 10: "A chunk's access is fixed when the chunk is created and
     * travels with its allocation. Every mapping of the chunk applies the same descriptors."
     * A chunk added read-only stays read-only when a later grow moves the buffer, and the other
     * chunks stay read-write.
     */
    @Test
    void aChunksAccessTravelsWithAMove() {
        try (VirtualMemoryResource mr = resource(0, VirtualMemoryResourceOptions.builder().addressHint(freeRegion(64L << 20)))) {
            long g = mr.granularity();
            VirtualMemoryResourceOptions readOnly = mr.options().toBuilder().addressHint(0).selfAccess(AccessMode.READ).build();
            try (VirtualMemoryBuffer buf = mr.allocate(g); VirtualMemoryBuffer grown = mr.modifyAllocation(buf, 2 * g, readOnly)) {
                assertEquals(AccessMode.READ, grown.access(0, 1));
                VirtualMemoryBuffer decoy = reserveAt(grown.address() + grown.mappedSize(), g);
                assumeTrue(decoy != null, "no decoy right after the buffer");
                VirtualMemoryBuffer moved;
                try {
                    moved = mr.modifyAllocation(grown, 3 * g);
                } finally {
                    decoy.close();
                }
                try (VirtualMemoryBuffer m = moved) {
                    assertEquals(BufferOrigin.MOVED, m.origin());
                    assertEquals(AccessMode.READ_WRITE, m.access(0, 0));
                    assertEquals(AccessMode.READ, m.access(0, 1), "the read-only chunk stays read-only at its new address");
                    assertEquals(AccessMode.READ_WRITE, m.access(0, 2), "the chunk this grow added has the resource's access");
                    assertEquals(AccessMode.READ, grown.access(0, 1), "and at its old one");
                }
            }
        }
    }

    /**
     * VirtualMemoryBuffer: "that memory is freed when the last buffer that maps it closes";
     * VMM_DESIGN.md invariant 9: "A mapping dies with the last range that holds it, in any
     * close order." The input, an in-place grow and a moved grow closed in each of the six
     * orders: the rest keep reading the data, and nothing is left at the end.
     */
    @Test
    void aliasesCloseInAnyOrder() {
        int[][] orders = {{0, 1, 2}, {0, 2, 1}, {1, 0, 2}, {1, 2, 0}, {2, 0, 1}, {2, 1, 0}};
        for (int[] order : orders) {
            try (VirtualMemoryResource mr = resource(0, VirtualMemoryResourceOptions.builder().addressHint(freeRegion(64L << 20)))) {
                long g = mr.granularity();
                long allocations = counters().liveAllocations();
                long mappings = counters().liveMappings();
                long reservations = counters().liveReservations();
                long hostMappings = counters().hostMappings();
                VirtualMemoryBuffer buf = mr.allocate(g);
                buf.fill((byte) 0x27);
                VirtualMemoryBuffer inPlace = mr.modifyAllocation(buf, 2 * g);
                VirtualMemoryBuffer decoy = reserveAt(inPlace.address() + inPlace.mappedSize(), g);
                assumeTrue(decoy != null, "no decoy right after the buffer");
                VirtualMemoryBuffer moved;
                try {
                    moved = mr.modifyAllocation(inPlace, 3 * g);
                } finally {
                    decoy.close();
                }
                assertEquals(BufferOrigin.MOVED, moved.origin());
                List<VirtualMemoryBuffer> open = new ArrayList<>(List.of(buf, inPlace, moved));
                VirtualMemoryBuffer[] all = {buf, inPlace, moved};
                for (int k : order) {
                    all[k].close();
                    open.remove(all[k]);
                    for (VirtualMemoryBuffer b : open) {
                        assertArrayEquals(bytes(0x27, 16), read(b, 0, 16), "order " + Arrays.toString(order) + ": " + b);
                    }
                }
                String o = "order " + Arrays.toString(order);
                assertEquals(allocations, counters().liveAllocations(), o);
                assertEquals(mappings, counters().liveMappings(), o);
                assertEquals(reservations, counters().liveReservations(), o);
                if (TestSupport.onHostDriver()) assertEquals(hostMappings, counters().hostMappings(), o);
            }
        }
    }

    /**
     * VMM_DESIGN.md, "Sharing across processes": "The access descriptors stored in the box are
     * the importer's, built from its options for its device and peers; the exporter's access
     * does not travel." An importer with read-only self access maps the import read-only; an
     * exporter's peers are not the importer's.
     */
    @Test
    void anImportHasTheImportersAccess() {
        try (VirtualMemoryResource exporter = resource(0); VirtualMemoryBuffer buf = exporter.allocate(exporter.granularity());
             BufferDescriptor desc = buf.exportDescriptor();
             VirtualMemoryResource readOnly = resource(0, VirtualMemoryResourceOptions.builder().selfAccess(AccessMode.READ));
             VirtualMemoryBuffer imported = readOnly.importBuffer(desc)) {
            assertEquals(AccessMode.READ_WRITE, buf.access(0));
            assertEquals(AccessMode.READ, imported.access(0), "the importer's self_access");
        }
        assumeTrue(Driver.get().deviceCount() >= 2 && Driver.get().canAccessPeer(1, 0), "needs two peer devices");
        try (VirtualMemoryResource exporter = resource(0, VirtualMemoryResourceOptions.builder().peers(1));
             VirtualMemoryBuffer buf = exporter.allocate(exporter.granularity()); BufferDescriptor desc = buf.exportDescriptor();
             VirtualMemoryResource importer = resource(0); VirtualMemoryBuffer imported = importer.importBuffer(desc)) {
            assertEquals(AccessMode.READ_WRITE, buf.access(1));
            assertEquals(AccessMode.NONE, imported.access(1), "the exporter's peers do not travel");
            assertEquals(AccessMode.READ_WRITE, imported.access(0));
        }
    }

    /**
     * VMM_DESIGN.md: "The import then reserves sum(sizes) with the importer's alignment": an
     * importer whose addressAlignment is 32 MiB places each import at a multiple of it.
     */
    @Test
    void anImportIsAlignedToTheImportersAlignment() {
        long align = 32L << 20;
        try (VirtualMemoryResource mr = resource(0); VirtualMemoryBuffer buf = mr.allocate(mr.granularity());
             BufferDescriptor desc = buf.exportDescriptor();
             VirtualMemoryResource importer = resource(0, VirtualMemoryResourceOptions.builder().addressAlignment(align))) {
            List<VirtualMemoryBuffer> imports = new ArrayList<>();
            try {
                for (int i = 0; i < 3; i++) {
                    VirtualMemoryBuffer imported = importer.importBuffer(desc);
                    imports.add(imported);
                    assertEquals(0, imported.address() % align, "import at 0x" + Long.toHexString(imported.address()));
                }
            } finally {
                imports.forEach(VirtualMemoryBuffer::close);
            }
        }
    }

    /**
     * VMM_DESIGN.md: "each open descriptor keeps the physical memory allocated" (and "A
     * descriptor on a Queue pins the memory in the sender until the receiver unpickles it"):
     * the exporter closes its buffer, the descriptor still imports the data, and the memory is
     * gone once the descriptor and the import are.
     */
    @Test
    void anOpenDescriptorKeepsTheMemory() {
        try (VirtualMemoryResource mr = resource(0)) {
            long hostAllocations = counters().hostAllocations();
            int fds0 = openFds();
            VirtualMemoryBuffer buf = mr.allocate(mr.granularity());
            buf.fill((byte) 0x6C);
            BufferDescriptor desc = buf.exportDescriptor();
            buf.close();
            try (VirtualMemoryBuffer imported = mr.importBuffer(desc)) {
                assertArrayEquals(bytes(0x6C, 16), read(imported, 0, 16), "the descriptor kept the memory");
            }
            desc.close();
            assertEquals(fds0, openFds());
            if (TestSupport.onHostDriver()) assertEquals(hostAllocations, counters().hostAllocations(), "freed with the descriptor");
        }
    }

    /**
     * VMM_DESIGN.md: "After each import, cuMemGetAllocationPropertiesFromHandle must report the
     * resource's location (the same device, or the same host location type); a mismatch is a
     * ValueError before anything is mapped, because the access descriptors would describe the
     * wrong location." Host NUMA memory imported by a device resource, and the reverse.
     */
    @Test
    void anImportOfMemoryInAnotherLocationIsRefused() {
        assumeTrue(Driver.get().device(0).supportsHostNumaVirtualMemory(), "needs host NUMA VMM");
        VirtualMemoryResourceOptions.Builder numa = VirtualMemoryResourceOptions.builder().locationType(LocationType.HOST_NUMA)
                .locationId(0).handleType(HandleType.POSIX_FD);
        try (VirtualMemoryResource host = resource(0, numa); VirtualMemoryResource device = resource(0)) {
            for (VirtualMemoryResource[] pair : new VirtualMemoryResource[][] {{host, device}, {device, host}}) {
                try (VirtualMemoryBuffer buf = pair[0].allocate(pair[0].granularity()); BufferDescriptor desc = buf.exportDescriptor()) {
                    long mappings = counters().liveMappings();
                    long reservations = counters().liveReservations();
                    String what = pair[0].options().locationType() + " memory imported by a " + pair[1].options().locationType()
                            + " resource";
                    VirtualMemoryBuffer imported = null;
                    try {
                        imported = pair[1].importBuffer(desc);
                    } catch (IllegalArgumentException | CudaException refused) {
                        assertTrue(refused.getMessage().contains("location") || refused.getMessage().contains("HOST"),
                                what + ": " + refused.getMessage());
                    }
                    try {
                        assertEquals(null, imported, what + " was mapped: " + imported);
                    } finally {
                        if (imported != null) imported.close();
                    }
                    assertEquals(mappings, counters().liveMappings(), what);
                    assertEquals(reservations, counters().liveReservations(), what);
                }
            }
        }
    }
}
