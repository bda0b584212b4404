// How the host driver's copies and memset reach the bytes of a device range (B40).
//
// DEVICE-located memory is PROT_NONE to the CPU at its public address whatever its access,
// as on a GPU, where device memory is never CPU memory: a program that reads it through a
// raw address faults on a CPU as it would on a GPU. The driver's own copies go through the
// allocation's private view instead (a second MAP_SHARED mapping of the same memfd, made by
// the first copy or memset that touches the allocation: view_of). HOST / HOST_NUMA memory is used at its public address, which the
// CPU may touch once it was granted access (a host pointer into it may be a copy's other
// side, so both sides must be the same addresses for memmove to see an overlap).
//
// Contract: the caller checked with accessible() that the range is covered by contiguous
// mappings, and holds the registry lock (shared) across the call, so no mapping or view
// goes away underneath (drop_if_dead unmaps a view under the exclusive lock). Several
// copies may create views at once, each under its allocation's view_mutex.
#include "host/host_internal.hpp"

#include <algorithm>
#include <cstring>
#include <mutex>
#include <vector>

namespace cuvmm {
namespace host {
namespace {

struct Piece {
    unsigned char* cpu;  // where the CPU reaches these bytes
    size_t len;
};

// A list that keeps its first N entries in place and spills to the heap only beyond: a copy
// within one or a few mappings (every small copy) allocates nothing per call, which matters
// for the ops run inline on an idle stream (a copy of 64 KiB costs about 1 us; a malloc/free
// pair under load a noticeable part of it). Order and contents as a std::vector's.
template <class T, size_t N>
class SmallList {
public:
    void push_back(const T& v) {
        if (spill_.empty() && n_ < N) {
            fixed_[n_++] = v;
            return;
        }
        if (spill_.empty()) spill_.assign(fixed_, fixed_ + n_);
        spill_.push_back(v);
        ++n_;
    }
    bool empty() const { return n_ == 0; }
    size_t size() const { return n_; }
    T* data() { return spill_.empty() ? fixed_ : spill_.data(); }
    T& operator[](size_t i) { return data()[i]; }
    T& back() { return data()[n_ - 1]; }
    T* begin() { return data(); }
    T* end() { return data() + n_; }

private:
    T fixed_[N];
    size_t n_ = 0;
    std::vector<T> spill_;
};
using Pieces = SmallList<Piece, 4>;

// The private view of a DEVICE-located allocation, mapped on first use; nullptr when the
// mmap failed (a later copy tries again). Double-checked: the acquire load sees a view some
// other copy published; view_mutex makes sure only one copy maps it.
unsigned char* view_of(Allocation& a) {
    unsigned char* v = a.view.load(std::memory_order_acquire);
    if (v != nullptr) return v;
    std::lock_guard<std::mutex> once(a.view_mutex);
    v = a.view.load(std::memory_order_relaxed);
    if (v != nullptr) return v;
    void* m = ::mmap(nullptr, a.size, PROT_READ | PROT_WRITE, MAP_SHARED, a.fd, 0);
    if (m == MAP_FAILED) return nullptr;
    v = static_cast<unsigned char*>(m);
    a.view.store(v, std::memory_order_release);
    return v;
}

// The CPU addresses of [p, p+n), in order; pieces that are adjacent for the CPU are merged,
// so a range of host memory is one piece, as the public addresses are contiguous.
// CUDA_ERROR_OUT_OF_MEMORY when a view it needs cannot be mapped.
CUresult pieces(State& st, uintptr_t p, size_t n, Pieces& out) {
    bool no_view = false;
    for_each_run(st, p, n, [&](uintptr_t base, Mapping& m, size_t b, size_t e, Access&) {
        if (no_view) return;
        Allocation& a = *st.allocations.at(m.alloc_id);
        // Map offset is 0 and maps are whole (B23): an offset in the mapping is an offset
        // in the allocation, and so in its view.
        unsigned char* cpu = reinterpret_cast<unsigned char*>(base + b);
        if (a.prop.location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
            unsigned char* v = view_of(a);
            if (v == nullptr) {
                no_view = true;
                return;
            }
            cpu = v + b;
        }
        if (!out.empty() && out.back().cpu + out.back().len == cpu) {
            out.back().len += e - b;
        } else {
            out.push_back({cpu, e - b});
        }
    });
    return no_view ? CUDA_ERROR_OUT_OF_MEMORY : CUDA_SUCCESS;
}

}  // namespace

CUresult device_prepare(State& st, uintptr_t p, size_t n) {
    Pieces unused;
    return pieces(st, p, n, unused);
}

CUresult device_write(State& st, uintptr_t dst, const void* src, size_t n) {
    Pieces ds;
    if (CUresult r = pieces(st, dst, n, ds)) return r;
    const auto* from = static_cast<const unsigned char*>(src);
    for (const Piece& d : ds) {
        std::memmove(d.cpu, from, d.len);  // a host source may overlap host memory
        from += d.len;
    }
    return CUDA_SUCCESS;
}

CUresult device_read(State& st, void* dst, uintptr_t src, size_t n) {
    Pieces ss;
    if (CUresult r = pieces(st, src, n, ss)) return r;
    auto* to = static_cast<unsigned char*>(dst);
    for (const Piece& s : ss) {
        std::memmove(to, s.cpu, s.len);
        to += s.len;
    }
    return CUDA_SUCCESS;
}

CUresult device_fill(State& st, uintptr_t dst, unsigned char value, size_t n) {
    Pieces ds;
    if (CUresult r = pieces(st, dst, n, ds)) return r;
    for (const Piece& d : ds) std::memset(d.cpu, value, d.len);
    return CUDA_SUCCESS;
}

CUresult device_copy(State& st, uintptr_t dst, uintptr_t src, size_t n) {
    // Both lists (and so every view) before the first byte moves: a failure copies nothing.
    Pieces ds, ss;
    if (CUresult r = pieces(st, dst, n, ds)) return r;
    if (CUresult r = pieces(st, src, n, ss)) return r;
    // Pair the two lists into steps of equal length.
    struct Step {
        unsigned char* to;
        const unsigned char* from;
        size_t len;
    };
    SmallList<Step, 8> steps;
    size_t di = 0, si = 0, doff = 0, soff = 0;
    while (di < ds.size() && si < ss.size()) {
        size_t len = std::min(ds[di].len - doff, ss[si].len - soff);
        steps.push_back({ds[di].cpu + doff, ss[si].cpu + soff, len});
        doff += len;
        soff += len;
        if (doff == ds[di].len) ++di, doff = 0;
        if (soff == ss[si].len) ++si, soff = 0;
    }
    // memmove's rule, decided on the public addresses in O(1) (a pairwise check of the steps
    // cost the square of the chunk count under the lock): copy from the end when the
    // destination starts inside the source. Overlap is undefined on the driver anyway; this
    // keeps the one case that is simple to keep, a shift within one mapping, intact.
    const bool backwards = dst > src && dst < src + n;
    if (backwards) {
        for (size_t i = steps.size(); i-- > 0;) std::memmove(steps[i].to, steps[i].from, steps[i].len);
    } else {
        for (const Step& s : steps) std::memmove(s.to, s.from, s.len);
    }
    return CUDA_SUCCESS;
}

}  // namespace host
}  // namespace cuvmm
