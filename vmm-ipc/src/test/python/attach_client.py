#!/usr/bin/env python3
"""A cuvmm sharing-protocol client using only the Python 3 standard library.

Written from docs/PROTOCOL.md alone: connects to a cuvmm server, attaches to a buffer by
name, maps every chunk (host driver: each fd is a memfd, mmap'd MAP_SHARED), checks the
test pattern of section 9, optionally writes a pattern back, releases the lease.

    attach_client.py --socket PATH --name NAME [--seed N] [--write-seed M] [--client-name X]

Exit status: 0 success, 2 the server answered ERROR (printed), 3 pattern mismatch,
4 protocol violation by the server, 5 connection failed.
"""
import argparse
import mmap
import os
import socket
import struct
import sys

MAGIC = 0x43564D4D
VERSION = 1
HEADER = struct.Struct(">IHHII")          # magic, version, type, request id, length
MAX_PAYLOAD = 65536
MAX_FDS = 253
MSG_CMSG_CLOEXEC = getattr(socket, "MSG_CMSG_CLOEXEC", 0x40000000)

HELLO, HELLO_OK, ATTACH, DESCRIPTOR, RELEASE, RELEASED, DROP, ERROR = range(1, 9)
TYPE_NAMES = {1: "HELLO", 2: "HELLO_OK", 3: "ATTACH", 4: "DESCRIPTOR", 5: "RELEASE", 6: "RELEASED",
              7: "DROP", 8: "ERROR"}
ERROR_NAMES = {1: "BAD_MAGIC", 2: "BAD_VERSION", 3: "UNKNOWN_TYPE", 4: "TRUNCATED", 5: "TOO_LARGE",
               6: "UNEXPECTED_FDS", 7: "FD_COUNT_MISMATCH", 8: "UNKNOWN_NAME", 9: "UNKNOWN_LEASE",
               10: "NOT_ALLOWED", 11: "INTERNAL", 12: "BAD_PAYLOAD", 13: "UNEXPECTED_FRAME",
               14: "BAD_REQUEST_ID", 15: "TOO_MANY_CONNECTIONS", 16: "TOO_MANY_LEASES", 17: "TIMEOUT"}


class ServerError(Exception):
    def __init__(self, code, message):
        super().__init__("%s (%d): %s" % (ERROR_NAMES.get(code, "?"), code, message))
        self.code = code


class ProtocolViolation(Exception):
    pass


def string(s):
    b = s.encode("utf-8")
    return struct.pack(">H", len(b)) + b


def send_frame(sock, ftype, request_id, payload=b""):
    frame = HEADER.pack(MAGIC, VERSION, ftype, request_id, len(payload)) + payload
    sock.sendall(frame)


def close_fds(fds):
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def recv_exactly(sock, n, fds):
    """Reads exactly n bytes (fewer only at end of stream), appending every fd that arrives."""
    data = bytearray()
    while len(data) < n:
        chunk, got, flags, _ = socket.recv_fds(sock, n - len(data), MAX_FDS, MSG_CMSG_CLOEXEC)
        fds.extend(got)
        if flags & socket.MSG_CTRUNC:
            close_fds(fds)
            raise ProtocolViolation("the kernel dropped fds (MSG_CTRUNC): at the open-file limit?")
        if not chunk:
            break
        data += chunk
    return bytes(data)


def read_frame(sock):
    """Returns (type, request id, payload, fds); the caller owns the fds."""
    fds = []
    try:
        head = recv_exactly(sock, HEADER.size, fds)
        if len(head) < HEADER.size:
            raise ProtocolViolation("the server closed the connection (%d header bytes)" % len(head))
        magic, version, ftype, request_id, length = HEADER.unpack(head)
        if magic != MAGIC:
            raise ProtocolViolation("bad magic 0x%08X" % magic)
        if length > MAX_PAYLOAD:
            raise ProtocolViolation("payload length %d above %d" % (length, MAX_PAYLOAD))
        payload = recv_exactly(sock, length, fds)
        if len(payload) < length:
            raise ProtocolViolation("stream ended inside a frame")
        if version != VERSION:
            raise ProtocolViolation("version %d" % version)
        if len(fds) > MAX_FDS:
            raise ProtocolViolation("%d fds in one frame" % len(fds))
        if ftype != DESCRIPTOR and fds:
            raise ProtocolViolation("%s arrived with %d fds" % (TYPE_NAMES.get(ftype, ftype), len(fds)))
        return ftype, request_id, payload, fds
    except BaseException:
        close_fds(fds)
        raise


def parse_string(payload, offset):
    (n,) = struct.unpack_from(">H", payload, offset)
    end = offset + 2 + n
    if end > len(payload):
        raise ProtocolViolation("string runs past the payload")
    return payload[offset + 2:end].decode("utf-8"), end


def expect_reply(sock, request_id, expected_type):
    """Reads frames until the reply to request_id; DROP notices on the way are reported."""
    while True:
        ftype, rid, payload, fds = read_frame(sock)
        if ftype == DROP:
            (lease,) = struct.unpack_from(">Q", payload, 0)
            name, _ = parse_string(payload, 8)
            print("DROP lease %d of %r" % (lease, name))
            continue
        if ftype == ERROR:
            close_fds(fds)
            (code,) = struct.unpack_from(">I", payload, 0)
            message, _ = parse_string(payload, 4)
            raise ServerError(code, message)
        if rid != request_id or ftype != expected_type:
            close_fds(fds)
            raise ProtocolViolation("expected %s #%d, got %s #%d" % (TYPE_NAMES[expected_type], request_id,
                                                                     TYPE_NAMES.get(ftype, ftype), rid))
        return payload, fds


def parse_descriptor(payload, fds):
    lease, handle_type, size, count = struct.unpack_from(">QIQI", payload, 0)
    if handle_type != 1:
        raise ProtocolViolation("handle type %d" % handle_type)
    if not 1 <= count <= MAX_FDS or len(payload) != 24 + 8 * count:
        raise ProtocolViolation("chunk count %d with a %d-byte payload" % (count, len(payload)))
    sizes = list(struct.unpack_from(">%dQ" % count, payload, 24))
    if any(s == 0 or s >= 1 << 63 for s in sizes) or sum(sizes) >= 1 << 63:
        raise ProtocolViolation("bad chunk sizes %r" % sizes)
    if not 1 <= size <= sum(sizes):
        raise ProtocolViolation("buffer size %d for chunks %r" % (size, sizes))
    if len(fds) != count:
        raise ProtocolViolation("%d chunks but %d fds" % (count, len(fds)))
    return lease, size, sizes


def expected_block(k, seed, template):
    """Block k (bytes 2048k .. 2048k+2047) of the pattern: the template shifted by seed*7 + k."""
    add = (seed * 7 + k) & 0xFF
    return template.translate(bytes((b + add) & 0xFF for b in range(256)))


def check_pattern(view, start, seed, template):
    """view holds buffer bytes start .. start+len(view)-1 (start is a multiple of 2048)."""
    for off in range(0, len(view), 2048):
        i = start + off
        want = expected_block(i >> 11, seed, template)
        got = view[off:off + 2048]
        if got != want[:len(got)]:
            j = next(x for x in range(len(got)) if got[x] != want[x])
            return i + j, got[j], want[j]
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--socket", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--seed", type=int, default=None, help="verify the pattern with this seed")
    ap.add_argument("--write-seed", type=int, default=None, help="then fill the buffer with this seed")
    ap.add_argument("--client-name", default="python pid %d" % os.getpid())
    args = ap.parse_args()

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(args.socket)
    except OSError as e:
        print("cannot connect to %s: %s" % (args.socket, e))
        return 5
    try:
        send_frame(sock, HELLO, 1, string(args.client_name))
        payload, _ = expect_reply(sock, 1, HELLO_OK)
        version, max_fds = struct.unpack(">HH", payload)
        print("HELLO_OK version %d, max fds %d" % (version, max_fds))

        send_frame(sock, ATTACH, 2, string(args.name))
        payload, fds = expect_reply(sock, 2, DESCRIPTOR)
        maps = []
        try:
            lease, size, sizes = parse_descriptor(payload, fds)
            print("DESCRIPTOR lease %d, size %d, chunks %r" % (lease, size, sizes))
            for fd, chunk in zip(fds, sizes):
                target = os.readlink("/proc/self/fd/%d" % fd)
                if not target.startswith("/memfd:cuvmm-host"):
                    raise ProtocolViolation("fd %d is %s, not a cuvmm host memfd (this client maps host-driver "
                                            "memory only)" % (fd, target))
                if os.fstat(fd).st_size != chunk:
                    raise ProtocolViolation("fd %d has %d bytes, the descriptor says %d"
                                            % (fd, os.fstat(fd).st_size, chunk))
                maps.append(mmap.mmap(fd, chunk, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE))
        finally:
            close_fds(fds)          # the mappings keep the memory; the fds are not needed

        status = 0
        template = bytes((j * 131) & 0xFF for j in range(2048))
        if args.seed is not None:
            start = 0
            for m, chunk in zip(maps, sizes):
                n = min(chunk, size - start)
                if n <= 0:
                    break
                bad = check_pattern(m[:n], start, args.seed, template)
                if bad:
                    print("MISMATCH at offset %d: 0x%02X (expected 0x%02X)" % bad)
                    status = 3
                    break
                start += chunk
            if status == 0:
                print("VERIFIED %d bytes with seed %d" % (size, args.seed))
        if args.write_seed is not None and status == 0:
            start = 0
            for m, chunk in zip(maps, sizes):
                n = min(chunk, size - start)
                if n <= 0:
                    break
                for off in range(0, n, 2048):
                    block = expected_block((start + off) >> 11, args.write_seed, template)
                    m[off:off + min(2048, n - off)] = block[:min(2048, n - off)]
                start += chunk
            print("WROTE %d bytes with seed %d" % (size, args.write_seed))
        for m in maps:
            m.close()

        send_frame(sock, RELEASE, 3, struct.pack(">Q", lease))
        payload, _ = expect_reply(sock, 3, RELEASED)
        print("RELEASED lease %d" % struct.unpack(">Q", payload)[0])
        return status
    except ServerError as e:
        print("ERROR %s" % e)
        return 2
    except ProtocolViolation as e:
        print("PROTOCOL %s" % e)
        return 4
    finally:
        sock.close()


if __name__ == "__main__":
    sys.exit(main())
