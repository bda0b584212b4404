package org.cuvmm.ipc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.File;
import java.nio.file.Path;
import java.util.List;
import java.util.concurrent.TimeUnit;

import org.junit.jupiter.api.Test;

/**
 * A server at its open-file limit answers an ATTACH it cannot export with ERROR INTERNAL, in
 * a JVM whose class path is the test's class directories (ChildMain "exportAtLimit"): the
 * classes of the error path are loaded before they are needed, not when an fd is needed to
 * read them.
 */
class ExportAtLimitTest {
    @Test
    void anExportRefusedAtTheFdLimitIsAnsweredNotDropped() throws Exception {
        Path sock = IpcTestSupport.socketPath();
        File log = File.createTempFile("cuvmm-export-limit", ".log");
        try {
            Process child = IpcTestSupport.startChild(ChildMain.class, log, List.of(), List.of(), "exportAtLimit",
                    sock.toString());
            assertTrue(child.waitFor(60, TimeUnit.SECONDS), "child finished:\n" + IpcTestSupport.read(log));
            String out = IpcTestSupport.read(log);
            assertEquals(0, child.exitValue(), out);
            assertTrue(out.contains("REFUSED INTERNAL: server: cannot export 'b'"), out);
            assertTrue(out.contains("attached again below the limit"), out);
        } finally {
            log.delete();
            IpcTestSupport.deleteTree(sock.getParent());
        }
    }
}
