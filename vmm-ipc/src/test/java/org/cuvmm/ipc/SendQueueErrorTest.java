package org.cuvmm.ipc;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.concurrent.atomic.AtomicInteger;

import org.junit.jupiter.api.Test;

/**
 * An Error thrown on the direct write path (here by the afterTake hook; in life by onSent, or
 * an OutOfMemoryError) kills the queue and gives the writer token back, as an exception does: a
 * review found the token kept, and every later put waiting on a queue nobody would send.
 */
class SendQueueErrorTest {
    @Test
    void anErrorOnTheDirectPathKillsTheQueueAndLaterPutsReturn() throws Exception {
        FdSocket[] p = FdSocket.pair();
        SendQueue q = new SendQueue(p[0], 4, "error-on-direct-send");
        try {
            q.start();
            IpcTestSupport.await("the writer parks", 10, () -> q.writerState() == Thread.State.WAITING);
            q.afterTake = () -> {
                throw new AssertionError("thrown by the hook");
            };
            AtomicInteger released = new AtomicInteger();
            AssertionError e = assertThrows(AssertionError.class,
                    () -> q.put(new SendQueue.Item(new byte[16], null, released::incrementAndGet)));
            assertEquals("thrown by the hook", e.getMessage());
            q.afterTake = null;
            assertEquals(1, released.get(), "the item was released once");
            assertTrue(q.isDead(), "the queue died");
            Thread later = new Thread(() -> {
                for (int i = 0; i < 10; i++) q.put(new SendQueue.Item(new byte[16], null, released::incrementAndGet));
            });
            later.start();
            later.join(5000);
            assertFalse(later.isAlive(), "later puts returned (refused) instead of waiting for room");
            assertEquals(11, released.get(), "each refused item was released");
        } finally {
            q.finish();
            p[1].close();
        }
    }
}
