#!/usr/bin/env python3
"""A cuvmm sharing-protocol client (versions 1 and 2) using only the Python 3 standard library.

Written from docs/PROTOCOL.md alone: connects to a cuvmm server, attaches to a buffer by
name, maps every chunk (host driver: each fd is a memfd, mmap'd MAP_SHARED), checks the
test pattern of section 9, optionally writes a pattern back, releases the lease.

    attach_client.py --socket PATH --name NAME [--seed N] [--write-seed M] [--client-name X]
                     [--protocol 1|2] [--cache-ids N]
    attach_client.py --socket PATH --commands [--protocol 1|2] [--cache-ids N]   (commands on stdin)

--protocol 1 (the default) is version 1 exactly (sections 1-10). --protocol 2 says HELLO in
version 2 (section 13; falls back to version 1 on BAD_VERSION) and keeps a cache of mapped
chunks by allocation id: a chunk that arrives with its fd is mmap'd and its fd closed (the
mapping keeps the memory and is what "holding the id" means here); a chunk without fd is the
kept mapping. Up to --cache-ids idle ids stay mapped (LRU; 0: every id is unmapped and
FORGET at release, section 13.11 step 3). EVICT: the ids are unmapped and FORGET once no lease
of this client maps them (this client holds a lease only inside one attach).

--commands reads one command per line from stdin and prints one result line per command:
    attach NAME [SEED [WRITE_SEED]]  -> ROUND k lease=L chunks=N fds=F fds_total=T hits=H misses=M
                                        held=I verified=yes|no|skipped
    evict                            -> waits (30 s at most) for an EVICT, handles it:
                                        EVICTED ids=a,b forgotten=K held=I
    forget ID [ID...]                -> sends FORGET of raw ids (unmapping those it holds):
                                        FORGOTTEN K held=I, or ERROR NAME (code): message
    quit                             -> FORGET every held id, close, exit 0 (also at end of input)
A server ERROR answering a command prints "ERROR NAME (code): message" and the next command
is read.

Exit status: 0 success, 2 the server answered ERROR (printed; one-shot mode), 3 pattern
mismatch, 4 protocol violation by the server, 5 connection failed.
"""
import argparse
import array
import collections
import fcntl
import mmap
import os
import socket
import struct
import sys

MAGIC = 0x43564D4D
HEADER = struct.Struct(">IHHII")          # magic, version, type, request id, length
MAX_PAYLOAD = 65536
MAX_FDS = 253
MAX_IDS_PER_FRAME = 8190                  # FORGET / EVICT (section 13.8)
FLAG_FD = 0x1                             # DESCRIPTOR v2 chunk flag (section 13.3)
MSG_CMSG_CLOEXEC = getattr(socket, "MSG_CMSG_CLOEXEC", 0x40000000)

HELLO, HELLO_OK, ATTACH, DESCRIPTOR, RELEASE, RELEASED, DROP, ERROR, FORGET, FORGOTTEN, EVICT = range(1, 12)
TYPE_NAMES = {1: "HELLO", 2: "HELLO_OK", 3: "ATTACH", 4: "DESCRIPTOR", 5: "RELEASE", 6: "RELEASED",
              7: "DROP", 8: "ERROR", 9: "FORGET", 10: "FORGOTTEN", 11: "EVICT"}
ERROR_NAMES = {1: "BAD_MAGIC", 2: "BAD_VERSION", 3: "UNKNOWN_TYPE", 4: "TRUNCATED", 5: "TOO_LARGE",
               6: "UNEXPECTED_FDS", 7: "FD_COUNT_MISMATCH", 8: "UNKNOWN_NAME", 9: "UNKNOWN_LEASE",
               10: "NOT_ALLOWED", 11: "INTERNAL", 12: "BAD_PAYLOAD", 13: "UNEXPECTED_FRAME",
               14: "BAD_REQUEST_ID", 15: "TOO_MANY_CONNECTIONS", 16: "TOO_MANY_LEASES", 17: "TIMEOUT",
               18: "UNKNOWN_ID", 19: "TOO_MANY_IDS"}
BAD_VERSION, FD_COUNT_MISMATCH, BAD_PAYLOAD, UNKNOWN_ID = 2, 7, 12, 18


class ServerError(Exception):
    def __init__(self, code, message):
        super().__init__("%s (%d): %s" % (ERROR_NAMES.get(code, "?"), code, message))
        self.code = code


class ProtocolViolation(Exception):
    pass


def string(s):
    b = s.encode("utf-8")
    return struct.pack(">H", len(b)) + b


def close_fds(fds):
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def recv_with_fds(sock, bufsize):
    """One recvmsg with MSG_CMSG_CLOEXEC and room for MAX_FDS fds: (data, fds, msg_flags).

    Not socket.recv_fds: CPython's (checked on 3.11) ignores its flags argument, so
    the fds it returns are not close-on-exec.
    """
    data, ancdata, flags, _ = sock.recvmsg(bufsize, socket.CMSG_SPACE(MAX_FDS * 4), MSG_CMSG_CLOEXEC)
    fds = array.array("i")
    for level, kind, payload in ancdata:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[:len(payload) - len(payload) % fds.itemsize])
    got = list(fds)
    for fd in got:
        # The test client checks what the protocol asks of every receiver (PROTOCOL.md section 1).
        if not fcntl.fcntl(fd, fcntl.F_GETFD) & fcntl.FD_CLOEXEC:
            close_fds(got)
            raise ProtocolViolation("fd %d arrived without close-on-exec (MSG_CMSG_CLOEXEC not honoured)" % fd)
    return data, got, flags


def recv_exactly(sock, n, fds):
    """Reads exactly n bytes (fewer only at end of stream), appending every fd that arrives."""
    data = bytearray()
    while len(data) < n:
        chunk, got, flags = recv_with_fds(sock, n - len(data))
        fds.extend(got)
        if flags & socket.MSG_CTRUNC:
            close_fds(fds)
            raise ProtocolViolation("the kernel dropped fds (MSG_CTRUNC): at the open-file limit?")
        if len(fds) > MAX_FDS:
            close_fds(fds)
            raise ProtocolViolation("%d fds in one frame" % len(fds))
        if not chunk:
            break
        data += chunk
    return bytes(data)


def parse_string(payload, offset):
    (n,) = struct.unpack_from(">H", payload, offset)
    end = offset + 2 + n
    if end > len(payload):
        raise ProtocolViolation("string runs past the payload")
    return payload[offset + 2:end].decode("utf-8"), end


def parse_ids(payload, what):
    """FORGET / EVICT payload: count K (1 to 8190), K ids, non-zero, no id twice."""
    if len(payload) < 4:
        raise ProtocolViolation("%s payload of %d bytes" % (what, len(payload)))
    (k,) = struct.unpack_from(">I", payload, 0)
    if not 1 <= k <= MAX_IDS_PER_FRAME or len(payload) != 4 + 8 * k:
        raise ProtocolViolation("%s count %d with a %d-byte payload" % (what, k, len(payload)))
    ids = list(struct.unpack_from(">%dQ" % k, payload, 4))
    if 0 in ids or len(set(ids)) != k:
        raise ProtocolViolation("%s ids %r (non-zero, no id twice)" % (what, ids))
    return ids


class Connection:
    """One connection: frames in both directions, the connection's version, unsolicited notices."""

    def __init__(self, sock):
        self.sock = sock
        self.version = None           # None until HELLO_OK: frames of version 1 or 2 are accepted then
        self.send_version = 1
        self.next_request = 1
        self.evicted = []             # ids named by EVICT frames not yet handled (version 2)

    def send(self, ftype, payload=b"", request_id=None):
        if request_id is None:
            request_id = self.next_request
            self.next_request += 1
        self.sock.sendall(HEADER.pack(MAGIC, self.send_version, ftype, request_id, len(payload)) + payload)
        return request_id

    def read_frame(self):
        """Returns (type, request id, payload, fds); the caller owns the fds."""
        fds = []
        try:
            head = recv_exactly(self.sock, HEADER.size, fds)
            if len(head) < HEADER.size:
                raise ProtocolViolation("the server closed the connection (%d header bytes)" % len(head))
            magic, version, ftype, request_id, length = HEADER.unpack(head)
            if magic != MAGIC:
                raise ProtocolViolation("bad magic 0x%08X" % magic)
            if length > MAX_PAYLOAD:
                raise ProtocolViolation("payload length %d above %d" % (length, MAX_PAYLOAD))
            payload = recv_exactly(self.sock, length, fds)
            if len(payload) < length:
                raise ProtocolViolation("stream ended inside a frame")
            if (version not in (1, 2)) if self.version is None else version != self.version:
                raise ProtocolViolation("version %d" % version)
            if ftype > (ERROR if version == 1 else EVICT) or ftype < 1:
                raise ProtocolViolation("frame type %d in version %d" % (ftype, version))
            if ftype != DESCRIPTOR and fds:
                raise ProtocolViolation("%s arrived with %d fds" % (TYPE_NAMES.get(ftype, ftype), len(fds)))
            return ftype, request_id, payload, fds
        except BaseException:
            close_fds(fds)
            raise

    def notice(self, ftype, payload):
        """Handles an unsolicited frame (DROP, EVICT); False if ftype is not one."""
        if ftype == DROP:
            (lease,) = struct.unpack_from(">Q", payload, 0)
            name, _ = parse_string(payload, 8)
            print("DROP lease %d of %r" % (lease, name))
            return True
        if ftype == EVICT:
            ids = parse_ids(payload, "EVICT")
            print("EVICT ids %s" % ",".join(map(str, ids)))
            self.evicted.extend(ids)
            return True
        return False

    def expect_reply(self, request_id, expected_type):
        """Reads frames until the reply to request_id; DROP and EVICT notices on the way are noted."""
        while True:
            ftype, rid, payload, fds = self.read_frame()
            if self.notice(ftype, payload):
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

    def hello(self, client_name, want_version):
        """HELLO in want_version; on BAD_VERSION to a version-2 HELLO, HELLO again in version 1 (13.1)."""
        self.send_version = want_version
        rid = self.send(HELLO, string(client_name))
        try:
            payload, _ = self.expect_reply(rid, HELLO_OK)
        except ServerError as e:
            if e.code != BAD_VERSION or want_version == 1:
                raise
            print("BAD_VERSION to HELLO version 2: saying HELLO in version 1")
            self.send_version = 1
            rid = self.send(HELLO, string(client_name))
            payload, _ = self.expect_reply(rid, HELLO_OK)
        version, max_fds = struct.unpack(">HH", payload)
        if version not in (1, self.send_version):
            raise ProtocolViolation("HELLO_OK announces version %d to a version-%d HELLO" % (version, self.send_version))
        self.version = self.send_version = version
        print("HELLO_OK version %d, max fds %d" % (version, max_fds))
        return version


def check_sizes(sizes, size):
    if any(s == 0 or s >= 1 << 63 for s in sizes) or sum(sizes) >= 1 << 63:
        raise ProtocolViolation("bad chunk sizes %r" % sizes)
    if not 1 <= size <= sum(sizes):
        raise ProtocolViolation("buffer size %d for chunks %r" % (size, sizes))


class Rejected(Exception):
    """A DESCRIPTOR this client refuses once its lease id is known: answered with ERROR code, then
    RELEASE (section 3), and in version 2 FORGET of the ids it brought (13.3)."""

    def __init__(self, code, message):
        super().__init__("%s (%d): %s" % (ERROR_NAMES[code], code, message))
        self.code = code
        self.message = message
        self.lease = None
        self.fresh_ids = []


def descriptor_header(payload, chunk_bytes):
    """Both versions: (lease, size, count) after the checks of the fixed part (section 3; 13.3
    with 20-byte chunks). A payload too short for the lease id is a violation (no lease to
    release); past that, a refusal is Rejected with the lease id."""
    if len(payload) < 24:
        raise ProtocolViolation("DESCRIPTOR payload of %d bytes" % len(payload))
    lease, handle_type, size, count = struct.unpack_from(">QIQI", payload, 0)
    try:
        if handle_type != 1:
            raise Rejected(BAD_PAYLOAD, "handle type %d (expected: 1)" % handle_type)
        if lease == 0:
            raise Rejected(BAD_PAYLOAD, "lease id 0 (expected: non-zero)")
        if not 1 <= count <= MAX_FDS or len(payload) != 24 + chunk_bytes * count:
            raise Rejected(BAD_PAYLOAD, "chunk count %d with a %d-byte payload" % (count, len(payload)))
    except Rejected as e:
        e.lease = lease
        raise
    return lease, size, count


def parse_descriptor(payload, fds):
    """Version 1 (section 3): returns (lease, size, sizes); raises Rejected once the lease id is known."""
    lease, size, count = descriptor_header(payload, 8)
    try:
        sizes = list(struct.unpack_from(">%dQ" % count, payload, 24))
        try:
            check_sizes(sizes, size)
        except ProtocolViolation as e:
            raise Rejected(BAD_PAYLOAD, str(e))
        if len(fds) != count:
            raise Rejected(FD_COUNT_MISMATCH, "%d chunks but %d fds" % (count, len(fds)))
    except Rejected as e:
        e.lease = lease
        raise
    return lease, size, sizes


def parse_descriptor_v2(payload, fds):
    """Version 2 (section 13.3): returns (lease, size, [(size, id, flags)]); raises Rejected."""
    lease, size, count = descriptor_header(payload, 20)
    try:
        chunks = [struct.unpack_from(">QQI", payload, 24 + 20 * i) for i in range(count)]
        try:
            check_sizes([c[0] for c in chunks], size)
        except ProtocolViolation as e:
            raise Rejected(BAD_PAYLOAD, str(e))
        ids = [c[1] for c in chunks]
        if 0 in ids or len(set(ids)) != count:
            raise Rejected(BAD_PAYLOAD, "allocation ids %r (non-zero, no id twice)" % ids)
        if any(c[2] & ~FLAG_FD for c in chunks):
            raise Rejected(BAD_PAYLOAD, "chunk flags %r (only bit 0 is defined)" % [c[2] for c in chunks])
        with_fd = sum(1 for c in chunks if c[2] & FLAG_FD)
        if len(fds) != with_fd:
            raise Rejected(FD_COUNT_MISMATCH, "%d chunks with FD but %d fds" % (with_fd, len(fds)))
    except Rejected as e:
        e.lease = lease
        e.chunks = chunks
        raise
    return lease, size, chunks


def map_fd(fd, chunk):
    """Maps one host-driver memfd of `chunk` bytes (section 7)."""
    target = os.readlink("/proc/self/fd/%d" % fd)
    if not target.startswith("/memfd:cuvmm-host"):
        raise ProtocolViolation("fd %d is %s, not a cuvmm host memfd (this client maps host-driver "
                                "memory only)" % (fd, target))
    if os.fstat(fd).st_size != chunk:
        raise ProtocolViolation("fd %d has %d bytes, the descriptor says %d" % (fd, os.fstat(fd).st_size, chunk))
    return mmap.mmap(fd, chunk, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)


class Client:
    """Attaches in version 1 or 2; in version 2 keeps chunk mappings by allocation id (LRU)."""

    def __init__(self, conn, cache_ids):
        self.conn = conn
        self.cache_ids = cache_ids
        self.held = collections.OrderedDict()     # id -> (size, mmap); oldest first
        self.fds_total = 0
        self.hits = 0
        self.misses = 0
        self.rounds = 0

    def attach(self, name):
        """ATTACH; returns (lease, size, sizes, maps, fds received). The caller releases the lease."""
        rid = self.conn.send(ATTACH, string(name))
        payload, fds = self.conn.expect_reply(rid, DESCRIPTOR)
        self.fds_total += len(fds)
        if self.conn.version == 1:
            maps = []
            try:
                try:
                    lease, size, sizes = parse_descriptor(payload, fds)
                except Rejected as e:
                    close_fds(fds)
                    fds = []
                    self.reject(rid, e)
                for fd, chunk in zip(fds, sizes):
                    maps.append(map_fd(fd, chunk))
            except BaseException:
                for m in maps:
                    m.close()
                raise
            finally:
                close_fds(fds)          # the mappings keep the memory; the fds are not needed
            return lease, size, sizes, maps, len(fds)
        try:
            lease, size, chunks = parse_descriptor_v2(payload, fds)
            # Against what this client holds (13.3), before anything is mapped.
            for csize, cid, flags in chunks:
                if flags & FLAG_FD and cid in self.held:
                    raise Rejected(UNKNOWN_ID, "chunk id %d came with an fd but this client holds it" % cid)
                if not flags & FLAG_FD:
                    if cid not in self.held:
                        raise Rejected(UNKNOWN_ID, "chunk id %d came without fd and this client does not hold it" % cid)
                    if self.held[cid][0] != csize:
                        raise Rejected(BAD_PAYLOAD, "chunk id %d came with %d bytes; it was given with %d"
                                       % (cid, csize, self.held[cid][0]))
        except Rejected as e:
            close_fds(fds)
            # 13.3: the ids that came with FD and that this client did not hold are held by the
            # server from this DESCRIPTOR on: FORGET them, or every later DESCRIPTOR names them
            # without fd (whatever the reason for the refusal, a bad fd count included).
            e.fresh_ids = [cid for _, cid, flags in getattr(e, "chunks", [])
                           if flags & FLAG_FD and cid != 0 and cid not in self.held]
            self.reject(rid, e)
        new = 0
        try:
            for csize, cid, flags in chunks:
                if flags & FLAG_FD:
                    self.held[cid] = (csize, map_fd(fds[new], csize))
                    new += 1
                self.held.move_to_end(cid)
        finally:
            close_fds(fds)              # the mapping is what holds the id from here on
        if new == 0:
            self.hits += 1
        else:
            self.misses += 1
        return lease, size, [c[0] for c in chunks], [self.held[c[1]][1] for c in chunks], len(fds)

    def reject(self, rid, e):
        """Answers a refused DESCRIPTOR with ERROR (its request id), RELEASEs its lease (13.3)."""
        print("REJECTED DESCRIPTOR lease %d: %s" % (e.lease, e))
        msg = e.message.encode("utf-8")[:4096]
        self.conn.send(ERROR, struct.pack(">IH", e.code, len(msg)) + msg, request_id=rid)
        if e.lease:                     # lease id 0 names no lease: nothing to release
            self.release(e.lease)
        fresh = sorted(set(e.fresh_ids))
        if fresh:
            rid = self.conn.send(FORGET, struct.pack(">I%dQ" % len(fresh), len(fresh), *fresh))
            payload, _ = self.conn.expect_reply(rid, FORGOTTEN)
            print("FORGOT %d id(s) of the refused DESCRIPTOR" % struct.unpack(">I", payload)[0])
        raise ProtocolViolation("DESCRIPTOR refused: %s" % e)

    def release(self, lease):
        rid = self.conn.send(RELEASE, struct.pack(">Q", lease))
        payload, _ = self.conn.expect_reply(rid, RELEASED)
        return struct.unpack(">Q", payload)[0]

    def after_release(self):
        """No lease of this client is open now: apply EVICTs, then the cache bound."""
        self.handle_evictions()
        if self.conn.version != 2:
            return
        idle = list(self.held) if self.cache_ids == 0 else list(self.held)[:max(0, len(self.held) - self.cache_ids)]
        if idle:
            self.forget(idle)

    def forget(self, ids):
        """Unmaps the ids this client holds, then FORGET all of them; returns the FORGOTTEN count."""
        for i in ids:
            entry = self.held.pop(i, None)
            if entry is not None:
                entry[1].close()
        forgotten = 0
        for k in range(0, len(ids), MAX_IDS_PER_FRAME):
            part = ids[k:k + MAX_IDS_PER_FRAME]
            rid = self.conn.send(FORGET, struct.pack(">I%dQ" % len(part), len(part), *part))
            payload, _ = self.conn.expect_reply(rid, FORGOTTEN)
            (n,) = struct.unpack(">I", payload)
            if n != len(part):
                raise ProtocolViolation("FORGOTTEN %d for a FORGET of %d ids" % (n, len(part)))
            forgotten += n
        return forgotten

    def handle_evictions(self):
        """EVICTed ids: unmap, FORGET (an id not held, or already forgotten, is ignored: 13.6)."""
        done = []
        forgotten = 0
        while self.conn.evicted:
            ids = [i for i in dict.fromkeys(self.conn.evicted) if i in self.held]
            self.conn.evicted = []
            if ids:
                forgotten += self.forget(ids)   # may note more EVICTs: the loop takes them
                done.extend(ids)
        return done, forgotten

    def wait_evict(self, seconds):
        """Reads frames until an EVICT arrived (nothing else is expected: no request is open)."""
        self.conn.sock.settimeout(seconds)
        try:
            while not self.conn.evicted:
                ftype, rid, payload, fds = self.conn.read_frame()
                if not self.conn.notice(ftype, payload):
                    close_fds(fds)
                    raise ProtocolViolation("unexpected %s #%d while waiting for EVICT" % (TYPE_NAMES[ftype], rid))
        except socket.timeout:
            raise ProtocolViolation("no EVICT within %d s" % seconds)
        finally:
            self.conn.sock.settimeout(None)
        return self.handle_evictions()

    def round(self, name, seed, write_seed, verbose):
        """attach, verify, write, unmap what is not cached, RELEASE; returns (status, fds, lease, chunks)."""
        lease, size, sizes, maps, nfds = self.attach(name)
        if verbose:
            print("DESCRIPTOR lease %d, size %d, chunks %r" % (lease, size, sizes))
        status = 0
        try:
            status = use(maps, sizes, size, seed, write_seed, verbose)
        finally:
            if self.conn.version == 1:
                for m in maps:
                    m.close()
            del maps
            released = self.release(lease)
        if verbose:
            print("RELEASED lease %d" % released)
        self.after_release()
        self.rounds += 1
        return status, nfds, lease, len(sizes)


TEMPLATE = bytes((j * 131) & 0xFF for j in range(2048))


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


def use(maps, sizes, size, seed, write_seed, verbose):
    """Verifies the pattern with seed, then writes write_seed (each if not None); returns the status."""
    status = 0
    if seed is not None:
        start = 0
        for m, chunk in zip(maps, sizes):
            n = min(chunk, size - start)
            if n <= 0:
                break
            bad = check_pattern(m[:n], start, seed, TEMPLATE)
            if bad:
                print("MISMATCH at offset %d: 0x%02X (expected 0x%02X)" % bad)
                status = 3
                break
            start += chunk
        if status == 0 and verbose:
            print("VERIFIED %d bytes with seed %d" % (size, seed))
    if write_seed is not None and status == 0:
        start = 0
        for m, chunk in zip(maps, sizes):
            n = min(chunk, size - start)
            if n <= 0:
                break
            for off in range(0, n, 2048):
                block = expected_block((start + off) >> 11, write_seed, TEMPLATE)
                m[off:off + min(2048, n - off)] = block[:min(2048, n - off)]
            start += chunk
        if verbose:
            print("WROTE %d bytes with seed %d" % (size, write_seed))
    return status


def commands(client):
    """The --commands loop (see the module doc)."""
    for line in sys.stdin:
        words = line.split()
        if not words:
            continue
        try:
            if words[0] == "attach":
                seed = int(words[2]) if len(words) > 2 else None
                write_seed = int(words[3]) if len(words) > 3 else None
                status, nfds, lease, chunks = client.round(words[1], seed, write_seed, False)
                print("ROUND %d lease=%d chunks=%d fds=%d fds_total=%d hits=%d misses=%d held=%d verified=%s"
                      % (client.rounds, lease, chunks, nfds, client.fds_total, client.hits, client.misses,
                         len(client.held), "skipped" if seed is None else ("yes" if status == 0 else "no")))
                if status:
                    return status
            elif words[0] == "evict":
                ids, forgotten = client.wait_evict(30)
                print("EVICTED ids=%s forgotten=%d held=%d" % (",".join(map(str, ids)), forgotten, len(client.held)))
            elif words[0] == "forget":
                n = client.forget([int(w) for w in words[1:]])
                print("FORGOTTEN %d held=%d" % (n, len(client.held)))
            elif words[0] == "quit":
                break
            else:
                print("UNKNOWN COMMAND %r" % line.strip())
        except ServerError as e:
            print("ERROR %s" % e)
        sys.stdout.flush()
    if client.held:
        client.forget(list(client.held))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--socket", required=True)
    ap.add_argument("--name", help="attach this buffer once (one-shot mode)")
    ap.add_argument("--commands", action="store_true", help="read commands from stdin (see the module doc)")
    ap.add_argument("--seed", type=int, default=None, help="verify the pattern with this seed")
    ap.add_argument("--write-seed", type=int, default=None, help="then fill the buffer with this seed")
    ap.add_argument("--client-name", default="python pid %d" % os.getpid())
    ap.add_argument("--protocol", type=int, choices=(1, 2), default=1, help="version of the HELLO (default 1)")
    ap.add_argument("--cache-ids", type=int, default=64, help="version 2: idle ids kept mapped (0: none)")
    args = ap.parse_args()
    if (args.name is None) == (not args.commands):
        ap.error("--name NAME or --commands (one of them)")
    if args.cache_ids < 0:
        ap.error("--cache-ids: %d (expected: 0 or more)" % args.cache_ids)

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(args.socket)
    except OSError as e:
        print("cannot connect to %s: %s" % (args.socket, e))
        return 5
    try:
        conn = Connection(sock)
        conn.hello(args.client_name, args.protocol)
        sys.stdout.flush()
        client = Client(conn, args.cache_ids)
        if args.commands:
            return commands(client)
        status, _, _, _ = client.round(args.name, args.seed, args.write_seed, True)
        if client.held:
            print("FORGOTTEN %d" % client.forget(list(client.held)))
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
