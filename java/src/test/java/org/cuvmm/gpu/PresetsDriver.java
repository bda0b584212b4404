package org.cuvmm.gpu;

import static org.junit.jupiter.api.Assertions.fail;

import org.bytedeco.cuda.cudart.CUctx_st;
import org.bytedeco.cuda.global.cudart;
import org.bytedeco.javacpp.BytePointer;
import org.bytedeco.javacpp.Loader;
import org.bytedeco.javacpp.PointerPointer;

/**
 * The JavaCPP CUDA presets as an independent second binding of the driver, for the gpu
 * tests that hold cuvmm against it: loading them with a message that says what is missing,
 * checking a result, naming a {@code CUresult}. Touch it only once the cuda driver is known
 * to run: any presets class fails to load without {@code libcuda.so.1}.
 */
final class PresetsDriver {
    private PresetsDriver() {}

    /** Loads the presets' JNI library; {@code whatIsLost} says what the failure skips ("so the cross-check did not run"). */
    static void load(String whatIsLost) {
        try {
            Loader.load(cudart.class);
        } catch (Throwable t) {
            fail("the JavaCPP CUDA presets (org.bytedeco:cuda) could not load their JNI library, " + whatIsLost
                    + ". libjnicudart.so needs libcuda.so.1 (the NVIDIA driver) and libcudart.so.13 (the CUDA 13 "
                    + "runtime): scripts/gpu-check bundles libcudart.so.13 and puts it on LD_LIBRARY_PATH; under "
                    + "Maven, put a CUDA 13 toolkit's lib64 on LD_LIBRARY_PATH. Cause: " + t, t);
        }
    }

    /**
     * Loads the presets ({@link #load}), initializes the driver and retains device 0's primary
     * context, current on this thread (cuvmm's buffers use the same one). Returns only with the
     * context retained and current: when making it current fails, it is released again before the
     * failure is thrown. The caller releases it with {@link #releasePrimaryContext()}.
     */
    static void retainPrimaryContext(String whatIsLost) {
        load(whatIsLost);
        check(cudart.cuInit(0), "cuInit");
        CUctx_st ctx = new CUctx_st();
        check(cudart.cuDevicePrimaryCtxRetain(ctx, 0), "cuDevicePrimaryCtxRetain(device 0)");
        try {
            check(cudart.cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
        } catch (Throwable t) {
            releasePrimaryContext();
            throw t;
        }
    }

    /** Releases device 0's primary context retained by {@link #retainPrimaryContext}. */
    static void releasePrimaryContext() {
        check(cudart.cuDevicePrimaryCtxRelease(0), "cuDevicePrimaryCtxRelease(device 0)");
    }

    static void check(int rc, String call) {
        if (rc != cudart.CUDA_SUCCESS) fail(call + " through the presets failed: " + name(rc) + " (" + rc + ")");
    }

    static String name(int rc) {
        try (PointerPointer<BytePointer> out = new PointerPointer<>(1)) {
            if (cudart.cuGetErrorName(rc, out) == cudart.CUDA_SUCCESS && out.get(0) != null) {
                return new BytePointer(out.get(0)).getString();
            }
        } catch (RuntimeException e) {
            // fall through to the number
        }
        return "CUresult " + rc;
    }
}
