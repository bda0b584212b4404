// The C++ baseline of the descriptor-transport benchmark (bench/run-sharing-pool,
// org.cuvmm.bench.sharing.TransportBenchmark): a sendmsg/recvmsg SCM_RIGHTS ping-pong
// between two threads over a socketpair, with the same driver-table calls the Java path
// makes, and nothing of ours in between.
//
// Like bench/native/baseline.cpp it links native/'s static library only to select the
// driver exactly as Java does (cuvmm::select_driver; CUVMM_DRIVER, CUVMM_HOST_DEVICES,
// CUVMM_HOST_GRANULARITY, CUVMM_CUDA_LIBRARY) and then calls the driver table's function
// pointers directly: no call counters in the timed path, no Step, no shared_ptr, no
// exceptions.
//
// Setup (not timed): a source buffer of N chunks of one granularity (2 MiB) each, mapped
// in one reservation (the Java side builds the same by growing a one-chunk buffer).
//
// One round, timed on the sender thread:
//   sender:   cuCtxGetCurrent, N x cuMemExportToShareableHandle; sendmsg(frame, N fds);
//             close the N fds; recv the 1-byte ack
//   receiver: recvmsg(frame, N fds); cuCtxGetCurrent, cuMemAddressReserve (N chunks),
//             N x (cuMemImportFromShareableHandle, cuMemGetAllocationPropertiesFromHandle,
//             cuMemMap, cuMemSetAccess); N x (cuMemUnmap, cuMemRelease); cuMemAddressFree,
//             each teardown call after a cuCtxGetCurrent (cuvmm's TeardownContextScope);
//             close the N fds; send the 1-byte ack
// The frame is the same bytes the Java side sends: int32 flags (0), int32 N, int64 size,
// N x int64 chunk size, little-endian (host order on x86-64 and aarch64).
//
// Usage: cuvmm-transport-baseline [--chunks N] [--warmup-rounds N] [--rounds N] [--round-ms N]
//        cuvmm-transport-baseline --pingpong A,B[,C,D...] [--cpus T,P] [--work-ns T,P] [--warmup-rounds N] [--rounds N] [--round-ms N]
// --pingpong is the bare Unix-socket ping-pong of bench/run-sharing-v2 (SharingV2Report): no
// driver, no fds, nothing of ours; the two threads of a socketpair exchange messages of the
// given sizes in turn (the timed thread sends A, the peer answers B, then C and D, ...), one
// send() and one recv(MSG_WAITALL) per message. One round is the whole list. It prints
// "result name=pingpong_A_B_... mean_ns=... cpu_ns_per_round=... rounds_ns=..." and selects no driver.
// --cpus T,P pins the timed thread to CPU T and the peer to CPU P (sched_setaffinity), as
// SharingV2Report --placement pins its consumer and producer threads; cpu_ns_per_round is the
// process's CPU time (getrusage: user + system, both threads) over the measured rounds / rounds,
// and switches_per_round its context switches (getrusage: voluntary + involuntary) over them.
// --work-ns T,P (a diagnostic, issue 11) makes each thread busy-wait T (timed thread) or P (peer)
// ns of CPU before each of its sends, standing in for the work a real implementation does per
// message: with T != P the scheduler's wake-up preemption changes (more switches per round).
// --segments-on-stdin (with --pingpong; SharingV2Report's interleaved measurement): prints
// "ready ..." once its threads run, then for each line "segment" read from stdin times one
// segment of --round-ms (no warm-up of its own: the caller discards its first segments) and
// prints "segment ns_per_round=... cpu_ns=... switches=... rounds=..." (CPU and context
// switches of the process over that segment, getrusage); ends at the end of stdin.
// Output: "driver ...", "calls name=... entry=count ..." (one counted round),
//         "result name=transport_<N>chunk mean_ns=... rounds_ns=a,b,c", "live ..." (host driver).
#include "cuvmm/driver.hpp"
#include "baseline_common.hpp"

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace {

using namespace cuvmm_bench;
using cuvmm::Entry;
using cuvmm::kEntryCount;
using Clock = std::chrono::steady_clock;

constexpr int kMaxChunks = 16;

struct CallCounts {
    std::array<long long, kEntryCount> n{};
};

// Both threads count into one table, only in the counted round (the socket ping-pong
// orders their accesses: never both at once).
CallCounts g_counts;

#define TB_CALL(kCount, op, name, ...)                                               \
    do {                                                                             \
        if constexpr (kCount) ++g_counts.n[static_cast<int>(Entry::name)];           \
        CUresult rc_ = table.name(__VA_ARGS__);                                      \
        if (rc_ != CUDA_SUCCESS) fail_call(#name, rc_, op);                          \
    } while (0)

struct Env {
    const cuvmm::DriverTable& table;
    CUcontext ctx;
    CUmemAllocationProp prop;
    CUmemAccessDesc access;
    size_t granularity;
};

template <bool kCount>
inline void make_current(const Env& e, const char* op) {
    const cuvmm::DriverTable& table = e.table;
    CUcontext current = nullptr;
    TB_CALL(kCount, op, cuCtxGetCurrent, &current);
    if (current != e.ctx) TB_CALL(kCount, op, cuCtxSetCurrent, e.ctx);
}

struct Frame {
    int32_t flags;
    int32_t chunks;
    int64_t size;
    int64_t sizes[kMaxChunks];
};

size_t frame_bytes(int chunks) { return 16 + 8 * static_cast<size_t>(chunks); }

void send_with_fds(int sock, const void* data, size_t len, const int* fds, int nfds) {
    iovec iov{const_cast<void*>(data), len};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxChunks)];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (nfds > 0) {
        msg.msg_control = control;
        msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
        cmsghdr* c = CMSG_FIRSTHDR(&msg);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
        std::memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
    }
    ssize_t r;
    do r = ::sendmsg(sock, &msg, MSG_NOSIGNAL);
    while (r < 0 && errno == EINTR);
    if (r != static_cast<ssize_t>(len)) die(std::string("sendmsg: ") + (r < 0 ? std::strerror(errno) : "short send"));
}

// Returns bytes read (0 at end of stream); fds received go to out_fds / *nfds.
ssize_t recv_with_fds(int sock, void* data, size_t len, int* out_fds, int* nfds) {
    iovec iov{data, len};
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxChunks)];
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    ssize_t r;
    do r = ::recvmsg(sock, &msg, MSG_CMSG_CLOEXEC | MSG_WAITALL);
    while (r < 0 && errno == EINTR);
    if (r < 0) die(std::string("recvmsg: ") + std::strerror(errno));
    if (msg.msg_flags & MSG_CTRUNC) die("recvmsg: control truncated");
    *nfds = 0;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
            int n = static_cast<int>((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
            std::memcpy(out_fds + *nfds, CMSG_DATA(c), sizeof(int) * n);
            *nfds += n;
        }
    }
    return r;
}

struct Source {
    CUdeviceptr address = 0;
    std::vector<CUmemGenericAllocationHandle> handles;
};

// Sender side of one round. The frame is prebuilt (its content does not change).
template <bool kCount>
inline void send_round(const Env& e, const Source& s, int sock, const Frame& frame, int chunks) {
    static const char* op = "export";
    const cuvmm::DriverTable& table = e.table;
    int fds[kMaxChunks];
    make_current<kCount>(e, op);
    for (int i = 0; i < chunks; ++i) {
        TB_CALL(kCount, op, cuMemExportToShareableHandle, &fds[i], s.handles[i],
                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    }
    send_with_fds(sock, &frame, frame_bytes(chunks), fds, chunks);
    for (int i = 0; i < chunks; ++i) ::close(fds[i]);
    char ack = 0;
    ssize_t r;
    do r = ::recv(sock, &ack, 1, 0);
    while (r < 0 && errno == EINTR);
    if (r != 1) die("recv ack failed");
}

// Receiver side of one round, after the frame and its fds arrived.
template <bool kCount>
inline void import_round(const Env& e, const Frame& f, const int* fds) {
    static const char* op = "import";
    const cuvmm::DriverTable& table = e.table;
    const int chunks = f.chunks;
    size_t total = 0;
    for (int i = 0; i < chunks; ++i) total += static_cast<size_t>(f.sizes[i]);
    make_current<kCount>(e, op);
    CUdeviceptr base = 0;
    TB_CALL(kCount, op, cuMemAddressReserve, &base, total, e.granularity, 0, 0);  // explicit alignment (A2)
    CUmemGenericAllocationHandle h[kMaxChunks];
    CUdeviceptr at = base;
    for (int i = 0; i < chunks; ++i) {
        const size_t sz = static_cast<size_t>(f.sizes[i]);
        TB_CALL(kCount, op, cuMemImportFromShareableHandle, &h[i], reinterpret_cast<void*>(static_cast<intptr_t>(fds[i])),
                CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        CUmemAllocationProp prop{};
        TB_CALL(kCount, op, cuMemGetAllocationPropertiesFromHandle, &prop, h[i]);
        if (prop.location.type != e.prop.location.type || prop.location.id != e.prop.location.id) {
            die("import: the memory lives elsewhere");
        }
        TB_CALL(kCount, op, cuMemMap, at, sz, 0, h[i], 0);
        TB_CALL(kCount, op, cuMemSetAccess, at, sz, &e.access, 1);
        at += sz;
    }
    // close of the imported buffer: each mapping unmapped and its allocation released, then the range.
    at = base;
    for (int i = 0; i < chunks; ++i) {
        const size_t sz = static_cast<size_t>(f.sizes[i]);
        make_current<kCount>(e, op);
        TB_CALL(kCount, op, cuMemUnmap, at, sz);
        make_current<kCount>(e, op);
        TB_CALL(kCount, op, cuMemRelease, h[i]);
        at += sz;
    }
    make_current<kCount>(e, op);
    TB_CALL(kCount, op, cuMemAddressFree, base, total);
}

std::atomic<bool> g_counting{false};

void receiver_loop(const Env& e, int sock, int chunks) {
    Frame f{};
    const size_t want = frame_bytes(chunks);
    for (;;) {
        int fds[kMaxChunks];
        int nfds = 0;
        ssize_t r = recv_with_fds(sock, &f, want, fds, &nfds);
        if (r == 0) return;  // the sender shut down: done
        if (static_cast<size_t>(r) != want) die("receiver: short frame");
        if (f.chunks != chunks || nfds != chunks) die("receiver: frame/fd count mismatch");
        if (g_counting.load(std::memory_order_acquire)) import_round<true>(e, f, fds);
        else import_round<false>(e, f, fds);
        for (int i = 0; i < nfds; ++i) ::close(fds[i]);
        char ack = 1;
        ssize_t w;
        do w = ::send(sock, &ack, 1, MSG_NOSIGNAL);
        while (w < 0 && errno == EINTR);
        if (w != 1) die("send ack failed");
    }
}

volatile long long g_sink = 0;

// ---------------------------------------------------------------- bare ping-pong

constexpr size_t kMaxMessage = 16 + 65536;  // a frame header and the largest payload

void write_all(int sock, const char* p, size_t n) {
    while (n > 0) {
        ssize_t w = ::send(sock, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) die(std::string("send: ") + (w < 0 ? std::strerror(errno) : "0 bytes"));
        p += w;
        n -= static_cast<size_t>(w);
    }
}

// false at end of stream before the first byte.
bool read_all(int sock, char* p, size_t n) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = ::recv(sock, p + got, n - got, MSG_WAITALL);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) die(std::string("recv: ") + std::strerror(errno));
        if (r == 0) {
            if (got == 0) return false;
            die("recv: stream ended inside a message");
        }
        got += static_cast<size_t>(r);
    }
    return true;
}

// Pins the calling thread to one CPU (--cpus); -1: leave it where the scheduler puts it.
void pin_this_thread(int cpu) {
    if (cpu < 0) return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    const int rc = pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
    if (rc != 0) die("--cpus: pthread_setaffinity_np(cpu " + std::to_string(cpu) + "): " + std::strerror(rc));
}

long long process_cpu_ns() {
    rusage u{};
    ::getrusage(RUSAGE_SELF, &u);
    auto ns = [](const timeval& t) { return static_cast<long long>(t.tv_sec) * 1000000000LL + t.tv_usec * 1000LL; };
    return ns(u.ru_utime) + ns(u.ru_stime);
}

// Context switches of the process (every thread): voluntary + involuntary.
long long process_switches() {
    rusage u{};
    ::getrusage(RUSAGE_SELF, &u);
    return static_cast<long long>(u.ru_nvcsw) + static_cast<long long>(u.ru_nivcsw);
}

// Busy for `ns` of wall time (0: returns at once): --work-ns's stand-in for per-message work.
void busy_ns(long ns) {
    if (ns <= 0) return;
    const auto until = Clock::now() + std::chrono::nanoseconds(ns);
    while (Clock::now() < until) {
    }
}

// "T,P": two numbers at least `min` (--cpus, --work-ns); dies naming `option` otherwise.
std::pair<long, long> parse_pair(const std::string& option, const std::string& v, long min, long max,
                                 const char* expected) {
    char* stop = nullptr;
    const long t = std::strtol(v.c_str(), &stop, 10);
    if (stop == v.c_str() || *stop != ',' || t < min || t > max) die(option + ": " + v + " (expected: " + expected + ")");
    const char* second = stop + 1;
    const long q = std::strtol(second, &stop, 10);
    if (stop == second || *stop != '\0' || q < min || q > max) die(option + ": " + v + " (expected: " + expected + ")");
    return {t, q};
}

int run_pingpong(const std::string& list, int warmup, int rounds, long round_ms, int timed_cpu, int peer_cpu,
                 long timed_work_ns, long peer_work_ns, bool segments_on_stdin) {
    std::vector<size_t> sizes;
    std::string name = "pingpong";
    size_t start = 0;
    while (start <= list.size()) {
        size_t end = list.find(',', start);
        if (end == std::string::npos) end = list.size();
        const std::string v = list.substr(start, end - start);
        char* stop = nullptr;
        const unsigned long long n = std::strtoull(v.c_str(), &stop, 10);
        if (v.empty() || *stop != '\0' || n < 1 || n > kMaxMessage) {
            die("--pingpong: " + list + " (expected: an even number of sizes, 1 to " + std::to_string(kMaxMessage) +
                " bytes each, comma-separated)");
        }
        sizes.push_back(static_cast<size_t>(n));
        name += "_" + v;
        start = end + 1;
    }
    if (sizes.size() % 2 != 0) die("--pingpong: " + list + " (expected: an even number of sizes)");
    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) die(std::string("socketpair: ") + std::strerror(errno));
    std::atomic<bool> peer_started{false};
    std::thread peer([&] {
        pin_this_thread(peer_cpu);
        std::vector<char> buf(kMaxMessage, 1);
        peer_started.store(true, std::memory_order_release);
        for (;;) {
            for (size_t i = 0; i < sizes.size(); i += 2) {
                if (!read_all(sv[1], buf.data(), sizes[i])) return;  // the timed side shut down: done
                busy_ns(peer_work_ns);
                write_all(sv[1], buf.data(), sizes[i + 1]);
            }
        }
    });
    pin_this_thread(timed_cpu);
    std::vector<char> buf(kMaxMessage, 2);
    auto one_round = [&] {
        for (size_t i = 0; i < sizes.size(); i += 2) {
            busy_ns(timed_work_ns);
            write_all(sv[0], buf.data(), sizes[i]);
            if (!read_all(sv[0], buf.data(), sizes[i + 1])) die("the peer ended the stream");
        }
    };
    // Rounds for round_ms: {elapsed ns, rounds}.
    auto timed_segment = [&] {
        long long ops = 0;
        const auto begin = Clock::now();
        auto now = begin;
        do {
            one_round();
            ++ops;
            now = Clock::now();
        } while (now - begin < std::chrono::milliseconds(round_ms));
        return std::make_pair(std::chrono::duration<double, std::nano>(now - begin).count(), ops);
    };
    // The peer reads the end of the stream and ends; then both ends close.
    auto finish = [&] {
        ::shutdown(sv[0], SHUT_WR);
        peer.join();
        ::close(sv[0]);
        ::close(sv[1]);
    };
    if (segments_on_stdin) {
        // Interleaved with the Java rounds by SharingV2Report: one timed segment per request,
        // so that a drift of the machine's speed falls on both sides of each ratio alike.
        // "ready" once the peer runs where --cpus put it: its start is in no segment.
        while (!peer_started.load(std::memory_order_acquire)) std::this_thread::yield();
        std::printf("ready pingpong=%s segment_ms=%ld\n", list.c_str(), round_ms);
        std::fflush(stdout);
        char line[64];
        while (std::fgets(line, sizeof line, stdin) != nullptr) {
            if (std::strcmp(line, "segment\n") != 0) {
                die("stdin: '" + std::string(line, std::strcspn(line, "\n")) + "' (expected: a line 'segment')");
            }
            const long long cpu0 = process_cpu_ns();
            const long long switches0 = process_switches();
            const auto [elapsed_ns, ops] = timed_segment();
            const long long cpu_ns = process_cpu_ns() - cpu0;
            const long long switches = process_switches() - switches0;
            std::printf("segment ns_per_round=%.1f cpu_ns=%lld switches=%lld rounds=%lld\n",
                        elapsed_ns / static_cast<double>(ops), cpu_ns, switches, ops);
            std::fflush(stdout);
        }
        finish();
        return 0;
    }
    std::printf("settings pingpong=%s warmup_rounds=%d rounds=%d round_ms=%ld work_ns=%ld,%ld\n", list.c_str(), warmup,
                rounds, round_ms, timed_work_ns, peer_work_ns);
    std::vector<double> round_ns;
    long long measured_ops = 0;
    long long cpu_start = 0;
    long long switches_start = 0;
    for (int i = 0; i < warmup + rounds; ++i) {
        if (i == warmup) {
            cpu_start = process_cpu_ns();
            switches_start = process_switches();
        }
        const auto [elapsed_ns, ops] = timed_segment();
        g_sink = ops;
        if (i >= warmup) {
            round_ns.push_back(elapsed_ns / static_cast<double>(ops));
            measured_ops += ops;
        }
    }
    const long long cpu_ns = process_cpu_ns() - cpu_start;
    const long long switches = process_switches() - switches_start;
    finish();
    double sum = 0;
    for (double v : round_ns) sum += v;
    std::printf("result name=%s mean_ns=%.1f cpu_ns_per_round=%.1f switches_per_round=%.2f rounds=%zu ops=%lld rounds_ns=",
                name.c_str(), sum / static_cast<double>(round_ns.size()),
                static_cast<double>(cpu_ns) / static_cast<double>(measured_ops),
                static_cast<double>(switches) / static_cast<double>(measured_ops), round_ns.size(), measured_ops);
    for (size_t i = 0; i < round_ns.size(); ++i) std::printf("%s%.1f", i ? "," : "", round_ns[i]);
    std::printf("\n");
    return 0;
}

}  // namespace

int main(int argc, char** argv) {
    cuvmm_bench::program = "cuvmm-transport-baseline";
    int chunks = 1, warmup = 3, rounds = 5;
    long round_ms = 1000;
    std::string pingpong;
    int timed_cpu = -1, peer_cpu = -1;
    long timed_work_ns = 0, peer_work_ns = 0;
    bool work_set = false;
    bool segments_on_stdin = false;
    for (int i = 1; i < argc; ++i) {
        std::string a = argv[i];
        if (a == "--pingpong") {
            if (i + 1 >= argc) die("--pingpong needs a value");
            pingpong = argv[++i];
        } else if (a == "--cpus") {
            if (i + 1 >= argc) die("--cpus needs a value (T,P: the timed thread's CPU, the peer's CPU)");
            const auto cpus = parse_pair("--cpus", argv[++i], 0, CPU_SETSIZE - 1, "T,P, two CPU numbers, e.g. 1,0");
            timed_cpu = static_cast<int>(cpus.first);
            peer_cpu = static_cast<int>(cpus.second);
        } else if (a == "--work-ns") {
            if (i + 1 >= argc) die("--work-ns needs a value (T,P: ns of busy work before each send, timed thread, peer)");
            const auto work = parse_pair("--work-ns", argv[++i], 0, 1000000000L,
                                         "T,P, ns of busy work before each send (0 to 1e9), e.g. 1500,1000");
            timed_work_ns = work.first;
            peer_work_ns = work.second;
            work_set = true;
        } else if (a == "--segments-on-stdin") {
            segments_on_stdin = true;
        } else if (a == "--chunks") chunks = static_cast<int>(parse_count(argc, argv, i, 1));
        else if (a == "--warmup-rounds") warmup = static_cast<int>(parse_count(argc, argv, i, 0));
        else if (a == "--rounds") rounds = static_cast<int>(parse_count(argc, argv, i, 1));
        else if (a == "--round-ms") round_ms = parse_count(argc, argv, i, 1);
        else if (a == "--help" || a == "-h") {
            std::printf("usage: cuvmm-transport-baseline [--chunks N | --pingpong A,B[,C,D...] [--cpus T,P] [--work-ns T,P] "
                        "[--segments-on-stdin]] "
                        "[--warmup-rounds N] [--rounds N] [--round-ms N]\n");
            return 0;
        } else {
            die("unknown argument: " + a + " (try --help)");
        }
    }
    if (chunks > kMaxChunks) die("--chunks: at most " + std::to_string(kMaxChunks));
    if (timed_cpu >= 0 && pingpong.empty()) die("--cpus is for --pingpong only");
    if (work_set && pingpong.empty()) die("--work-ns is for --pingpong only");
    if (segments_on_stdin && pingpong.empty()) die("--segments-on-stdin is for --pingpong only");
    if (!pingpong.empty()) {
        return run_pingpong(pingpong, warmup, rounds, round_ms, timed_cpu, peer_cpu, timed_work_ns, peer_work_ns,
                            segments_on_stdin);  // no driver
    }

    cuvmm::DriverKind kind = select_and_report_driver();

    const cuvmm::DriverTable& table = cuvmm::driver();
    static const char* op = "setup";
    CUdevice dev = 0;
    TB_CALL(false, op, cuDeviceGet, &dev, 0);
    CUcontext ctx = nullptr;
    TB_CALL(false, op, cuDevicePrimaryCtxRetain, &ctx, dev);
    TB_CALL(false, op, cuCtxSetCurrent, ctx);
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    size_t g = 0;
    TB_CALL(false, op, cuMemGetAllocationGranularity, &g, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
    CUmemAccessDesc access{};
    access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access.location.id = 0;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    const Env env{table, ctx, prop, access, g};

    // The source buffer: N chunks of g in one reservation.
    Source src;
    TB_CALL(false, op, cuMemAddressReserve, &src.address, g * chunks, 0, 0, 0);
    for (int i = 0; i < chunks; ++i) {
        CUmemGenericAllocationHandle h = 0;
        TB_CALL(false, op, cuMemCreate, &h, g, &prop, 0);
        TB_CALL(false, op, cuMemMap, src.address + g * i, g, 0, h, 0);
        TB_CALL(false, op, cuMemSetAccess, src.address + g * i, g, &access, 1);
        src.handles.push_back(h);
    }
    Frame frame{};
    frame.flags = 0;
    frame.chunks = chunks;
    frame.size = static_cast<int64_t>(g) * chunks;
    for (int i = 0; i < chunks; ++i) frame.sizes[i] = static_cast<int64_t>(g);

    int sv[2];
    if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) die(std::string("socketpair: ") + std::strerror(errno));
    std::thread receiver([&] { receiver_loop(env, sv[1], chunks); });
    const int sock = sv[0];
    std::printf("settings chunks=%d warmup_rounds=%d rounds=%d round_ms=%ld granularity=%zu\n", chunks, warmup, rounds,
                round_ms, g);
    std::fflush(stdout);

    // Two warm rounds (each thread makes its context current once), then one counted round.
    send_round<false>(env, src, sock, frame, chunks);
    send_round<false>(env, src, sock, frame, chunks);
    g_counting.store(true, std::memory_order_release);
    send_round<true>(env, src, sock, frame, chunks);
    g_counting.store(false, std::memory_order_release);
    const std::string name = "transport_" + std::to_string(chunks) + "chunk";
    std::printf("calls name=%s", name.c_str());
    for (int i = 0; i < kEntryCount; ++i) {
        if (g_counts.n[i] != 0) std::printf(" %s=%lld", cuvmm::entry_name(i), g_counts.n[i]);
    }
    std::printf("\n");
    std::fflush(stdout);

    std::vector<double> round_ns;
    long long measured_ops = 0;
    const auto round = std::chrono::milliseconds(round_ms);
    for (int i = 0; i < warmup + rounds; ++i) {
        long long ops = 0;
        const auto start = Clock::now();
        auto now = start;
        do {
            send_round<false>(env, src, sock, frame, chunks);
            ++ops;
            now = Clock::now();  // a round trip is microseconds: reading the clock each op is noise
        } while (now - start < round);
        g_sink = ops;
        const double ns = std::chrono::duration<double, std::nano>(now - start).count() / static_cast<double>(ops);
        if (i >= warmup) {
            round_ns.push_back(ns);
            measured_ops += ops;
        }
    }
    ::shutdown(sock, SHUT_WR);
    receiver.join();
    ::close(sv[0]);
    ::close(sv[1]);

    double sum = 0;
    for (double v : round_ns) sum += v;
    const double mean = sum / static_cast<double>(round_ns.size());
    std::printf("result name=%s mean_ns=%.1f rounds=%zu ops=%lld rounds_ns=", name.c_str(), mean, round_ns.size(),
                measured_ops);
    for (size_t i = 0; i < round_ns.size(); ++i) std::printf("%s%.1f", i ? "," : "", round_ns[i]);
    std::printf("\n");

    for (int i = 0; i < chunks; ++i) {
        TB_CALL(false, op, cuMemUnmap, src.address + g * i, g);
        TB_CALL(false, op, cuMemRelease, src.handles[i]);
    }
    TB_CALL(false, op, cuMemAddressFree, src.address, g * chunks);
    if (kind == cuvmm::DriverKind::host) {
        cuvmm::HostLiveCounts live = cuvmm::host_live_counts();
        std::printf("live allocations=%lld reservations=%lld mappings=%lld memfds=%lld\n", live.allocations,
                    live.reservations, live.mappings, live.memfds);
    }
    return 0;
}
