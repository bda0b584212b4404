package org.cuvmm;

/**
 * What the driver reports about one device. Immutable; obtained from {@link Driver#device(int)}.
 * On the host driver the "device" is simulated in host memory and says so in its name.
 */
public final class Device {
    private final int ordinal;
    private final String name;
    private final long totalMemory;
    private final boolean virtualMemoryManagement;
    private final boolean posixFileDescriptorHandles;
    private final boolean gpuDirectRdma;
    private final boolean fabricHandles;
    private final boolean hostVirtualMemory;
    private final boolean hostNumaVirtualMemory;
    private final int computeCapabilityMajor;
    private final int computeCapabilityMinor;

    Device(int ordinal, String name, long totalMemory, boolean virtualMemoryManagement,
           boolean posixFileDescriptorHandles, boolean gpuDirectRdma, boolean fabricHandles,
           boolean hostVirtualMemory, boolean hostNumaVirtualMemory, int computeCapabilityMajor,
           int computeCapabilityMinor) {
        this.ordinal = ordinal;
        this.name = name;
        this.totalMemory = totalMemory;
        this.virtualMemoryManagement = virtualMemoryManagement;
        this.posixFileDescriptorHandles = posixFileDescriptorHandles;
        this.gpuDirectRdma = gpuDirectRdma;
        this.fabricHandles = fabricHandles;
        this.hostVirtualMemory = hostVirtualMemory;
        this.hostNumaVirtualMemory = hostNumaVirtualMemory;
        this.computeCapabilityMajor = computeCapabilityMajor;
        this.computeCapabilityMinor = computeCapabilityMinor;
    }

    public int ordinal() { return ordinal; }
    public String name() { return name; }
    /**
     * Device memory in bytes. Host driver: the machine's physical memory, or this process's
     * memory cgroup limit where that is smaller; every device and the host location share it
     * (their allocations together may not exceed it).
     */
    public long totalMemory() { return totalMemory; }
    /** {@code cuMemCreate}/{@code cuMemMap} are available. */
    public boolean supportsVirtualMemoryManagement() { return virtualMemoryManagement; }
    /** Allocations can be exported as POSIX file descriptors (needed for sharing). */
    public boolean supportsPosixFileDescriptorHandles() { return posixFileDescriptorHandles; }
    public boolean supportsGpuDirectRdma() { return gpuDirectRdma; }
    public boolean supportsFabricHandles() { return fabricHandles; }
    /** Host-located VMM allocations ({@link LocationType#HOST}) are available. */
    public boolean supportsHostVirtualMemory() { return hostVirtualMemory; }
    /** Host NUMA-located VMM allocations ({@link LocationType#HOST_NUMA}) are available. */
    public boolean supportsHostNumaVirtualMemory() { return hostNumaVirtualMemory; }
    /** Handle types allocations on this device can be created with: NONE always, then what it supports. */
    public java.util.Set<HandleType> supportedHandleTypes() {
        java.util.Set<HandleType> types = java.util.EnumSet.of(HandleType.NONE);
        if (posixFileDescriptorHandles) types.add(HandleType.POSIX_FD);
        if (fabricHandles) types.add(HandleType.FABRIC);
        return java.util.Collections.unmodifiableSet(types);
    }

    public int computeCapabilityMajor() { return computeCapabilityMajor; }
    public int computeCapabilityMinor() { return computeCapabilityMinor; }

    @Override
    public String toString() {
        return "Device[" + ordinal + ": " + name + ", " + totalMemory + " bytes, vmm=" + virtualMemoryManagement
                + ", posixFd=" + posixFileDescriptorHandles + ", rdma=" + gpuDirectRdma + ", fabric=" + fabricHandles
                + ", hostVmm=" + hostVirtualMemory + ", hostNumaVmm=" + hostNumaVirtualMemory + ", sm="
                + computeCapabilityMajor + "." + computeCapabilityMinor + "]";
    }
}
