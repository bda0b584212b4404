package org.cuvmm;

/** {@code CUmemAllocationGranularity_flags}: which granularity sizes are rounded to. */
public enum GranularityKind {
    MINIMUM(0),
    RECOMMENDED(1);

    final int cuValue;

    GranularityKind(int cuValue) { this.cuValue = cuValue; }
}
