package org.cuvmm.cli;

import java.io.PrintStream;
import java.util.List;
import java.util.Map;

/** {@code cuvmm help}: what each command does and what the exit statuses mean. */
final class HelpCommand implements Command {
    private final Map<String, Command> commands;

    HelpCommand(Map<String, Command> commands) {
        this.commands = commands;
    }

    @Override
    public String name() { return "help"; }

    @Override
    public String summary() { return "show this help"; }

    @Override
    public int run(List<String> args, PrintStream out, PrintStream err) {
        if (args.size() == 1 && commands.containsKey(args.get(0))) { // cuvmm help <command>
            Command c = commands.get(args.get(0));
            out.println("cuvmm " + c.name() + ": " + c.summary());
            return OK;
        }
        if (!args.isEmpty()) {
            err.println("cuvmm help: unexpected argument(s) " + args + " (expected: nothing, or one command of: "
                    + String.join(", ", commands.keySet()) + ")");
            return USAGE;
        }
        out.println("usage: cuvmm <command>   (cuvmm <command> --help, or cuvmm help <command>: its options)");
        out.println();
        out.println("CUDA Virtual Memory Management for Java: reserve, create, map, grow and share GPU memory.");
        out.println();
        out.println("commands:");
        for (Command c : commands.values()) out.printf("  %-8s %s%n", c.name(), c.summary());
        out.println();
        out.println("driver selection (system property, else environment variable):");
        out.println("  cuvmm.driver / CUVMM_DRIVER              auto (default), cuda or host");
        out.println("  cuvmm.host.devices / CUVMM_HOST_DEVICES  devices the host driver presents (1 to 8)");
        out.println("  cuvmm.host.granularity / CUVMM_HOST_GRANULARITY");
        out.println("                                           host driver granularity in bytes, a power of two,");
        out.println("                                           at least 4096");
        out.println("                                           (default 2097152, like a GPU)");
        out.println("  cuvmm.cuda.library / CUVMM_CUDA_LIBRARY  the library the cuda driver dlopens (default libcuda.so.1)");
        out.println("  cuvmm.host.streamDelayMicros / CUVMM_HOST_STREAM_DELAY_MICROS");
        out.println("                                           host driver: microseconds each queued stream op");
        out.println("                                           waits before it runs (0, default; tests of ordering);");
        out.println("                                           any delay also stops small copies on an idle stream");
        out.println("                                           from running at once on the calling thread");
        out.println("  pass properties through JAVA_OPTS with ./cuvmm, for example JAVA_OPTS=-Dcuvmm.driver=host");
        out.println();
        out.println("exit status: 0 success;");
        out.println("             1 a failure while running: a check, a driver call, a socket or server (attach to a");
        out.println("               path where no server listens, a file that is no socket, a server's refusal);");
        out.println("             2 a usage error (an unknown command or option, a bad value: nothing was run), or a");
        out.println("               command this installation cannot run (bench outside a cuvmm source tree);");
        out.println("             serve, attach or demo stopped by Ctrl-C or SIGTERM: 130 or 143 (serve and demo remove");
        out.println("             their socket files first, waiting a bounded time for that)");
        return OK;
    }
}
