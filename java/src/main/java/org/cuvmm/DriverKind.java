package org.cuvmm;

/** Which implementation of the driver entry points is running. */
public enum DriverKind {
    /** The NVIDIA driver, {@code libcuda.so.1}, opened at run time. */
    CUDA,
    /** cuvmm's strict host driver over POSIX shared memory (memfd + mmap); no GPU involved. */
    HOST
}
