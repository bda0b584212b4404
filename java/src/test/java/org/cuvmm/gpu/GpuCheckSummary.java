package org.cuvmm.gpu;

import java.io.IOException;
import java.nio.charset.StandardCharsets;
import java.nio.file.DirectoryStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

import javax.xml.parsers.DocumentBuilderFactory;

import org.w3c.dom.Document;
import org.w3c.dom.Element;
import org.w3c.dom.Node;
import org.w3c.dom.NodeList;

/**
 * Last step of {@code scripts/gpu-check}'s run: reads the JUnit console launcher's legacy
 * XML reports and the facts {@link GpuCheckPreflight} wrote, and prints which tests ran on
 * which driver (the real NVIDIA driver, the cuda driver over cuvmm's host library, or the host
 * driver: only the first is a GPU), which failed, and which were
 * skipped and why, then "What the driver did": the lines {@link DriverObservationsTest}
 * recorded, and "not observed: why" for each of its audit entries whose test skipped, failed
 * or did not run. Arguments: reports folder, preflight facts file, launcher exit status,
 * observations file (optional; default {@code observations.txt} in the reports folder).
 * The launcher exit status is either one number (one run, its reports in the reports folder)
 * or one {@code module=status} per module, comma-separated (run.sh: {@code java=0,vmm-ipc=0}),
 * each module's reports in the reports folder's subfolder of that name; the summary then says
 * per module what ran, failed and skipped.
 *
 * <p>Exit status: 0 when every test that ran passed, every launcher succeeded, every module
 * has results, and (on cuda) at least one gpu-tagged test ran; 1 otherwise.
 */
public final class GpuCheckSummary {
    private GpuCheckSummary() {}

    private static final class Result {
        final String module;
        final String className;
        final String name;
        final String status; // passed, failed, skipped
        final String detail;
        final double seconds;

        Result(String module, String className, String name, String status, String detail, double seconds) {
            this.module = module;
            this.className = className;
            this.name = name;
            this.status = status;
            this.detail = detail;
            this.seconds = seconds;
        }

        boolean gpu() { return className.startsWith("org.cuvmm.gpu."); }

        String label() {
            String simple = className.substring(className.lastIndexOf('.') + 1);
            return (module.isEmpty() ? "" : String.format(Locale.ROOT, "%-8s ", module))
                    + (gpu() ? "[gpu] " : "      ") + simple + "." + name;
        }
    }

    public static void main(String[] args) throws Exception {
        Path reports = Path.of(args[0]);
        Map<String, List<String>> facts = readFacts(Path.of(args[1]));
        Map<String, Integer> launchers = launcherStatuses(args.length > 2 ? args[2] : "0");
        int launcherStatus = launchers.values().stream().filter(v -> v != 0).findFirst().orElse(0);
        Path observations = args.length > 3 ? Path.of(args[3]) : reports.resolve("observations.txt");
        List<Result> results = new ArrayList<>();
        for (String module : launchers.keySet()) {
            Path dir = module.isEmpty() ? reports : reports.resolve(module);
            if (!Files.isDirectory(dir)) continue;
            try (DirectoryStream<Path> files = Files.newDirectoryStream(dir, "TEST-*.xml")) {
                for (Path f : files) results.addAll(parse(module, f));
            }
        }
        String driver = first(facts, "driver", "unknown");
        boolean cuda = driver.equals("CUDA");
        boolean hostLibrary = cuda && overHostLibrary(facts);
        String where = where(facts);

        List<String> moduleOrder = new ArrayList<>(launchers.keySet());
        results.sort(java.util.Comparator.comparing((Result r) -> moduleOrder.indexOf(r.module))
                .thenComparing(r -> !r.gpu()).thenComparing(r -> r.className)
                .thenComparing(r -> r.name));
        List<Result> passed = new ArrayList<>();
        List<Result> failed = new ArrayList<>();
        List<Result> skipped = new ArrayList<>();
        for (Result r : results) {
            (r.status.equals("passed") ? passed : r.status.equals("failed") ? failed : skipped).add(r);
        }
        long gpuRan = results.stream().filter(r -> r.gpu() && !r.status.equals("skipped")).count();

        StringBuilder out = new StringBuilder();
        out.append("\n==================== gpu-check summary ====================\n");
        out.append("driver:   ").append(driverLine(facts)).append('\n');
        out.append("why:      ").append(first(facts, "reason", "")).append('\n');
        for (String d : facts.getOrDefault("device", List.of())) out.append("device:   ").append(d).append('\n');
        if (facts.containsKey("presets")) out.append("presets:  ").append(first(facts, "presets", "")).append('\n');
        out.append('\n');
        out.append("Ran on ").append(where).append(": ").append(passed.size() + failed.size()).append(" test(s), ")
                .append(gpuRan).append(" of them gpu-tagged\n");
        for (Result r : passed) out.append(String.format(Locale.ROOT, "  PASS  %-90s %7.3f s%n", r.label(), r.seconds));
        for (Result r : failed) {
            out.append(String.format(Locale.ROOT, "  FAIL  %-90s %7.3f s%n", r.label(), r.seconds));
            out.append("        ").append(r.detail).append('\n');
        }
        out.append('\n').append("Skipped (did not run), with the reason:\n");
        if (skipped.isEmpty()) out.append("  none\n");
        for (Result r : skipped) out.append("  SKIP  ").append(r.label()).append("\n        ").append(r.detail).append('\n');
        out.append('\n');
        out.append(driverObservations(observations, results));
        out.append('\n');
        if (!cuda) {
            out.append("NOTE: no test ran on the NVIDIA driver in this run");
            out.append(driver.equals("HOST") ? " (host driver selected; gpu-tagged tests skip).\n" : ".\n");
        } else if (hostLibrary) {
            out.append("NOTE: no test ran on a GPU in this run: the cuda driver loaded cuvmm's host library (the CUDA "
                    + "driver API over the host driver). It proves the cuda code path, not device behaviour.\n");
        }
        boolean modulesHaveResults = true;
        for (Map.Entry<String, Integer> l : launchers.entrySet()) {
            String module = l.getKey();
            boolean moduleFailed = results.stream().anyMatch(r -> r.module.equals(module) && r.status.equals("failed"));
            if (l.getValue() != 0 && !moduleFailed) {
                out.append("NOTE: the JUnit console launcher").append(module.isEmpty() ? "" : " of module " + module)
                        .append(" exited with ").append(l.getValue())
                        .append(" (see its output above: a container or the engine may have failed).\n");
            }
            if (results.stream().noneMatch(r -> r.module.equals(module))) {
                modulesHaveResults = false;
                out.append("NOTE: no test results were found in ")
                        .append(module.isEmpty() ? reports : reports.resolve(module)).append('\n');
            }
        }
        if (!launchers.containsKey("")) {
            out.append("Per module (soak-tagged tests left out):\n");
            for (Map.Entry<String, Integer> l : launchers.entrySet()) {
                out.append("  ").append(moduleLine(l.getKey(), results.stream().filter(r -> r.module.equals(l.getKey()))
                        .map(r -> r.status + (r.gpu() ? " gpu" : "")).toList(), l.getValue())).append('\n');
            }
        }
        out.append(String.format(Locale.ROOT, "gpu-check (%s driver): %d passed, %d failed, %d skipped%n",
                driver.toLowerCase(Locale.ROOT), passed.size(), failed.size(), skipped.size()));
        System.out.print(out);
        System.out.flush();

        boolean ok = failed.isEmpty() && launcherStatus == 0 && !results.isEmpty() && modulesHaveResults
                && (!cuda || gpuRan > 0);
        if (cuda && gpuRan == 0) System.out.println("gpu-check: FAILED: the cuda driver ran but no gpu-tagged test ran");
        System.exit(ok ? 0 : 1);
    }

    /**
     * The "What the driver did" section: each recorded observation line as written, then, for
     * each audit entry of {@link DriverObservationsTest} with no line, why (its test's skip
     * reason or failure, else "no result").
     */
    static String driverObservations(Path file, List<Result> results) throws IOException {
        List<String> lines = Files.exists(file) ? Files.readAllLines(file, StandardCharsets.UTF_8) : List.of();
        Map<String, String> why = new LinkedHashMap<>();
        for (Result r : results) {
            if (!r.className.endsWith("." + DriverObservationLog.TEST_CLASS)) continue;
            java.util.regex.Matcher m = java.util.regex.Pattern.compile("^([ab][0-9]+)").matcher(r.name);
            if (!m.find()) continue;
            String entry = m.group(1).toUpperCase(Locale.ROOT);
            if (r.status.equals("skipped")) why.put(entry, r.detail);
            if (r.status.equals("failed")) why.put(entry, "its test failed: " + r.detail);
        }
        StringBuilder out = new StringBuilder(
                "What the driver did (DriverObservationsTest: the audit's first-GPU-run entries):\n");
        for (String line : lines) if (!line.isBlank()) out.append("  ").append(line).append('\n');
        for (String entry : DriverObservationLog.ENTRIES) {
            boolean seen = lines.stream().anyMatch(l -> l.startsWith(entry + " "));
            if (seen && !why.containsKey(entry)) continue;
            out.append("  ").append(entry).append(seen ? " (partly) not observed: " : " not observed: ")
                    .append(why.getOrDefault(entry, "no result (its test did not run)")).append('\n');
        }
        return out.toString();
    }

    /**
     * The launcher exit status argument: one number (module "", reports in the reports folder
     * itself), or {@code module=status} pairs separated by commas, in the order the modules ran.
     */
    static Map<String, Integer> launcherStatuses(String arg) {
        Map<String, Integer> out = new LinkedHashMap<>();
        String a = arg.trim();
        if (!a.contains("=")) {
            out.put("", Integer.parseInt(a));
            return out;
        }
        for (String part : a.split(",")) {
            if (part.isBlank()) continue;
            int eq = part.indexOf('=');
            if (eq <= 0) throw new IllegalArgumentException("launcher status '" + part + "' is not module=status");
            out.put(part.substring(0, eq).trim(), Integer.parseInt(part.substring(eq + 1).trim()));
        }
        return out;
    }

    /**
     * A module's line in "Per module": {@code statuses} holds one "passed", "failed" or
     * "skipped" per test, followed by " gpu" for a gpu-tagged one.
     */
    static String moduleLine(String module, List<String> statuses, int launcherStatus) {
        long passed = statuses.stream().filter(s -> s.startsWith("passed")).count();
        long failed = statuses.stream().filter(s -> s.startsWith("failed")).count();
        long skipped = statuses.stream().filter(s -> s.startsWith("skipped")).count();
        long gpuRan = statuses.stream().filter(s -> s.endsWith(" gpu") && !s.startsWith("skipped")).count();
        return String.format(Locale.ROOT, "%-8s ran %d test(s) (%d gpu-tagged): %d passed, %d failed, %d skipped; "
                + "launcher exit %d%s", module, passed + failed, gpuRan, passed, failed, skipped, launcherStatus,
                statuses.isEmpty() ? " (NO RESULTS)" : "");
    }

    /**
     * Whether the preflight facts say the cuda driver was cuvmm's host library
     * ({@code hostLibrary=true}, from {@link org.cuvmm.Driver#isHostLibrary()}), or its reason says so.
     */
    static boolean overHostLibrary(Map<String, List<String>> facts) {
        return "true".equals(first(facts, "hostLibrary", "false"))
                || first(facts, "reason", "").contains("cuda driver API over the host library (no GPU)");
    }

    /** The summary's "driver:" line: a GPU only when the NVIDIA driver ran. */
    static String driverLine(Map<String, List<String>> facts) {
        String driver = first(facts, "driver", "unknown");
        if (driver.equals("CUDA")) {
            return overHostLibrary(facts)
                    ? "CUDA over the host library (cuda driver API over the host library (no GPU), "
                            + first(facts, "version", "?") + ": NOT a GPU result)"
                    : "CUDA (real NVIDIA driver, " + first(facts, "version", "?") + ")";
        }
        return driver.equals("HOST") ? "HOST (cuvmm's host driver: memfd/mmap simulation, NO GPU involved)" : driver;
    }

    /** What the tests "Ran on", in the summary's words. */
    static String where(Map<String, List<String>> facts) {
        String driver = first(facts, "driver", "unknown");
        if (!driver.equals("CUDA")) return "the " + driver.toLowerCase(Locale.ROOT) + " driver";
        return overHostLibrary(facts) ? "the cuda driver API over the host library (no GPU)"
                : "the real NVIDIA driver (cuda " + first(facts, "version", "?") + ")";
    }

    private static Map<String, List<String>> readFacts(Path file) throws IOException {
        Map<String, List<String>> facts = new LinkedHashMap<>();
        if (!Files.exists(file)) return facts;
        for (String line : Files.readAllLines(file, StandardCharsets.UTF_8)) {
            int eq = line.indexOf('=');
            if (eq > 0) facts.computeIfAbsent(line.substring(0, eq), k -> new ArrayList<>()).add(line.substring(eq + 1));
        }
        return facts;
    }

    private static String first(Map<String, List<String>> facts, String key, String fallback) {
        List<String> v = facts.get(key);
        return v == null || v.isEmpty() ? fallback : v.get(0);
    }

    private static List<Result> parse(String module, Path file) throws Exception {
        DocumentBuilderFactory f = DocumentBuilderFactory.newInstance();
        f.setExpandEntityReferences(false);
        Document doc = f.newDocumentBuilder().parse(file.toFile());
        NodeList cases = doc.getElementsByTagName("testcase");
        List<Result> out = new ArrayList<>();
        for (int i = 0; i < cases.getLength(); i++) {
            Element c = (Element) cases.item(i);
            String status = "passed";
            String detail = "";
            for (Node n = c.getFirstChild(); n != null; n = n.getNextSibling()) {
                if (!(n instanceof Element)) continue;
                String tag = ((Element) n).getTagName();
                if (tag.equals("failure") || tag.equals("error")) {
                    status = "failed";
                    detail = describe((Element) n);
                    break;
                }
                if (tag.equals("skipped")) {
                    status = "skipped";
                    detail = describe((Element) n);
                }
            }
            double seconds = 0;
            try {
                seconds = Double.parseDouble(c.getAttribute("time"));
            } catch (NumberFormatException e) {
                // keep 0
            }
            out.add(new Result(module, c.getAttribute("classname"), c.getAttribute("name"), status, detail, seconds));
        }
        return out;
    }

    /** The message attribute, else the first meaningful line of the element's text. */
    private static String describe(Element e) {
        String message = e.getAttribute("message");
        if (message.isBlank()) {
            for (String line : e.getTextContent().split("\n")) {
                String t = line.trim();
                if (!t.isEmpty()) {
                    message = t;
                    break;
                }
            }
        }
        message = message.replace('\n', ' ').trim();
        String type = e.getAttribute("type");
        if (!type.isBlank() && !message.startsWith(type)) message = type + ": " + message;
        // A skip's reason is what matters, not the exception that carried it.
        message = message.replaceFirst("^org\\.opentest4j\\.TestAbortedException: (Assumption failed: )?", "");
        return message.length() > 600 ? message.substring(0, 600) + " ..." : message;
    }
}
