package org.cuvmm.gpu;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;

import org.cuvmm.Device;
import org.cuvmm.Driver;
import org.cuvmm.DriverKind;
import org.cuvmm.VirtualMemoryResource;

/**
 * First step of {@code scripts/gpu-check}'s run: selects the driver the way the suite will
 * (system property {@code cuvmm.driver}, else {@code CUVMM_DRIVER}), prints which one runs
 * and why, and on cuda whether the cross-check binding (JavaCPP CUDA presets) loads. Writes
 * the same facts as {@code key=value} lines to the file named by the first argument, for
 * {@link GpuCheckSummary}.
 *
 * <p>Exit status: 0 when the driver was selected; 3 when it could not be (for example cuda
 * forced on a machine without {@code libcuda.so.1}; the reason is printed); 4 when cuvmm
 * itself could not load.
 */
public final class GpuCheckPreflight {
    private GpuCheckPreflight() {}

    public static void main(String[] args) throws IOException {
        Path info = args.length > 0 ? Path.of(args[0]) : null;
        List<String> facts = new ArrayList<>();
        String mode = System.getProperty("cuvmm.driver", System.getenv().getOrDefault("CUVMM_DRIVER", "auto"));
        facts.add("requested=" + mode);
        System.out.println("gpu-check: driver requested: " + mode);
        int status = 0;
        try {
            Driver d = Driver.get();
            facts.add("driver=" + d.kind());
            facts.add("version=" + d.versionString());
            facts.add("reason=" + oneLine(d.reason()));
            facts.add("hostLibrary=" + d.isHostLibrary());
            System.out.println("gpu-check: driver running: " + d.kind() + " " + d.versionString() + " (" + d.reason() + ")");
            if (d.isHostLibrary()) {
                System.out.println("gpu-check: this is " + d.describe() + ", not the NVIDIA driver: not a GPU result");
            }
            for (Device dev : d.devices()) {
                facts.add("device=" + oneLine(dev.toString()));
                System.out.println("gpu-check:   " + dev);
            }
            try (VirtualMemoryResource r = VirtualMemoryResource.create(0)) {
                facts.add("granularity=" + r.granularity());
                System.out.println("gpu-check:   device 0 recommended granularity: " + r.granularity() + " bytes");
            }
            if (d.kind() == DriverKind.CUDA) {
                String presets;
                try {
                    org.bytedeco.javacpp.Loader.load(org.bytedeco.cuda.global.cudart.class);
                    presets = "loaded";
                } catch (Throwable t) {
                    presets = "failed: " + oneLine(t.toString());
                }
                facts.add("presets=" + presets);
                System.out.println("gpu-check: cross-check binding (JavaCPP CUDA presets): " + presets);
            }
        } catch (LinkageError e) {
            facts.add("driver=NONE");
            facts.add("reason=" + oneLine("cuvmm could not load: " + e));
            System.out.println("gpu-check: cuvmm could not load its native library: " + e);
            status = 4;
        } catch (RuntimeException e) {
            facts.add("driver=NONE");
            facts.add("reason=" + oneLine(e.getMessage() == null ? e.toString() : e.getMessage()));
            System.out.println("gpu-check: the " + mode + " driver could not be loaded: " + e.getMessage());
            status = 3;
        }
        if (info != null) Files.write(info, facts, StandardCharsets.UTF_8);
        System.out.flush();
        System.exit(status);
    }

    private static String oneLine(String s) {
        return s == null ? "" : s.replace('\n', ' ').replace('\r', ' ');
    }
}
