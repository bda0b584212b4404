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
//
// `after`: events recorded on `stream` right after the op is queued, in the same context
// scope, so that an async copy is one context check and, from Java, one native call (the
// stream-use records of StreamUses). Each event must belong to the stream's device (checked
// before any driver call, DriverError CUDA_ERROR_INVALID_VALUE). `*after.queued` is set once
// the op is queued, before the first record: when a record then throws, the op is in the
// stream unrecorded and the caller must wait for the stream before it reports the error. A
// zero-length op queues nothing but still records (a record per call, as before).
struct RecordAfter {
    const Event* first = nullptr;   // null: none
    const Event* second = nullptr;  // null: none
    bool* queued = nullptr;         // null: not wanted
};
void copy_host_to_range_async(const Range& dst, size_t offset, const void* src, size_t bytes, const Stream& stream,
                              const RecordAfter& after = {});
void copy_range_to_host_async(const Range& src, size_t offset, void* dst, size_t bytes, const Stream& stream,
                              const RecordAfter& after = {});
void copy_range_to_range_async(const Range& dst, size_t dst_offset, const Range& src, size_t src_offset, size_t bytes,
                               const Stream& stream, const RecordAfter& after = {});
void fill_range_async(const Range& dst, size_t offset, size_t bytes, uint8_t value, const Stream& stream,
                      const RecordAfter& after = {});

}  // namespace cuvmm
