// The VMM object model: physical allocation, reservation, mapping, range.
//
// Each driver object is a small immutable box held by std::shared_ptr<const T>; its
// destructor makes exactly one undo call (cuMemRelease, cuMemAddressFree, cuMemUnmap).
// A Mapping holds its Reservation and its Allocation as members, so destroying the last
// reference to a mapping unmaps, then releases the allocation (if no other mapping holds
// it), then frees the address range (if no other mapping holds it): destruction order is
// teardown order. A Range is an immutable list of mappings covering one contiguous
// address range; a grow builds a new Range that shares the old mappings.
//
// Failure contract: factories throw DriverError and leave nothing behind (partially built
// objects are released by their own destructors as the exception unwinds). Destructors
// never throw; a failed undo call is reported through report_cleanup_failure. Each undo
// call runs inside a TeardownContextScope of the device the object was made for, so a
// teardown on a thread with no current context (the cleaner's) has one.
#pragma once

#include "cuvmm/driver.hpp"

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

namespace cuvmm {

// What a resource asks of the driver for every chunk. Immutable once built; shared by
// every range made from the same resource options.
struct ChunkSpec {
    CUmemAllocationProp prop{};              // type, requested handle types, location, RDMA flag
    int device = 0;                          // ordinal whose primary context runs copies and fills
    std::vector<CUmemAccessDesc> access;     // applied to every mapping (self, peers, host)
    size_t granularity = 0;                  // every chunk size and reservation is a multiple
    CUdeviceptr address_hint = 0;            // first reservation of an allocate() or import tries here
    size_t alignment = 0;                    // reservation alignment; the driver always gets
                                             // max(alignment, granularity), never 0
};
using ChunkSpecRef = std::shared_ptr<const ChunkSpec>;

// Numbers of our own boxes alive right now (either driver).
struct ObjectCounts {
    long long allocations = 0;
    long long reservations = 0;
    long long mappings = 0;
    long long ranges = 0;
};
ObjectCounts object_counts();

// One physical allocation (cuMemCreate or cuMemImportFromShareableHandle).
// Owns its handle; the destructor calls cuMemRelease once.
class Allocation {
public:
    static std::shared_ptr<const Allocation> create(const ChunkSpec& spec, size_t size, const Step& step);
    // Imports a shareable handle (a POSIX fd for POSIX_FILE_DESCRIPTOR). The caller keeps
    // ownership of `fd`; the driver keeps what it needs. Throws CUDA_ERROR_INVALID_DEVICE
    // (after releasing the import) when the memory is not at `expected`.
    static std::shared_ptr<const Allocation> import_fd(int device, int fd, size_t size,
                                                       const CUmemLocation& expected, const Step& step);

    ~Allocation();
    Allocation(const Allocation&) = delete;
    Allocation& operator=(const Allocation&) = delete;

    CUmemGenericAllocationHandle handle() const { return handle_; }
    size_t size() const { return size_; }
    // True when this memory came from another process: it may not be exported again.
    bool imported() const { return imported_; }
    CUmemAllocationHandleType handle_types() const { return handle_types_; }
    // The device whose primary context is current while the handle is released.
    int device() const { return device_; }
    // This box's identity: non-zero, unique in the process, never reused (a counter taken
    // when the box is made, by create or import_fd). Stays with the physical allocation for
    // as long as the box lives, whatever ranges (aliases, grows, pool reuse) map it; the
    // destructor reports it to the release notices (release_notices.hpp) after cuMemRelease.
    uint64_t id() const { return id_; }
    // True once a handle of this memory was exported (cuMemExportToShareableHandle, by
    // export_chunk_fds): another process may map it for as long as it likes, and nothing
    // tells this one when it stops. The pool's LOCAL lifetime (buffers used only in this
    // process) then releases the memory instead of handing it to a new owner. Never cleared.
    bool exported() const { return exported_.load(std::memory_order_relaxed); }
    void mark_exported() const { exported_.store(true, std::memory_order_relaxed); }

private:
    Allocation(int device, CUmemGenericAllocationHandle handle, size_t size, bool imported,
               CUmemAllocationHandleType types);
    // Boxes a handle that was just created or imported; releases it if boxing fails.
    static std::shared_ptr<const Allocation> own(int device, CUmemGenericAllocationHandle handle, size_t size,
                                                 bool imported, CUmemAllocationHandleType types);

    const CUmemGenericAllocationHandle handle_;
    const size_t size_;
    const bool imported_;
    const CUmemAllocationHandleType handle_types_;
    const int device_;
    const uint64_t id_;
    mutable std::atomic<bool> exported_{false};
};

// One reserved virtual address range (cuMemAddressReserve). The destructor frees it.
class Reservation {
public:
    // `hint` is a request, not a promise: check base() to see where the range landed.
    // `device`'s primary context is current when the destructor frees the range.
    static std::shared_ptr<const Reservation> reserve(int device, size_t size, size_t alignment, CUdeviceptr hint,
                                                      const Step& step);
    // reserve() with `hint`, and when the driver refuses that call with INVALID_VALUE or
    // OUT_OF_MEMORY and the hint is not 0, once more with no hint: some drivers fail a hint
    // they cannot honour (INVALID_VALUE) instead of placing the range elsewhere (audit A1).
    // The retry's error, if any, is thrown; any other first error is thrown as it is.
    static std::shared_ptr<const Reservation> reserve_preferring(int device, size_t size, size_t alignment,
                                                                 CUdeviceptr hint, const Step& step);
    ~Reservation();
    Reservation(const Reservation&) = delete;
    Reservation& operator=(const Reservation&) = delete;

    CUdeviceptr base() const { return base_; }
    size_t size() const { return size_; }
    int device() const { return device_; }

private:
    Reservation(int device, CUdeviceptr base, size_t size);
    const CUdeviceptr base_;
    const size_t size_;
    const int device_;
};

// One allocation mapped at one address inside a reservation, with access set.
// Holds both; the destructor unmaps, then the members drop (allocation, then reservation).
// It also keeps the access list it was mapped with: that list belongs to the chunk, not to
// whichever options a later grow is called with, and a move re-maps the chunk with it.
class Mapping {
public:
    // Maps `allocation` at `address` (inside `reservation`) and applies `access`. If
    // setting access fails the chunk is unmapped again before the error propagates.
    static std::shared_ptr<const Mapping> map(std::shared_ptr<const Reservation> reservation, CUdeviceptr address,
                                              std::shared_ptr<const Allocation> allocation,
                                              const std::vector<CUmemAccessDesc>& access, const Step& step);
    ~Mapping();
    Mapping(const Mapping&) = delete;
    Mapping& operator=(const Mapping&) = delete;

    CUdeviceptr address() const { return address_; }
    size_t size() const { return allocation_->size(); }
    const std::shared_ptr<const Allocation>& allocation() const { return allocation_; }
    // The access descriptors this chunk was mapped with (cuMemSetAccess's list).
    const std::vector<CUmemAccessDesc>& access() const { return access_; }
    // What the driver says `location` may do with this mapping (cuMemGetAccess at its
    // address): CU_MEM_ACCESS_FLAGS_PROT_NONE, _READ or _READWRITE. Throws DriverError.
    unsigned long long granted(const CUmemLocation& location, const Step& step) const;

private:
    Mapping(std::shared_ptr<const Reservation> reservation, CUdeviceptr address,
            std::shared_ptr<const Allocation> allocation, std::vector<CUmemAccessDesc> access);
    // Declaration order is teardown order in reverse: allocation_ is destroyed first.
    const std::shared_ptr<const Reservation> reservation_;
    const std::shared_ptr<const Allocation> allocation_;
    const CUdeviceptr address_;
    const std::vector<CUmemAccessDesc> access_;  // plain data; no teardown role
};

// How modify/grow produced its result.
enum class GrowOutcome : int { alias = 0, in_place = 1, moved = 2, fresh = 3 };

class Range;
using RangeRef = std::shared_ptr<const Range>;

// An immutable, contiguous list of mappings plus the logical size the user asked for
// (size() <= mapped_size()). Copies of a RangeRef are aliases of the same memory.
class Range {
public:
    static RangeRef empty(ChunkSpecRef spec);
    static RangeRef allocate(ChunkSpecRef spec, size_t size);
    // Imports one allocation per fd (sizes in address order) into one new reservation.
    static RangeRef import_fds(ChunkSpecRef spec, const std::vector<int>& fds, const std::vector<size_t>& sizes,
                               size_t size);

    // A new range of `new_size` bytes whose first bytes are this range's memory:
    //  - new_size <= mapped_size(): same mappings, no driver call (alias);
    //  - the range right after the last chunk can be reserved at exactly that address:
    //    one new chunk mapped there (in_place);
    //  - else a new reservation of the whole size, every existing allocation mapped again
    //    at its offset (no byte copied), then the new chunk (moved).
    // Existing chunks keep the access they were mapped with in every outcome (a move
    // re-maps each with its own Mapping::access()); only the new chunk gets spec->access.
    // `spec` must have the same handle types and device as this range's.
    RangeRef grow(ChunkSpecRef spec, size_t new_size, GrowOutcome& outcome) const;

    ~Range();
    Range(const Range&) = delete;
    Range& operator=(const Range&) = delete;

    CUdeviceptr address() const { return mappings_.empty() ? 0 : mappings_.front()->address(); }
    size_t size() const { return size_; }
    size_t mapped_size() const { return mapped_size_; }
    const std::vector<std::shared_ptr<const Mapping>>& mappings() const { return mappings_; }
    const ChunkSpecRef& spec() const { return spec_; }
    // True when any chunk of this range was imported from another process.
    bool any_imported() const;

private:
    Range(ChunkSpecRef spec, std::vector<std::shared_ptr<const Mapping>> mappings, size_t size);
    const ChunkSpecRef spec_;
    const std::vector<std::shared_ptr<const Mapping>> mappings_;
    const size_t size_;
    const size_t mapped_size_;
};

// Rounds `size` up to a multiple of `granularity` (a power of two); throws DriverError
// (CUDA_ERROR_INVALID_VALUE) when that would overflow.
size_t round_up_to_granularity(size_t size, size_t granularity);

}  // namespace cuvmm
