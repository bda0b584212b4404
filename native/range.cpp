// Ranges: allocate, grow (alias / in place / move) and import, each building a new
// immutable Range. Every intermediate object is owned by a shared_ptr, so an exception at
// any step unwinds to exactly the state before the call.
#include "cuvmm/object_counts.hpp"

#include <limits>

namespace cuvmm {

size_t round_up_to_granularity(size_t size, size_t granularity) {
    if (granularity == 0) return size;
    if (size > std::numeric_limits<size_t>::max() - (granularity - 1)) {
        throw DriverError(CUDA_ERROR_INVALID_VALUE, "round_up", "rounding the size to the granularity",
                          "size " + std::to_string(size) + " overflows when rounded up to the granularity " +
                              std::to_string(granularity));
    }
    return (size + granularity - 1) / granularity * granularity;
}

namespace {

// The alignment every reservation of `spec` asks for, always explicit: to the driver 0
// means its own default (cuda.h, cuMemAddressReserve), not the granularity, and an
// alignment below the granularity may be honoured, giving a base cuMemMap refuses (A2).
size_t reservation_alignment(const ChunkSpec& spec) {
    return spec.alignment > spec.granularity ? spec.alignment : spec.granularity;
}

size_t sum_sizes(const std::vector<std::shared_ptr<const Mapping>>& mappings) {
    size_t total = 0;
    for (const auto& m : mappings) total += m->size();
    return total;
}

}  // namespace

Range::Range(ChunkSpecRef spec, std::vector<std::shared_ptr<const Mapping>> mappings, size_t size)
    : spec_(std::move(spec)), mappings_(std::move(mappings)), size_(size), mapped_size_(sum_sizes(mappings_)) {
    g_live_ranges.fetch_add(1, std::memory_order_relaxed);
}

Range::~Range() { g_live_ranges.fetch_sub(1, std::memory_order_relaxed); }

bool Range::any_imported() const {
    for (const auto& m : mappings_) {
        if (m->allocation()->imported()) return true;
    }
    return false;
}

RangeRef Range::empty(ChunkSpecRef spec) { return RangeRef(new Range(std::move(spec), {}, 0)); }

RangeRef Range::allocate(ChunkSpecRef spec, size_t size) {
    if (size == 0) return empty(std::move(spec));
    const size_t chunk = round_up_to_granularity(size, spec->granularity);
    DeviceContextScope context(spec->device);
    auto reservation = Reservation::reserve_preferring(spec->device, chunk, reservation_alignment(*spec),
                                                       spec->address_hint, Step{"reserving the address range"});
    auto allocation = Allocation::create(*spec, chunk, Step{"creating chunk", 1, 1});
    auto mapping = Mapping::map(reservation, reservation->base(), std::move(allocation), spec->access,
                                Step{"mapping chunk", 1, 1});
    return RangeRef(new Range(std::move(spec), {std::move(mapping)}, size));
}

RangeRef Range::grow(ChunkSpecRef spec, size_t new_size, GrowOutcome& outcome) const {
    if (spec->prop.requestedHandleTypes != spec_->prop.requestedHandleTypes) {
        throw DriverError(CUDA_ERROR_INVALID_VALUE, "modify_allocation", "checking the options",
                          "a grow may not change the handle type (buffer: " +
                              std::to_string(spec_->prop.requestedHandleTypes) + ", requested: " +
                              std::to_string(spec->prop.requestedHandleTypes) +
                              "); grow with the buffer's own options or allocate a new buffer and copy");
    }
    if (spec->device != spec_->device || spec->prop.location.type != spec_->prop.location.type ||
        spec->prop.location.id != spec_->prop.location.id) {
        throw DriverError(CUDA_ERROR_INVALID_VALUE, "modify_allocation", "checking the options",
                          "a grow may not change the device or memory location; allocate a new buffer and copy");
    }
    if (new_size <= mapped_size_) {
        outcome = GrowOutcome::alias;
        return RangeRef(new Range(std::move(spec), mappings_, new_size));
    }
    if (mappings_.empty()) {
        outcome = GrowOutcome::fresh;
        return allocate(std::move(spec), new_size);
    }
    const size_t extra = round_up_to_granularity(new_size - mapped_size_, spec->granularity);
    const int total_chunks = static_cast<int>(mappings_.size()) + 1;
    DeviceContextScope context(spec->device);

    // 1. In place: ask for the range that starts exactly where this one ends (aligned to the
    //    granularity only: the hint must be a multiple of the alignment passed). A refusal
    //    of the probe is not an error of the grow: moving still works.
    const CUdeviceptr end = address() + mapped_size_;
    std::shared_ptr<const Reservation> next;
    try {
        next = Reservation::reserve(spec->device, extra, spec->granularity, end, Step{"reserving the range after the buffer"});
    } catch (const DriverError&) {
        next.reset();
    }
    if (next && next->base() == end) {
        auto allocation = Allocation::create(*spec, extra, Step{"creating chunk", total_chunks, total_chunks});
        auto mapping = Mapping::map(std::move(next), end, std::move(allocation), spec->access,
                                    Step{"mapping chunk", total_chunks, total_chunks});
        std::vector<std::shared_ptr<const Mapping>> mappings = mappings_;
        mappings.push_back(std::move(mapping));
        outcome = GrowOutcome::in_place;
        return RangeRef(new Range(std::move(spec), std::move(mappings), new_size));
    }
    next.reset();  // landed elsewhere: give it back and move instead

    // 2. Move: one new reservation, every existing allocation mapped at its offset with
    //    the access it had, so that the outcome (which depends on free address space) never
    //    changes what a device may do with the old chunks; only the new chunk gets
    //    spec->access, as in place.
    auto reservation = Reservation::reserve(spec->device, mapped_size_ + extra, reservation_alignment(*spec), 0,
                                            Step{"reserving the moved range"});
    std::vector<std::shared_ptr<const Mapping>> mappings;
    mappings.reserve(total_chunks);
    CUdeviceptr at = reservation->base();
    int index = 1;
    for (const auto& old : mappings_) {
        mappings.push_back(Mapping::map(reservation, at, old->allocation(), old->access(),
                                        Step{"re-mapping chunk", index, total_chunks}));
        at += old->size();
        ++index;
    }
    auto allocation = Allocation::create(*spec, extra, Step{"creating chunk", total_chunks, total_chunks});
    mappings.push_back(Mapping::map(reservation, at, std::move(allocation), spec->access,
                                    Step{"mapping chunk", total_chunks, total_chunks}));
    outcome = GrowOutcome::moved;
    return RangeRef(new Range(std::move(spec), std::move(mappings), new_size));
}

RangeRef Range::import_fds(ChunkSpecRef spec, const std::vector<int>& fds, const std::vector<size_t>& sizes,
                           size_t size) {
    if (fds.size() != sizes.size()) {
        throw DriverError(CUDA_ERROR_INVALID_VALUE, "import", "checking the descriptor",
                          std::to_string(fds.size()) + " handles but " + std::to_string(sizes.size()) +
                              " sizes; a descriptor has one size per handle");
    }
    size_t total = 0;
    for (size_t s : sizes) {
        if (s == 0 || s % spec->granularity != 0 || total > std::numeric_limits<size_t>::max() - s) {
            throw DriverError(CUDA_ERROR_INVALID_VALUE, "import", "checking the descriptor",
                              "chunk size " + std::to_string(s) + " is not a positive multiple of the granularity " +
                                  std::to_string(spec->granularity) + " or the total overflows");
        }
        total += s;
    }
    if (size > total) {
        throw DriverError(CUDA_ERROR_INVALID_VALUE, "import", "checking the descriptor",
                          "buffer size " + std::to_string(size) + " exceeds the chunks' total " + std::to_string(total));
    }
    if (fds.empty()) return empty(std::move(spec));
    DeviceContextScope context(spec->device);
    const int chunks = static_cast<int>(fds.size());
    // The importer's address hint, as for an allocation (cuda.core imports at its resource's
    // addr_hint): a preference, dropped when the driver cannot honour it.
    auto reservation = Reservation::reserve_preferring(spec->device, total, reservation_alignment(*spec),
                                                       spec->address_hint, Step{"reserving the imported range"});
    std::vector<std::shared_ptr<const Mapping>> mappings;
    mappings.reserve(fds.size());
    CUdeviceptr at = reservation->base();
    for (int i = 0; i < chunks; ++i) {
        auto allocation = Allocation::import_fd(spec->device, fds[i], sizes[i], spec->prop.location,
                                              Step{"importing chunk", i + 1, chunks});
        try {
            mappings.push_back(Mapping::map(reservation, at, std::move(allocation), spec->access,
                                            Step{"mapping imported chunk", i + 1, chunks}));
        } catch (const DriverError& e) {
            if (e.code() != CUDA_ERROR_INVALID_VALUE || e.call() != "cuMemMap") throw; // not cuMemSetAccess's
            // The likely cause, which the driver does not name: a size that is not the
            // exported allocation's (an independent probe's forged descriptors).
            throw DriverError(e.code(), e.call(), e.step(),
                              "the descriptor gives this chunk " + std::to_string(sizes[i]) +
                                  " bytes; it must be exactly the size of the allocation its fd was exported "
                                  "from (check the sizes sent with the fds)");
        }
        at += sizes[i];
    }
    return RangeRef(new Range(std::move(spec), std::move(mappings), size));
}

}  // namespace cuvmm
