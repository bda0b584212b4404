// The host driver: our own implementation of the CUDA driver entry points in DriverTable,
// over POSIX shared memory (memfd + mmap), for machines without a GPU.
//
// It exists so that CI finds the bugs a GPU would find, so it is STRICT: every misuse
// returns the CUresult we believe the real driver returns, and no call, however bad its
// arguments (garbage handles, ranges outside any reservation, null out-pointers, foreign
// fds), crashes the process. Device memory is a memfd; a reservation is a PROT_NONE
// anonymous mapping; cuMemMap maps the memfd MAP_SHARED|MAP_FIXED over the reservation;
// cuMemSetAccess mprotects. All operations are synchronous.
//
// Cross-process sharing: a memfd is named "cuvmm-host:d<device>:h<requestedHandleTypes>:
// l<locationType>:n<locationId>" so an importer (another process, its own host driver)
// recovers the properties from /proc/self/fd/<fd>, and is sealed against shrinking and
// growing so that no holder can truncate it under someone else's mapping (SIGBUS).
//
// Misuse rules and what they return (one code per rule; this table is the documentation):
//
//   rule                                                                       CUresult
//   -------------------------------------------------------------------------  ----------------------------
//   any entry point except cuInit, cuDriverGetVersion, cuGetErrorName/String   CUDA_ERROR_NOT_INITIALIZED
//     before cuInit
//   cuInit(flags != 0)                                                         CUDA_ERROR_INVALID_VALUE
//   a null out-pointer / null required input pointer                           CUDA_ERROR_INVALID_VALUE
//   cuGetErrorName/String of a code cuda.h does not define (*str = nullptr)    CUDA_ERROR_INVALID_VALUE
//   device ordinal / CUdevice outside 0..device_count-1                        CUDA_ERROR_INVALID_DEVICE
//   cuDeviceGetName(len <= 0)                                                  CUDA_ERROR_INVALID_VALUE
//   cuDevicePrimaryCtxRelease without a matching retain                        CUDA_ERROR_INVALID_CONTEXT
//   cuCtxSetCurrent(ctx that is not a retained primary context)                CUDA_ERROR_INVALID_CONTEXT
//   cuCtxSynchronize / cuStreamCreate / a copy with no current context, or     CUDA_ERROR_INVALID_CONTEXT
//     with a current context whose primary context was fully released
//   allocation prop: type MANAGED                                              CUDA_ERROR_NOT_SUPPORTED
//   allocation prop: type other than PINNED                                    CUDA_ERROR_INVALID_VALUE
//   allocation prop: DEVICE location with an id that is not a device          CUDA_ERROR_INVALID_DEVICE
//   allocation prop: HOST_NUMA location with id != 0                           CUDA_ERROR_INVALID_VALUE
//   allocation prop: location type not DEVICE/HOST/HOST_NUMA (HOST_NUMA_CURRENT too) CUDA_ERROR_INVALID_VALUE
//   allocation prop: requestedHandleTypes with bits outside the enum           CUDA_ERROR_INVALID_VALUE
//   allocation prop: requestedHandleTypes FABRIC, WIN32 or WIN32_KMT           CUDA_ERROR_NOT_SUPPORTED
//   allocation prop: HOST location (not NUMA) with POSIX_FILE_DESCRIPTOR       CUDA_ERROR_INVALID_VALUE
//   allocation prop: allocFlags.gpuDirectRDMACapable != 0                      CUDA_ERROR_NOT_SUPPORTED
//   allocation prop: allocFlags.compressionType != 0                           CUDA_ERROR_NOT_SUPPORTED
//   cuMemGetAllocationGranularity option not MINIMUM/RECOMMENDED               CUDA_ERROR_INVALID_VALUE
//   cuMemCreate flags != 0, size 0 or not a multiple of the granularity        CUDA_ERROR_INVALID_VALUE
//   cuMemCreate: memfd_create / ftruncate / sealing failed (EMFILE included)   CUDA_ERROR_OUT_OF_MEMORY
//   a handle that is not live in this process (never created, released, junk) CUDA_ERROR_INVALID_VALUE
//   cuMemAddressReserve flags != 0, size 0 / not a multiple of granularity,    CUDA_ERROR_INVALID_VALUE
//     alignment not 0 or a power of two, addr not a multiple of granularity
//   cuMemAddressReserve: mmap failed or size + alignment overflows             CUDA_ERROR_OUT_OF_MEMORY
//   cuMemAddressReserve addr hint that cannot be honoured                      (not an error: placed elsewhere)
//   cuMemAddressFree (ptr, size) not exactly one reservation                   CUDA_ERROR_INVALID_VALUE
//   cuMemAddressFree of a reservation that still holds a mapping               CUDA_ERROR_INVALID_VALUE
//   cuMemMap flags != 0 or offset != 0                                         CUDA_ERROR_INVALID_VALUE
//   cuMemMap size 0, not a multiple of granularity, larger than the allocation CUDA_ERROR_INVALID_VALUE
//   cuMemMap ptr not a multiple of granularity                                 CUDA_ERROR_INVALID_VALUE
//   cuMemMap range not inside one reservation                                  CUDA_ERROR_INVALID_VALUE
//   cuMemMap range overlapping an existing mapping                             CUDA_ERROR_INVALID_VALUE
//   cuMemMap / cuMemUnmap: mmap failed                                         CUDA_ERROR_OUT_OF_MEMORY
//   cuMemUnmap range not inside one reservation or not exactly whole mappings  CUDA_ERROR_INVALID_VALUE
//   cuMemSetAccess desc null or count 0                                        CUDA_ERROR_INVALID_VALUE
//   cuMemSetAccess ptr/size not granularity-aligned, size 0, or range not      CUDA_ERROR_INVALID_VALUE
//     entirely covered by (contiguous) mappings
//   access location DEVICE with an id that is not a device                     CUDA_ERROR_INVALID_DEVICE
//   access location HOST_NUMA with id != 0, or any other location type        CUDA_ERROR_INVALID_VALUE
//   access flags not PROT_NONE / PROT_READ / PROT_READWRITE                    CUDA_ERROR_INVALID_VALUE
//   cuMemSetAccess: mprotect failed                                            CUDA_ERROR_OUT_OF_MEMORY
//   cuMemGetAccess / cuMemRetainAllocationHandle ptr not inside a mapping      CUDA_ERROR_INVALID_VALUE
//   export: flags != 0                                                         CUDA_ERROR_INVALID_VALUE
//   export/import: handle type FABRIC, WIN32 or WIN32_KMT                      CUDA_ERROR_NOT_SUPPORTED
//   export/import: handle type other than POSIX_FILE_DESCRIPTOR                CUDA_ERROR_INVALID_VALUE
//   export of an allocation created without POSIX_FILE_DESCRIPTOR requested    CUDA_ERROR_INVALID_VALUE
//   export of an allocation that was itself imported                           CUDA_ERROR_NOT_PERMITTED
//   export/import: duplicating the fd failed (EMFILE)                          CUDA_ERROR_OPERATING_SYSTEM
//   import of an fd that is closed, not a cuvmm host memfd (pipe, file,        CUDA_ERROR_INVALID_VALUE
//     /dev/null, foreign memfd, malformed or never-exportable name), not open
//     read-write, not sealed against shrinking, or whose size is not a
//     positive multiple of granularity
//   import of a memfd whose device does not exist in this process              CUDA_ERROR_INVALID_DEVICE
//   copies/memset: n == 0                                                      CUDA_SUCCESS (nothing checked
//                                                                                but cuInit)
//   copies/memset: null host pointer                                           CUDA_ERROR_INVALID_VALUE
//   copies/memset: a host range overlapping a reservation (device memory       CUDA_ERROR_INVALID_VALUE
//     passed as host memory)
//   copies/memset: device range not entirely covered by contiguous mappings,   CUDA_ERROR_INVALID_VALUE
//     or the current device lacks READ on a source / READWRITE on a dest
//   cuStreamCreate flags not DEFAULT / NON_BLOCKING                            CUDA_ERROR_INVALID_VALUE
//   cuStreamDestroy / cuStreamSynchronize of a stream that is not live         CUDA_ERROR_INVALID_HANDLE
//     (cuStreamDestroy of the null / legacy / per-thread stream included)
//
// Threading: all registry state sits behind one shared mutex (a writer-preferring
// pthread rwlock, see RegistryMutex: a std::shared_mutex would let copies starve unmap).
// Structural changes (create, release, reserve, free, map, unmap, set access, import,
// context retain/release, streams) take it exclusively,
// including the mmap/munmap/mprotect/close they do, so the kernel's view and the registry
// never disagree to another thread. Copies and memset take it shared for the whole
// memcpy, so a concurrent unmap or mprotect waits until the copy is done and a copy can
// never fault. Nothing but bookkeeping and those syscalls happens under the lock.
//
// Ownership: the driver owns exactly one fd per live allocation record (created memfd
// or its own dup of an imported fd) and closes it once, when the handle is fully
// released AND no mapping references the allocation. Reservations and mappings are
// munmapped/replaced exactly once. An fd returned by export belongs to the caller; an fd
// passed to import stays the caller's.
#include "cuvmm/driver_table.hpp"

#include "cuvmm/cuda_errors.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <shared_mutex>  // std::shared_lock
#include <string>
#include <unordered_map>

#ifndef MAP_FIXED_NOREPLACE
#define MAP_FIXED_NOREPLACE 0x100000
#endif
#ifndef MFD_CLOEXEC
#define MFD_CLOEXEC 0x0001U
#endif
#ifndef MFD_ALLOW_SEALING
#define MFD_ALLOW_SEALING 0x0002U
#endif

namespace cuvmm {
namespace {

constexpr int kMaxDevices = 8;
constexpr int kHostSlot = kMaxDevices;          // access slot for the CPU (all host location types)
constexpr int kAccessSlots = kMaxDevices + 1;
constexpr const char* kMemfdPrefix = "cuvmm-host:";

constexpr unsigned kReadBit = CU_MEM_ACCESS_FLAGS_PROT_READ;
constexpr unsigned kReadWrite = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
constexpr unsigned kKnownHandleBits = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR | CU_MEM_HANDLE_TYPE_WIN32 |
                                      CU_MEM_HANDLE_TYPE_WIN32_KMT | CU_MEM_HANDLE_TYPE_FABRIC;
constexpr unsigned kUnsupportedHandleBits =
        CU_MEM_HANDLE_TYPE_WIN32 | CU_MEM_HANDLE_TYPE_WIN32_KMT | CU_MEM_HANDLE_TYPE_FABRIC;

// Handles are counter values, never pointers: a foreign or stale value is just "not found".
// The stride makes an off-by-one handle miss instead of hitting a neighbour.
constexpr uint64_t kFirstHandle = 0x10000;
constexpr uint64_t kHandleStride = 0x10;
constexpr uintptr_t kFirstStream = 0x5a000000;

// Per-location access flags (CU_MEM_ACCESS_FLAGS_*), slot 0..7 = device, kHostSlot = CPU.
using Access = std::array<unsigned char, kAccessSlots>;

// One memfd-backed allocation. Lives while its handle is alive or a mapping uses it.
struct Allocation {
    int fd = -1;                    // owned; closed exactly once in drop_if_dead
    size_t size = 0;
    CUmemAllocationProp prop{};     // type, requestedHandleTypes, location (normalised)
    bool imported = false;
    long refcount = 0;              // handle references (create/import/retain = +1, release = -1)
    long mappings = 0;              // live mappings referencing this allocation
    uint64_t handle = 0;            // current handle value; 0 once fully released
};

// One cuMemMap'ed chunk. `segments` splits it into runs of equal access: key = offset of
// the run inside the mapping, the run extends to the next key (or the mapping's end).
struct Mapping {
    size_t size = 0;
    uint64_t alloc_id = 0;
    std::map<size_t, Access> segments;
};

// A shared mutex that does not starve writers. std::shared_mutex is glibc's default
// rwlock, which prefers readers: a steady stream of copies on a few threads keeps
// cuMemUnmap waiting forever. This is the same pthread rwlock set to prefer writers
// (PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP): once a writer waits, new readers
// queue behind it. Nobody holding it ever takes it again, which that kind requires.
// Meets the SharedMutex requirements used here (std::unique_lock / std::shared_lock).
class RegistryMutex {
public:
    RegistryMutex() {
        pthread_rwlockattr_t attr;
        pthread_rwlockattr_init(&attr);
        pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
        pthread_rwlock_init(&rw_, &attr);
        pthread_rwlockattr_destroy(&attr);
    }
    ~RegistryMutex() { pthread_rwlock_destroy(&rw_); }
    RegistryMutex(const RegistryMutex&) = delete;
    RegistryMutex& operator=(const RegistryMutex&) = delete;

    void lock() { pthread_rwlock_wrlock(&rw_); }
    void unlock() { pthread_rwlock_unlock(&rw_); }
    void lock_shared() { pthread_rwlock_rdlock(&rw_); }
    void unlock_shared() { pthread_rwlock_unlock(&rw_); }

private:
    pthread_rwlock_t rw_;
};

struct State {
    HostDriverConfig config;
    size_t page_size = 4096;

    RegistryMutex mutex;                                // guards everything below
    std::unordered_map<uint64_t, std::unique_ptr<Allocation>> allocations;  // by allocation id
    std::unordered_map<uint64_t, uint64_t> handles;     // handle value -> allocation id
    std::map<uintptr_t, size_t> reservations;           // base -> size
    std::map<uintptr_t, Mapping> mappings;              // base -> mapping
    std::array<long, kMaxDevices> ctx_retains{};        // primary context retain counts
    std::set<uintptr_t> streams;                        // live stream handle values
    uint64_t next_handle = kFirstHandle;
    uint64_t next_alloc_id = 1;
    uintptr_t next_stream = kFirstStream;
    long long memfds = 0;                               // fds held open by the driver
};

State* g_state = nullptr;            // created once by install_host_driver, never destroyed
std::mutex g_install_mutex;
std::atomic<bool> g_initialized{false};
thread_local int tl_current_device = -1;  // -1: no current context on this thread

using Shared = std::shared_lock<RegistryMutex>;
using Exclusive = std::unique_lock<RegistryMutex>;

// ---- small helpers -------------------------------------------------------------------

bool is_pow2(size_t v) { return v != 0 && (v & (v - 1)) == 0; }

CUcontext context_of(int dev) {
    return reinterpret_cast<CUcontext>(static_cast<uintptr_t>(0x1000 + 16 * dev));
}

// Device whose primary context `ctx` is, or -1.
int device_of(CUcontext ctx) {
    auto v = reinterpret_cast<uintptr_t>(ctx);
    if (v < 0x1000 || (v - 0x1000) % 16 != 0) return -1;
    uintptr_t dev = (v - 0x1000) / 16;
    return dev < static_cast<uintptr_t>(g_state->config.device_count) ? static_cast<int>(dev) : -1;
}

bool valid_device(long long dev) { return dev >= 0 && dev < g_state->config.device_count; }

bool aligned(unsigned long long v) { return v % g_state->config.granularity == 0; }

// [p, p+n) without wrapping past the end of the address space.
bool range_ok(unsigned long long p, size_t n) { return p + n >= p; }

// Maps an access location to its slot, or returns the CUresult for a bad location.
CUresult access_slot(const CUmemLocation& loc, int* slot) {
    switch (loc.type) {
        case CU_MEM_LOCATION_TYPE_DEVICE:
            if (!valid_device(loc.id)) return CUDA_ERROR_INVALID_DEVICE;
            *slot = loc.id;
            return CUDA_SUCCESS;
        case CU_MEM_LOCATION_TYPE_HOST_NUMA:
            if (loc.id != 0) return CUDA_ERROR_INVALID_VALUE;  // one host NUMA node: 0
            *slot = kHostSlot;
            return CUDA_SUCCESS;
        case CU_MEM_LOCATION_TYPE_HOST:
        case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
            *slot = kHostSlot;
            return CUDA_SUCCESS;
        default:
            return CUDA_ERROR_INVALID_VALUE;
    }
}

// The CPU protection of a run: the union of what every location may do, because a CPU
// mapping cannot tell devices apart (per-device checks happen in the bookkeeping).
int prot_of(const Access& a) {
    unsigned u = 0;
    for (unsigned char f : a) u |= f;
    if ((u & kReadWrite) == kReadWrite) return PROT_READ | PROT_WRITE;
    if (u & kReadBit) return PROT_READ;
    return PROT_NONE;
}

// Validation shared by cuMemCreate and cuMemGetAllocationGranularity.
CUresult validate_prop(const CUmemAllocationProp* prop) {
    if (prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (prop->type == CU_MEM_ALLOCATION_TYPE_MANAGED) return CUDA_ERROR_NOT_SUPPORTED;
    if (prop->type != CU_MEM_ALLOCATION_TYPE_PINNED) return CUDA_ERROR_INVALID_VALUE;
    switch (prop->location.type) {
        case CU_MEM_LOCATION_TYPE_DEVICE:
            if (!valid_device(prop->location.id)) return CUDA_ERROR_INVALID_DEVICE;
            break;
        case CU_MEM_LOCATION_TYPE_HOST_NUMA:
            if (prop->location.id != 0) return CUDA_ERROR_INVALID_VALUE;
            break;
        case CU_MEM_LOCATION_TYPE_HOST:
            break;
        // cuda.h (cuMemCreate): "Specifying CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT as the
        // CUmemLocation::type will result in CUDA_ERROR_INVALID_VALUE."
        case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
        default:
            return CUDA_ERROR_INVALID_VALUE;
    }
    auto ht = static_cast<unsigned>(prop->requestedHandleTypes);
    if (ht & ~kKnownHandleBits) return CUDA_ERROR_INVALID_VALUE;
    if (ht & kUnsupportedHandleBits) return CUDA_ERROR_NOT_SUPPORTED;
    // The driver shares host memory only from a HOST_NUMA location.
    if (prop->location.type == CU_MEM_LOCATION_TYPE_HOST && (ht & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
        return CUDA_ERROR_INVALID_VALUE;
    if (prop->allocFlags.gpuDirectRDMACapable != 0) return CUDA_ERROR_NOT_SUPPORTED;
    if (prop->allocFlags.compressionType != 0) return CUDA_ERROR_NOT_SUPPORTED;
    return CUDA_SUCCESS;
}

// The normalised location recorded for an allocation (ignored ids become 0).
CUmemLocation normalised_location(const CUmemLocation& loc) {
    CUmemLocation out{};
    out.type = loc.type;
    out.id = loc.type == CU_MEM_LOCATION_TYPE_DEVICE ? loc.id : 0;
    return out;
}

// memfd name encoding the properties, so an importer in another process recovers them.
std::string memfd_name(const CUmemAllocationProp& p) {
    int dev = p.location.type == CU_MEM_LOCATION_TYPE_DEVICE ? p.location.id : 0;
    char buf[128];
    std::snprintf(buf, sizeof buf, "%sd%d:h%u:l%u:n%d", kMemfdPrefix, dev,
                  static_cast<unsigned>(p.requestedHandleTypes), static_cast<unsigned>(p.location.type),
                  p.location.id);
    return buf;
}

// Parses one "<tag><decimal>" field at *s, advancing past it. Accepts 0..1e6 only.
bool parse_field(const char** s, char tag, long* out) {
    const char* p = *s;
    if (*p != tag) return false;
    ++p;
    if (*p < '0' || *p > '9') return false;
    long v = 0;
    int digits = 0;
    while (*p >= '0' && *p <= '9') {
        if (++digits > 7) return false;
        v = v * 10 + (*p - '0');
        ++p;
    }
    *s = p;
    *out = v;
    return true;
}

// Parses the /proc/self/fd link target of a memfd we created (possibly in another
// process): "/memfd:cuvmm-host:d<dev>:h<types>:l<loctype>:n<locid> (deleted)".
bool parse_memfd_target(const std::string& target, int* device, CUmemAllocationProp* prop) {
    static const std::string prefix = std::string("/memfd:") + kMemfdPrefix;
    static const std::string suffix = " (deleted)";
    if (target.size() < prefix.size() + suffix.size()) return false;
    if (target.compare(0, prefix.size(), prefix) != 0) return false;
    if (target.compare(target.size() - suffix.size(), suffix.size(), suffix) != 0) return false;
    std::string body = target.substr(prefix.size(), target.size() - prefix.size() - suffix.size());
    const char* s = body.c_str();
    long d, h, l, n;
    if (!parse_field(&s, 'd', &d) || *s++ != ':') return false;
    if (!parse_field(&s, 'h', &h) || *s++ != ':') return false;
    if (!parse_field(&s, 'l', &l) || *s++ != ':') return false;
    if (!parse_field(&s, 'n', &n) || *s != '\0') return false;
    // Only an allocation created with POSIX_FILE_DESCRIPTOR requested can be exported,
    // and never from a plain HOST location, so any other combination is not a real export.
    if (h != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return false;
    switch (l) {
        case CU_MEM_LOCATION_TYPE_DEVICE:
            if (n != d) return false;
            break;
        case CU_MEM_LOCATION_TYPE_HOST_NUMA:
        case CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT:
            if (d != 0 || n != 0) return false;
            break;
        default:
            return false;
    }
    *prop = CUmemAllocationProp{};
    prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop->requestedHandleTypes = static_cast<CUmemAllocationHandleType>(h);
    prop->location.type = static_cast<CUmemLocationType>(l);
    prop->location.id = static_cast<int>(n);
    *device = static_cast<int>(d);
    return true;
}

// ---- registry helpers (caller holds the mutex as noted) ------------------------------

// Allocation of a live handle, or nullptr. Any lock.
Allocation* find_handle(State& st, CUmemGenericAllocationHandle h) {
    auto it = st.handles.find(h);
    if (it == st.handles.end()) return nullptr;
    auto a = st.allocations.find(it->second);
    return a == st.allocations.end() ? nullptr : a->second.get();
}

uint64_t new_handle(State& st) {
    uint64_t h = st.next_handle;
    st.next_handle += kHandleStride;
    return h;
}

// Records a new allocation that owns `fd` under a fresh handle with one reference, and
// returns the handle. Caller holds the exclusive lock.
CUmemGenericAllocationHandle register_allocation(State& st, int fd, size_t size, const CUmemAllocationProp& prop,
                                                 bool imported) {
    auto a = std::make_unique<Allocation>();
    a->fd = fd;
    a->size = size;
    a->prop = prop;
    a->imported = imported;
    a->refcount = 1;
    a->handle = new_handle(st);
    const CUmemGenericAllocationHandle handle = a->handle;
    uint64_t id = st.next_alloc_id++;
    st.handles.emplace(handle, id);
    st.allocations.emplace(id, std::move(a));
    ++st.memfds;
    return handle;
}

// Closes and forgets an allocation once nothing references it. Exclusive lock.
void drop_if_dead(State& st, uint64_t alloc_id) {
    auto it = st.allocations.find(alloc_id);
    if (it == st.allocations.end()) return;
    Allocation& a = *it->second;
    if (a.refcount > 0 || a.mappings > 0) return;
    if (a.fd >= 0) {
        ::close(a.fd);
        --st.memfds;
    }
    st.allocations.erase(it);
}

// The reservation containing all of [p, p+n), or end(). Any lock.
std::map<uintptr_t, size_t>::iterator find_reservation(State& st, uintptr_t p, size_t n) {
    auto it = st.reservations.upper_bound(p);
    if (it == st.reservations.begin()) return st.reservations.end();
    --it;
    if (p - it->first >= it->second || n > it->second - (p - it->first)) return st.reservations.end();
    return it;
}

// The mapping containing address p, or end(). Any lock.
std::map<uintptr_t, Mapping>::iterator find_mapping(State& st, uintptr_t p) {
    auto it = st.mappings.upper_bound(p);
    if (it == st.mappings.begin()) return st.mappings.end();
    --it;
    if (p - it->first >= it->second.size) return st.mappings.end();
    return it;
}

// Calls fn(mapping_base, mapping, run_begin, run_end, access) for each access run that
// intersects [p, p+n), with run bounds clipped to the range (offsets inside the mapping).
// Returns false, having called nothing, unless [p, p+n) is entirely covered by
// contiguous mappings. n > 0 and the range must not wrap. Any lock.
template <class Fn>
bool for_each_run(State& st, uintptr_t p, size_t n, Fn&& fn) {
    // First pass: coverage only.
    {
        auto it = find_mapping(st, p);
        if (it == st.mappings.end()) return false;
        uintptr_t end = p + n;
        while (it->first + it->second.size < end) {
            uintptr_t next = it->first + it->second.size;
            ++it;
            if (it == st.mappings.end() || it->first != next) return false;
        }
    }
    uintptr_t end = p + n;
    for (auto it = find_mapping(st, p); it != st.mappings.end() && it->first < end; ++it) {
        Mapping& m = it->second;
        size_t lo = p > it->first ? p - it->first : 0;
        size_t hi = end - it->first < m.size ? end - it->first : m.size;
        auto seg = m.segments.upper_bound(lo);
        --seg;  // segments always has a key 0
        for (; seg != m.segments.end() && seg->first < hi; ++seg) {
            auto nxt = std::next(seg);
            size_t run_end = nxt == m.segments.end() ? m.size : nxt->first;
            size_t b = seg->first > lo ? seg->first : lo;
            size_t e = run_end < hi ? run_end : hi;
            fn(it->first, m, b, e, seg->second);
        }
    }
    return true;
}

// True when [p, p+n) is covered by mappings on which `slot` has at least `need`.
bool accessible(State& st, uintptr_t p, size_t n, int slot, unsigned need) {
    bool ok = true;
    bool covered = for_each_run(st, p, n, [&](uintptr_t, Mapping&, size_t, size_t, Access& a) {
        if ((a[slot] & need) != need) ok = false;
    });
    return covered && ok;
}

// True when [p, p+n) intersects any reservation (device VA used as host memory).
bool overlaps_reservation(State& st, uintptr_t p, size_t n) {
    uintptr_t end = range_ok(p, n) ? p + n : UINTPTR_MAX;
    auto it = st.reservations.upper_bound(p);
    if (it != st.reservations.begin()) {
        auto prev = std::prev(it);
        if (p - prev->first < prev->second) return true;
    }
    return it != st.reservations.end() && it->first < end;
}

// Splits the run containing offset `off` so that a run starts exactly at `off`.
void split_at(Mapping& m, size_t off) {
    if (off >= m.size) return;
    auto it = m.segments.upper_bound(off);
    --it;
    if (it->first != off) m.segments.emplace(off, it->second);
}

// Merges adjacent runs with equal access.
void coalesce(Mapping& m) {
    auto it = m.segments.begin();
    while (it != m.segments.end()) {
        auto nxt = std::next(it);
        if (nxt != m.segments.end() && nxt->second == it->second) {
            m.segments.erase(nxt);
        } else {
            it = nxt;
        }
    }
}

// Common prologue of every entry point but cuInit/cuDriverGetVersion/cuGetError*.
inline bool initialized() { return g_initialized.load(std::memory_order_acquire); }

// A current context whose primary context is still retained; its device via *dev.
// Caller holds the mutex (any mode).
bool current_device(State& st, int* dev) {
    int d = tl_current_device;
    if (d < 0 || d >= st.config.device_count || st.ctx_retains[d] <= 0) return false;
    *dev = d;
    return true;
}

// ---- entry points --------------------------------------------------------------------
namespace entry {

// Declared from the X-macro so a signature that does not match the table fails to compile.
#define CUVMM_HOST_DECL(name, version, params) CUresult CUDAAPI name params;
CUVMM_DRIVER_ENTRY_POINTS(CUVMM_HOST_DECL)
#undef CUVMM_HOST_DECL

#define CUVMM_REQUIRE_INIT()                                    \
    do {                                                        \
        if (!initialized()) return CUDA_ERROR_NOT_INITIALIZED;  \
    } while (0)

CUresult CUDAAPI cuInit(unsigned int flags) {
    if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
    g_initialized.store(true, std::memory_order_release);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDriverGetVersion(int* version) {
    if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
    *version = CUDA_VERSION;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetCount(int* count) {
    CUVMM_REQUIRE_INIT();
    if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
    *count = g_state->config.device_count;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGet(CUdevice* device, int ordinal) {
    CUVMM_REQUIRE_INIT();
    if (device == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(ordinal)) return CUDA_ERROR_INVALID_DEVICE;
    *device = ordinal;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetName(char* name, int len, CUdevice dev) {
    CUVMM_REQUIRE_INIT();
    if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    std::snprintf(name, static_cast<size_t>(len), "cuvmm host device %d", dev);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceTotalMem(size_t* bytes, CUdevice dev) {
    CUVMM_REQUIRE_INIT();
    if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    long pages = ::sysconf(_SC_PHYS_PAGES);
    long page = ::sysconf(_SC_PAGESIZE);
    *bytes = pages > 0 && page > 0 ? static_cast<size_t>(pages) * static_cast<size_t>(page) : 0;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetAttribute(int* value, CUdevice_attribute attrib, CUdevice dev) {
    CUVMM_REQUIRE_INIT();
    if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    switch (attrib) {
        case CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
        case CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED:
        case CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
        case CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED:
        case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING:
            *value = 1;
            break;
        default:  // RDMA, fabric, Win32 handles and everything we do not model: 0
            *value = 0;
            break;
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext* ctx, CUdevice dev) {
    CUVMM_REQUIRE_INIT();
    if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    Exclusive lock(g_state->mutex);
    ++g_state->ctx_retains[dev];
    *ctx = context_of(dev);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease(CUdevice dev) {
    CUVMM_REQUIRE_INIT();
    if (!valid_device(dev)) return CUDA_ERROR_INVALID_DEVICE;
    Exclusive lock(g_state->mutex);
    if (g_state->ctx_retains[dev] <= 0) return CUDA_ERROR_INVALID_CONTEXT;
    --g_state->ctx_retains[dev];
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx) {
    CUVMM_REQUIRE_INIT();
    if (ctx == nullptr) {
        tl_current_device = -1;
        return CUDA_SUCCESS;
    }
    int dev = device_of(ctx);
    if (dev < 0) return CUDA_ERROR_INVALID_CONTEXT;
    Shared lock(g_state->mutex);
    if (g_state->ctx_retains[dev] <= 0) return CUDA_ERROR_INVALID_CONTEXT;  // not retained
    tl_current_device = dev;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetCurrent(CUcontext* ctx) {
    CUVMM_REQUIRE_INIT();
    if (ctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
    *ctx = tl_current_device < 0 ? nullptr : context_of(tl_current_device);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSynchronize() {
    CUVMM_REQUIRE_INIT();
    Shared lock(g_state->mutex);
    int dev;
    return current_device(*g_state, &dev) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

CUresult CUDAAPI cuMemGetAllocationGranularity(size_t* granularity, const CUmemAllocationProp* prop,
                                               CUmemAllocationGranularity_flags option) {
    CUVMM_REQUIRE_INIT();
    if (granularity == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult r = validate_prop(prop)) return r;
    if (option != CU_MEM_ALLOC_GRANULARITY_MINIMUM && option != CU_MEM_ALLOC_GRANULARITY_RECOMMENDED)
        return CUDA_ERROR_INVALID_VALUE;
    *granularity = g_state->config.granularity;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemCreate(CUmemGenericAllocationHandle* handle, size_t size, const CUmemAllocationProp* prop,
                             unsigned long long flags) {
    CUVMM_REQUIRE_INIT();
    if (handle == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
    if (size == 0 || !aligned(size)) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult r = validate_prop(prop)) return r;

    CUmemAllocationProp recorded{};
    recorded.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    recorded.requestedHandleTypes = prop->requestedHandleTypes;
    recorded.location = normalised_location(prop->location);

    // Sparse: ftruncate only, pages appear on first touch. Sealed against resizing so
    // that no holder (an importer included) can shrink it under a mapping (SIGBUS).
    std::string name = memfd_name(recorded);
    int fd = ::memfd_create(name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) return CUDA_ERROR_OUT_OF_MEMORY;
    if (size > static_cast<size_t>(INT64_MAX) || ::ftruncate(fd, static_cast<off_t>(size)) != 0 ||
        ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) != 0) {
        ::close(fd);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }

    Exclusive lock(g_state->mutex);
    State& st = *g_state;
    *handle = register_allocation(st, fd, size, recorded, false);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemRelease(CUmemGenericAllocationHandle handle) {
    CUVMM_REQUIRE_INIT();
    Exclusive lock(g_state->mutex);
    State& st = *g_state;
    auto h = st.handles.find(handle);
    if (h == st.handles.end()) return CUDA_ERROR_INVALID_VALUE;
    uint64_t id = h->second;
    Allocation* a = st.allocations.at(id).get();
    if (--a->refcount == 0) {
        st.handles.erase(h);
        a->handle = 0;
        drop_if_dead(st, id);  // memory stays while mapped
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAddressReserve(CUdeviceptr* ptr, size_t size, size_t alignment, CUdeviceptr addr,
                                     unsigned long long flags) {
    CUVMM_REQUIRE_INIT();
    if (ptr == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
    if (size == 0 || !aligned(size)) return CUDA_ERROR_INVALID_VALUE;
    if (alignment != 0 && !is_pow2(alignment)) return CUDA_ERROR_INVALID_VALUE;
    if (!aligned(addr)) return CUDA_ERROR_INVALID_VALUE;
    const size_t gran = g_state->config.granularity;
    const size_t align = alignment > gran ? alignment : gran;
    constexpr int kProt = PROT_NONE;
    constexpr int kFlags = MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE;

    Exclusive lock(g_state->mutex);
    State& st = *g_state;
    uintptr_t base = 0;
    // The hint is best effort, like the driver's: exactly addr or anywhere.
    if (addr != 0 && addr % align == 0 && range_ok(addr, size)) {
        void* want = reinterpret_cast<void*>(static_cast<uintptr_t>(addr));
        void* got = ::mmap(want, size, kProt, kFlags | MAP_FIXED_NOREPLACE, -1, 0);
        if (got == want) {
            base = static_cast<uintptr_t>(addr);
        } else if (got != MAP_FAILED) {
            ::munmap(got, size);  // an old kernel treated NOREPLACE as a plain hint
        }
    }
    if (base == 0) {
        if (size > SIZE_MAX - align) return CUDA_ERROR_OUT_OF_MEMORY;
        size_t span = size + align;
        void* got = ::mmap(nullptr, span, kProt, kFlags, -1, 0);
        if (got == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
        auto raw = reinterpret_cast<uintptr_t>(got);
        base = (raw + align - 1) & ~(static_cast<uintptr_t>(align) - 1);
        if (base > raw) ::munmap(got, base - raw);
        uintptr_t tail = base + size;
        if (raw + span > tail) ::munmap(reinterpret_cast<void*>(tail), raw + span - tail);
    }
    st.reservations.emplace(base, size);
    *ptr = static_cast<CUdeviceptr>(base);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAddressFree(CUdeviceptr ptr, size_t size) {
    CUVMM_REQUIRE_INIT();
    Exclusive lock(g_state->mutex);
    State& st = *g_state;
    auto it = st.reservations.find(static_cast<uintptr_t>(ptr));
    if (it == st.reservations.end() || it->second != size) return CUDA_ERROR_INVALID_VALUE;
    uintptr_t base = it->first;
    auto m = st.mappings.lower_bound(base);
    if (m != st.mappings.end() && m->first < base + size) return CUDA_ERROR_INVALID_VALUE;  // still mapped
    ::munmap(reinterpret_cast<void*>(base), size);
    st.reservations.erase(it);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemMap(CUdeviceptr ptr, size_t size, size_t offset, CUmemGenericAllocationHandle handle,
                          unsigned long long flags) {
    CUVMM_REQUIRE_INIT();
    if (flags != 0 || offset != 0) return CUDA_ERROR_INVALID_VALUE;
    Exclusive lock(g_state->mutex);
    State& st = *g_state;
    auto h = st.handles.find(handle);
    if (h == st.handles.end()) return CUDA_ERROR_INVALID_VALUE;
    Allocation* a = st.allocations.at(h->second).get();
    if (size == 0 || !aligned(size) || size > a->size) return CUDA_ERROR_INVALID_VALUE;
    if (!aligned(ptr) || !range_ok(ptr, size)) return CUDA_ERROR_INVALID_VALUE;
    auto p = static_cast<uintptr_t>(ptr);
    if (find_reservation(st, p, size) == st.reservations.end()) return CUDA_ERROR_INVALID_VALUE;
    // Overlap: the mapping starting at or before p reaching past p, or one starting in range.
    auto next = st.mappings.lower_bound(p);
    if (next != st.mappings.end() && next->first < p + size) return CUDA_ERROR_INVALID_VALUE;
    if (find_mapping(st, p) != st.mappings.end()) return CUDA_ERROR_INVALID_VALUE;

    // No access for anyone until cuMemSetAccess.
    void* want = reinterpret_cast<void*>(p);
    void* got = ::mmap(want, size, PROT_NONE, MAP_SHARED | MAP_FIXED, a->fd, 0);
    if (got != want) {
        // MAP_FIXED may have torn the reservation down already: put the placeholder back.
        if (got != MAP_FAILED) ::munmap(got, size);
        ::mmap(want, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
        return CUDA_ERROR_OUT_OF_MEMORY;
    }
    Mapping m;
    m.size = size;
    m.alloc_id = h->second;
    m.segments.emplace(0, Access{});
    st.mappings.emplace(p, std::move(m));
    ++a->mappings;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemUnmap(CUdeviceptr ptr, size_t size) {
    CUVMM_REQUIRE_INIT();
    if (size == 0 || !range_ok(ptr, size)) return CUDA_ERROR_INVALID_VALUE;
    Exclusive lock(g_state->mutex);
    State& st = *g_state;
    auto p = static_cast<uintptr_t>(ptr);
    if (find_reservation(st, p, size) == st.reservations.end()) return CUDA_ERROR_INVALID_VALUE;
    // Exactly whole, contiguous mappings from p to p + size.
    auto first = st.mappings.find(p);
    if (first == st.mappings.end()) return CUDA_ERROR_INVALID_VALUE;
    auto it = first;
    uintptr_t at = p, end = p + size;
    while (at < end) {
        if (it == st.mappings.end() || it->first != at || it->second.size > end - at) return CUDA_ERROR_INVALID_VALUE;
        at += it->second.size;
        ++it;
    }
    auto last = it;

    // Keep the VA reserved: replace the shared mapping with a fresh placeholder.
    void* want = reinterpret_cast<void*>(p);
    void* got = ::mmap(want, size, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    if (got != want) return CUDA_ERROR_OUT_OF_MEMORY;
    for (it = first; it != last;) {
        uint64_t id = it->second.alloc_id;
        it = st.mappings.erase(it);
        auto a = st.allocations.find(id);
        if (a != st.allocations.end()) --a->second->mappings;
        drop_if_dead(st, id);
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemSetAccess(CUdeviceptr ptr, size_t size, const CUmemAccessDesc* desc, size_t count) {
    CUVMM_REQUIRE_INIT();
    if (desc == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
    if (size == 0 || !aligned(size) || !aligned(ptr) || !range_ok(ptr, size)) return CUDA_ERROR_INVALID_VALUE;
    // Validate every descriptor before changing anything.
    std::array<int, kAccessSlots> wanted;  // -1: unchanged
    wanted.fill(-1);
    for (size_t i = 0; i < count; ++i) {
        int slot = 0;
        if (CUresult r = access_slot(desc[i].location, &slot)) return r;
        unsigned f = desc[i].flags;
        if (f != CU_MEM_ACCESS_FLAGS_PROT_NONE && f != CU_MEM_ACCESS_FLAGS_PROT_READ &&
            f != CU_MEM_ACCESS_FLAGS_PROT_READWRITE)
            return CUDA_ERROR_INVALID_VALUE;
        wanted[slot] = static_cast<int>(f);  // a later descriptor for the same location wins
    }

    Exclusive lock(g_state->mutex);
    State& st = *g_state;
    auto p = static_cast<uintptr_t>(ptr);
    bool covered = for_each_run(st, p, size, [](uintptr_t, Mapping&, size_t, size_t, Access&) {});
    if (!covered) return CUDA_ERROR_INVALID_VALUE;

    // Split the runs at the range ends (no semantic change), then for each run: mprotect
    // to the new union first and record the new flags only if that worked, so the
    // bookkeeping never claims more access than the CPU mapping grants.
    uintptr_t end = p + size;
    for (auto it = find_mapping(st, p); it != st.mappings.end() && it->first < end; ++it) {
        size_t lo = p > it->first ? p - it->first : 0;
        size_t hi = end - it->first < it->second.size ? end - it->first : it->second.size;
        split_at(it->second, lo);
        split_at(it->second, hi);
    }
    CUresult result = CUDA_SUCCESS;
    for_each_run(st, p, size, [&](uintptr_t base, Mapping&, size_t b, size_t e, Access& cur) {
        if (result != CUDA_SUCCESS) return;
        Access next = cur;
        for (int s = 0; s < kAccessSlots; ++s)
            if (wanted[s] >= 0) next[s] = static_cast<unsigned char>(wanted[s]);
        if (::mprotect(reinterpret_cast<void*>(base + b), e - b, prot_of(next)) != 0) {
            result = CUDA_ERROR_OUT_OF_MEMORY;
            return;
        }
        cur = next;  // runs are exactly [b, e) after the splits
    });
    for (auto it = find_mapping(st, p); it != st.mappings.end() && it->first < end; ++it) coalesce(it->second);
    return result;
}

CUresult CUDAAPI cuMemGetAccess(unsigned long long* flags, const CUmemLocation* location, CUdeviceptr ptr) {
    CUVMM_REQUIRE_INIT();
    if (flags == nullptr || location == nullptr) return CUDA_ERROR_INVALID_VALUE;
    int slot = 0;
    if (CUresult r = access_slot(*location, &slot)) return r;
    Shared lock(g_state->mutex);
    State& st = *g_state;
    auto p = static_cast<uintptr_t>(ptr);
    auto it = find_mapping(st, p);
    if (it == st.mappings.end()) return CUDA_ERROR_INVALID_VALUE;
    const Mapping& m = it->second;
    auto seg = m.segments.upper_bound(p - it->first);
    --seg;
    *flags = seg->second[slot];
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemExportToShareableHandle(void* shareableHandle, CUmemGenericAllocationHandle handle,
                                              CUmemAllocationHandleType handleType, unsigned long long flags) {
    CUVMM_REQUIRE_INIT();
    if (shareableHandle == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
    // Shared: a concurrent cuMemRelease (exclusive) cannot close the fd while we dup it.
    Shared lock(g_state->mutex);
    Allocation* a = find_handle(*g_state, handle);
    if (a == nullptr) return CUDA_ERROR_INVALID_VALUE;
    auto ht = static_cast<unsigned>(handleType);
    if (ht == CU_MEM_HANDLE_TYPE_FABRIC || ht == CU_MEM_HANDLE_TYPE_WIN32 || ht == CU_MEM_HANDLE_TYPE_WIN32_KMT)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (ht != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_INVALID_VALUE;
    if (!(static_cast<unsigned>(a->prop.requestedHandleTypes) & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR))
        return CUDA_ERROR_INVALID_VALUE;
    if (a->imported) return CUDA_ERROR_NOT_PERMITTED;
    int fd = ::fcntl(a->fd, F_DUPFD_CLOEXEC, 0);  // the caller owns this one
    if (fd < 0) return CUDA_ERROR_OPERATING_SYSTEM;
    *static_cast<int*>(shareableHandle) = fd;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemImportFromShareableHandle(CUmemGenericAllocationHandle* handle, void* osHandle,
                                                CUmemAllocationHandleType shHandleType) {
    CUVMM_REQUIRE_INIT();
    if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
    auto ht = static_cast<unsigned>(shHandleType);
    if (ht == CU_MEM_HANDLE_TYPE_FABRIC || ht == CU_MEM_HANDLE_TYPE_WIN32 || ht == CU_MEM_HANDLE_TYPE_WIN32_KMT)
        return CUDA_ERROR_NOT_SUPPORTED;
    if (ht != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) return CUDA_ERROR_INVALID_VALUE;
    auto raw = reinterpret_cast<intptr_t>(osHandle);
    if (raw < 0 || raw > INT32_MAX) return CUDA_ERROR_INVALID_VALUE;
    int fd = static_cast<int>(raw);

    // Is it one of ours? Open, a regular read-write memfd named by a cuvmm host driver,
    // sealed against shrinking (so a mapping of it can never SIGBUS), sized in granules.
    if (::fcntl(fd, F_GETFD) < 0) return CUDA_ERROR_INVALID_VALUE;
    int fl = ::fcntl(fd, F_GETFL);
    if (fl < 0 || (fl & O_ACCMODE) != O_RDWR) return CUDA_ERROR_INVALID_VALUE;
    struct stat sb {};
    if (::fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) return CUDA_ERROR_INVALID_VALUE;
    int seals = ::fcntl(fd, F_GET_SEALS);
    if (seals < 0 || !(seals & F_SEAL_SHRINK)) return CUDA_ERROR_INVALID_VALUE;
    char link[64];
    std::snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    char target[512];
    ssize_t n = ::readlink(link, target, sizeof target - 1);
    if (n <= 0 || n >= static_cast<ssize_t>(sizeof target - 1)) return CUDA_ERROR_INVALID_VALUE;
    target[n] = '\0';
    int device = 0;
    CUmemAllocationProp prop{};
    if (!parse_memfd_target(target, &device, &prop)) return CUDA_ERROR_INVALID_VALUE;
    if (sb.st_size <= 0 || !aligned(static_cast<unsigned long long>(sb.st_size))) return CUDA_ERROR_INVALID_VALUE;
    if (!valid_device(device)) return CUDA_ERROR_INVALID_DEVICE;

    int own = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);  // the caller keeps its fd
    if (own < 0) return CUDA_ERROR_OPERATING_SYSTEM;

    Exclusive lock(g_state->mutex);
    State& st = *g_state;
    *handle = register_allocation(st, own, static_cast<size_t>(sb.st_size), prop, true);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemGetAllocationPropertiesFromHandle(CUmemAllocationProp* prop,
                                                        CUmemGenericAllocationHandle handle) {
    CUVMM_REQUIRE_INIT();
    if (prop == nullptr) return CUDA_ERROR_INVALID_VALUE;
    Shared lock(g_state->mutex);
    Allocation* a = find_handle(*g_state, handle);
    if (a == nullptr) return CUDA_ERROR_INVALID_VALUE;
    *prop = a->prop;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemRetainAllocationHandle(CUmemGenericAllocationHandle* handle, void* addr) {
    CUVMM_REQUIRE_INIT();
    if (handle == nullptr) return CUDA_ERROR_INVALID_VALUE;
    Exclusive lock(g_state->mutex);
    State& st = *g_state;
    auto m = find_mapping(st, reinterpret_cast<uintptr_t>(addr));
    if (m == st.mappings.end()) return CUDA_ERROR_INVALID_VALUE;
    uint64_t id = m->second.alloc_id;
    Allocation* a = st.allocations.at(id).get();
    if (a->handle == 0) {  // fully released but still mapped: a new handle value
        a->handle = new_handle(st);
        a->refcount = 0;
        st.handles.emplace(a->handle, id);
    }
    ++a->refcount;
    *handle = a->handle;
    return CUDA_SUCCESS;
}

// Shared prologue of the copies: n > 0 here. Returns the device of the current context.
CUresult copy_context(State& st, int* dev) {
    return current_device(st, dev) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

bool host_range_ok(State& st, const void* p, size_t n) {
    auto v = reinterpret_cast<uintptr_t>(p);
    return p != nullptr && range_ok(v, n) && !overlaps_reservation(st, v, n);
}

CUresult CUDAAPI cuMemcpyHtoD(CUdeviceptr dst, const void* src, size_t bytes) {
    CUVMM_REQUIRE_INIT();
    if (bytes == 0) return CUDA_SUCCESS;
    Shared lock(g_state->mutex);  // held across the memcpy: no unmap/mprotect underneath
    State& st = *g_state;
    int dev;
    if (CUresult r = copy_context(st, &dev)) return r;
    if (!host_range_ok(st, src, bytes)) return CUDA_ERROR_INVALID_VALUE;
    if (!range_ok(dst, bytes) || !accessible(st, dst, bytes, dev, kReadWrite)) return CUDA_ERROR_INVALID_VALUE;
    std::memcpy(reinterpret_cast<void*>(static_cast<uintptr_t>(dst)), src, bytes);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpyDtoH(void* dst, CUdeviceptr src, size_t bytes) {
    CUVMM_REQUIRE_INIT();
    if (bytes == 0) return CUDA_SUCCESS;
    Shared lock(g_state->mutex);
    State& st = *g_state;
    int dev;
    if (CUresult r = copy_context(st, &dev)) return r;
    if (!host_range_ok(st, dst, bytes)) return CUDA_ERROR_INVALID_VALUE;
    if (!range_ok(src, bytes) || !accessible(st, src, bytes, dev, kReadBit)) return CUDA_ERROR_INVALID_VALUE;
    std::memcpy(dst, reinterpret_cast<const void*>(static_cast<uintptr_t>(src)), bytes);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpyDtoD(CUdeviceptr dst, CUdeviceptr src, size_t bytes) {
    CUVMM_REQUIRE_INIT();
    if (bytes == 0) return CUDA_SUCCESS;
    Shared lock(g_state->mutex);
    State& st = *g_state;
    int dev;
    if (CUresult r = copy_context(st, &dev)) return r;
    if (!range_ok(src, bytes) || !accessible(st, src, bytes, dev, kReadBit)) return CUDA_ERROR_INVALID_VALUE;
    if (!range_ok(dst, bytes) || !accessible(st, dst, bytes, dev, kReadWrite)) return CUDA_ERROR_INVALID_VALUE;
    std::memmove(reinterpret_cast<void*>(static_cast<uintptr_t>(dst)),
                 reinterpret_cast<const void*>(static_cast<uintptr_t>(src)), bytes);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemsetD8(CUdeviceptr dst, unsigned char value, size_t count) {
    CUVMM_REQUIRE_INIT();
    if (count == 0) return CUDA_SUCCESS;
    Shared lock(g_state->mutex);
    State& st = *g_state;
    int dev;
    if (CUresult r = copy_context(st, &dev)) return r;
    if (!range_ok(dst, count) || !accessible(st, dst, count, dev, kReadWrite)) return CUDA_ERROR_INVALID_VALUE;
    std::memset(reinterpret_cast<void*>(static_cast<uintptr_t>(dst)), value, count);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamCreate(CUstream* stream, unsigned int flags) {
    CUVMM_REQUIRE_INIT();
    if (stream == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (flags != CU_STREAM_DEFAULT && flags != CU_STREAM_NON_BLOCKING) return CUDA_ERROR_INVALID_VALUE;
    Exclusive lock(g_state->mutex);
    State& st = *g_state;
    int dev;
    if (!current_device(st, &dev)) return CUDA_ERROR_INVALID_CONTEXT;
    uintptr_t v = st.next_stream;
    st.next_stream += 16;
    st.streams.insert(v);
    *stream = reinterpret_cast<CUstream>(v);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamDestroy(CUstream stream) {
    CUVMM_REQUIRE_INIT();
    Exclusive lock(g_state->mutex);
    if (g_state->streams.erase(reinterpret_cast<uintptr_t>(stream)) == 0) return CUDA_ERROR_INVALID_HANDLE;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamSynchronize(CUstream stream) {
    CUVMM_REQUIRE_INIT();
    if (stream == nullptr || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD) return CUDA_SUCCESS;
    Shared lock(g_state->mutex);
    if (g_state->streams.count(reinterpret_cast<uintptr_t>(stream)) == 0) return CUDA_ERROR_INVALID_HANDLE;
    return CUDA_SUCCESS;  // all host work is synchronous
}

CUresult CUDAAPI cuGetErrorName(CUresult error, const char** str) {
    if (str == nullptr) return CUDA_ERROR_INVALID_VALUE;
    *str = result_name(error);
    return *str ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuGetErrorString(CUresult error, const char** str) {
    if (str == nullptr) return CUDA_ERROR_INVALID_VALUE;
    *str = result_description(error);
    return *str ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

#undef CUVMM_REQUIRE_INIT

}  // namespace entry

// Validated copy of the first config: 1..8 devices; granularity a power of two and at
// least a page (an invalid one falls back to 2 MiB).
HostDriverConfig sanitise(const HostDriverConfig& in, size_t page) {
    HostDriverConfig c = in;
    if (c.device_count < 1) c.device_count = 1;
    if (c.device_count > kMaxDevices) c.device_count = kMaxDevices;
    if (!is_pow2(c.granularity)) c.granularity = size_t(2) << 20;
    if (c.granularity < page) c.granularity = page;
    return c;
}

}  // namespace

void install_host_driver(DriverTable& table, const HostDriverConfig& config) {
    {
        std::lock_guard<std::mutex> lock(g_install_mutex);
        if (g_state == nullptr) {
            auto* st = new State();  // process lifetime: never destroyed (threads may outlive main)
            long page = ::sysconf(_SC_PAGESIZE);
            st->page_size = page > 0 ? static_cast<size_t>(page) : 4096;
            st->config = sanitise(config, st->page_size);
            g_state = st;
        }
    }
    // The X-macro assigns every member, so none can stay null.
#define CUVMM_HOST_FILL(name, version, params) table.name = &entry::name;
    CUVMM_DRIVER_ENTRY_POINTS(CUVMM_HOST_FILL)
#undef CUVMM_HOST_FILL
}

HostLiveCounts host_live_counts() {
    HostLiveCounts c;
    State* st;
    {
        std::lock_guard<std::mutex> lock(g_install_mutex);
        st = g_state;
    }
    if (st == nullptr) return c;
    Shared lock(st->mutex);
    c.allocations = static_cast<long long>(st->allocations.size());
    c.reservations = static_cast<long long>(st->reservations.size());
    c.mappings = static_cast<long long>(st->mappings.size());
    c.memfds = st->memfds;
    return c;
}

}  // namespace cuvmm
