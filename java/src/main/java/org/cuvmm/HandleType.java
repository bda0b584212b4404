package org.cuvmm;

/** {@code CUmemAllocationHandleType}: how allocations may be exported to other processes. */
public enum HandleType {
    /** Not exportable. */
    NONE(0),
    /** Exported as one POSIX file descriptor per allocation (sent with {@code SCM_RIGHTS}). */
    POSIX_FD(1),
    /** Exported as a fabric handle (multi-node NVLink systems). */
    FABRIC(8);

    final int cuValue;

    HandleType(int cuValue) { this.cuValue = cuValue; }
}
