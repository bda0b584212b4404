// The surface the JavaCPP-generated JNI calls (Java: org.cuvmm.internal.jni).
//
// Rules at this boundary:
//  - no C++ exception crosses it: every function catches, and reports through Status
//    (code, call, step, message); Java turns a non-zero code into CudaException;
//  - Java holds driver objects only through RangeHandle / SpecHandle / StreamHandle /
//    EventHandle / PinnedHandle, each a box around a
//    shared_ptr<const ...>: copying a handle makes an alias, deleting it drops one
//    reference. JavaCPP passes a closed handle as a null reference and throws before the
//    call, so a stale Java object never reaches this code;
//  - plain integers cross as long long (jlong); CUdeviceptr values are only ever read.
#pragma once

#include "cuvmm/stream.hpp"
#include "cuvmm/vmm.hpp"

#include <cstdint>
#include <string>

namespace cuvmm {
namespace jni {

// Outcome of one call: code 0 is success. Reused across calls by the Java side.
struct Status {
    int code = 0;
    std::string name;     // the CUresult name, "CUDA_ERROR_INVALID_VALUE"
    std::string call;     // the driver entry point or operation that failed
    std::string step;     // "mapping chunk 2 of 3"
    std::string message;  // the full sentence, CUresult name included
};

// The options of a resource as plain fields (filled by Java, validated by build_spec).
struct SpecInput {
    static constexpr int kMaxAccess = 17;  // self + up to 15 peers + host
    int allocation_type = CU_MEM_ALLOCATION_TYPE_PINNED;
    int location_type = CU_MEM_LOCATION_TYPE_DEVICE;
    int location_id = 0;
    int handle_types = CU_MEM_HANDLE_TYPE_NONE;
    int gpu_direct_rdma = 0;
    int granularity_option = CU_MEM_ALLOC_GRANULARITY_RECOMMENDED;
    int device = 0;
    long long address_hint = 0;
    long long alignment = 0;
    int access_count = 0;
    int access_location_type[kMaxAccess] = {};
    int access_location_id[kMaxAccess] = {};
    int access_flags[kMaxAccess] = {};

    // Returns false when the table is full.
    bool add_access(int location_type, int location_id, int flags);
};

// A built, immutable ChunkSpec (granularity resolved by the driver).
class SpecHandle {
public:
    ChunkSpecRef spec;
    long long granularity() const { return spec ? static_cast<long long>(spec->granularity) : 0; }
};

// One reference to a Range. Copy-constructing makes an alias of the same memory.
class RangeHandle {
public:
    RangeHandle() = default;
    RangeHandle(const RangeHandle& other) = default;

    RangeRef range;

    bool empty() const { return !range; }
    long long address() const { return range ? static_cast<long long>(range->address()) : 0; }
    long long size() const { return range ? static_cast<long long>(range->size()) : 0; }
    long long mapped_size() const { return range ? static_cast<long long>(range->mapped_size()) : 0; }
    int chunk_count() const { return range ? static_cast<int>(range->mappings().size()) : 0; }
    long long chunk_size(int index) const;
    long long chunk_address(int index) const;
    bool any_imported() const { return range && range->any_imported(); }
    bool chunk_imported(int index) const;
    // The ordinal of the device whose context serves this range.
    int device() const { return range ? range->spec()->device : -1; }
    // True when no other holder (an alias, a grow, a ByteBuffer view) shares this range,
    // its mappings or its allocations. Stable once the owning buffer is closed, since
    // nothing can make a new alias from this handle any more. The pool reuses only
    // exclusive ranges.
    bool exclusive() const;
    // exclusive(), and when `kept_in_process` (the pool's LOCAL lifetime) also no chunk's
    // allocation ever exported (Allocation::exported): whether the pool may hand this
    // memory to a new owner. One call on the pool's release path.
    bool reusable(bool kept_in_process) const;
    // True when both handles refer to the same Range object (the same alias group's view).
    bool same_range(const RangeHandle& other) const { return range == other.range; }
};

// One reference to a Stream (owned or a borrowed default). Deleting the last reference of an
// owned stream destroys it (work already queued still completes).
class StreamHandle {
public:
    StreamRef stream;
    bool empty() const { return !stream; }
    // The raw CUstream (CU_STREAM_LEGACY = 1, CU_STREAM_PER_THREAD = 2 for the defaults).
    long long handle() const { return stream ? static_cast<long long>(reinterpret_cast<uintptr_t>(stream->handle())) : 0; }
    int device() const { return stream ? stream->device() : -1; }
};

// One reference to an Event; the last reference destroys it.
class EventHandle {
public:
    EventRef event;
    bool empty() const { return !event; }
    long long handle() const { return event ? static_cast<long long>(reinterpret_cast<uintptr_t>(event->handle())) : 0; }
    int device() const { return event ? event->device() : -1; }
};

// One reference to pinned host memory. Copy-constructing makes another reference (a
// ByteBuffer view holds one, so the memory outlives the PinnedHostBuffer while a view is
// reachable); the last reference frees (or unregisters) it.
class PinnedHandle {
public:
    PinnedHandle() = default;
    PinnedHandle(const PinnedHandle& other) = default;
    PinnedHostRef pinned;
    bool empty() const { return !pinned; }
    long long address() const { return pinned ? static_cast<long long>(reinterpret_cast<uintptr_t>(pinned->address())) : 0; }
    long long size() const { return pinned ? static_cast<long long>(pinned->size()) : 0; }
};

struct DeviceInfo {
    int ordinal = 0;
    std::string name;
    long long total_memory = 0;
    int vmm = 0;
    int posix_fd = 0;
    int gpu_direct_rdma = 0;
    int fabric = 0;
    int host_vmm = 0;
    int host_numa_vmm = 0;
    int compute_major = 0;
    int compute_minor = 0;
};

// ---- driver ----
// mode: 0 auto, 1 cuda, 2 host. Returns the kind installed (1 cuda, 2 host), 0 on error.
// host_stream_delay_micros: HostDriverConfig::stream_delay_micros (0 or more).
int select_driver(int mode, int host_devices, long long host_granularity, long long host_stream_delay_micros,
                  const std::string& cuda_library, Status& status);
std::string driver_kind_name();  // "cuda", "host" or "none"
std::string driver_reason();
int driver_version();
bool driver_is_host_library();  // the cuda driver runs over cuvmm's host library (no GPU)
int device_count(Status& status);
void device_info(int ordinal, DeviceInfo& out, Status& status);
// cuDeviceCanAccessPeer(device, peer): 1 when `device` can directly access memory on
// `peer`, 0 when not; -1 with `status` set on an error.
int can_access_peer(int device, int peer, Status& status);

// ---- resources and buffers ----
// A new RangeHandle on the heap referring to the same range as `in` (one more reference, as
// the copy constructor makes), returned as its address; 0 when `in` is empty or memory ran
// out. Java wraps it without JavaCPP's deallocator (NativeRangeHandle.newReference: no upcall
// into Java and no global deallocator list per shared view, issue 11) and deletes it exactly
// once with range_delete_reference.
long long range_new_reference(const RangeHandle& in);
// Deletes a handle made by range_new_reference (drops its reference); 0 is ignored.
void range_delete_reference(long long handle);
void build_spec(SpecHandle& out, const SpecInput& in, Status& status);
void allocate(RangeHandle& out, const SpecHandle& spec, long long size, Status& status);
// Returns the GrowOutcome (0 alias, 1 in place, 2 moved, 3 fresh), -1 on error.
int grow(RangeHandle& out, const RangeHandle& in, const SpecHandle& spec, long long new_size, Status& status);

// What device `device` may do with chunk `chunk` (cuMemGetAccess at the chunk's address):
// 0 none, 1 read, 3 read-write; -1 and status set on error (an index outside the chunks,
// a device the driver does not know).
int chunk_access(const RangeHandle& range, int chunk, int device, Status& status);

// ---- sharing ----
// Number of chunks export_fds will write (chunks overlapping the buffer's size).
int export_chunk_count(const RangeHandle& range);
// Exports one fd per chunk into out_fds (capacity entries) and their sizes into out_sizes;
// returns the count, or -1 on error (no fd left open). The caller owns the fds.
int export_fds(const RangeHandle& range, int* out_fds, long long* out_sizes, int capacity, Status& status);
// Imports `count` fds (the caller keeps them) into one new range of `size` bytes.
void import_fds(RangeHandle& out, const SpecHandle& spec, const int* fds, const long long* sizes, int count,
                long long size, Status& status);
// fcntl(F_DUPFD_CLOEXEC); -1 and status set (naming errno and the fd limit) on failure.
int fd_dup(int fd, Status& status);
bool fd_valid(int fd);
// True when `fd` belongs to the host driver itself (an allocation's memfd): not the caller's to close.
bool fd_owned_by_driver(int fd);
int fd_close(int fd);

// ---- data ----
// Host memory is passed by address only, never as a Java array: a pinned array (JNI critical
// region) would hold off the GC for as long as the driver call blocks. Java stages arrays
// through direct buffers in bounded pieces (org.cuvmm.internal.ArrayCopies).
void write_address(const RangeHandle& dst, long long offset, long long address, long long bytes, Status& status);
void read_address(const RangeHandle& src, long long offset, long long address, long long bytes, Status& status);
void copy_range(const RangeHandle& dst, long long dst_offset, const RangeHandle& src, long long src_offset,
                long long bytes, Status& status);
void fill(const RangeHandle& dst, long long offset, long long bytes, int value, Status& status);

// ---- streams, events, host functions, pinned memory (stream.hpp) ----
// non_blocking: 1 CU_STREAM_NON_BLOCKING, 0 CU_STREAM_DEFAULT (blocking).
void stream_create(StreamHandle& out, int device, int non_blocking, int priority, Status& status);
// which: 0 the legacy stream, 1 the per-thread stream. No driver call.
void stream_default(StreamHandle& out, int device, int which, Status& status);
// cuCtxGetStreamPriorityRange of `device`: out[0] least (the default), out[1] greatest.
void stream_priority_range(int device, int* out, Status& status);
void stream_synchronize(const StreamHandle& stream, Status& status);
// 1 when all queued work completed, 0 when not, -1 with status set on an error.
int stream_query(const StreamHandle& stream, Status& status);
void stream_wait_event(const StreamHandle& stream, const EventHandle& event, Status& status);
// timing 0 adds CU_EVENT_DISABLE_TIMING.
void event_create(EventHandle& out, int device, int timing, Status& status);
void event_record(const EventHandle& event, const StreamHandle& stream, Status& status);
void event_synchronize(const EventHandle& event, Status& status);
// 1 completed (or never recorded), 0 not yet, -1 with status set on an error.
int event_query(const EventHandle& event, Status& status);
// Milliseconds from `start` to `end`; status set on an error.
float event_elapsed(const EventHandle& start, const EventHandle& end, Status& status);
// See stream.hpp, "host functions": Java's dispatcher takes tokens and reports them done.
void launch_host_function(const StreamHandle& stream, long long token, Status& status);
long long next_host_function(long long timeout_ms);
void host_function_done(long long token);
long long host_functions_pending();
void pinned_allocate(PinnedHandle& out, long long bytes, Status& status);
// Registers the caller's memory [address, address + bytes); the caller keeps it alive and
// mapped until the last reference to `out` is gone.
void pinned_register(PinnedHandle& out, long long address, long long bytes, Status& status);

// ---- stream-ordered data ----
// Queued on `stream`; they return when queued. Windows (the pinned memory's too) and access
// are checked before any driver call. `record1` / `record2`: events recorded on `stream` right
// after the op, in the same context scope (transfer.hpp RecordAfter): one native call and one
// context check for the op and its stream-use records. A null pointer means none; JavaCPP
// passes a deallocated Java handle as null too, so the Java caller (AsyncCopies) refuses an
// empty one before the call (a handle holding no event is refused here, before any driver
// call). Returns 1 when the op was queued, also when a record then failed (status says which):
// the caller must wait for the stream before it reports that error, so no queued op stays
// unrecorded; else 0 (the caller still records the events on `stream` if the op was refused:
// their uses are installed, see AsyncCopies.queueRecorded).
int write_pinned_async(const RangeHandle& dst, long long offset, const PinnedHandle& src, long long src_offset,
                       long long bytes, const StreamHandle& stream, const EventHandle* record1,
                       const EventHandle* record2, Status& status);
int read_pinned_async(const RangeHandle& src, long long offset, const PinnedHandle& dst, long long dst_offset,
                      long long bytes, const StreamHandle& stream, const EventHandle* record1,
                      const EventHandle* record2, Status& status);
int copy_range_async(const RangeHandle& dst, long long dst_offset, const RangeHandle& src, long long src_offset,
                     long long bytes, const StreamHandle& stream, const EventHandle* record1,
                     const EventHandle* record2, Status& status);
int fill_async(const RangeHandle& dst, long long offset, long long bytes, int value, const StreamHandle& stream,
               const EventHandle* record1, const EventHandle* record2, Status& status);
// The synchronous copies' path: the op queued on `stream` (cuvmm's internal stream), then a
// cuStreamSynchronize of that stream only; returns when the op completed. Host memory by
// address, as write_address / read_address (Java checks its window).
void write_address_on(const RangeHandle& dst, long long offset, long long address, long long bytes,
                      const StreamHandle& stream, Status& status);
void read_address_on(const RangeHandle& src, long long offset, long long address, long long bytes,
                     const StreamHandle& stream, Status& status);
void copy_range_on(const RangeHandle& dst, long long dst_offset, const RangeHandle& src, long long src_offset,
                   long long bytes, const StreamHandle& stream, Status& status);
void fill_on(const RangeHandle& dst, long long offset, long long bytes, int value, const StreamHandle& stream,
             Status& status);
// Copies between a file mapping (a direct ByteBuffer of FileChannel.map) and staging memory
// that report a lost page instead of raising SIGBUS (checked_copy.hpp): the bytes copied,
// fewer than `bytes` at the first page that is gone, or -errno when the kernel refuses the
// call (then nothing was copied). Addresses are this process's.
long long mapping_read(long long dst, long long mapping, long long bytes);
long long mapping_write(long long mapping, long long src, long long bytes);

// Host driver only (tests): every queued op sleeps `micros` before it runs. Status says
// CUDA_ERROR_NOT_SUPPORTED on the cuda driver.
void host_stream_delay(long long micros, Status& status);
// Host driver only (tests): the next cuEventRecord on the stream whose raw CUstream is
// `stream` returns `code` (a CUresult) without recording, once; 0 disarms
// (host_fail_next_event_record). Status says CUDA_ERROR_NOT_SUPPORTED on the cuda driver.
void host_fail_next_event_record(long long stream, int code, Status& status);
// Host driver only (tests): what cuDeviceCanAccessPeer(device, peer) answers for two distinct
// devices from now on (host_set_peer_access). Status says CUDA_ERROR_NOT_SUPPORTED on the
// cuda driver, CUDA_ERROR_INVALID_VALUE for a pair that is not two distinct devices.
void host_peer_access(int device, int peer, bool can, Status& status);

// ---- counters (tests, benchmarks, `cuvmm info`) ----
int entry_count();
std::string entry_name(int index);
long long call_count(int index);
void reset_call_counts();
// what: 0 allocations, 1 reservations, 2 mappings, 3 memfds (host driver only; 0 on cuda)
long long host_live(int what);
// what: 0 allocations, 1 reservations, 2 mappings, 3 ranges (our boxes, either driver)
long long object_live(int what);
long long cleanup_failures();

// ---- steady-state sharing support (issue 11) ----
// Writes the id (Allocation::id) of each chunk, address order, into out (capacity entries);
// returns the chunk count (which may exceed capacity: then only capacity are written).
// No driver call.
int allocation_ids(const RangeHandle& range, long long* out, int capacity);
// 1 when the window [a_offset, a_offset + bytes) of a and [b_offset, b_offset + bytes) of b
// share memory (one allocation, the same Allocation::id, at overlapping offsets within it),
// else 0: a copy between them would be undefined on the driver. The windows are checked by
// the caller. No driver call.
int windows_overlap(const RangeHandle& a, long long a_offset, const RangeHandle& b, long long b_offset,
                    long long bytes);
// Exports the `count` chunks named by `chunks` (sharing.hpp, export_chunk_fds) into out_fds
// and their sizes into out_sizes; returns count, or -1 on error (no fd left open).
int export_chunk_fds(const RangeHandle& range, const int* chunks, int count, int* out_fds, long long* out_sizes,
                     Status& status);
// Release notices (release_notices.hpp): on != 0 turns the queue on, 0 off.
void release_notices(int on);
// Waits up to timeout_ms for released allocation ids, writes up to capacity into out and
// their sequence numbers (release_notices.hpp) into sequences; returns how many (0 on timeout).
int take_released_allocations(long long* out, long long* sequences, int capacity, long long timeout_ms);
// The sequence number of the last id queued (release_notices.hpp, release_notice_sequence).
long long release_notice_sequence();

}  // namespace jni
}  // namespace cuvmm
