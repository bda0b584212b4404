package org.cuvmm.testing;

import org.junit.jupiter.api.extension.BeforeAllCallback;
import org.junit.jupiter.api.extension.ExtensionContext;

/**
 * Before each test class: {@link LiveObjects#settle()}, so that no class starts with an
 * earlier class's views still waiting for the collector. Registered for every test class of
 * the core and of vmm-ipc by JUnit's extension autodetection ({@code junit-platform.properties}
 * and {@code META-INF/services/org.junit.jupiter.api.extension.Extension} in each module's
 * test resources). The core's test-jar leaves both files out, so examples and cli, which use
 * it, do not run it (their tests make no exact count comparison).
 */
public final class SettleLiveObjectsExtension implements BeforeAllCallback {
    @Override
    public void beforeAll(ExtensionContext context) {
        LiveObjects.settle();
    }
}
