package org.cuvmm.cli;

import java.io.PrintStream;
import java.util.Arrays;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;

/**
 * The {@code cuvmm} command: picks the subcommand named by the first argument and runs it.
 * {@link #run} returns the exit status instead of exiting, for tests.
 */
public final class Main {
    private Main() {}

    public static void main(String[] args) {
        System.exit(run(args, System.out, System.err));
    }

    /** Runs {@code cuvmm args...} and returns its exit status. */
    public static int run(String[] args, PrintStream out, PrintStream err) {
        Map<String, Command> commands = commands();
        if (args.length == 0) {
            commands.get("help").run(List.of(), out, err);
            return Command.USAGE;
        }
        String name = args[0];
        if (name.equals("-h") || name.equals("--help")) name = "help";
        Command command = commands.get(name);
        if (command == null) {
            err.println("cuvmm: unknown command '" + args[0] + "' (expected one of: "
                    + String.join(", ", commands.keySet()) + "; 'cuvmm help' lists them)");
            return Command.USAGE;
        }
        List<String> rest = Arrays.asList(args).subList(1, args.length);
        // `cuvmm <command> --help`: the command's usage line (bench prints its suites itself).
        if (rest.size() == 1 && (rest.get(0).equals("--help") || rest.get(0).equals("-h"))
                && !command.name().equals("bench")) {
            out.println("cuvmm " + command.name() + ": " + command.summary());
            return Command.OK;
        }
        try {
            return command.run(rest, out, err);
        } catch (RuntimeException | LinkageError e) {
            // A LinkageError here is almost always the native library failing to load.
            err.println("cuvmm " + name + ": failed: " + e);
            return Command.FAILED;
        }
    }

    /** Every subcommand, in the order help lists them. */
    static Map<String, Command> commands() {
        Map<String, Command> m = new LinkedHashMap<>();
        add(m, new InfoCommand());
        add(m, new DemoCommand());
        add(m, new ServeCommand());
        add(m, new AttachCommand());
        add(m, new BenchCommand());
        add(m, new HelpCommand(m));
        return m;
    }

    private static void add(Map<String, Command> m, Command c) {
        m.put(c.name(), c);
    }
}
