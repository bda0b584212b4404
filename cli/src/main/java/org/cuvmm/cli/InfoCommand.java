package org.cuvmm.cli;

import java.io.IOException;
import java.io.InputStream;
import java.io.PrintStream;
import java.util.ArrayList;
import java.util.List;
import java.util.Locale;
import java.util.Properties;

import org.cuvmm.CudaException;
import org.cuvmm.Device;
import org.cuvmm.Driver;
import org.cuvmm.DriverKind;
import org.cuvmm.GranularityKind;
import org.cuvmm.HandleType;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.VirtualMemoryResourceOptions;

/**
 * {@code cuvmm info}: which driver runs and why, versions, and what each device supports,
 * including the granularities the driver reports (asked by creating a resource with each
 * {@link GranularityKind}, which is how a program would see them).
 */
final class InfoCommand implements Command {
    private static final String KEY = "  %-25s %s%n";
    private static final String DEVICE_KEY = "    %-23s %s%n";

    @Override
    public String name() { return "info"; }

    @Override
    public String summary() { return "which driver runs and why, versions, devices, granularities, handle types"; }

    @Override
    public int run(List<String> args, PrintStream out, PrintStream err) {
        if (!args.isEmpty()) {
            err.println("cuvmm info: unexpected argument '" + args.get(0) + "' (info takes none)");
            return USAGE;
        }
        out.println("cuvmm " + cuvmmVersion());
        out.printf(KEY, "JVM", Runtime.version() + " (" + System.getProperty("java.vm.name") + ", "
                + System.getProperty("java.vendor") + ") on " + System.getProperty("os.name") + " "
                + System.getProperty("os.arch"));
        out.printf(KEY, "driver requested", Driver.requestedMode());

        Driver driver;
        try {
            driver = Driver.get();
        } catch (CudaException | IllegalArgumentException e) {
            out.printf(KEY, "driver", "none: " + e.getMessage());
            return FAILED;
        }
        out.printf(KEY, "driver", describe(driver));
        out.printf(KEY, "why", driver.reason());
        out.printf(KEY, "driver version", driver.versionString() + " (" + driver.version()
                + (driver.kind() == DriverKind.HOST ? "; the host driver reports the CUDA version of the cuda.h it "
                        + "was built with" : "") + ")");
        out.printf(KEY, "devices", driver.deviceCount());

        boolean ok = true;
        for (Device d : driver.devices()) {
            ok &= printDevice(out, driver, d);
        }
        if (driver.kind() == DriverKind.HOST) {
            out.println();
            out.println("The host driver simulates the CUDA VMM API in host memory: buffers are real shared memory,");
            out.println("but nothing here runs on a GPU, and timings taken on it are not GPU results.");
        } else if (driver.isHostLibrary()) {
            out.println();
            out.println("The cuda driver loaded cuvmm's host library, the CUDA driver API over the host driver: it runs");
            out.println("cuvmm's cuda code path, but nothing here runs on a GPU, and timings taken on it are not GPU results.");
        }
        return ok ? OK : FAILED;
    }

    private static boolean printDevice(PrintStream out, Driver driver, Device d) {
        out.println();
        out.printf(KEY, "device " + d.ordinal(), d.name());
        out.printf(DEVICE_KEY, "memory", ByteSize.format(d.totalMemory()) + " (" + d.totalMemory() + " bytes)");
        if (driver.kind() == DriverKind.CUDA) {
            out.printf(DEVICE_KEY, "compute capability", d.computeCapabilityMajor() + "." + d.computeCapabilityMinor());
        }
        out.printf(DEVICE_KEY, "VMM", yesNo(d.supportsVirtualMemoryManagement()));
        out.printf(DEVICE_KEY, "POSIX fd handles", yesNo(d.supportsPosixFileDescriptorHandles()));
        out.printf(DEVICE_KEY, "GPUDirect RDMA", yesNo(d.supportsGpuDirectRdma()));
        out.printf(DEVICE_KEY, "host VMM", yesNo(d.supportsHostVirtualMemory()));
        out.printf(DEVICE_KEY, "host NUMA VMM", yesNo(d.supportsHostNumaVirtualMemory()));
        out.printf(DEVICE_KEY, "fabric handles", yesNo(d.supportsFabricHandles()));
        out.printf(DEVICE_KEY, "handle types", d.supportedHandleTypes().stream().map(Enum::name).collect(java.util.stream.Collectors.joining(", ")));
        if (!d.supportsVirtualMemoryManagement()) {
            out.printf(DEVICE_KEY, "granularity", "n/a: no VMM support");
            return true;
        }
        // Granularity depends on the allocation properties; ask for the ones a default
        // resource uses (pinned device memory), exportable when the device allows it.
        HandleType handle = d.supportsPosixFileDescriptorHandles() ? HandleType.POSIX_FD : HandleType.NONE;
        boolean ok = true;
        for (GranularityKind kind : new GranularityKind[] {GranularityKind.RECOMMENDED, GranularityKind.MINIMUM}) {
            String label = kind.name().toLowerCase(Locale.ROOT) + " granularity";
            VirtualMemoryResourceOptions options = VirtualMemoryResourceOptions.builder()
                    .handleType(handle).granularity(kind).build();
            try (VirtualMemoryResource r = VirtualMemoryResource.create(d.ordinal(), options)) {
                out.printf(DEVICE_KEY, label, ByteSize.format(r.granularity()) + " (" + r.granularity()
                        + " bytes; pinned device memory, handle type " + handle + ")");
            } catch (CudaException | IllegalArgumentException e) {
                out.printf(DEVICE_KEY, label, "unavailable: " + e.getMessage());
                ok = false;
            }
        }
        return ok;
    }

    private static String describe(Driver driver) {
        if (driver.kind() == DriverKind.HOST) return "host (cuvmm's strict simulation over memfd/mmap: no GPU)";
        return driver.isHostLibrary()
                ? "cuda (" + driver.describe() + ": cuvmm's native/hostcuda, not the NVIDIA driver)"
                : "cuda (the NVIDIA driver, libcuda.so.1)";
    }

    private static String yesNo(boolean b) { return b ? "yes" : "no"; }

    private static String cuvmmVersion() {
        try (InputStream in = InfoCommand.class.getResourceAsStream("version.properties")) {
            if (in == null) return "(version unknown)";
            Properties p = new Properties();
            p.load(in);
            return p.getProperty("version", "(version unknown)");
        } catch (IOException e) {
            return "(version unknown: " + e.getMessage() + ")";
        }
    }
}
