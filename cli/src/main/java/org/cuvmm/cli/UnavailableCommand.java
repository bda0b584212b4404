package org.cuvmm.cli;

import java.io.PrintStream;
import java.util.List;

/** A command that is planned but not in this version: says so and exits with {@link #USAGE}. */
final class UnavailableCommand implements Command {
    private final String name;
    private final String purpose;

    UnavailableCommand(String name, String purpose) {
        this.name = name;
        this.purpose = purpose;
    }

    @Override
    public String name() { return name; }

    @Override
    public String summary() { return purpose + " (not available yet in this version)"; }

    @Override
    public int run(List<String> args, PrintStream out, PrintStream err) {
        err.println("cuvmm " + name + ": not available yet in this version (" + purpose + "); "
                + "'cuvmm help' lists what is");
        return USAGE;
    }
}
