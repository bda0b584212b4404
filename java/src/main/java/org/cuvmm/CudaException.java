package org.cuvmm;

/**
 * A CUDA driver call (or a rule of cuvmm's that stands in for one) did not succeed.
 *
 * <p>The message names the call, the step of the operation it belonged to and the
 * {@code CUresult} name, for example {@code cuMemMap failed while mapping chunk 2 of 3:
 * CUDA_ERROR_INVALID_VALUE (...)}. The same parts are available separately.
 */
public class CudaException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    private final int code;
    private final String resultName;
    private final String call;
    private final String step;

    public CudaException(int code, String resultName, String call, String step, String message) {
        super(message);
        this.code = code;
        this.resultName = resultName;
        this.call = call;
        this.step = step;
    }

    /** The numeric {@code CUresult} (1 for {@code CUDA_ERROR_INVALID_VALUE}). */
    public int code() { return code; }

    /** The {@code CUresult} name, such as {@code CUDA_ERROR_INVALID_VALUE}. */
    public String resultName() { return resultName; }

    /** The driver entry point or cuvmm operation that failed, such as {@code cuMemMap}. */
    public String call() { return call; }

    /** Where in the operation it failed, such as {@code mapping chunk 2 of 3}; may be empty. */
    public String step() { return step; }

    /**
     * The same failure with {@code detail} after the message: what the caller knows and the
     * driver did not say (the request, the argument, what to do).
     */
    CudaException withDetail(String detail) {
        CudaException e = new CudaException(code, resultName, call, step, getMessage() + "; " + detail);
        e.setStackTrace(getStackTrace()); // where the driver's failure was seen
        return e;
    }
}
