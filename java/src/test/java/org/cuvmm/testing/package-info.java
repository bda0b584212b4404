/**
 * Test helpers shared by every module's tests (published in the core's test jar, which
 * vmm-ipc and the examples use with {@code <type>test-jar</type>}): open fds, the driver's
 * live objects, child JVMs, test data. One place, so that "nothing leaked" means the same in
 * every module.
 */
package org.cuvmm.testing;
