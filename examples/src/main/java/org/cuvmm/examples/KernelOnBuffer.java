package org.cuvmm.examples;

import java.io.PrintStream;
import java.nio.ByteOrder;
import java.nio.FloatBuffer;
import java.util.Locale;

import org.bytedeco.cuda.cudart.CUctx_st;
import org.bytedeco.cuda.cudart.CUfunc_st;
import org.bytedeco.cuda.cudart.CUmod_st;
import org.bytedeco.cuda.cudart.CUstream_st;
import org.bytedeco.cuda.global.cudart;
import org.bytedeco.cuda.global.nvrtc;
import org.bytedeco.cuda.nvrtc._nvrtcProgram;
import org.bytedeco.javacpp.BytePointer;
import org.bytedeco.javacpp.FloatPointer;
import org.bytedeco.javacpp.IntPointer;
import org.bytedeco.javacpp.Loader;
import org.bytedeco.javacpp.LongPointer;
import org.bytedeco.javacpp.Pointer;
import org.bytedeco.javacpp.PointerPointer;
import org.bytedeco.javacpp.SizeTPointer;
import org.cuvmm.Device;
import org.cuvmm.Driver;
import org.cuvmm.DriverKind;
import org.cuvmm.PinnedHostBuffer;
import org.cuvmm.Stream;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;

/**
 * Runs a CUDA kernel, compiled at run time with NVRTC, on memory cuvmm allocated: the
 * buffer's {@link VirtualMemoryBuffer#address() address()} is a plain {@code CUdeviceptr},
 * so any binding of the driver API can pass it to a kernel. This one uses the JavaCPP CUDA
 * presets ({@code org.bytedeco:cuda}) to compute {@code y = a*x + y} (SAXPY) in one buffer.
 *
 * <p>Everything runs in the order of one cuvmm {@link Stream}: the upload from pinned host
 * memory, the kernel (launched through the presets on {@link Stream#handle()}, inside
 * {@link VirtualMemoryBuffer#withAddress(Stream, java.util.function.LongConsumer)} so the buffer
 * knows the stream uses it), the download, and the buffer's release
 * ({@link VirtualMemoryBuffer#close(Stream)}: unmapped only once the stream got there). The
 * host waits once, for the result.
 *
 * <p>Exit status: {@value #EXIT_OK} the kernel ran and every element is right;
 * {@value #EXIT_FAILED} a wrong element (or a CUDA/NVRTC call failed: the exception names
 * the call and its CUresult/nvrtcResult); {@value #EXIT_CANNOT_RUN_HERE} the kernel cannot
 * run on this machine: cuvmm runs its host driver or the cuda driver over the host library (no
 * GPU, no kernels), or the presets' native libraries
 * ({@code libcuda.so.1}, {@code libcudart.so.13}, {@code libnvrtc.so.13}) do not load. One
 * line says which. Run it with
 * {@code mvn -q -pl examples exec:java -Dexec.mainClass=org.cuvmm.examples.KernelOnBuffer}.
 */
public final class KernelOnBuffer {
    public static final int EXIT_OK = 0;
    public static final int EXIT_FAILED = 1;
    public static final int EXIT_CANNOT_RUN_HERE = 3;

    private static final int N = 1 << 20;     // elements of x and of y
    private static final float A = 3f;        // x, y and a*x + y are integers below 2^24: exact in float

    private KernelOnBuffer() {}

    public static void main(String[] args) {
        int status = run(System.out);
        if (status != EXIT_OK) System.exit(status);
    }

    /** The whole example; returns the exit status. CUDA/NVRTC errors throw {@link IllegalStateException}. */
    public static int run(PrintStream out) {
        Driver driver = Driver.get();
        String kind = driver.kind().name().toLowerCase(Locale.ROOT);
        out.println("driver: " + kind + " " + driver.versionString() + " (" + driver.reason() + ")");
        // Checked before any org.bytedeco.cuda class is touched: their static initializers load
        // a JNI library that needs libcuda.so.1 and throw UnsatisfiedLinkError without it.
        // The host library (cuda over cuvmm's host driver) has no modules or kernels: a presets
        // call to cuModuleLoadData there would end the JVM (symbol lookup error), so stop here too.
        if (driver.kind() != DriverKind.CUDA || driver.isHostLibrary()) {
            String what = driver.isHostLibrary() ? "cuda driver over the host library" : kind + " driver";
            out.println("kernel part cannot run here: cuvmm runs the " + what + " (" + driver.reason()
                    + "), and a CUDA kernel needs the NVIDIA driver (cuda)");
            return EXIT_CANNOT_RUN_HERE;
        }
        String missing = Saxpy.load();
        if (missing != null) {
            out.println("kernel part cannot run here: cuvmm runs the cuda driver, but " + missing);
            return EXIT_CANNOT_RUN_HERE;
        }

        // x at offset 0, y right after it, in one buffer (rounded up to the granularity).
        long yOffset = 4L * N;
        int wrong = 0;
        try (VirtualMemoryResource resource = VirtualMemoryResource.create(0);
             Stream stream = Stream.builder(resource.device()).nonBlocking(true).build();
             PinnedHostBuffer host = PinnedHostBuffer.allocate(2 * yOffset)) {
            FloatBuffer xy = host.asByteBuffer().order(ByteOrder.nativeOrder()).asFloatBuffer();
            for (int i = 0; i < N; i++) xy.put(i, i).put(N + i, N - i);   // x[i] = i, y[i] = N - i

            // The module stays loaded until the stream is done with the kernel (closing Saxpy unloads it).
            try (Saxpy saxpy = Saxpy.compile(resource.device())) {
                out.println("compiled saxpy with NVRTC " + saxpy.nvrtcVersion + " for " + saxpy.arch + ": "
                        + saxpy.ptxBytes + " bytes of PTX");
                VirtualMemoryBuffer buffer = resource.allocate(2 * yOffset);
                try {
                    buffer.copyFromAsync(0, host, 0, 2 * yOffset, stream);   // queued; returns at once
                    saxpy.launch(buffer, A, 0, yOffset, N, stream);          // queued after the upload
                    out.printf("launched saxpy on %d elements on %s: x at 0x%x, y at 0x%x (%s, %d chunk(s))%n", N,
                            stream, buffer.address(), buffer.address() + yOffset, buffer, buffer.chunkCount());
                    buffer.copyToAsync(yOffset, host, yOffset, yOffset, stream);   // y back, after the kernel
                } finally {
                    buffer.close(stream);   // unmapped by cuvmm once the stream got here; never blocks
                }
                stream.synchronize();       // the one wait: upload, kernel, download and release are done
            }
            for (int i = 0; i < N; i++) {
                float expected = A * i + (N - i);
                if (xy.get(N + i) != expected && wrong++ == 0) {
                    out.println("first wrong element: y[" + i + "] = " + xy.get(N + i) + ", expected " + expected);
                }
            }
        }
        out.println("y = " + A + " * x + y checked on all " + N + " elements: " + (wrong == 0 ? "all right" : wrong + " wrong"));
        out.println(wrong == 0 ? "OK" : "FAILED");
        return wrong == 0 ? EXIT_OK : EXIT_FAILED;
    }

    /**
     * The compiled kernel, loaded into the primary context of one device, and everything else
     * that touches the presets: this class is initialized only once the cuda driver is known to
     * run. An instance owns a reference to that context and the module; {@link #launch} and
     * {@link #close()} (which releases both) must run on the thread that compiled it: the
     * context is on that thread's stack.
     */
    static final class Saxpy implements AutoCloseable {
        static final String SOURCE = "extern \"C\" __global__ void saxpy(float a, const float* x, float* y, unsigned int n) {\n"
                + "    unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                + "    if (i < n) y[i] = a * x[i] + y[i];\n"
                + "}\n";

        private final CUmod_st module = new CUmod_st();
        private final CUfunc_st function = new CUfunc_st();   // belongs to the module
        private int dev;            // the CUdevice
        private boolean retained;   // a reference to the primary context is ours to release
        private boolean pushed;     // that context is on this thread's stack, ours to pop
        String nvrtcVersion, arch;
        int ptxBytes;

        /** Loads the presets' JNI libraries; null when they load, else why not. */
        static String load() {
            try {
                Loader.load(cudart.class);   // libjnicudart.so: libcuda.so.1 and libcudart.so.13
                Loader.load(nvrtc.class);    // libjninvrtc.so: libnvrtc.so.13
                return null;
            } catch (Throwable t) {          // UnsatisfiedLinkError, or NoClassDefFoundError after one
                return "the JavaCPP CUDA presets could not load their native libraries (libcuda.so.1 from the "
                        + "NVIDIA driver, libcudart.so.13 and libnvrtc.so.13 from a CUDA 13 toolkit's lib64 on "
                        + "LD_LIBRARY_PATH): " + t;
            }
        }

        /**
         * Compiles the kernel for {@code device} (a cuvmm ordinal) and loads it. Same context as
         * cuvmm: cuvmm retains each device's primary context once (native/driver.cpp,
         * DeviceContextScope) and makes it current for each call, putting back a context the
         * caller had set. Retaining the primary context here gives that same context (one per
         * device, reference-counted; both bindings reach the same libcuda.so.1 in this process
         * unless cuvmm.cuda.library names another), so the kernel sees cuvmm's mappings; push,
         * and pop in close(), leave the thread's context as it was.
         */
        static Saxpy compile(int device) {
            check(cudart.cuInit(0), "cuInit");
            int[] major = {0}, minor = {0}, dev = {0};
            checkNvrtc(nvrtc.nvrtcVersion(major, minor), "nvrtcVersion", null);
            check(cudart.cuDeviceGet(dev, device), "cuDeviceGet(" + device + ")");
            Device d = Driver.get().device(device);   // PTX for the device's own compute capability
            Saxpy s = new Saxpy();
            s.dev = dev[0];
            s.nvrtcVersion = major[0] + "." + minor[0];
            s.arch = "compute_" + d.computeCapabilityMajor() + d.computeCapabilityMinor();
            try {
                try (CUctx_st ctx = new CUctx_st()) {
                    check(cudart.cuDevicePrimaryCtxRetain(ctx, s.dev), "cuDevicePrimaryCtxRetain(device " + device + ")");
                    s.retained = true;
                    check(cudart.cuCtxPushCurrent(ctx), "cuCtxPushCurrent");
                    s.pushed = true;
                }
                String ptx = s.ptx();
                s.ptxBytes = ptx.length();
                try (BytePointer image = new BytePointer(ptx)) {   // NUL-terminated, as cuModuleLoadData wants
                    int rc = cudart.cuModuleLoadData(s.module, image);
                    check(rc, rc == cudart.CUDA_ERROR_UNSUPPORTED_PTX_VERSION ? "cuModuleLoadData (the driver is older "
                            + "than NVRTC " + s.nvrtcVersion + " and cannot JIT its PTX)" : "cuModuleLoadData");
                }
                check(cudart.cuModuleGetFunction(s.function, s.module, "saxpy"), "cuModuleGetFunction(saxpy)");
                return s;
            } catch (RuntimeException | Error e) {
                try {
                    s.close();   // undoes what succeeded; the first error stays the one thrown
                } catch (RuntimeException c) {
                    e.addSuppressed(c);
                }
                throw e;
            }
        }

        /** SOURCE compiled to PTX; the NVRTC program is destroyed before this returns or throws. */
        private String ptx() {
            try (_nvrtcProgram program = new _nvrtcProgram(); BytePointer source = new BytePointer(SOURCE);
                 BytePointer name = new BytePointer("saxpy.cu")) {
                checkNvrtc(nvrtc.nvrtcCreateProgram(program, source, name, 0, (PointerPointer<?>) null,
                        (PointerPointer<?>) null), "nvrtcCreateProgram", null);
                String ptx;
                try (BytePointer option = new BytePointer("--gpu-architecture=" + arch);
                     PointerPointer<?> options = new PointerPointer<>(1).put(0, option);
                     SizeTPointer size = new SizeTPointer(1)) {
                    int rc = nvrtc.nvrtcCompileProgram(program, 1, options);
                    checkNvrtc(rc, "nvrtcCompileProgram(" + option.getString() + ")", rc == nvrtc.NVRTC_SUCCESS ? null : log(program));
                    checkNvrtc(nvrtc.nvrtcGetPTXSize(program, size), "nvrtcGetPTXSize", null);
                    try (BytePointer out = new BytePointer(size.get())) {
                        checkNvrtc(nvrtc.nvrtcGetPTX(program, out), "nvrtcGetPTX", null);
                        ptx = out.getString();
                    }
                } catch (RuntimeException | Error e) {
                    nvrtc.nvrtcDestroyProgram(program);   // best effort: the first error is the one to report
                    throw e;
                }
                checkNvrtc(nvrtc.nvrtcDestroyProgram(program), "nvrtcDestroyProgram", null);
                return ptx;
            }
        }

        /** The compiler's messages, for the exception of a failed compile. */
        private static String log(_nvrtcProgram program) {
            try (SizeTPointer size = new SizeTPointer(1)) {
                if (nvrtc.nvrtcGetProgramLogSize(program, size) != nvrtc.NVRTC_SUCCESS) return "(no log)";
                try (BytePointer log = new BytePointer(size.get())) {
                    return nvrtc.nvrtcGetProgramLog(program, log) == nvrtc.NVRTC_SUCCESS ? log.getString() : "(no log)";
                }
            }
        }

        /**
         * Queues y[i] = a * x[i] + y[i] for i below n, x and y at byte offsets of {@code buffer},
         * on {@code stream}, and returns without waiting. withAddress(stream, ...) holds a use
         * of the buffer during the launch and then records the stream on it, so a close()
         * waits for the kernel and a close(stream) orders after it.
         */
        void launch(VirtualMemoryBuffer buffer, float a, long xOffset, long yOffset, int n, Stream stream) {
            if (xOffset < 0 || yOffset < 0 || n < 0 || Math.max(xOffset, yOffset) + 4L * n > buffer.size()) {
                throw new IndexOutOfBoundsException("x at " + xOffset + ", y at " + yOffset + ", " + n
                        + " floats each: outside " + buffer);
            }
            if (n == 0) return; // a grid of 0 blocks is CUDA_ERROR_INVALID_VALUE; nothing to compute
            buffer.withAddress(stream, base -> {
                // kernelParams: one pointer per kernel argument, to a copy of its value.
                try (FloatPointer pa = new FloatPointer(1).put(a);
                     LongPointer px = new LongPointer(1).put(base + xOffset);   // CUdeviceptr x
                     LongPointer py = new LongPointer(1).put(base + yOffset);   // CUdeviceptr y
                     IntPointer pn = new IntPointer(1).put(n);
                     PointerPointer<?> params = new PointerPointer<>(4).put(0, pa).put(1, px).put(2, py).put(3, pn)) {
                    int block = 256;
                    int blocks = (int) ((n + (long) block - 1) / block); // long: no overflow near Integer.MAX_VALUE
                    check(cudart.cuLaunchKernel(function, blocks, 1, 1, block, 1, 1, 0,
                            asCuStream(stream.handle()), params, (PointerPointer<?>) null), "cuLaunchKernel(saxpy)");
                }
            });
        }

        /**
         * A cuvmm stream's raw {@code CUstream} as the presets' type. The object does not own
         * the stream (its deallocator is never set): cuvmm's {@link Stream} destroys it.
         */
        static CUstream_st asCuStream(long handle) {
            return new CUstream_st(new Pointer() {
                { address = handle; }
            });
        }

        /** Unloads the module, pops and releases the primary context: all three tried, the first failure thrown. */
        @Override
        public void close() {
            int unloaded = module.isNull() ? cudart.CUDA_SUCCESS : cudart.cuModuleUnload(module);
            module.setNull();
            int popped = cudart.CUDA_SUCCESS;
            if (pushed) {
                try (CUctx_st ctx = new CUctx_st()) {
                    popped = cudart.cuCtxPopCurrent(ctx);
                }
            }
            int released = retained ? cudart.cuDevicePrimaryCtxRelease(dev) : cudart.CUDA_SUCCESS;
            pushed = retained = false;
            check(unloaded, "cuModuleUnload");
            check(popped, "cuCtxPopCurrent");
            check(released, "cuDevicePrimaryCtxRelease");
        }

        static void check(int rc, String call) {
            if (rc != cudart.CUDA_SUCCESS) throw new IllegalStateException(call + " failed: " + errorName(rc) + " (" + rc + ")");
        }

        static void checkNvrtc(int rc, String call, String log) {
            if (rc != nvrtc.NVRTC_SUCCESS) {
                throw new IllegalStateException(call + " failed: " + nvrtc.nvrtcGetErrorString(rc).getString() + " (" + rc + ")"
                        + (log == null || log.isBlank() ? "" : "\n" + log));
            }
        }

        /** cuGetErrorName's static string (the driver's: not freed). */
        static String errorName(int rc) {
            try (PointerPointer<BytePointer> name = new PointerPointer<>(1)) {
                if (cudart.cuGetErrorName(rc, name) == cudart.CUDA_SUCCESS && name.get(0) != null) {
                    return new BytePointer(name.get(0)).getString();
                }
            }
            return "unknown CUresult";
        }
    }
}
