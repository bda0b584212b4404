// Copies and fills on ranges. Each checks its byte window against the range's logical
// size (throws DriverError CUDA_ERROR_INVALID_VALUE naming the window), then that the
// device that runs it has the access it needs to every chunk it touches (READ on a source,
// READWRITE on a destination; throws DriverError CUDA_ERROR_INVALID_VALUE naming the buffer,
// the device and its access, before any driver call: on a GPU such a copy faults), makes the range's
// device current, makes one driver call and returns only when the device is done with it
// (a cuStreamSynchronize follows the calls that are asynchronous to the host). The caller
// keeps the range alive.
#pragma once

#include "cuvmm/stream.hpp"
#include "cuvmm/vmm.hpp"

#include <cstdint>

namespace cuvmm {

void copy_host_to_range(const Range& dst, size_t offset, const void* src, size_t bytes);
void copy_range_to_host(const Range& src, size_t offset, void* dst, size_t bytes);
void copy_range_to_range(const Range& dst, size_t dst_offset, const Range& src, size_t src_offset, size_t bytes);
void fill_range(const Range& dst, size_t offset, size_t bytes, uint8_t value);

// The same four operations queued on `stream` (cuMemcpyHtoDAsync, cuMemcpyDtoHAsync,
// cuMemcpyDtoDAsync, cuMemsetD8Async): the same window and access checks, made before any
// driver call, but for the device of `stream` (the device that runs the op), in its context.
// They return once the op is queued: the caller keeps the ranges mapped, and host memory
// valid, until the op has completed (Java records the use and waits for it before a release).
// Host memory should be pinned (PinnedHost) for the copy to be asynchronous; from pageable
// memory the driver may stage the source, or wait, before it returns (cuda.h, "API
// synchronization behavior").
void copy_host_to_range_async(const Range& dst, size_t offset, const void* src, size_t bytes, const Stream& stream);
void copy_range_to_host_async(const Range& src, size_t offset, void* dst, size_t bytes, const Stream& stream);
void copy_range_to_range_async(const Range& dst, size_t dst_offset, const Range& src, size_t src_offset, size_t bytes,
                               const Stream& stream);
void fill_range_async(const Range& dst, size_t offset, size_t bytes, uint8_t value, const Stream& stream);

}  // namespace cuvmm
