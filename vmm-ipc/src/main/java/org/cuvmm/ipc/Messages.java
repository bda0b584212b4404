package org.cuvmm.ipc;

import java.nio.BufferUnderflowException;
import java.nio.ByteBuffer;
import java.nio.CharBuffer;
import java.nio.charset.CharacterCodingException;
import java.nio.charset.CodingErrorAction;
import java.nio.charset.StandardCharsets;
import java.util.Arrays;

/**
 * The payloads of protocol versions 1 and 2, encoded and decoded exactly as docs/PROTOCOL.md
 * sections 3 and 13 say (version 2 differs in DESCRIPTOR and adds FORGET, FORGOTTEN, EVICT) (big-endian; strings are a u16 byte count and UTF-8). Decoding is strict:
 * a payload must be exactly as long as its fields, strings must be valid UTF-8 within their
 * limits, and sizes must be positive without overflowing. Package-private.
 */
final class Messages {
    private Messages() {}

    /** A decoded payload. */
    sealed interface Message permits Hello, HelloOk, Attach, Descriptor, Release, Released, Drop, Error,
            DescriptorV2, Forget, Forgotten, Evict {
        FrameType type();

        /** Writes the payload's fields. */
        void write(Writer w);

        /** The payload's size in bytes when known cheaply (exact for the per-round messages), else a guess. */
        default int sizeHint() { return 64; }

        /** The payload alone (a frame is built by {@link Frame#encode(Message, int, int)} in one array). */
        default byte[] encode() {
            Writer w = new Writer(0, sizeHint());
            write(w);
            return w.bytes();
        }

        /** fds the frame must carry. */
        default int fdCount() { return 0; }
    }

    record Hello(String clientName) implements Message {
        public FrameType type() { return FrameType.HELLO; }

        public void write(Writer w) { w.string("clientName", clientName, 0, Protocol.MAX_CLIENT_NAME_BYTES); }

        @Override
        public int sizeHint() { return 2 + clientName.length(); }
    }

    record HelloOk(int version, int maxFds) implements Message {
        public FrameType type() { return FrameType.HELLO_OK; }

        public void write(Writer w) { w.u16(version).u16(maxFds); }

        @Override
        public int sizeHint() { return 4; }
    }

    record Attach(String name) implements Message {
        public FrameType type() { return FrameType.ATTACH; }

        public void write(Writer w) { w.string("name", name, 1, Protocol.MAX_NAME_BYTES); }

        @Override
        public int sizeHint() { return 2 + name.length(); }
    }

    record Descriptor(long leaseId, int handleType, long size, long[] chunkSizes) implements Message {
        public FrameType type() { return FrameType.DESCRIPTOR; }

        @Override
        public int fdCount() { return chunkSizes.length; }

        public void write(Writer w) {
            w.u64(leaseId).u32(handleType).u64(size).u32(chunkSizes.length);
            for (long s : chunkSizes) w.u64(s);
        }

        @Override
        public int sizeHint() { return 24 + 8 * chunkSizes.length; }

        @Override
        public boolean equals(Object o) {
            return o instanceof Descriptor d && d.leaseId == leaseId && d.handleType == handleType && d.size == size
                    && Arrays.equals(d.chunkSizes, chunkSizes);
        }

        @Override
        public int hashCode() { return Long.hashCode(leaseId) * 31 + Arrays.hashCode(chunkSizes); }

        @Override
        public String toString() {
            return "Descriptor[lease " + leaseId + ", handle type " + handleType + ", size " + size + ", chunks "
                    + Arrays.toString(chunkSizes) + "]";
        }
    }

    /**
     * Version 2's DESCRIPTOR: per chunk its size, the connection's allocation id and flags
     * (bit 0 {@link Protocol#CHUNK_FLAG_FD}: its fd is attached). The frame carries one fd per
     * chunk with the flag, in chunk order.
     */
    record DescriptorV2(long leaseId, int handleType, long size, long[] chunkSizes, long[] ids, int[] flags)
            implements Message {
        public FrameType type() { return FrameType.DESCRIPTOR; }

        @Override
        public int fdCount() {
            int n = 0;
            for (int f : flags) if ((f & Protocol.CHUNK_FLAG_FD) != 0) n++;
            return n;
        }

        /** True when chunk {@code i}'s fd is attached. */
        boolean hasFd(int i) { return (flags[i] & Protocol.CHUNK_FLAG_FD) != 0; }

        public void write(Writer w) {
            w.u64(leaseId).u32(handleType).u64(size).u32(chunkSizes.length);
            for (int i = 0; i < chunkSizes.length; i++) w.u64(chunkSizes[i]).u64(ids[i]).u32(flags[i]);
        }

        @Override
        public int sizeHint() { return 24 + 20 * chunkSizes.length; }

        @Override
        public boolean equals(Object o) {
            return o instanceof DescriptorV2 d && d.leaseId == leaseId && d.handleType == handleType && d.size == size
                    && Arrays.equals(d.chunkSizes, chunkSizes) && Arrays.equals(d.ids, ids)
                    && Arrays.equals(d.flags, flags);
        }

        @Override
        public int hashCode() { return Long.hashCode(leaseId) * 31 + Arrays.hashCode(ids); }

        @Override
        public String toString() {
            return "DescriptorV2[lease " + leaseId + ", handle type " + handleType + ", size " + size + ", chunks "
                    + Arrays.toString(chunkSizes) + ", ids " + Arrays.toString(ids) + ", flags "
                    + Arrays.toString(flags) + "]";
        }
    }

    /** Version 2 (c→s): the client holds none of these ids any more. 1 to 8190 non-zero ids. */
    record Forget(long[] ids) implements Message {
        public FrameType type() { return FrameType.FORGET; }

        public void write(Writer w) { idList(w, ids); }

        @Override
        public int sizeHint() { return 4 + 8 * ids.length; }

        @Override
        public boolean equals(Object o) { return o instanceof Forget f && Arrays.equals(f.ids, ids); }

        @Override
        public int hashCode() { return Arrays.hashCode(ids); }

        @Override
        public String toString() { return "Forget" + Arrays.toString(ids); }
    }

    /** Version 2 (s→c): the answer to FORGET, the number of ids forgotten. */
    record Forgotten(int count) implements Message {
        public FrameType type() { return FrameType.FORGOTTEN; }

        public void write(Writer w) { w.u32(count); }

        @Override
        public int sizeHint() { return 4; }
    }

    /** Version 2 (s→c, request id 0): the producer released these allocations. 1 to 8190 non-zero ids. */
    record Evict(long[] ids) implements Message {
        public FrameType type() { return FrameType.EVICT; }

        public void write(Writer w) { idList(w, ids); }

        @Override
        public int sizeHint() { return 4 + 8 * ids.length; }

        @Override
        public boolean equals(Object o) { return o instanceof Evict e && Arrays.equals(e.ids, ids); }

        @Override
        public int hashCode() { return Arrays.hashCode(ids); }

        @Override
        public String toString() { return "Evict" + Arrays.toString(ids); }
    }

    private static void idList(Writer w, long[] ids) {
        if (ids.length < 1 || ids.length > Protocol.MAX_IDS_PER_FRAME) {
            throw new IllegalArgumentException("ids: " + ids.length + " (expected: 1 to " + Protocol.MAX_IDS_PER_FRAME
                    + " per frame)");
        }
        w.u32(ids.length);
        for (long id : ids) w.u64(id);
    }

    record Release(long leaseId) implements Message {
        public FrameType type() { return FrameType.RELEASE; }

        public void write(Writer w) { w.u64(leaseId); }

        @Override
        public int sizeHint() { return 8; }
    }

    record Released(long leaseId) implements Message {
        public FrameType type() { return FrameType.RELEASED; }

        public void write(Writer w) { w.u64(leaseId); }

        @Override
        public int sizeHint() { return 8; }
    }

    record Drop(long leaseId, String name) implements Message {
        public FrameType type() { return FrameType.DROP; }

        public void write(Writer w) { w.u64(leaseId).string("name", name, 1, Protocol.MAX_NAME_BYTES); }

        @Override
        public int sizeHint() { return 10 + name.length(); }
    }

    /** {@code code} is the raw number (a peer may send one this version does not know). */
    record Error(int code, String message) implements Message {
        Error(ErrorCode code, String message) { this(code.code(), message); }

        public FrameType type() { return FrameType.ERROR; }

        public void write(Writer w) {
            w.u32(code).string("message", truncate(message, Protocol.MAX_MESSAGE_BYTES), 0, Protocol.MAX_MESSAGE_BYTES);
        }

        ErrorCode errorCode() { return ErrorCode.of(code); }
    }

    /** Cuts {@code s} to at most {@code maxBytes} of UTF-8 without splitting a character. */
    static String truncate(String s, int maxBytes) {
        if (s == null) return "";
        if (s.getBytes(StandardCharsets.UTF_8).length <= maxBytes) return s;
        StringBuilder b = new StringBuilder();
        int bytes = 0;
        for (int i = 0; i < s.length(); ) {
            int cp = s.codePointAt(i);
            int n = new String(Character.toChars(cp)).getBytes(StandardCharsets.UTF_8).length;
            if (bytes + n > maxBytes - 3) break;
            b.appendCodePoint(cp);
            bytes += n;
            i += Character.charCount(cp);
        }
        return b.append("...").toString();
    }

    /**
     * Decodes the payload of a frame of {@code type}.
     *
     * @throws ProtocolException {@link ErrorCode#BAD_PAYLOAD} (request id 0: the caller adds it)
     */
    static Message decode(FrameType type, byte[] payload) throws ProtocolException {
        return decode(type, Protocol.VERSION, payload);
    }

    /**
     * Decodes the payload of a frame of {@code type} in protocol {@code version} (in version 2
     * a DESCRIPTOR is a {@link DescriptorV2}).
     *
     * @throws ProtocolException {@link ErrorCode#BAD_PAYLOAD} (request id 0: the caller adds it)
     */
    static Message decode(FrameType type, int version, byte[] payload) throws ProtocolException {
        return decode(type, version, payload, 0);
    }

    /**
     * As {@link #decode(FrameType, int, byte[])} of the payload {@code array[from,
     * array.length)} (a frame read whole: header and payload in one array, no copy).
     */
    static Message decode(FrameType type, int version, byte[] array, int from) throws ProtocolException {
        java.util.Objects.checkFromToIndex(from, array.length, array.length); // 0 <= from <= length
        Reader r = new Reader(type, array, from);
        try {
            Message m = switch (type) {
                case HELLO -> new Hello(r.string("client name", 0, Protocol.MAX_CLIENT_NAME_BYTES));
                case HELLO_OK -> new HelloOk(r.u16(), r.u16());
                case ATTACH -> new Attach(r.string("name", 1, Protocol.MAX_NAME_BYTES));
                case DESCRIPTOR -> version >= Protocol.VERSION_2 ? descriptorV2(r) : descriptor(r);
                case RELEASE -> new Release(r.u64());
                case RELEASED -> new Released(r.u64());
                case DROP -> new Drop(r.u64(), r.string("name", 1, Protocol.MAX_NAME_BYTES));
                case ERROR -> new Error(r.u32(), r.string("message", 0, Protocol.MAX_MESSAGE_BYTES));
                case FORGET -> new Forget(ids(r));
                case FORGOTTEN -> new Forgotten(r.u32());
                case EVICT -> new Evict(ids(r));
            };
            r.end();
            return m;
        } catch (BufferUnderflowException e) {
            throw r.bad("the payload (" + (array.length - from) + " bytes) ends before its fields do");
        }
    }

    private static Descriptor descriptor(Reader r) throws ProtocolException {
        Head h = head(r, 8, "sizes");
        long lease = h.lease, size = h.size, count = h.count;
        int handleType = h.handleType;
        long[] sizes = new long[(int) count];
        long sum = 0;
        for (int i = 0; i < count; i++) {
            long s = r.u64();
            sum = addChunkSize(r, i, s, sum);
            sizes[i] = s;
        }
        checkBufferSize(r, size, sum);
        return new Descriptor(lease, handleType, size, sizes);
    }

    /** A count u32 (1 to 8190) and that many non-zero, distinct u64 ids (FORGET, EVICT). */
    private static long[] ids(Reader r) throws ProtocolException {
        long count = Integer.toUnsignedLong(r.u32());
        if (count < 1 || count > Protocol.MAX_IDS_PER_FRAME) {
            throw r.bad("id count " + count + " (expected: 1 to " + Protocol.MAX_IDS_PER_FRAME + ")");
        }
        if (r.remaining() != 8 * count) {
            throw r.bad("id count " + count + " needs " + 8 * count + " bytes of ids, the payload has " + r.remaining());
        }
        long[] ids = new long[(int) count];
        java.util.Set<Long> seen = count > SCAN_DISTINCT_UP_TO ? new java.util.HashSet<>() : null;
        for (int i = 0; i < count; i++) {
            ids[i] = r.u64();
            if (ids[i] == 0) throw r.bad("id at index " + i + " is 0 (expected: non-zero ids)");
            if (seenBefore(ids, i, seen)) throw r.bad("id " + Long.toUnsignedString(ids[i]) + " appears twice");
        }
        return ids;
    }

    /** Up to this many ids, distinctness is checked by comparing pairs (no set, no boxing): a DESCRIPTOR has a few chunks. */
    private static final int SCAN_DISTINCT_UP_TO = 16;

    /** True when {@code ids[i]} equals one of {@code ids[0..i)}: by scan, or through {@code seen} when given. */
    private static boolean seenBefore(long[] ids, int i, java.util.Set<Long> seen) {
        if (seen != null) return !seen.add(ids[i]);
        for (int j = 0; j < i; j++) if (ids[j] == ids[i]) return true;
        return false;
    }

    /** Version 2's DESCRIPTOR: the checks of version 1 plus ids (non-zero, distinct) and flags (only bit 0). */
    private static DescriptorV2 descriptorV2(Reader r) throws ProtocolException {
        Head h = head(r, 20, "chunks");
        long lease = h.lease, size = h.size, count = h.count;
        int handleType = h.handleType;
        long[] sizes = new long[(int) count];
        long[] ids = new long[(int) count];
        int[] flags = new int[(int) count];
        java.util.Set<Long> seen = count > SCAN_DISTINCT_UP_TO ? new java.util.HashSet<>() : null;
        long sum = 0;
        for (int i = 0; i < count; i++) {
            long s = r.u64();
            long id = r.u64();
            int f = r.u32();
            sum = addChunkSize(r, i, s, sum);
            if (id == 0) throw r.bad("chunk " + i + " allocation id 0 (expected: non-zero)");
            ids[i] = id;
            if (seenBefore(ids, i, seen)) throw r.bad("chunk " + i + " allocation id " + Long.toUnsignedString(id)
                    + " appears twice");
            if ((f & ~Protocol.CHUNK_FLAG_FD) != 0) {
                throw r.bad("chunk " + i + " flags 0x" + Integer.toHexString(f) + " (expected: only bit 0, FD)");
            }
            sizes[i] = s;
            ids[i] = id;
            flags[i] = f;
        }
        checkBufferSize(r, size, sum);
        return new DescriptorV2(lease, handleType, size, sizes, ids, flags);
    }

    /** The fixed fields of a DESCRIPTOR (both versions), checked; the chunk entries follow. */
    private record Head(long lease, int handleType, long size, long count) {
    }

    /**
     * Reads and checks a DESCRIPTOR's lease, handle type, size and chunk count (both versions),
     * and that the rest of the payload is exactly {@code bytesPerChunk} per chunk.
     */
    private static Head head(Reader r, int bytesPerChunk, String entries) throws ProtocolException {
        long lease = r.u64();
        int handleType = r.u32();
        long size = r.u64();
        long count = Integer.toUnsignedLong(r.u32());
        if (lease == 0) throw r.bad("lease id 0 (expected: non-zero)");
        if (handleType != Protocol.HANDLE_TYPE_POSIX_FD) {
            throw r.bad("handle type " + Integer.toUnsignedString(handleType) + " (expected: 1, POSIX fd)");
        }
        if (count < 1 || count > Protocol.MAX_FDS_PER_FRAME) {
            throw r.bad("chunk count " + count + " (expected: 1 to " + Protocol.MAX_FDS_PER_FRAME + ")");
        }
        if (r.remaining() != bytesPerChunk * count) {
            throw r.bad("chunk count " + count + " needs " + bytesPerChunk * count + " bytes of " + entries
                    + ", the payload has " + r.remaining());
        }
        return new Head(lease, handleType, size, count);
    }

    /** Checks chunk {@code i}'s size {@code s} (1 to 2^63-1) and returns {@code sum + s} (no overflow). */
    private static long addChunkSize(Reader r, int i, long s, long sum) throws ProtocolException {
        if (s == 0) throw r.bad("chunk " + i + " size 0 (expected: >= 1)");
        if (s < 0) throw r.bad("chunk " + i + " size " + Long.toUnsignedString(s) + " is negative as a signed "
                + "64-bit value (expected: 1 to 2^63-1)");
        try {
            sum = Math.addExact(sum, s);
        } catch (ArithmeticException e) {
            throw r.bad("chunk sizes overflow a signed 64-bit sum at chunk " + i);
        }
        return sum;
    }

    /** The buffer size must be 1 to the sum of the chunk sizes (both versions). */
    private static void checkBufferSize(Reader r, long size, long sum) throws ProtocolException {
        if (size <= 0) {
            throw r.bad("buffer size " + (size == 0 ? "0" : Long.toUnsignedString(size) + " (negative as signed)")
                    + " (expected: 1 to the sum of the chunk sizes, " + sum + ")");
        }
        if (size > sum) throw r.bad("buffer size " + size + " is larger than the sum of the chunk sizes, " + sum);
    }

    /**
     * Big-endian writer with the protocol's string rules, into one growable array: {@link
     * Frame#encode(Message, int, int)} reserves the header's 16 bytes in front and sizes it from
     * {@link Message#sizeHint()}, so a frame is built in one array, exactly sized for the
     * per-round messages (issue 11: it was built twice, payload then frame, through two
     * ByteBuffers and a copy).
     */
    static final class Writer {
        private byte[] b;
        private int pos;

        Writer() {
            this(0, 64);
        }

        /** {@code offset} bytes left free in front (a frame's header), room for {@code sizeHint} more. */
        Writer(int offset, int sizeHint) {
            b = new byte[offset + Math.max(0, sizeHint)];
            pos = offset;
        }

        private void room(int n) {
            if (b.length - pos < n) b = Arrays.copyOf(b, Math.max(b.length * 2, pos + n));
        }

        /** Bytes written, the reserved front included. */
        int position() { return pos; }

        Writer u16(int v) {
            room(2);
            b[pos] = (byte) (v >>> 8);
            b[pos + 1] = (byte) v;
            pos += 2;
            return this;
        }

        Writer u32(int v) {
            room(4);
            putInt(b, pos, v);
            pos += 4;
            return this;
        }

        Writer u64(long v) {
            room(8);
            putInt(b, pos, (int) (v >>> 32));
            putInt(b, pos + 4, (int) v);
            pos += 8;
            return this;
        }

        Writer raw(byte[] v) {
            room(v.length);
            System.arraycopy(v, 0, b, pos, v.length);
            pos += v.length;
            return this;
        }

        Writer string(String field, String s, int minBytes, int maxBytes) {
            if (s == null) throw new IllegalArgumentException(field + ": null (expected: a string)");
            int n = s.length();
            boolean ascii = true;
            for (int i = 0; i < n && ascii; i++) ascii = s.charAt(i) < 0x80;
            if (ascii && n >= minBytes && n <= maxBytes) {
                // ASCII: one byte per char, written in place (no getBytes copy per name).
                u16(n);
                room(n);
                for (int i = 0; i < n; i++) b[pos + i] = (byte) s.charAt(i);
                pos += n;
                return this;
            }
            byte[] u = s.getBytes(StandardCharsets.UTF_8);
            if (u.length < minBytes || u.length > maxBytes) {
                throw new IllegalArgumentException(field + ": \"" + truncate(s, 64) + "\" is " + u.length
                        + " bytes of UTF-8 (expected: " + minBytes + " to " + maxBytes + ")");
            }
            return u16(u.length).raw(u);
        }

        /** The bytes written (the array itself when it is exactly full). */
        byte[] bytes() { return pos == b.length ? b : Arrays.copyOf(b, pos); }

        /** The array, for a caller that writes into the reserved front (a frame's header). */
        byte[] array() { return b; }

        static void putInt(byte[] a, int at, int v) {
            a[at] = (byte) (v >>> 24);
            a[at + 1] = (byte) (v >>> 16);
            a[at + 2] = (byte) (v >>> 8);
            a[at + 3] = (byte) v;
        }
    }

    /**
     * Strict big-endian reader over the payload array itself (no ByteBuffer per frame):
     * underflow throws {@link BufferUnderflowException}, leftovers are an error.
     */
    static final class Reader {
        private final FrameType type;
        private final byte[] b;
        private int pos;

        Reader(FrameType type, byte[] payload) {
            this(type, payload, 0);
        }

        /** Over {@code array[from, array.length)}. */
        Reader(FrameType type, byte[] array, int from) {
            this.type = type;
            this.b = array;
            this.pos = from;
        }

        private int take(int n) {
            if (b.length - pos < n) throw new BufferUnderflowException();
            int at = pos;
            pos += n;
            return at;
        }

        int u16() {
            int at = take(2);
            return (b[at] & 0xFF) << 8 | (b[at + 1] & 0xFF);
        }

        int u32() {
            int at = take(4);
            return getInt(at);
        }

        private int getInt(int at) {
            return intAt(b, at);
        }

        /** The big-endian int at {@code at} of {@code a} (frame headers are read with it too). */
        static int intAt(byte[] a, int at) {
            return (a[at] & 0xFF) << 24 | (a[at + 1] & 0xFF) << 16 | (a[at + 2] & 0xFF) << 8 | (a[at + 3] & 0xFF);
        }

        long u64() {
            int at = take(8);
            return (long) getInt(at) << 32 | (getInt(at + 4) & 0xFFFFFFFFL);
        }

        int remaining() { return b.length - pos; }

        String string(String field, int minBytes, int maxBytes) throws ProtocolException {
            int n = u16();
            if (n > remaining()) throw bad(field + " length " + n + " runs past the payload (" + remaining() + " bytes left)");
            if (n < minBytes || n > maxBytes) throw bad(field + " is " + n + " bytes (expected: " + minBytes + " to " + maxBytes + ")");
            int at = take(n);
            // Bytes below 0x80 are valid UTF-8 and decode to the same chars: a plain copy (a
            // name is ASCII in nearly every ATTACH: issue 11, CPU per exchange). Anything else
            // goes through the strict decoder.
            if (isAscii(b, at, n)) return new String(b, at, n, StandardCharsets.ISO_8859_1);
            try {
                CharBuffer c = StandardCharsets.UTF_8.newDecoder().onMalformedInput(CodingErrorAction.REPORT)
                        .onUnmappableCharacter(CodingErrorAction.REPORT).decode(ByteBuffer.wrap(b, at, n));
                return c.toString();
            } catch (CharacterCodingException e) {
                throw bad(field + " is not valid UTF-8");
            }
        }

        private static boolean isAscii(byte[] u, int from, int n) {
            for (int i = from; i < from + n; i++) if (u[i] < 0) return false;
            return true;
        }

        void end() throws ProtocolException {
            if (remaining() > 0) throw bad(remaining() + " bytes left over after the fields");
        }

        ProtocolException bad(String what) {
            return new ProtocolException(ErrorCode.BAD_PAYLOAD, 0, type + " payload: " + what);
        }
    }
}
