package org.cuvmm.cli;

import java.io.PrintStream;
import java.util.List;

/**
 * One subcommand of {@code cuvmm}. Output goes to {@code out}, problems to {@code err}; the
 * returned value is the process exit status ({@link #OK}, {@link #FAILED}, {@link #USAGE}).
 * Commands never call {@code System.exit}, so tests run them in-process.
 */
public interface Command {
    /** Everything worked and every check passed. */
    int OK = 0;
    /** The command ran but something failed: a verification, a driver call. */
    int FAILED = 1;
    /**
     * The command line was wrong (nothing was run), or the command cannot run in this
     * installation (bench outside a source tree). A server that cannot be reached is a
     * failure ({@link #FAILED}), not this.
     */
    int USAGE = 2;

    /** The word typed after {@code cuvmm}. */
    String name();

    /** One line for {@code cuvmm help}. */
    String summary();

    /** Runs with the arguments that follow the command's name. */
    int run(List<String> args, PrintStream out, PrintStream err);
}
