// The host driver's shared internals: registry records, the registry lock and state,
// helpers every family uses, and the entry point declarations. Included only by
// native/host/*.cpp; the rest of native/ knows the host driver only through
// install_host_driver / host_live_counts / host_import_refusal (cuvmm/driver_table.hpp).
//
// The host driver: our own implementation of the CUDA driver entry points in DriverTable,
// over POSIX shared memory (memfd + mmap), for machines without a GPU.
//
// It exists so that CI finds the bugs a GPU would find, so it is STRICT: every misuse
// returns the CUresult we believe the real driver returns, and no call, however bad its
// arguments (garbage handles, ranges outside any reservation, null out-pointers, foreign
// fds), crashes the process. Device memory is a memfd; a reservation is a PROT_NONE
// anonymous mapping; cuMemMap maps the memfd MAP_SHARED|MAP_FIXED over the reservation;
// cuMemSetAccess mprotects. Stream work runs asynchronously on one worker thread per
// stream (stream_queue.hpp); everything else is synchronous.
//
// Cross-process sharing: a memfd is named "cuvmm-host:d<device>:h<requestedHandleTypes>:
// l<locationType>:n<locationId>" so an importer (another process, its own host driver)
// recovers the properties from /proc/self/fd/<fd>, and is sealed against shrinking and
// growing so that no holder can truncate it under someone else's mapping (SIGBUS), and
// against further seals (a write seal would make it read-only for every holder).
//
// Files, one concern each (all in namespace cuvmm::host):
//   registry.cpp  the state, handle / reservation / mapping lookup, install_host_driver
//   memfd.cpp     memfd naming, parsing and the import checks (check_import_fd)
//   access.cpp    access locations, slots, the CPU protection of a run
//   devices.cpp   cuInit, version, devices, primary contexts, error strings
//   memory.cpp    allocation properties, granularity, cuMemCreate / Release, retain
//   va.cpp        reserve / free, map / unmap, set / get access
//   sharing.cpp   export / import of POSIX fds
//   copies.cpp    copies and memset
//   views.cpp     how copies reach the bytes (DEVICE memory through a private view, B40)
//   stream_queue.cpp  the stream FIFOs, worker threads, dependencies, sticky fault, delay
//   streams.cpp   stream entry points, cuStreamWaitEvent, cuLaunchHostFunc, priorities
//   events.cpp    events
//   pinned.cpp    page-locked host memory (cuMemHostAlloc / Register) and its pending uses
//   async_copies.cpp  cuMemcpy*Async / cuMemsetD8Async
//   pointers.cpp  cuMemGetAddressRange / cuPointerGetAttribute (host library only: cuvmm/host_pointers.hpp)
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
//   a stream or event created in a primary context that was since reset (its   CUDA_ERROR_INVALID_HANDLE
//     last cuDevicePrimaryCtxRelease), in any call; its queued work still drains
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
//   allocation prop: HOST location (not NUMA) with any requestedHandleTypes    CUDA_ERROR_INVALID_VALUE
//     (FABRIC / WIN32 included: checked before the NOT_SUPPORTED row above, B10)
//   allocation prop: allocFlags.gpuDirectRDMACapable != 0                      CUDA_ERROR_NOT_SUPPORTED
//   allocation prop: allocFlags.compressionType != 0                           CUDA_ERROR_NOT_SUPPORTED
//   allocation prop: win32HandleMetaData not null (cuda.h: "required to be     CUDA_ERROR_INVALID_VALUE
//     zero" without a WIN32 handle type; the code is not documented)
//   cuMemGetAllocationGranularity option not MINIMUM/RECOMMENDED               CUDA_ERROR_INVALID_VALUE
//   cuMemCreate flags != 0, size 0 or not a multiple of the granularity        CUDA_ERROR_INVALID_VALUE
//   cuMemCreate: memfd_create / ftruncate / sealing failed (EMFILE included)   CUDA_ERROR_OUT_OF_MEMORY
//   a handle that is not live in this process (never created, released, junk) CUDA_ERROR_INVALID_VALUE
//   cuMemAddressReserve flags != 0, size 0 / not a multiple of granularity,    CUDA_ERROR_INVALID_VALUE
//     alignment not 0 or a power of two, addr not a multiple of granularity
//     or of the alignment (B22: a hint is a multiple of max(alignment, granularity))
//   cuMemAddressReserve: mmap failed or size + alignment overflows             CUDA_ERROR_OUT_OF_MEMORY
//   cuMemAddressReserve addr hint that cannot be honoured                      (not an error: placed elsewhere)
//   cuMemAddressFree (ptr, size) not exactly one reservation                   CUDA_ERROR_INVALID_VALUE
//   cuMemAddressFree of a reservation that still holds a mapping               CUDA_ERROR_INVALID_VALUE
//   cuMemMap flags != 0 or offset != 0                                         CUDA_ERROR_INVALID_VALUE
//   cuMemMap size 0 or not the allocation's size (whole allocations only, B23)  CUDA_ERROR_INVALID_VALUE
//   cuMemMap ptr not a multiple of granularity                                 CUDA_ERROR_INVALID_VALUE
//   cuMemMap range not inside one reservation                                  CUDA_ERROR_INVALID_VALUE
//   cuMemMap range overlapping an existing mapping                             CUDA_ERROR_INVALID_VALUE
//   cuMemMap / cuMemUnmap: mmap failed                                         CUDA_ERROR_OUT_OF_MEMORY
//   cuMemUnmap range not inside one reservation or not exactly whole mappings  CUDA_ERROR_INVALID_VALUE
//   cuMemSetAccess desc null or count 0                                        CUDA_ERROR_INVALID_VALUE
//   cuMemSetAccess ptr/size not granularity-aligned, size 0, or range not      CUDA_ERROR_INVALID_VALUE
//     entirely covered by (contiguous) mappings
//   access location DEVICE with an id that is not a device                     CUDA_ERROR_INVALID_DEVICE
//   access location type not DEVICE / HOST / HOST_NUMA / HOST_NUMA_CURRENT      CUDA_ERROR_INVALID_VALUE
//     (a HOST_NUMA access id is ignored, as cuda.h says)
//   cuMemSetAccess HOST_NUMA or HOST_NUMA_CURRENT access on a range mapping     CUDA_ERROR_INVALID_VALUE
//     any allocation that is not HOST_NUMA-located
//   cuMemSetAccess HOST access on a range mapping any DEVICE-located           CUDA_ERROR_NOT_SUPPORTED
//     allocation (B37)
//   access flags not PROT_NONE / PROT_READ / PROT_READWRITE                    CUDA_ERROR_INVALID_VALUE
//   cuMemSetAccess: mprotect failed                                            CUDA_ERROR_OUT_OF_MEMORY
//   any entry point: a C++ exception inside it (std::bad_alloc of a container  CUDA_ERROR_OUT_OF_MEMORY
//     or string; none crosses the table: Guarded in registry.cpp)
//   cuMemGetAccess / cuMemRetainAllocationHandle ptr not inside a mapping      CUDA_ERROR_INVALID_VALUE
//   export: flags != 0                                                         CUDA_ERROR_INVALID_VALUE
//   export/import: handle type FABRIC, WIN32 or WIN32_KMT                      CUDA_ERROR_NOT_SUPPORTED
//   export/import: handle type other than POSIX_FILE_DESCRIPTOR                CUDA_ERROR_INVALID_VALUE
//   export of an allocation created without POSIX_FILE_DESCRIPTOR requested    CUDA_ERROR_INVALID_VALUE
//   export of an allocation that was itself imported                           CUDA_ERROR_NOT_PERMITTED
//   export/import: duplicating the fd failed (EMFILE)                          CUDA_ERROR_OPERATING_SYSTEM
//   import of an fd that is closed, not a cuvmm host memfd (pipe, file,        CUDA_ERROR_INVALID_VALUE
//     /dev/null, foreign memfd, malformed or never-exportable name), not open
//     read-write, not sealed exactly F_SEAL_SHRINK|F_SEAL_GROW|F_SEAL_SEAL
//     (F_SEAL_EXEC aside: a write seal, or a missing one), or whose size is not
//     a positive multiple of granularity (host_import_refusal says which)
//   import of a memfd whose device does not exist in this process (cuda.h:     CUDA_ERROR_NOT_SUPPORTED
//     "the current process cannot support the memory")
//     (import duplicates the caller's fd FIRST and checks and keeps the duplicate,
//     so a number closed and reused by another thread meanwhile cannot slip through)
//   copies/memset: n == 0                                                      CUDA_SUCCESS (nothing checked
//                                                                                but cuInit)
//   copies/memset: null host pointer                                           CUDA_ERROR_INVALID_VALUE
//   copies: a host range overlapping a reservation that is not entirely        CUDA_ERROR_INVALID_VALUE
//     covered by contiguous mappings on which the CPU (HOST / HOST_NUMA
//     access) has READ for a source / READWRITE for a destination (a host
//     pointer into mapped, CPU-accessible memory is fine: unified addressing)
//   copies/memset: device range not entirely covered by contiguous mappings,   CUDA_ERROR_INVALID_VALUE
//     or the current device lacks READ on a source / READWRITE on a dest
//   cuStreamCreate[WithPriority] flags not DEFAULT / NON_BLOCKING              CUDA_ERROR_INVALID_VALUE
//   cuStreamCreateWithPriority priority outside [-5, 0]                        (not an error: clamped)
//   a stream argument that is not live (destroyed, junk) in any stream call,   CUDA_ERROR_INVALID_HANDLE
//     async copy, event record or host function; cuStreamDestroy of the
//     null / legacy / per-thread stream
//   the null / legacy / per-thread stream, cuStreamCreate*, cuEventCreate,     CUDA_ERROR_INVALID_CONTEXT
//     cuCtxGetStreamPriorityRange, async copies, cuMemHostAlloc/Register with
//     no current context
//   any CUDA call made from inside a host function (cuda.h: must not)          CUDA_ERROR_NOT_PERMITTED
//   an event that is not live (destroyed, junk)                                CUDA_ERROR_INVALID_HANDLE
//   cuEventCreate flags outside DEFAULT|BLOCKING_SYNC|DISABLE_TIMING|           CUDA_ERROR_INVALID_VALUE
//     INTERPROCESS, or INTERPROCESS without DISABLE_TIMING
//   cuEventRecord of an event and a stream of different devices (contexts)     CUDA_ERROR_INVALID_HANDLE
//   cuStreamWaitEvent flags != 0 (WAIT_EXTERNAL: stream capture only)          CUDA_ERROR_INVALID_VALUE
//   cuStreamQuery / cuEventQuery / cuEventElapsedTime: work not complete       CUDA_ERROR_NOT_READY
//   cuEventElapsedTime: either event never recorded or DISABLE_TIMING          CUDA_ERROR_INVALID_HANDLE
//   cuEventElapsedTime / cuLaunchHostFunc: null out-pointer / fn               CUDA_ERROR_INVALID_VALUE
//   async copies/memset: same argument rules and codes as the synchronous ones (checked at the call)
//   a queued copy/memset whose memory is no longer mapped / accessible when    CUDA_ERROR_ILLEGAL_ADDRESS,
//     it runs: sticky for its device (stream/event sync, query, elapsed,         sticky; later ops skipped,
//     create, record, wait, host func, copies needing that current context,      host functions not called
//     cuStreamDestroy: the stream is destroyed all the same)
//   a queued op that throws std::bad_alloc (staging, a container in the copy)  CUDA_ERROR_OUT_OF_MEMORY, sticky
//   a host function that throws any other C++ exception (cuda.h is silent;     CUDA_ERROR_LAUNCH_FAILED, sticky
//     never across the worker: the process goes on, later ops are skipped)
//   cuMemHostAlloc: null pp, size 0, flags outside PORTABLE|DEVICEMAP|         CUDA_ERROR_INVALID_VALUE
//     WRITECOMBINED
//   cuMemHostAlloc: mmap failed                                                CUDA_ERROR_OUT_OF_MEMORY
//   cuMemFreeHost of a pointer that is not a live cuMemHostAlloc base          CUDA_ERROR_INVALID_VALUE
//   cuMemHostRegister: null, size 0, wrapping, flags outside PORTABLE|         CUDA_ERROR_INVALID_VALUE
//     DEVICEMAP|IOMEMORY|READ_ONLY, or a range touching a reservation
//   cuMemHostRegister READ_ONLY (READ_ONLY_HOST_REGISTER_SUPPORTED is 0)        CUDA_ERROR_NOT_SUPPORTED (cuda.h)
//   cuMemHostRegister of a range not entirely mapped read-write in this        CUDA_ERROR_INVALID_VALUE
//     process (/proc/self/maps: unmapped, PROT_NONE or read-only pages)          (GPU to confirm the code)
//   cuMemHostRegister overlapping a pinned range (allocated or registered)     CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED
//   cuMemHostUnregister of a pointer that is not a registered range's base     CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED
//   cuMemFreeHost / cuMemHostUnregister while queued copies target the range   (waits for them: undocumented)
//   async copy whose host range lies in mapped CPU-accessible VMM memory       (pinned: fully asynchronous,
//     (HOST / HOST_NUMA located)                                                 no staging, no wait)
//   fork(): the child forgets the parent's stream work (queued ops dropped,    (sync / free / unmap in the
//     counts complete, no workers, no pending pinned uses; the atfork handler     child return at once)
//     holds the registry lock and the queue mutex across the fork)
//   cuMemAddressReserve addr hint not a multiple of max(alignment, granularity) CUDA_ERROR_INVALID_VALUE
//     (B22; a well-aligned hint that cannot be honoured is still placed elsewhere)
//   cuMemMap size other than the allocation's whole size (B23)                 CUDA_ERROR_INVALID_VALUE
//   cuMemSetAccess HOST or HOST_NUMA_CURRENT access on a range mapping a        CUDA_ERROR_NOT_SUPPORTED
//     DEVICE-located allocation (B37; after the HOST_NUMA rule above)
//   copies/memset: the private view of a DEVICE-located allocation cannot be    CUDA_ERROR_OUT_OF_MEMORY
//     mapped (mmap at the first copy or memset that touches it; nothing copied)
//   a CPU load or store at the public address of DEVICE-located memory         SIGSEGV, as on a GPU (B40:
//                                                                                PROT_NONE whatever the
//                                                                                access; copies use the view)
//
// Threading: all registry state sits behind one shared mutex (a writer-preferring
// pthread rwlock, see RegistryMutex: a std::shared_mutex would let copies starve unmap).
// Structural changes (create, release, reserve, free, map, unmap, set access, import,
// context retain/release, streams) take it exclusively,
// including the mmap/munmap/mprotect/close they do, so the kernel's view and the registry
// never disagree to another thread. Copies and memset take it shared for the whole
// memcpy, so a concurrent unmap or mprotect waits until the copy is done and a copy can
// never fault. Nothing but bookkeeping and those syscalls happens under the lock.
// Streams, events and pinned ranges sit behind a separate queue mutex (stream_queue.hpp),
// never held across an op, a host function or a sleep; a queued copy takes this lock shared
// when it runs, as the synchronous copies do. When both are held, this lock is taken first
// (the fork() prepare handler; the last primary context release), never the other way.
//
// Ownership: the driver owns exactly one fd per live allocation record (created memfd
// or its own dup of an imported fd) and closes it once, when the handle is fully
// released AND no mapping references the allocation. Reservations and mappings are
// munmapped/replaced exactly once. An fd returned by export belongs to the caller; an fd
// passed to import stays the caller's.
#pragma once

#include "cuvmm/driver_table.hpp"

#include <pthread.h>
#include <sys/mman.h>

#include <array>
#include <atomic>
#include <cstdint>
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
#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif
#ifndef F_SEAL_EXEC
#define F_SEAL_EXEC 0x0020
#endif

namespace cuvmm {
namespace host {

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
    uint64_t mapped_handle = 0;     // the value it was created or imported with: a retain after
                                    // the last release hands it back (cuda.h: "the same handle
                                    // value used to map the memory"; audit B47)
    // DEVICE-located only: the driver's private read-write mapping of the whole memfd.
    // Copies and memset go through it; the public mappings stay PROT_NONE to the CPU (B40:
    // device memory is not CPU memory). Lazy: mapped by the first copy or memset that
    // touches the allocation (most allocations are never copied by the driver, and a view
    // at cuMemMap cost ~5 us an allocate/close), unmapped in drop_if_dead. Copies hold the
    // registry lock only shared, so view_mutex is the once-guard of its creation; the
    // atomic lets later copies read it without that mutex (views.cpp, view_of).
    std::atomic<unsigned char*> view{nullptr};
    std::mutex view_mutex;
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
    RegistryMutex() { init(); }
    ~RegistryMutex() { pthread_rwlock_destroy(&rw_); }
    RegistryMutex(const RegistryMutex&) = delete;
    RegistryMutex& operator=(const RegistryMutex&) = delete;

    void lock() { pthread_rwlock_wrlock(&rw_); }
    void unlock() { pthread_rwlock_unlock(&rw_); }
    void lock_shared() { pthread_rwlock_rdlock(&rw_); }
    void unlock_shared() { pthread_rwlock_unlock(&rw_); }
    // fork() child only (stream_queue.cpp's atfork handler, which held it exclusively
    // across the fork): a fresh, unlocked lock; the parent's holders do not exist here.
    void reinit_in_child() { init(); }

private:
    void init() {
        pthread_rwlockattr_t attr;
        pthread_rwlockattr_init(&attr);
        pthread_rwlockattr_setkind_np(&attr, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP);
        pthread_rwlock_init(&rw_, &attr);
        pthread_rwlockattr_destroy(&attr);
    }
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
    uint64_t next_handle = kFirstHandle;
    uint64_t next_alloc_id = 1;
    long long memfds = 0;                               // fds held open by the driver
    // Bytes of the live allocations this process created (not imported), per location:
    // slot = device ordinal for DEVICE, kMaxDevices for the host locations. cuMemCreate
    // refuses past device_memory_bytes, as a GPU's memory runs out, although a sparse memfd
    // would take it (a port of cuda.core's tests found it); the budget is the slots' sum,
    // since every location's pages come from the same RAM (an independent probe: three
    // locations of 3/4 of the RAM each were granted, and filling one in a memory cgroup got
    // the JVM killed).
    std::array<size_t, kMaxDevices + 1> created_bytes{};
};

// The memory of the host driver, shared by all its locations (devices and host): this
// machine's physical memory, or this process's memory cgroup limit where that is smaller
// (what cuDeviceTotalMem reports for each device). Read once. 0 when the system does not say.
size_t device_memory_bytes();

// The smallest memory limit of this process's memory cgroup and its ancestors (cgroup v2's
// memory.max, v1's memory.limit_in_bytes), found through the two proc files named (normally
// /proc/self/cgroup and /proc/self/mountinfo; tests pass their own). 0: no limit, or none
// found.
size_t cgroup_memory_limit(const char* proc_cgroup_path, const char* mountinfo_path);

// created_bytes' slot for an allocation at `loc` (a normalised location).
inline size_t created_slot(const CUmemLocation& loc) {
    return loc.type == CU_MEM_LOCATION_TYPE_DEVICE && loc.id >= 0 && loc.id < kMaxDevices
               ? static_cast<size_t>(loc.id)
               : static_cast<size_t>(kMaxDevices);
}

// The one State, published once by install_host_driver (never destroyed). Atomic because
// host_import_refusal and host_live_counts may read it on any thread without the install
// mutex; entry points read it after CUVMM_REQUIRE_INIT. Loads are acquire (a plain load on
// x86), so whoever sees the pointer sees the State it was built into.
class StatePtr {
public:
    State* get() const { return p_.load(std::memory_order_acquire); }
    State* operator->() const { return get(); }
    State& operator*() const { return *get(); }
    void publish(State* st) { p_.store(st, std::memory_order_release); }

private:
    std::atomic<State*> p_{nullptr};
};

extern StatePtr g_state;
extern std::atomic<bool> g_initialized;
extern thread_local int tl_current_device;  // -1: no current context on this thread

using Shared = std::shared_lock<RegistryMutex>;
using Exclusive = std::unique_lock<RegistryMutex>;

// ---- small helpers -------------------------------------------------------------------

inline bool is_pow2(size_t v) { return v != 0 && (v & (v - 1)) == 0; }

bool valid_device(long long dev);

bool aligned(unsigned long long v);

// [p, p+n) without wrapping past the end of the address space.
inline bool range_ok(unsigned long long p, size_t n) { return p + n >= p; }

// Common prologue of every entry point but cuInit/cuDriverGetVersion/cuGetError*.
inline bool initialized() { return g_initialized.load(std::memory_order_acquire); }

// ---- access rules (access.cpp) -------------------------------------------------------

// Maps an access location to its slot, or returns the CUresult for a bad location.
CUresult access_slot(const CUmemLocation& loc, int* slot);

// The CPU protection of a run: the union of what every location may do, because a CPU
// mapping cannot tell devices apart (per-device checks happen in the bookkeeping).
int prot_of(const Access& a);

// True when [p, p+n) is covered by mappings on which `slot` has at least `need`.
bool accessible(State& st, uintptr_t p, size_t n, int slot, unsigned need);

// The argument checks of every copy (copies.cpp), shared by the async ones: a host range
// the CPU can touch with `need` without faulting (outside every reservation, or mapped
// with that CPU access), and a device range mapped with `need` for device `dev`. Caller
// holds the mutex (shared is enough).
bool host_range_ok(State& st, const void* p, size_t n, unsigned need);
bool device_range_ok(State& st, CUdeviceptr p, size_t n, int dev, unsigned need);

// Copies and memset on device ranges that accessible() has just checked (shared lock held
// across them): DEVICE-located memory is reached through its allocation's private view,
// other memory at its address. memmove semantics, also across chunks (views.cpp).
// CUDA_ERROR_OUT_OF_MEMORY, having copied nothing, when a view cannot be mapped.
CUresult device_write(State& st, uintptr_t dst, const void* src, size_t n);
// Maps the views [p, p+n) will need, copying nothing: a stream-ordered copy calls it when it
// is queued, so a view that cannot be mapped is the caller's CUDA_ERROR_OUT_OF_MEMORY rather
// than a fault of the op later.
CUresult device_prepare(State& st, uintptr_t p, size_t n);
CUresult device_read(State& st, void* dst, uintptr_t src, size_t n);
CUresult device_copy(State& st, uintptr_t dst, uintptr_t src, size_t n);
CUresult device_fill(State& st, uintptr_t dst, unsigned char value, size_t n);

// ---- memfd naming (memfd.cpp) --------------------------------------------------------

// memfd name encoding the properties, so an importer in another process recovers them.
std::string memfd_name(const CUmemAllocationProp& p);

// Parses the /proc/self/fd link target of a memfd we created (possibly in another
// process): "/memfd:cuvmm-host:d<dev>:h<types>:l<loctype>:n<locid> (deleted)".
bool parse_memfd_target(const std::string& target, int* device, CUmemAllocationProp* prop);

// What check_import_fd learns about an importable memfd.
struct ImportableMemfd {
    size_t size = 0;
    CUmemAllocationProp prop{};  // as the name encodes it (normalised, PINNED)
};

// Whether `fd` is a memfd some cuvmm host driver created and exported: open read-write, a
// regular file named by memfd_name, sealed exactly F_SEAL_SHRINK|F_SEAL_GROW|F_SEAL_SEAL
// (F_SEAL_EXEC tolerated), sized in granules, of a device this process has. Returns
// CUDA_SUCCESS and fills *out (when non-null), or the refusal's CUresult
// (INVALID_VALUE, NOT_SUPPORTED) with a sentence in *why (when non-null). Reads the fd's
// metadata only; needs no lock (the config is fixed once installed).
CUresult check_import_fd(int fd, ImportableMemfd* out, std::string* why);

// ---- registry helpers (registry.cpp; caller holds the mutex as noted) ----------------

// Allocation of a live handle, or nullptr. Any lock.
Allocation* find_handle(State& st, CUmemGenericAllocationHandle h);

uint64_t new_handle(State& st);

// Records a new allocation that owns `fd` under a fresh handle with one reference, and
// returns the handle. Caller holds the exclusive lock. Throws std::bad_alloc having
// recorded nothing and closed `fd` (it owns the fd either way).
CUmemGenericAllocationHandle register_allocation(State& st, int fd, size_t size, const CUmemAllocationProp& prop,
                                                 bool imported);

// Closes and forgets an allocation once nothing references it. Exclusive lock.
void drop_if_dead(State& st, uint64_t alloc_id);

// The reservation containing all of [p, p+n), or end(). Any lock.
std::map<uintptr_t, size_t>::iterator find_reservation(State& st, uintptr_t p, size_t n);

// The mapping containing address p, or end(). Any lock.
std::map<uintptr_t, Mapping>::iterator find_mapping(State& st, uintptr_t p);

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

// True when [p, p+n) intersects any reservation (device VA used as host memory).
bool overlaps_reservation(State& st, uintptr_t p, size_t n);

// Splits the run containing offset `off` so that a run starts exactly at `off`.
void split_at(Mapping& m, size_t off);

// Merges adjacent runs with equal access.
void coalesce(Mapping& m);

// cuCtxSynchronize: waits for every stream of the current device; INVALID_CONTEXT without
// one, else the device's sticky error (stream_queue.cpp). Takes no lock the caller holds.
CUresult synchronize_current_device();

// The primary context of `dev` was reset (its last release): its created streams and events
// stop being handles (later use: INVALID_HANDLE); queued work still drains, then the workers
// exit. Caller holds the registry lock exclusively; takes the queue mutex (stream_queue.cpp).
void forget_streams_and_events(int dev);

// A current context whose primary context is still retained; its device via *dev.
// Caller holds the mutex (any mode).
bool current_device(State& st, int* dev);

// ---- entry points (one family a file) ------------------------------------------------
namespace entry {

// Declared from the X-macro so a signature that does not match the table fails to compile.
#define CUVMM_HOST_DECL(name, version, params) CUresult CUDAAPI name params;
CUVMM_DRIVER_ENTRY_POINTS(CUVMM_HOST_DECL)
#undef CUVMM_HOST_DECL

}  // namespace entry

// True on a worker thread while it runs a host function (stream_queue.cpp): CUDA calls
// made from there are refused, since cuda.h says a host function must not make any (the
// real driver may deadlock; refusing is the strict answer).
extern thread_local bool tl_in_host_function;

#define CUVMM_REQUIRE_INIT()                                                \
    do {                                                                    \
        if (!::cuvmm::host::initialized()) return CUDA_ERROR_NOT_INITIALIZED; \
        if (::cuvmm::host::tl_in_host_function) return CUDA_ERROR_NOT_PERMITTED; \
    } while (0)

}  // namespace host
}  // namespace cuvmm
