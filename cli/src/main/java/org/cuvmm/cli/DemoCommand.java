package org.cuvmm.cli;

import java.io.PrintStream;
import java.util.List;

import org.cuvmm.CudaException;
import org.cuvmm.Device;
import org.cuvmm.Driver;
import org.cuvmm.DriverKind;
import org.cuvmm.cli.demo.DemoPart;
import org.cuvmm.cli.demo.DemoRun;
import org.cuvmm.cli.demo.GrowDemo;
import org.cuvmm.cli.demo.ShareDemo;
import org.cuvmm.cli.demo.StepTable;

/**
 * {@code cuvmm demo}: runs each {@link DemoPart} (the single-process grow demo, then the
 * cross-process share demo, which serves a buffer to a second JVM running {@code cuvmm
 * attach}), prints their steps as one table, and exits 1 when any byte or check failed.
 * Stopped by Ctrl-C or SIGTERM, the share demo stops its attach process and removes its
 * temporary directory before the JVM exits ({@link ShareDemo}).
 */
final class DemoCommand implements Command {
    private static final int DEVICE = 0;

    @Override
    public String name() { return "demo"; }

    @Override
    public String summary() {
        return "allocate, grow in place, force a move; verify every byte and print the steps";
    }

    @Override
    public int run(List<String> args, PrintStream out, PrintStream err) {
        if (!args.isEmpty()) {
            err.println("cuvmm demo: unexpected argument '" + args.get(0) + "' (demo takes none)");
            return USAGE;
        }
        Driver driver;
        try {
            driver = Driver.get();
        } catch (CudaException | IllegalArgumentException e) {
            err.println("cuvmm demo: no driver: " + e.getMessage());
            return FAILED;
        }
        List<DemoPart> parts = List.of(new GrowDemo(DEVICE), new ShareDemo(DEVICE));
        Device device = driver.device(DEVICE);

        out.println("cuvmm demo on the " + driverLine(driver) + ", device " + DEVICE + ": " + device.name());
        DemoRun run = new DemoRun();
        for (DemoPart part : parts) {
            out.println("part: " + part.title());
            part.run(run);
        }
        out.println();
        StepTable.print(run.steps(), out);
        out.println();
        for (String note : run.notes()) out.println("note: " + note);
        out.println("note: each time is one call (after a short untimed warm-up), not a benchmark.");
        if (driver.kind() == DriverKind.HOST) {
            out.println("note: these ran on cuvmm's host driver (memfd/mmap in host memory), not on a GPU: the times "
                    + "are not GPU results.");
        } else if (driver.isHostLibrary()) {
            out.println("note: these ran on the cuda driver API over cuvmm's host library (no GPU): the times are not "
                    + "GPU results.");
        }
        if (run.succeeded()) {
            out.println("result: OK: every byte verified at every step, nothing left alive");
            return OK;
        }
        out.println("result: FAILED: " + run.failures() + " check(s) failed (see above)");
        return FAILED;
    }

    private static String driverLine(Driver driver) {
        if (driver.kind() != DriverKind.CUDA) return "host driver (simulation; no GPU)";
        return driver.isHostLibrary()
                ? "cuda driver " + driver.versionString() + " over cuvmm's host library (no GPU)"
                : "cuda driver " + driver.versionString();
    }
}
