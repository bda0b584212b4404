package org.cuvmm;

/**
 * Thrown by {@link Stream#synchronize()} when a host function launched on that stream
 * ({@link Stream#launchHostFunction(Runnable)}) threw. The cause is the first exception; later
 * ones since the previous synchronize are suppressed. Each was also logged (logger
 * {@code org.cuvmm}) when it happened. The stream itself is unaffected: work queued after the
 * host function ran.
 */
public final class HostFunctionException extends RuntimeException {
    private static final long serialVersionUID = 1L;

    /**
     * @param message what happened, naming the stream
     * @param cause the exception the host function threw
     */
    public HostFunctionException(String message, Throwable cause) {
        super(message, cause);
    }
}
