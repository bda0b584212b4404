package org.cuvmm;

/** {@code CUmemAllocationType}. */
public enum AllocationType {
    /** Pinned (non-migratable) memory: {@code CU_MEM_ALLOCATION_TYPE_PINNED}. */
    PINNED(1),
    /** Managed memory where the driver allows it: {@code CU_MEM_ALLOCATION_TYPE_MANAGED}. */
    MANAGED(2);

    final int cuValue;

    AllocationType(int cuValue) { this.cuValue = cuValue; }
}
