package org.cuvmm;

/** {@code CUmemAccess_flags}: what a device may do with a mapping. */
public enum AccessMode {
    READ_WRITE(3),
    READ(1),
    NONE(0);

    final int cuValue;

    AccessMode(int cuValue) { this.cuValue = cuValue; }
}
