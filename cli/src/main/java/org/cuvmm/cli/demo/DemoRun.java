package org.cuvmm.cli.demo;

import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

/** What the demo's parts did: the steps of the table, notes printed under it, failures. */
public final class DemoRun {
    private final List<DemoStep> steps = new ArrayList<>();
    private final List<String> notes = new ArrayList<>();
    private int failures;

    public void step(DemoStep step) {
        steps.add(step);
        if (!step.ok()) failures++;
    }

    /** Something worth saying that is not a failure, such as an outcome other than the one wanted. */
    public void note(String note) { notes.add(note); }

    /** A failure that is not a step's check, such as a part stopped by an exception. */
    public void fail(String why) {
        notes.add("FAILED: " + why);
        failures++;
    }

    public List<DemoStep> steps() { return Collections.unmodifiableList(steps); }

    public List<String> notes() { return Collections.unmodifiableList(notes); }

    public int failures() { return failures; }

    public boolean succeeded() { return failures == 0; }
}
