package org.cuvmm.internal;

import org.cuvmm.CudaException;
import org.cuvmm.internal.jni.JavaCppSettings;
import org.cuvmm.internal.jni.NativeStatus;

/**
 * Turns a failed {@link NativeStatus} into a {@link CudaException}. Each thread reuses one
 * status object, so a call costs no allocation on success.
 */
public final class NativeCalls {
    static {
        JavaCppSettings.apply(); // before NativeStatus (a Pointer) initializes
    }

    private static final ThreadLocal<NativeStatus> STATUS = ThreadLocal.withInitial(NativeStatus::new);

    private NativeCalls() {}

    /** The calling thread's status object, to pass to one native call and then {@link #check}. */
    public static NativeStatus status() { return STATUS.get(); }

    /** Throws a {@link CudaException} built from {@code status} if it holds an error. */
    public static void check(NativeStatus status) {
        int code = status.code();
        if (code != 0) throw toException(status);
    }

    public static CudaException toException(NativeStatus status) {
        int code = status.code();
        String message = status.message();
        return new CudaException(code, status.name(), status.call(), status.step(), message);
    }
}
