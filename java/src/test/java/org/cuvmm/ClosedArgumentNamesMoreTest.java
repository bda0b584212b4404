package org.cuvmm;

import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import org.junit.jupiter.api.Test;

/**
 * The rule ArgumentMessagesTest holds for streams, pinned buffers, buffers and events passed to
 * another object's method ("argument: value is closed (expected: an open one; ...)", while a
 * closed receiver keeps its own "X is closed" message), for the two calls it missed:
 * {@link Stream#record(Event)}, which went through {@link Event#record(Stream)} and so named its
 * closed receiver as the argument "stream" and a closed event as no argument at all, and
 * {@link VirtualMemoryResource#importBuffer(BufferDescriptor)} of a closed (or taken)
 * descriptor, which named neither the argument nor what to do.
 */
class ClosedArgumentNamesMoreTest {
    @Test
    void streamRecordNamesAClosedEventAndKeepsItsOwnClosedMessage() {
        try (Stream open = Stream.create(0)) {
            Event closedEvent = Event.create(0);
            closedEvent.close();
            IllegalStateException e = assertThrows(IllegalStateException.class, () -> open.record(closedEvent));
            assertTrue(e.getMessage().startsWith("event: " + closedEvent + " is closed (expected: an open one;"),
                    e.getMessage());

            Stream closed = Stream.create(0);
            closed.close();
            try (Event event = Event.create(0)) {
                e = assertThrows(IllegalStateException.class, () -> closed.record(event));
                assertTrue(e.getMessage().startsWith(closed + " is closed; it cannot be used after close()"),
                        "the receiver's own message, not an argument's: " + e.getMessage());
                assertTrue(event.isDone(), "nothing was recorded");
            }
        }
    }

    @Test
    void streamRecordOfAnotherDevicesEventNamesTheEvent() {
        org.junit.jupiter.api.Assumptions.assumeTrue(Driver.get().deviceCount() >= 2, "needs two devices");
        try (Event e = Event.create(0); Stream s1 = Stream.create(1)) {
            IllegalArgumentException x = assertThrows(IllegalArgumentException.class, () -> s1.record(e));
            assertTrue(x.getMessage().startsWith("event: " + e + " (expected: an event of device 1"), x.getMessage());
        }
    }

    @Test
    void importBufferNamesAClosedOrTakenDescriptor() {
        try (VirtualMemoryResource r = VirtualMemoryResource.create(0);
             VirtualMemoryBuffer b = r.allocate(r.granularity())) {
            BufferDescriptor closed = b.exportDescriptor();
            closed.close();
            IllegalStateException e = assertThrows(IllegalStateException.class, () -> r.importBuffer(closed));
            assertTrue(e.getMessage().startsWith("descriptor: " + closed + " is closed"), e.getMessage());
            assertTrue(e.getMessage().contains("(expected: an open descriptor;"), e.getMessage());

            BufferDescriptor taken = b.exportDescriptor();
            int[] fds = taken.takeFds();
            try {
                e = assertThrows(IllegalStateException.class, () -> r.importBuffer(taken, () -> { }));
                assertTrue(e.getMessage().startsWith("descriptor: " + taken + ": its fds were handed to the caller "
                        + "by takeFds()"), e.getMessage());
                assertTrue(e.getMessage().contains("(expected: an open descriptor;"), e.getMessage());
            } finally {
                BufferDescriptor.adoptFds(fds, taken.sizes(), taken.handleType(), taken.size()).close();
            }
            // The descriptor's own methods keep their own words.
            e = assertThrows(IllegalStateException.class, closed::fds);
            assertFalse(e.getMessage().startsWith("descriptor: "), e.getMessage());
        }
    }
}
