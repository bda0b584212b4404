// The host driver's registry: the one State (allocations, handles, reservations,
// mappings, context retains), lookups over it, and install_host_driver /
// host_live_counts, the host driver's face to the rest of native/.
#include "host/host_internal.hpp"

#include <unistd.h>
#include <mutex>

namespace cuvmm {
namespace host {
namespace {

std::mutex g_install_mutex;

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

StatePtr g_state;
std::atomic<bool> g_initialized{false};
thread_local int tl_current_device = -1;

bool valid_device(long long dev) { return dev >= 0 && dev < g_state->config.device_count; }

bool aligned(unsigned long long v) { return v % g_state->config.granularity == 0; }

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
    std::unique_ptr<Allocation> a;
    const uint64_t id = st.next_alloc_id;
    try {
        a = std::make_unique<Allocation>();
        st.allocations.emplace(id, nullptr);  // the node first: the move below cannot throw
    } catch (...) {  // std::bad_alloc: nothing recorded; the fd is closed, as promised
        ::close(fd);
        throw;
    }
    a->fd = fd;
    a->size = size;
    a->prop = prop;
    a->imported = imported;
    a->refcount = 1;
    a->handle = new_handle(st);
    a->mapped_handle = a->handle;
    const CUmemGenericAllocationHandle handle = a->handle;
    try {
        st.handles.emplace(handle, id);
    } catch (...) {
        st.allocations.erase(id);
        ::close(fd);
        throw;
    }
    st.allocations[id] = std::move(a);
    ++st.next_alloc_id;
    ++st.memfds;
    return handle;
}

// Closes and forgets an allocation once nothing references it. Exclusive lock.
void drop_if_dead(State& st, uint64_t alloc_id) {
    auto it = st.allocations.find(alloc_id);
    if (it == st.allocations.end()) return;
    Allocation& a = *it->second;
    if (a.refcount > 0 || a.mappings > 0) return;
    // Exclusive lock: no copy is using or creating the view.
    if (unsigned char* v = a.view.load(std::memory_order_acquire)) ::munmap(v, a.size);
    if (a.fd >= 0) {
        ::close(a.fd);
        --st.memfds;
    }
    if (!a.imported) st.created_bytes[created_slot(a.prop.location)] -= a.size;  // cuMemCreate's count
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

// A current context whose primary context is still retained; its device via *dev.
// Caller holds the mutex (any mode).
bool current_device(State& st, int* dev) {
    int d = tl_current_device;
    if (d < 0 || d >= st.config.device_count || st.ctx_retains[d] <= 0) return false;
    *dev = d;
    return true;
}

// The one exception rule of the host driver: no C++ exception crosses an entry point (its
// caller expects a CUresult over a C signature, and the JNI layer would not survive one).
// The entry points use standard containers and strings, whose only failure is running out
// of memory (std::bad_alloc, std::length_error), so any exception becomes
// CUDA_ERROR_OUT_OF_MEMORY, the driver's code for "out of memory". The code that holds an
// fd or a mapping across an allocation undoes it before the exception leaves
// (register_allocation, cuMemAddressReserve, cuMemMap, import), so the registry and the
// kernel still agree afterwards. install_host_driver puts every entry point behind it.
template <class Fn, Fn fn>
struct Guarded;
template <class... Args, CUresult(CUDAAPI* fn)(Args...)>
struct Guarded<CUresult(CUDAAPI*)(Args...), fn> {
    static CUresult CUDAAPI call(Args... args) noexcept {
        try {
            return fn(args...);
        } catch (...) {
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
    }
};

}  // namespace host

void install_host_driver(DriverTable& table, const HostDriverConfig& config) {
    {
        std::lock_guard<std::mutex> lock(host::g_install_mutex);
        if (host::g_state.get() == nullptr) {  // (a bad_alloc here is the caller's: before any entry point)
            auto* st = new host::State();  // process lifetime: never destroyed (threads may outlive main)
            long page = ::sysconf(_SC_PAGESIZE);
            st->page_size = page > 0 ? static_cast<size_t>(page) : 4096;
            st->config = host::sanitise(config, st->page_size);
            host::g_state.publish(st);
            host_set_stream_delay_micros(st->config.stream_delay_micros);
            host::device_memory_bytes();  // the memory budget, read now while fds are to spare
        }
    }
    // The X-macro assigns every member, so none can stay null. Each is the entry point
    // behind host::Guarded (no exception crosses the table).
#define CUVMM_HOST_FILL(name, version, params) \
    table.name = &host::Guarded<decltype(&host::entry::name), &host::entry::name>::call;
    CUVMM_DRIVER_ENTRY_POINTS(CUVMM_HOST_FILL)
#undef CUVMM_HOST_FILL
}

HostLiveCounts host_live_counts() {
    HostLiveCounts c;
    host::State* st = host::g_state.get();  // atomic: no install mutex needed
    if (st == nullptr) return c;
    host::Shared lock(st->mutex);
    c.allocations = static_cast<long long>(st->allocations.size());
    c.reservations = static_cast<long long>(st->reservations.size());
    c.mappings = static_cast<long long>(st->mappings.size());
    c.memfds = st->memfds;
    return c;
}

bool host_owns_fd(int fd) {
    host::State* st = host::g_state.get();  // atomic: no install mutex needed
    if (st == nullptr || fd < 0) return false;
    host::Shared lock(st->mutex);
    for (const auto& entry : st->allocations) {
        if (entry.second != nullptr && entry.second->fd == fd) return true;
    }
    return false;
}

}  // namespace cuvmm
