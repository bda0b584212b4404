package org.cuvmm.cli.demo;

/**
 * One part of {@code cuvmm demo}. Each part records its steps and notes in the shared
 * {@link DemoRun}; the command prints them as one table. Issue 3's cross-process half is a
 * second part next to {@link GrowDemo}.
 */
public interface DemoPart {
    /** A few words printed above the part's steps. */
    String title();

    /**
     * Runs the part. A failed check is recorded (a step with {@code ok=false} or
     * {@link DemoRun#fail}) and the part carries on where it can; a part closes everything it
     * opened before returning, even when it stops early.
     */
    void run(DemoRun run);
}
