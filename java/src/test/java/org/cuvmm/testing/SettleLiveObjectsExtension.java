package org.cuvmm.testing;

import org.junit.jupiter.api.extension.BeforeAllCallback;
import org.junit.jupiter.api.extension.ExtensionContext;

/**
 * Before each test class: {@link LiveObjects#settle()}, so that no class starts with an
 * earlier class's views still waiting for the collector. Registered for every test class by
 * JUnit's extension autodetection ({@code junit-platform.properties} and
 * {@code META-INF/services/org.junit.jupiter.api.extension.Extension} in the test resources;
 * the core's test-jar carries the service file, so a module that shares these tests turns
 * autodetection on in its own properties).
 */
public final class SettleLiveObjectsExtension implements BeforeAllCallback {
    @Override
    public void beforeAll(ExtensionContext context) {
        LiveObjects.settle();
    }
}
