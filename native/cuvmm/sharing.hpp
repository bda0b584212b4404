// Export of a range's physical allocations as POSIX fds (one per chunk, address order).
#pragma once

#include "cuvmm/vmm.hpp"

#include <vector>

namespace cuvmm {

// Exports every chunk that overlaps [0, range.size()), in address order, with
// cuMemExportToShareableHandle. Returns fds the caller owns. Refuses, before any driver
// call, a range that covers imported memory. On failure at chunk k the fds of chunks
// 0..k-1 are closed before the DriverError propagates; at the fd limit the message says so.
std::vector<int> export_range_fds(const Range& range);

// Number of chunks export_range_fds would export.
size_t exported_chunk_count(const Range& range);

// Exports the chunks named by `chunks` (indices into range.mappings(), distinct, in the
// order given): one cuMemExportToShareableHandle each, nothing for the others. Checks every
// index, duplicates, imported chunks and the handle type before any driver call. Same
// failure contract as export_range_fds. Returns fds the caller owns, in the order named.
std::vector<int> export_chunk_fds(const Range& range, const std::vector<size_t>& chunks);

}  // namespace cuvmm
