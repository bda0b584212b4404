package org.cuvmm.ipc;

import static org.cuvmm.ipc.IpcTestSupport.await;
import static org.cuvmm.ipc.IpcTestSupport.concat;
import static org.cuvmm.ipc.IpcTestSupport.descriptorPayload;
import static org.cuvmm.ipc.IpcTestSupport.header;
import static org.cuvmm.ipc.IpcTestSupport.str;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotNull;
import static org.junit.jupiter.api.Assertions.assertNull;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.file.Path;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CopyOnWriteArrayList;

import jnr.ffi.LibraryLoader;
import org.cuvmm.VirtualMemoryBuffer;
import org.cuvmm.VirtualMemoryResource;
import org.cuvmm.ipc.internal.BytePattern;
import org.junit.jupiter.api.AfterAll;
import org.junit.jupiter.api.AfterEach;
import org.junit.jupiter.api.BeforeAll;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;

/**
 * Independent probe (frame fuzzer), server side: a raw peer sends mutated frames; each case
 * checks the documented reply, that the server still serves another client, and that no fd
 * or connection thread is left behind (the fixture, {@link FuzzServerSupport}).
 */
class ServerFrameFuzzTest extends FuzzServerSupport {
    // ---------------------------------------------------------------- header fields

    @Test
    void headerVersionsOutOfRangeAreBadVersionAndSkipped() throws Exception {
        try (FdSocket s = helloed(1)) {
            for (int v : new int[] {0, 3, 0xFFFF}) {
                s.send(frameV(v, 3, 100 + v % 50, str("b")), null);
                expectError(s, ErrorCode.BAD_VERSION, 100 + v % 50, "protocol version " + v + " (expected: 1)");
            }
            expectAlive(s, 1, 10);
        }
        try (FdSocket s = FdSocket.connect(sock)) {
            s.send(frameV(0, 1, 5, str("x")), null);
            expectError(s, ErrorCode.BAD_VERSION, 5, "protocol version 0 (expected: 1 to 2)");
            s.send(frameV(2, 1, 6, str("x")), null);
            try (Frame f = FrameIO.read(s)) {
                assertEquals(FrameType.HELLO_OK, f.type, "the refused HELLO did not count");
            }
            expectAlive(s, 2, 7);
        }
    }

    @Test
    void typeFieldExtremes() throws Exception {
        try (FdSocket s = helloed(1)) {
            s.send(frame(0, 20, new byte[0]), null);
            expectError(s, ErrorCode.UNKNOWN_TYPE, 20, "frame type 0 (expected: 1 to 8)");
            s.send(frame(0xFFFF, 21, new byte[3]), null);
            expectError(s, ErrorCode.UNKNOWN_TYPE, 21, "frame type 65535 (expected: 1 to 8)");
            for (int t = 9; t <= 11; t++) { // version-2 types on a version-1 connection
                s.send(frame(t, 20 + t, idList(1, 1)), null);
                expectError(s, ErrorCode.UNKNOWN_TYPE, 20 + t, "frame type " + t + " (expected: 1 to 8)");
            }
            expectAlive(s, 1, 40);
        }
        try (FdSocket s = helloed(2)) {
            s.send(frameV(2, 12, 50, new byte[0]), null);
            expectError(s, ErrorCode.UNKNOWN_TYPE, 50, "frame type 12 (expected: 1 to 11)");
            s.send(frameV(2, 10, 51, new byte[4]), null);
            expectError(s, ErrorCode.UNEXPECTED_FRAME, 51, "FORGOTTEN is sent by servers");
            s.send(frameV(2, 11, 52, idList(1, 1)), null);
            expectError(s, ErrorCode.UNEXPECTED_FRAME, 52, "EVICT is sent by servers");
            expectAlive(s, 2, 60);
        }
    }

    @Test
    void lengthExactlyMaxIsTrustedAndOneMoreIsFatal() throws Exception {
        try (FdSocket s = helloed(1)) {
            byte[] p = new byte[Protocol.MAX_PAYLOAD];
            p[0] = (byte) 0xFF; // string length 0xFF?? > remaining? no: 0xFF?? bytes fits; too long for a name
            p[1] = (byte) 0xFF;
            s.send(frame(3, 70, p), null);
            expectError(s, ErrorCode.BAD_PAYLOAD, 70, "ATTACH payload");
            expectAlive(s, 1, 71);
        }
    }

    @Test
    void lengthOffByOne() throws Exception {
        try (FdSocket s = helloed(1)) {
            byte[] name = str("b");
            // one byte short: the last byte of the name is missing
            s.send(concat(header(Protocol.MAGIC, 1, 3, 80, name.length - 1), java.util.Arrays.copyOf(name, name.length - 1)), null);
            expectError(s, ErrorCode.BAD_PAYLOAD, 80, "runs past the payload");
            // one byte long
            s.send(concat(header(Protocol.MAGIC, 1, 3, 81, name.length + 1), name, new byte[] {0}), null);
            expectError(s, ErrorCode.BAD_PAYLOAD, 81, "1 bytes left over");
            expectAlive(s, 1, 82);
        }
    }

    @Test
    void zeroLengthPayloadForEveryClientType() throws Exception {
        try (FdSocket s = helloed(2)) {
            int id = 90;
            for (int t : new int[] {3, 5, 9}) {
                s.send(frameV(2, t, id, new byte[0]), null);
                expectError(s, ErrorCode.BAD_PAYLOAD, id, "ends before its fields");
                id++;
            }
            s.send(frameV(2, 1, id, new byte[0]), null); // second HELLO, empty payload: BAD_PAYLOAD first
            expectError(s, ErrorCode.BAD_PAYLOAD, id, "ends before its fields");
            expectAlive(s, 2, 100);
        }
    }

    // ---------------------------------------------------------------- strings

    @Test
    void badUtf8InEveryString() throws Exception {
        byte[][] bad = {
            {(byte) 0xC0, (byte) 0x80},                   // overlong NUL
            {(byte) 0xED, (byte) 0xA0, (byte) 0x80},      // a UTF-16 surrogate encoded
            {(byte) 0xF4, (byte) 0x90, (byte) 0x80, (byte) 0x80}, // above U+10FFFF
            {(byte) 0xE2, (byte) 0x82},                   // cut short
            {(byte) 0xFF},
        };
        try (FdSocket s = FdSocket.connect(sock)) {
            int id = 110;
            for (byte[] b : bad) {
                s.send(frame(1, id, concat(new byte[] {0, (byte) b.length}, b)), null);
                expectError(s, ErrorCode.BAD_PAYLOAD, id, "client name is not valid UTF-8");
                id++;
            }
            s.send(frame(1, id, str("ok")), null);
            try (Frame f = FrameIO.read(s)) {
                assertEquals(FrameType.HELLO_OK, f.type, "no refused HELLO counted");
            }
            id++;
            for (byte[] b : bad) {
                s.send(frame(3, id, concat(new byte[] {0, (byte) b.length}, b)), null);
                expectError(s, ErrorCode.BAD_PAYLOAD, id, "name is not valid UTF-8");
                id++;
            }
            expectAlive(s, 1, 150);
        }
    }

    @Test
    void multiByteNameAtTheLimitIsANameNotAPayloadError() throws Exception {
        String name = "\u00e9".repeat(127) + "x"; // 255 bytes
        try (FdSocket s = helloed(1)) {
            s.send(frame(3, 160, str(name)), null);
            expectError(s, ErrorCode.UNKNOWN_NAME, 160, "no buffer is published as '" + name + "'");
            s.send(frame(3, 161, str(name + "x")), null);
            expectError(s, ErrorCode.BAD_PAYLOAD, 161, "name is 256 bytes");
            expectAlive(s, 1, 162);
        }
    }

    // ---------------------------------------------------------------- fds

    @Test
    void fdsOfEveryKindOnFramesThatCarryNoneAreClosed() throws Exception {
        int[] fds = strangeFds();
        try (FdSocket s = FdSocket.connect(sock)) {
            s.send(frame(1, 200, str("with fds")), fds); // HELLO with fds: refused, does not count
            expectError(s, ErrorCode.UNEXPECTED_FDS, 200, "HELLO arrived with 5 fds");
            s.send(frame(1, 201, str("clean")), null);
            try (Frame f = FrameIO.read(s)) {
                assertEquals(FrameType.HELLO_OK, f.type, "the refused HELLO did not count: got " + f);
            }
            s.send(frame(3, 202, str("b")), fds);
            expectError(s, ErrorCode.UNEXPECTED_FDS, 202, "ATTACH arrived with 5 fds");
            s.send(frame(5, 203, u64(1)), fds);
            expectError(s, ErrorCode.UNEXPECTED_FDS, 203, "RELEASE arrived with 5 fds");
            s.send(frame(2, 204, new byte[4]), fds);
            expectError(s, ErrorCode.UNEXPECTED_FDS, 204, "HELLO_OK arrived with 5 fds");
            s.send(frame(99, 205, new byte[4]), fds);
            expectError(s, ErrorCode.UNKNOWN_TYPE, 205, "frame type 99");
            s.send(frameV(2, 3, 206, str("b")), fds);
            expectError(s, ErrorCode.BAD_VERSION, 206, "protocol version 2 (expected: 1)");
            s.send(frame(4, 207, descriptorPayload(1, 1, 2 << 20, 2 << 20, 2 << 20, 2 << 20, 2 << 20, 2 << 20)), fds);
            expectError(s, ErrorCode.UNEXPECTED_FRAME, 207, "DESCRIPTOR is sent by servers");
            expectAlive(s, 1, 210);
        }
        for (int fd : fds) LIBC.close(fd);
    }

    @Test
    void forgetOnVersion2WithFds() throws Exception {
        int[] fds = strangeFds();
        try (FdSocket s = helloed(2)) {
            s.send(frameV(2, 9, 220, idList(1, 5)), fds);
            expectError(s, ErrorCode.UNEXPECTED_FDS, 220, "FORGET arrived with 5 fds");
            expectAlive(s, 2, 221);
        }
        for (int fd : fds) LIBC.close(fd);
    }

    @Test
    void moreFdsThanTheFrameSaysOnAClientDescriptorV2() throws Exception {
        int[] fds = strangeFds();
        try (FdSocket s = helloed(2)) {
            ByteBuffer p = ByteBuffer.allocate(24 + 20).putLong(1).putInt(1).putLong(4096).putInt(1)
                    .putLong(4096).putLong(7).putInt(1);
            s.send(frameV(2, 4, 230, p.array()), fds);
            expectError(s, ErrorCode.FD_COUNT_MISMATCH, 230, "1 chunks with the FD flag but arrived with 5 fds");
            expectAlive(s, 2, 231);
        }
        for (int fd : fds) LIBC.close(fd);
    }

    // ---------------------------------------------------------------- byte-by-byte, coalesced

    @Test
    void framesSplitByteByByteWithDelays() throws Exception {
        try (FdSocket s = FdSocket.connect(sock)) {
            byte[] all = concat(frame(1, 1, str("slow")), frame(3, 2, str("b")));
            for (byte b : all) {
                s.send(new byte[] {b}, null);
                Thread.sleep(2);
            }
            try (Frame f = FrameIO.read(s)) {
                assertEquals(FrameType.HELLO_OK, f.type);
            }
            long lease;
            try (Frame f = FrameIO.read(s)) {
                assertEquals(FrameType.DESCRIPTOR, f.type, "got " + f);
                lease = ((Messages.Descriptor) f.message).leaseId();
            }
            byte[] rel = frame(5, 3, u64(lease));
            for (byte b : rel) {
                s.send(new byte[] {b}, null);
                Thread.sleep(2);
            }
            try (Frame f = FrameIO.read(s)) {
                assertEquals(FrameType.RELEASED, f.type);
            }
        }
    }

    @Test
    void fdsOnTheFirstByteOfAFrameSentByteByByte() throws Exception {
        int[] fds = strangeFds();
        try (FdSocket s = helloed(1)) {
            byte[] f = frame(3, 240, str("b"));
            s.send(new byte[] {f[0]}, fds);
            for (int i = 1; i < f.length; i++) {
                s.send(new byte[] {f[i]}, null);
                Thread.sleep(1);
            }
            expectError(s, ErrorCode.UNEXPECTED_FDS, 240, "ATTACH arrived with 5 fds");
            expectAlive(s, 1, 241);
        }
        for (int fd : fds) LIBC.close(fd);
    }

    @Test
    void manyFramesCoalescedInOneSend() throws Exception {
        try (FdSocket s = FdSocket.connect(sock)) {
            java.io.ByteArrayOutputStream all = new java.io.ByteArrayOutputStream();
            all.write(frame(1, 1, str("burst")));
            for (int i = 0; i < 100; i++) all.write(frame(3, 10 + i, str(i % 2 == 0 ? "b" : "nope")));
            s.send(all.toByteArray(), null);
            try (Frame f = FrameIO.read(s)) {
                assertEquals(FrameType.HELLO_OK, f.type);
            }
            List<Long> leases = new java.util.ArrayList<>();
            for (int i = 0; i < 100; i++) {
                try (Frame f = FrameIO.read(s)) {
                    assertEquals(10 + i, f.requestId, "replies in request order");
                    if (i % 2 == 0) {
                        assertEquals(FrameType.DESCRIPTOR, f.type);
                        leases.add(((Messages.Descriptor) f.message).leaseId());
                    } else {
                        assertEquals(FrameType.ERROR, f.type);
                    }
                }
            }
            java.io.ByteArrayOutputStream rel = new java.io.ByteArrayOutputStream();
            for (int i = 0; i < leases.size(); i++) rel.write(frame(5, 500 + i, u64(leases.get(i))));
            s.send(rel.toByteArray(), null);
            for (int i = 0; i < leases.size(); i++) {
                try (Frame f = FrameIO.read(s)) {
                    assertEquals(FrameType.RELEASED, f.type);
                    assertEquals(500 + i, f.requestId);
                }
            }
        }
    }

    @Test
    void twoFramesWithFdsInOneSendAreRefusedAndTheFdsClosed() throws Exception {
        int[] fds = strangeFds();
        try (FdSocket s = helloed(1)) {
            s.send(concat(frame(3, 250, str("b")), frame(3, 251, str("b"))), fds);
            // one of the two is refused for the fds; the other gets a DESCRIPTOR
            int refused = 0;
            List<Long> leases = new java.util.ArrayList<>();
            for (int i = 0; i < 2; i++) {
                try (Frame f = FrameIO.read(s)) {
                    if (f.type == FrameType.ERROR) {
                        assertEquals(ErrorCode.UNEXPECTED_FDS, ((Messages.Error) f.message).errorCode());
                        refused++;
                    } else {
                        assertEquals(FrameType.DESCRIPTOR, f.type);
                        leases.add(((Messages.Descriptor) f.message).leaseId());
                    }
                }
            }
            for (long lease : leases) {
                s.send(frame(5, 260, u64(lease)), null);
                try (Frame r = FrameIO.read(s)) {
                    assertEquals(FrameType.RELEASED, r.type);
                }
            }
            assertEquals(1, refused);
            expectAlive(s, 1, 270);
        }
        for (int fd : fds) LIBC.close(fd);
    }

    // ---------------------------------------------------------------- state

    @Test
    void forgetAndReleaseOfThingsNeverGiven() throws Exception {
        try (FdSocket s = helloed(2)) {
            s.send(frameV(2, 9, 300, idList(1, 42)), null);
            expectError(s, ErrorCode.UNKNOWN_ID, 300, "id 42 is not held");
            s.send(frameV(2, 9, 301, idList(2, 0xFFFFFFFFFFFFFFFFL, 1)), null);
            expectError(s, ErrorCode.UNKNOWN_ID, 301, "is not held");
            s.send(frameV(2, 9, 0, idList(1, 42)), null);
            expectError(s, ErrorCode.BAD_REQUEST_ID, 0, "FORGET with request id 0");
            s.send(frameV(2, 5, 302, u64(-1)), null);
            expectError(s, ErrorCode.UNKNOWN_LEASE, 302, "lease 18446744073709551615 is not held");
            s.send(frameV(2, 5, 303, u64(0)), null);
            expectError(s, ErrorCode.UNKNOWN_LEASE, 303, "lease 0 is not held");
            expectAlive(s, 2, 304);
        }
    }

    @Test
    void forgetPayloadsThatDoNotParse() throws Exception {
        try (FdSocket s = helloed(2)) {
            s.send(frameV(2, 9, 310, idList(0)), null);
            expectError(s, ErrorCode.BAD_PAYLOAD, 310, "id count 0");
            s.send(frameV(2, 9, 311, idList(8191, new long[0])), null);
            expectError(s, ErrorCode.BAD_PAYLOAD, 311, "id count 8191");
            s.send(frameV(2, 9, 312, idList(-1, 1)), null);
            expectError(s, ErrorCode.BAD_PAYLOAD, 312, "id count 4294967295");
            s.send(frameV(2, 9, 313, idList(2, 1)), null);
            expectError(s, ErrorCode.BAD_PAYLOAD, 313, "needs 16 bytes of ids, the payload has 8");
            s.send(frameV(2, 9, 314, idList(1, 0)), null);
            expectError(s, ErrorCode.BAD_PAYLOAD, 314, "is 0");
            long[] dup = new long[20];
            for (int i = 0; i < 20; i++) dup[i] = i + 1;
            dup[19] = 3;
            s.send(frameV(2, 9, 315, idList(20, dup)), null);
            expectError(s, ErrorCode.BAD_PAYLOAD, 315, "id 3 appears twice");
            s.send(frameV(2, 9, 316, concat(idList(1, 5), new byte[] {1})), null);
            expectError(s, ErrorCode.BAD_PAYLOAD, 316, "needs 8 bytes of ids, the payload has 9");
            expectAlive(s, 2, 317);
        }
    }

    @Test
    void forgetBeforeHelloAndOnVersion1() throws Exception {
        try (FdSocket s = FdSocket.connect(sock)) {
            s.send(frameV(2, 9, 320, idList(1, 1)), null);
            expectError(s, ErrorCode.UNEXPECTED_FRAME, 320, "FORGET before HELLO");
            s.send(frameV(1, 9, 321, idList(1, 1)), null);
            expectError(s, ErrorCode.UNKNOWN_TYPE, 321, "frame type 9 (expected: 1 to 8)");
            s.send(frameV(2, 9, 0, idList(1, 1)), null);
            expectError(s, ErrorCode.BAD_REQUEST_ID, 0, "FORGET with request id 0");
            s.send(frameV(1, 1, 322, str("v1")), null);
            try (Frame f = FrameIO.read(s)) {
                assertEquals(FrameType.HELLO_OK, f.type);
            }
            s.send(frameV(2, 9, 323, idList(1, 1)), null);
            expectError(s, ErrorCode.BAD_VERSION, 323, "protocol version 2 (expected: 1)");
            expectAlive(s, 1, 324);
        }
    }

    @Test
    void repeatedHelloInTheOtherVersion() throws Exception {
        try (FdSocket s = helloed(1)) {
            s.send(frameV(1, 1, 330, str("again")), null);
            expectError(s, ErrorCode.UNEXPECTED_FRAME, 330, "HELLO was already sent");
            s.send(frameV(2, 1, 331, str("again v2")), null);
            expectError(s, ErrorCode.BAD_VERSION, 331, "protocol version 2 (expected: 1)");
            expectAlive(s, 1, 332);
        }
    }

    @Test
    void releaseOfAnotherConnectionsLeaseAndTwice() throws Exception {
        try (FdSocket a = helloed(1); FdSocket b = helloed(1)) {
            a.send(frame(3, 340, str("b")), null);
            long lease;
            try (Frame f = FrameIO.read(a)) {
                lease = ((Messages.Descriptor) f.message).leaseId();
            }
            b.send(frame(5, 341, u64(lease)), null);
            expectError(b, ErrorCode.UNKNOWN_LEASE, 341, "is not held by this connection");
            a.send(frame(5, 342, u64(lease)), null);
            try (Frame f = FrameIO.read(a)) {
                assertEquals(FrameType.RELEASED, f.type);
            }
            a.send(frame(5, 343, u64(lease)), null);
            expectError(a, ErrorCode.UNKNOWN_LEASE, 343, "is not held");
            expectAlive(b, 1, 344);
        }
    }

    @Test
    void halfCloseAfterAttachGetsTheDescriptorThenTheEnd() throws Exception {
        try (FdSocket s = FdSocket.connect(sock)) {
            s.send(concat(frame(1, 1, str("half")), frame(3, 2, str("b"))), null);
            s.shutdownOutput();
            try (Frame f = FrameIO.read(s)) {
                assertEquals(FrameType.HELLO_OK, f.type);
            }
            try (Frame f = FrameIO.read(s)) {
                assertNotNull(f);
                assertEquals(FrameType.DESCRIPTOR, f.type, "got " + f);
            }
            assertNull(FrameIO.read(s));
        }
        await("the lease ended", 5, () -> server.totalLeaseCount() == 0);
    }

    @Test
    void endOfStreamRightAfterAWholeHeaderWithPayloadDue() throws Exception {
        try (FdSocket s = helloed(1)) {
            s.send(header(Protocol.MAGIC, 1, 3, 350, 4), null);
            s.shutdownOutput();
            expectError(s, ErrorCode.TRUNCATED, 350, "after 0 of the 4 payload bytes");
            assertNull(FrameIO.read(s));
        }
    }

    @Test
    void badMagicVariants() throws Exception {
        for (int magic : new int[] {0, 0x4D4D5643 /* little-endian CVMM */, 0x43564D4E, -1}) {
            try (FdSocket s = helloed(1)) {
                s.send(header(magic, 1, 3, 360, 3), null);
                expectError(s, ErrorCode.BAD_MAGIC, 0, String.format("bad magic 0x%08X", magic));
                assertNull(FrameIO.read(s));
            }
        }
    }

    @Test
    void manyBadConnectionsLeaveNoThreadOrFd() throws Exception {
        int[] fds = strangeFds();
        for (int i = 0; i < 30; i++) {
            try (FdSocket s = FdSocket.connect(sock)) {
                switch (i % 5) {
                    case 0 -> s.send(header(0xBAD, 1, 1, 1, 0), fds);
                    case 1 -> s.send(new byte[] {0x43, 0x56}, fds);
                    case 2 -> s.send(header(Protocol.MAGIC, 1, 1, 1, 70000), fds);
                    case 3 -> s.send(concat(header(Protocol.MAGIC, 1, 3, 1, 100), new byte[50]), fds);
                    default -> s.send(frame(1, 1, str("x")), fds);
                }
            }
        }
        for (int fd : fds) LIBC.close(fd);
    }
    // ---------------------------------------------------------------- version 2 ids

    static Messages.DescriptorV2 attachV2(FdSocket s, int id) throws Exception {
        s.send(frameV(2, 3, id, str("b")), null);
        try (Frame f = FrameIO.read(s)) {
            assertNotNull(f);
            assertEquals(FrameType.DESCRIPTOR, f.type, "got " + f);
            assertEquals(id, f.requestId);
            return (Messages.DescriptorV2) f.message;
        }
    }

    static void releaseV2(FdSocket s, int id, long lease) throws Exception {
        s.send(frameV(2, 5, id, u64(lease)), null);
        try (Frame f = FrameIO.read(s)) {
            assertEquals(FrameType.RELEASED, f.type, "got " + f);
        }
    }

    @Test
    void forgetIsAllOrNothingAndIdsAreNeverReused() throws Exception {
        try (FdSocket s = helloed(2)) {
            Messages.DescriptorV2 d1 = attachV2(s, 400);
            long id1 = d1.ids()[0];
            assertTrue(d1.hasFd(0));
            releaseV2(s, 401, d1.leaseId());
            Messages.DescriptorV2 d2 = attachV2(s, 402);
            assertEquals(id1, d2.ids()[0], "held: same id");
            assertTrue(!d2.hasFd(0), "held: no fd");
            releaseV2(s, 403, d2.leaseId());
            // a FORGET naming a held id and one never given: nothing forgotten
            s.send(frameV(2, 9, 404, idList(2, id1, 999)), null);
            expectError(s, ErrorCode.UNKNOWN_ID, 404, "id 999 is not held");
            Messages.DescriptorV2 d3 = attachV2(s, 405);
            assertEquals(id1, d3.ids()[0], "still held after the refused FORGET");
            assertTrue(!d3.hasFd(0));
            releaseV2(s, 406, d3.leaseId());
            s.send(frameV(2, 9, 407, idList(1, id1)), null);
            try (Frame f = FrameIO.read(s)) {
                assertEquals(FrameType.FORGOTTEN, f.type, "got " + f);
                assertEquals(407, f.requestId);
                assertEquals(1, ((Messages.Forgotten) f.message).count());
            }
            s.send(frameV(2, 9, 408, idList(1, id1)), null);
            expectError(s, ErrorCode.UNKNOWN_ID, 408, "is not held");
            Messages.DescriptorV2 d4 = attachV2(s, 409);
            assertTrue(d4.ids()[0] > id1, "a new id after FORGET: " + d4);
            assertTrue(d4.hasFd(0), "with its fd");
            releaseV2(s, 410, d4.leaseId());
        }
    }

    @Test
    void forgetWhileALeaseStillMapsIt() throws Exception {
        try (FdSocket s = helloed(2)) {
            Messages.DescriptorV2 d1 = attachV2(s, 420);
            s.send(frameV(2, 9, 421, idList(1, d1.ids()[0])), null);
            try (Frame f = FrameIO.read(s)) {
                assertEquals(FrameType.FORGOTTEN, f.type, "got " + f);
            }
            Messages.DescriptorV2 d2 = attachV2(s, 422);
            assertTrue(d2.hasFd(0) && d2.ids()[0] != d1.ids()[0], "" + d2);
            releaseV2(s, 423, d1.leaseId());
            releaseV2(s, 424, d2.leaseId());
        }
    }

    @Test
    void tooManyIdsThenForgetThenAttach() throws Exception {
        Path other = IpcTestSupport.socketPath();
        try (SharingServer small = builder(other).maxIdsPerConnection(1).build();
             VirtualMemoryBuffer b2 = resource.allocate(resource.granularity())) {
            small.publish("b", buffer);
            small.publish("c", b2);
            try (FdSocket s = FdSocket.connect(other)) {
                s.send(frameV(2, 1, 1, str("ids")), null);
                FrameIO.read(s).close();
                Messages.DescriptorV2 d1 = attachV2(s, 430);
                s.send(frameV(2, 3, 431, str("c")), null);
                expectError(s, ErrorCode.TOO_MANY_IDS, 431, "may hold at most 1");
                releaseV2(s, 432, d1.leaseId());
                s.send(frameV(2, 9, 433, idList(1, d1.ids()[0])), null);
                try (Frame f = FrameIO.read(s)) {
                    assertEquals(FrameType.FORGOTTEN, f.type);
                }
                s.send(frameV(2, 3, 434, str("c")), null);
                long lease;
                try (Frame f = FrameIO.read(s)) {
                    assertEquals(FrameType.DESCRIPTOR, f.type, "got " + f);
                    lease = ((Messages.DescriptorV2) f.message).leaseId();
                }
                releaseV2(s, 435, lease);
            }
            await("gone", 5, () -> small.connectionCount() == 0);
        } finally {
            IpcTestSupport.deleteTree(other.getParent());
        }
    }

    // ---------------------------------------------------------------- timeouts and partial frames

    @Test
    void handshakeTimeoutDropsAHalfSentFrameUnansweredAndClosesItsFds() throws Exception {
        Path other = IpcTestSupport.socketPath();
        int[] fds = strangeFds();
        try (SharingServer t = builder(other).handshakeTimeout(java.time.Duration.ofMillis(300)).build();
             FdSocket s = FdSocket.connect(other)) {
            byte[] hello = frame(1, 1, str("slow"));
            s.send(java.util.Arrays.copyOf(hello, 10), fds);
            expectError(s, ErrorCode.TIMEOUT, 0, "");
            assertNull(FrameIO.read(s), "end of stream after TIMEOUT, no TRUNCATED");
            await("gone", 5, () -> t.connectionCount() == 0);
        } finally {
            for (int fd : fds) LIBC.close(fd);
            IpcTestSupport.deleteTree(other.getParent());
        }
    }

    @Test
    void onlyWholeFramesRestartTheIdleClock() throws Exception {
        Path other = IpcTestSupport.socketPath();
        try (SharingServer t = builder(other).idleTimeout(java.time.Duration.ofMillis(600)).build();
             FdSocket s = FdSocket.connect(other)) {
            t.publish("b", buffer);
            s.send(frame(1, 1, str("dribble")), null);
            FrameIO.read(s).close();
            byte[] attach = frame(3, 2, str("b".repeat(100)));
            long t0 = System.nanoTime();
            CompletableFutureHolder h = new CompletableFutureHolder();
            Thread dribbler = new Thread(() -> {
                try {
                    for (int i = 0; i < attach.length - 1 && !h.stop; i++) {
                        s.send(new byte[] {attach[i]}, null);
                        Thread.sleep(20);
                    }
                } catch (Exception ignored) {
                    // the server cut us
                }
            });
            dribbler.start();
            Messages.Error e = expectError(s, ErrorCode.TIMEOUT, 0, "");
            h.stop = true;
            dribbler.join(5000);
            long ms = (System.nanoTime() - t0) / 1_000_000;
            assertTrue(ms < 2000, "cut after about 600 ms despite the bytes: " + ms + " ms, " + e.message());
            assertNull(FrameIO.read(s));
        } finally {
            IpcTestSupport.deleteTree(other.getParent());
        }
    }

    static final class CompletableFutureHolder {
        volatile boolean stop;
    }

    @Test
    void fdsOnTheTailOfOneFrameAndTheHeadOfTheNextAreClosed() throws Exception {
        int[] fds = strangeFds();
        try (FdSocket s = helloed(1)) {
            byte[] a = frame(3, 440, str("b"));
            byte[] b = frame(3, 441, str("nope"));
            s.send(a, 0, 10, null);
            s.send(concat(java.util.Arrays.copyOfRange(a, 10, a.length), b), fds);
            int refused = 0;
            List<Long> leases = new java.util.ArrayList<>();
            for (int i = 0; i < 2; i++) {
                try (Frame f = FrameIO.read(s)) {
                    assertNotNull(f);
                    if (f.type == FrameType.DESCRIPTOR) leases.add(((Messages.Descriptor) f.message).leaseId());
                    else if (((Messages.Error) f.message).errorCode() == ErrorCode.UNEXPECTED_FDS) refused++;
                    else assertEquals(ErrorCode.UNKNOWN_NAME, ((Messages.Error) f.message).errorCode(), "" + f);
                }
            }
            assertEquals(1, refused, "some frame refused for the fds");
            for (long lease : leases) {
                s.send(frame(5, 442, u64(lease)), null);
                FrameIO.read(s).close();
            }
            expectAlive(s, 1, 443);
        }
        for (int fd : fds) LIBC.close(fd);
    }

    @Test
    void v1OnlyServerRefusesAV2HelloAndTakesAV1One() throws Exception {
        Path other = IpcTestSupport.socketPath();
        try (SharingServer t = builder(other).maxProtocolVersion(1).build(); FdSocket s = FdSocket.connect(other)) {
            s.send(frameV(2, 1, 1, str("v2")), null);
            expectError(s, ErrorCode.BAD_VERSION, 1, "protocol version 2 (expected: 1); frame skipped");
            s.send(frameV(2, 9, 2, idList(1, 1)), null);
            expectError(s, ErrorCode.BAD_VERSION, 2, "protocol version 2 (expected: 1)");
            s.send(frameV(1, 1, 3, str("v1")), null);
            try (Frame f = FrameIO.read(s)) {
                assertEquals(FrameType.HELLO_OK, f.type);
                assertEquals(1, ((Messages.HelloOk) f.message).version());
            }
        } finally {
            IpcTestSupport.deleteTree(other.getParent());
        }
    }
    // ---------------------------------------------------------------- ending with work queued

    @Test
    void manyAttachesThenGarbageInOneSend() throws Exception {
        try (FdSocket s = FdSocket.connect(sock)) {
            java.io.ByteArrayOutputStream all = new java.io.ByteArrayOutputStream();
            all.write(frame(1, 1, str("burst")));
            for (int i = 0; i < 300; i++) all.write(frame(3, 10 + i, str("b")));
            all.write(header(0x0BADF00D, 1, 3, 999, 0));
            s.send(all.toByteArray(), null);
            Thread.sleep(300); // let the server fill its queue while we do not read
            int descriptors = 0;
            boolean badMagic = false;
            for (;;) {
                Frame f = FrameIO.read(s);
                if (f == null) break;
                try (f) {
                    if (f.type == FrameType.DESCRIPTOR) descriptors++;
                    else if (f.type == FrameType.ERROR) {
                        assertEquals(ErrorCode.BAD_MAGIC, ((Messages.Error) f.message).errorCode(), "" + f);
                        badMagic = true;
                    }
                }
            }
            assertTrue(badMagic, "the fatal ERROR came (" + descriptors + " DESCRIPTORs before it)");
        }
        await("leases freed", 10, () -> server.totalLeaseCount() == 0);
    }

    @Test
    void manyAttachesThenAnAbruptClose() throws Exception {
        for (int round = 0; round < 5; round++) {
            FdSocket s = FdSocket.connect(sock);
            java.io.ByteArrayOutputStream all = new java.io.ByteArrayOutputStream();
            all.write(frame(1, 1, str("abrupt")));
            for (int i = 0; i < 300; i++) all.write(frame(3, 10 + i, str("b")));
            s.send(all.toByteArray(), null);
            Thread.sleep(round * 20);
            s.close();
        }
        await("connections gone", 10, () -> server.connectionCount() == 0);
        await("leases freed", 10, () -> server.totalLeaseCount() == 0);
    }
}
