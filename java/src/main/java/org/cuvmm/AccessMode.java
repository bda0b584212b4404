package org.cuvmm;

/** {@code CUmemAccess_flags}: what a device may do with a mapping. */
public enum AccessMode {
    /** Reads and writes ({@code CU_MEM_ACCESS_FLAGS_PROT_READWRITE}). */
    READ_WRITE(3),
    /** Reads only ({@code CU_MEM_ACCESS_FLAGS_PROT_READ}): copies and fills into the memory are refused. */
    READ(1),
    /** No access ({@code CU_MEM_ACCESS_FLAGS_PROT_NONE}). */
    NONE(0);

    final int cuValue;

    AccessMode(int cuValue) { this.cuValue = cuValue; }
}
