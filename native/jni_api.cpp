// Implementation of the JNI-facing surface: argument checks that protect native code,
// then the object model, with every exception turned into a Status.
#include "cuvmm/jni_api.hpp"

#include "cuvmm/checked_copy.hpp"
#include "cuvmm/cuda_errors.hpp"
#include "cuvmm/fd_utils.hpp"
#include "cuvmm/release_notices.hpp"
#include "cuvmm/sharing.hpp"
#include "cuvmm/transfer.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <new>

namespace cuvmm {
namespace jni {
namespace {

void set_error(Status& status, CUresult code, std::string call, std::string step, std::string message) {
    status.code = static_cast<int>(code);
    status.name = describe_result(code);
    status.call = std::move(call);
    status.step = std::move(step);
    status.message = std::move(message);
}

// Runs `body`, turning any exception into `status`. Returns true on success.
template <class Body>
bool guarded(Status& status, const char* operation, Body&& body) {
    status.code = 0;
    try {
        body();
        return true;
    } catch (const DriverError& e) {
        set_error(status, e.code(), e.call(), e.step(), e.what());
    } catch (const std::bad_alloc&) {
        set_error(status, CUDA_ERROR_OUT_OF_MEMORY, operation, "allocating native bookkeeping",
                  std::string(operation) + " failed: out of native memory for bookkeeping");
    } catch (const std::exception& e) {
        set_error(status, CUDA_ERROR_UNKNOWN, operation, "", std::string(operation) + " failed: " + e.what());
    } catch (...) {
        set_error(status, CUDA_ERROR_UNKNOWN, operation, "", std::string(operation) + " failed: unknown exception");
    }
    return false;
}

DriverError invalid(const char* call, const std::string& detail) {
    return DriverError(CUDA_ERROR_INVALID_VALUE, call, "checking the arguments", detail);
}

const Range& require_range(const RangeHandle& handle, const char* call) {
    if (!handle.range) throw invalid(call, "the buffer handle is empty (closed)");
    return *handle.range;
}

const Stream& require_stream(const StreamHandle& handle, const char* call) {
    if (!handle.stream) throw invalid(call, "the stream handle is empty (closed)");
    return *handle.stream;
}

const Event& require_event(const EventHandle& handle, const char* call) {
    if (!handle.event) throw invalid(call, "the event handle is empty (closed)");
    return *handle.event;
}

// The host memory [offset, offset + bytes) of `handle`, checked against its size.
char* pinned_window(const PinnedHandle& handle, long long offset, long long bytes, const char* call) {
    if (!handle.pinned) throw invalid(call, "the pinned memory handle is empty (closed)");
    const long long size = static_cast<long long>(handle.pinned->size());
    if (offset < 0 || bytes < 0 || offset > size || bytes > size - offset) {
        throw invalid(call, "pinned window: offset " + std::to_string(offset) + ", length " + std::to_string(bytes) +
                                " (expected: within the pinned memory of " + std::to_string(size) + " bytes)");
    }
    return static_cast<char*>(handle.pinned->address()) + offset;
}

size_t require_non_negative(long long value, const char* call, const char* name) {
    if (value < 0) throw invalid(call, std::string(name) + ": " + std::to_string(value) + " (expected: >= 0)");
    return static_cast<size_t>(value);
}

}  // namespace

bool SpecInput::add_access(int type, int id, int flags) {
    if (access_count >= kMaxAccess) return false;
    access_location_type[access_count] = type;
    access_location_id[access_count] = id;
    access_flags[access_count] = flags;
    ++access_count;
    return true;
}

long long RangeHandle::chunk_size(int index) const {
    if (!range || index < 0 || index >= static_cast<int>(range->mappings().size())) return -1;
    return static_cast<long long>(range->mappings()[index]->size());
}

long long RangeHandle::chunk_address(int index) const {
    if (!range || index < 0 || index >= static_cast<int>(range->mappings().size())) return 0;
    return static_cast<long long>(range->mappings()[index]->address());
}

bool RangeHandle::exclusive() const {
    if (!range || range.use_count() != 1) return false;
    for (const auto& m : range->mappings()) {
        if (m.use_count() != 1 || m->allocation().use_count() != 1) return false;
    }
    return true;
}

bool RangeHandle::reusable(bool kept_in_process) const {
    if (!exclusive()) return false;
    if (kept_in_process) {
        // Orders the mark's reads after exclusive()'s use counts: an alias that exported
        // (marking) and was then destroyed (its shared_ptr release) is seen marked.
        std::atomic_thread_fence(std::memory_order_acquire);
        for (const auto& m : range->mappings()) {
            if (m->allocation()->exported()) return false;
        }
    }
    return true;
}

bool RangeHandle::chunk_imported(int index) const {
    if (!range || index < 0 || index >= static_cast<int>(range->mappings().size())) return false;
    return range->mappings()[index]->allocation()->imported();
}

int select_driver(int mode, int host_devices, long long host_granularity, long long host_stream_delay_micros,
                  const std::string& cuda_library, Status& status) {
    int kind = 0;
    guarded(status, "select_driver", [&] {
        if (mode < 0 || mode > 2) throw invalid("select_driver", "mode: " + std::to_string(mode) + " (expected: 0 auto, 1 cuda, 2 host)");
        if (host_devices < 1 || host_devices > 8) {
            throw invalid("select_driver", "host devices: " + std::to_string(host_devices) + " (expected: 1 to 8)");
        }
        if (host_granularity < 4096 || (host_granularity & (host_granularity - 1)) != 0) {
            throw invalid("select_driver", "host granularity: " + std::to_string(host_granularity) +
                                               " (expected: a power of two >= 4096)");
        }
        if (host_stream_delay_micros < 0) {
            throw invalid("select_driver", "host stream delay: " + std::to_string(host_stream_delay_micros) +
                                               " microseconds (expected: 0 or more)");
        }
        DriverSelection selection;
        selection.mode = static_cast<DriverMode>(mode);
        selection.host.device_count = host_devices;
        selection.host.granularity = static_cast<size_t>(host_granularity);
        selection.host.stream_delay_micros = host_stream_delay_micros;
        selection.cuda_library = cuda_library;
        kind = static_cast<int>(cuvmm::select_driver(selection));
    });
    return kind;
}

std::string driver_kind_name() {
    switch (driver_kind()) {
        case DriverKind::cuda: return "cuda";
        case DriverKind::host: return "host";
        default: return "none";
    }
}

std::string driver_reason() { return cuvmm::driver_reason(); }
int driver_version() { return cuvmm::driver_version(); }
bool driver_is_host_library() { return cuvmm::driver_is_host_library(); }

int device_count(Status& status) {
    int count = 0;
    guarded(status, "device_count", [&] { CUVMM_CALL(cuDeviceGetCount, Step{"counting devices"}, &count); });
    return count;
}

int can_access_peer(int device, int peer, Status& status) {
    int can = -1;
    guarded(status, "can_access_peer", [&] {
        CUdevice dev = 0, other = 0;
        CUVMM_CALL(cuDeviceGet, Step{"looking up the device"}, &dev, device);
        CUVMM_CALL(cuDeviceGet, Step{"looking up the peer device"}, &other, peer);
        CUVMM_CALL(cuDeviceCanAccessPeer, Step{"asking whether the device can access the peer"}, &can, dev, other);
    });
    return can;
}

void device_info(int ordinal, DeviceInfo& out, Status& status) {
    guarded(status, "device_info", [&] {
        CUdevice dev = 0;
        CUVMM_CALL(cuDeviceGet, Step{"looking up the device"}, &dev, ordinal);
        char name[256] = {};
        CUVMM_CALL(cuDeviceGetName, Step{"reading the device name"}, name, static_cast<int>(sizeof(name) - 1), dev);
        size_t total = 0;
        CUVMM_CALL(cuDeviceTotalMem, Step{"reading the device memory size"}, &total, dev);
        // Attributes newer than the oldest driver we support: an older driver answers
        // CUDA_ERROR_INVALID_VALUE for them, which means "not supported", not a failure.
        auto attr = [&](CUdevice_attribute a, const char* name, bool optional) {
            int v = 0;
            count_call(Entry::cuDeviceGetAttribute);
            CUresult rc = driver().cuDeviceGetAttribute(&v, a, dev);
            if (rc == CUDA_ERROR_INVALID_VALUE && optional) return 0;
            if (rc != CUDA_SUCCESS) {
                throw DriverError(rc, "cuDeviceGetAttribute", std::string("reading the device attribute ") + name);
            }
            return v;
        };
        out.ordinal = ordinal;
        out.name = name;
        out.total_memory = static_cast<long long>(total);
        out.vmm = attr(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, "VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED", false);
        out.posix_fd = attr(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, "HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED", false);
        out.gpu_direct_rdma = attr(CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED, "GPU_DIRECT_RDMA_WITH_CUDA_VMM_SUPPORTED", true);
        out.fabric = attr(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED, "HANDLE_TYPE_FABRIC_SUPPORTED", true);
        out.host_vmm = attr(CU_DEVICE_ATTRIBUTE_HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, "HOST_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED", true);
        out.host_numa_vmm = attr(CU_DEVICE_ATTRIBUTE_HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, "HOST_NUMA_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED", true);
        out.compute_major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, "COMPUTE_CAPABILITY_MAJOR", false);
        out.compute_minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, "COMPUTE_CAPABILITY_MINOR", false);
    });
}

void build_spec(SpecHandle& out, const SpecInput& in, Status& status) {
    guarded(status, "build_spec", [&] {
        if (in.access_count < 0 || in.access_count > SpecInput::kMaxAccess) {
            throw invalid("build_spec", "access count: " + std::to_string(in.access_count) + " (expected: 0 to " +
                                            std::to_string(SpecInput::kMaxAccess) + ")");
        }
        if (in.address_hint < 0) {
            throw invalid("build_spec", "address hint: " + std::to_string(in.address_hint) + " (expected: >= 0)");
        }
        if (in.alignment < 0) throw invalid("build_spec", "alignment: " + std::to_string(in.alignment) + " (expected: >= 0)");
        auto spec = std::make_shared<ChunkSpec>();
        spec->prop.type = static_cast<CUmemAllocationType>(in.allocation_type);
        spec->prop.requestedHandleTypes = static_cast<CUmemAllocationHandleType>(in.handle_types);
        spec->prop.location.type = static_cast<CUmemLocationType>(in.location_type);
        spec->prop.location.id = in.location_id;
        spec->prop.allocFlags.gpuDirectRDMACapable = in.gpu_direct_rdma ? 1 : 0;
        spec->device = in.device;
        spec->address_hint = static_cast<CUdeviceptr>(in.address_hint);
        spec->alignment = static_cast<size_t>(in.alignment);
        for (int i = 0; i < in.access_count; ++i) {
            CUmemAccessDesc d{};
            d.location.type = static_cast<CUmemLocationType>(in.access_location_type[i]);
            d.location.id = in.access_location_id[i];
            d.flags = static_cast<CUmemAccess_flags>(in.access_flags[i]);
            spec->access.push_back(d);
        }
        DeviceContextScope context(in.device);
        size_t granularity = 0;
        CUVMM_CALL(cuMemGetAllocationGranularity, Step{"querying the allocation granularity"}, &granularity,
                   &spec->prop, static_cast<CUmemAllocationGranularity_flags>(in.granularity_option));
        spec->granularity = granularity;
        out.spec = std::move(spec);
    });
}

void allocate(RangeHandle& out, const SpecHandle& spec, long long size, Status& status) {
    guarded(status, "allocate", [&] {
        if (!spec.spec) throw invalid("allocate", "the resource options are not built");
        size_t bytes = require_non_negative(size, "allocate", "size");
        out.range = Range::allocate(spec.spec, bytes);
    });
}

int grow(RangeHandle& out, const RangeHandle& in, const SpecHandle& spec, long long new_size, Status& status) {
    int outcome = -1;
    guarded(status, "modify_allocation", [&] {
        const Range& range = require_range(in, "modify_allocation");
        if (!spec.spec) throw invalid("modify_allocation", "the resource options are not built");
        size_t bytes = require_non_negative(new_size, "modify_allocation", "new size");
        GrowOutcome o = GrowOutcome::alias;
        out.range = range.grow(spec.spec, bytes, o);
        outcome = static_cast<int>(o);
    });
    return outcome;
}

int chunk_access(const RangeHandle& range, int chunk, int device, Status& status) {
    int flags = -1;
    guarded(status, "access", [&] {
        const Range& r = require_range(range, "access");
        const int chunks = static_cast<int>(r.mappings().size());
        if (chunk < 0 || chunk >= chunks) {
            throw invalid("access", "chunk: " + std::to_string(chunk) + " (expected: 0 to " + std::to_string(chunks - 1) + ")");
        }
        CUmemLocation location{};
        location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        location.id = device;
        DeviceContextScope context(r.spec()->device);
        flags = static_cast<int>(
            r.mappings()[chunk]->granted(location, Step{"reading the access of chunk", chunk + 1, chunks}));
    });
    return flags;
}

long long range_new_reference(const RangeHandle& in) {
    if (!in.range) return 0;
    RangeHandle* copy = new (std::nothrow) RangeHandle(in);
    return static_cast<long long>(reinterpret_cast<uintptr_t>(copy));
}

void range_delete_reference(long long handle) {
    delete reinterpret_cast<RangeHandle*>(static_cast<uintptr_t>(handle));
}

int export_chunk_count(const RangeHandle& range) {
    return range.range ? static_cast<int>(exported_chunk_count(*range.range)) : 0;
}

int export_fds(const RangeHandle& range, int* out_fds, long long* out_sizes, int capacity, Status& status) {
    int count = -1;
    guarded(status, "export", [&] {
        const Range& r = require_range(range, "export");
        if (out_fds == nullptr || out_sizes == nullptr) throw invalid("export", "output arrays are null");
        if (static_cast<size_t>(capacity) < exported_chunk_count(r)) {
            throw invalid("export", "capacity " + std::to_string(capacity) + " is below the chunk count " +
                                        std::to_string(exported_chunk_count(r)));
        }
        std::vector<int> fds = export_range_fds(r);
        for (size_t i = 0; i < fds.size(); ++i) {
            out_fds[i] = fds[i];
            out_sizes[i] = static_cast<long long>(r.mappings()[i]->size());
        }
        count = static_cast<int>(fds.size());
    });
    return count;
}

void import_fds(RangeHandle& out, const SpecHandle& spec, const int* fds, const long long* sizes, int count,
                long long size, Status& status) {
    guarded(status, "import", [&] {
        if (!spec.spec) throw invalid("import", "the resource options are not built");
        if (count < 0 || (count > 0 && (fds == nullptr || sizes == nullptr))) {
            throw invalid("import", "count: " + std::to_string(count));
        }
        std::vector<int> fd_list(fds, fds + count);
        std::vector<size_t> size_list;
        for (int i = 0; i < count; ++i) size_list.push_back(require_non_negative(sizes[i], "import", "chunk size"));
        out.range = Range::import_fds(spec.spec, fd_list, size_list, require_non_negative(size, "import", "size"));
    });
}

int fd_dup(int fd, Status& status) {
    int result = -1;
    guarded(status, "fromFds", [&] {
        result = dup_cloexec(fd);
        if (result < 0) {
            int err = errno;
            std::string hint = fd_limit_hint();
            throw DriverError(CUDA_ERROR_OPERATING_SYSTEM, "fcntl(F_DUPFD_CLOEXEC)", "duplicating fd " + std::to_string(fd),
                              std::string(std::strerror(err)) + (hint.empty() ? "" : "; " + hint));
        }
    });
    return result;
}

bool fd_valid(int fd) { return fd_is_open(fd); }

bool fd_owned_by_driver(int fd) { return host_owns_fd(fd); }

int fd_close(int fd) { return close_fd(fd); }

void write_address(const RangeHandle& dst, long long offset, long long address, long long bytes, Status& status) {
    guarded(status, "write", [&] {
        const Range& r = require_range(dst, "write");
        if (address == 0) throw invalid("write", "source address is null");
        copy_host_to_range(r, require_non_negative(offset, "write", "offset"),
                           reinterpret_cast<const void*>(static_cast<uintptr_t>(address)),
                           require_non_negative(bytes, "write", "length"));
    });
}

void read_address(const RangeHandle& src, long long offset, long long address, long long bytes, Status& status) {
    guarded(status, "read", [&] {
        const Range& r = require_range(src, "read");
        if (address == 0) throw invalid("read", "destination address is null");
        copy_range_to_host(r, require_non_negative(offset, "read", "offset"),
                           reinterpret_cast<void*>(static_cast<uintptr_t>(address)),
                           require_non_negative(bytes, "read", "length"));
    });
}

void copy_range(const RangeHandle& dst, long long dst_offset, const RangeHandle& src, long long src_offset,
                long long bytes, Status& status) {
    guarded(status, "copy", [&] {
        copy_range_to_range(require_range(dst, "copy"), require_non_negative(dst_offset, "copy", "destination offset"),
                            require_range(src, "copy"), require_non_negative(src_offset, "copy", "source offset"),
                            require_non_negative(bytes, "copy", "length"));
    });
}

void fill(const RangeHandle& dst, long long offset, long long bytes, int value, Status& status) {
    guarded(status, "fill", [&] {
        fill_range(require_range(dst, "fill"), require_non_negative(offset, "fill", "offset"),
                   require_non_negative(bytes, "fill", "length"), static_cast<uint8_t>(value));
    });
}

// ---- streams, events, host functions, pinned memory ----

void stream_create(StreamHandle& out, int device, int non_blocking, int priority, Status& status) {
    guarded(status, "stream_create", [&] {
        out.stream = Stream::create(device, non_blocking ? CU_STREAM_NON_BLOCKING : CU_STREAM_DEFAULT, priority);
    });
}

void stream_default(StreamHandle& out, int device, int which, Status& status) {
    guarded(status, "stream_default", [&] {
        if (which != 0 && which != 1) {
            throw invalid("stream_default", "which: " + std::to_string(which) + " (expected: 0 legacy, 1 per-thread)");
        }
        int count = 0;
        CUVMM_CALL(cuDeviceGetCount, Step{"counting devices"}, &count);
        if (device < 0 || device >= count) {
            throw DriverError(CUDA_ERROR_INVALID_DEVICE, "stream_default", "checking the device",
                              "device " + std::to_string(device) + " (expected: 0 to " + std::to_string(count - 1) + ")");
        }
        out.stream = which == 0 ? Stream::legacy(device) : Stream::per_thread(device);
    });
}

void stream_priority_range(int device, int* out, Status& status) {
    guarded(status, "stream_priority_range", [&] {
        if (out == nullptr) throw invalid("stream_priority_range", "output array is null");
        DeviceContextScope context(device);
        CUVMM_CALL(cuCtxGetStreamPriorityRange, Step{"reading the stream priority range"}, &out[0], &out[1]);
    });
}

void stream_synchronize(const StreamHandle& stream, Status& status) {
    guarded(status, "stream_synchronize", [&] {
        require_stream(stream, "cuStreamSynchronize").synchronize(Step{"waiting for the stream"});
    });
}

int stream_query(const StreamHandle& stream, Status& status) {
    int done = -1;
    guarded(status, "stream_query", [&] {
        done = require_stream(stream, "cuStreamQuery").query(Step{"asking whether the stream is done"}) ? 1 : 0;
    });
    return done;
}

void stream_wait_event(const StreamHandle& stream, const EventHandle& event, Status& status) {
    guarded(status, "stream_wait_event", [&] {
        const Stream& s = require_stream(stream, "cuStreamWaitEvent");
        require_event(event, "cuStreamWaitEvent").make_wait(s, Step{"making the stream wait for the event"});
    });
}

void event_create(EventHandle& out, int device, int timing, Status& status) {
    guarded(status, "event_create", [&] {
        out.event = Event::create(device, timing ? CU_EVENT_DEFAULT : CU_EVENT_DISABLE_TIMING);
    });
}

void event_record(const EventHandle& event, const StreamHandle& stream, Status& status) {
    guarded(status, "event_record", [&] {
        const Stream& s = require_stream(stream, "cuEventRecord");
        require_event(event, "cuEventRecord").record(s, Step{"recording the event"});
    });
}

void event_synchronize(const EventHandle& event, Status& status) {
    guarded(status, "event_synchronize", [&] {
        require_event(event, "cuEventSynchronize").synchronize(Step{"waiting for the event"});
    });
}

int event_query(const EventHandle& event, Status& status) {
    int done = -1;
    guarded(status, "event_query", [&] {
        done = require_event(event, "cuEventQuery").query(Step{"asking whether the event completed"}) ? 1 : 0;
    });
    return done;
}

float event_elapsed(const EventHandle& start, const EventHandle& end, Status& status) {
    float ms = 0;
    guarded(status, "event_elapsed", [&] {
        const Event& s = require_event(start, "cuEventElapsedTime");
        ms = require_event(end, "cuEventElapsedTime").elapsed_since(s, Step{"reading the time between the events"});
    });
    return ms;
}

void launch_host_function(const StreamHandle& stream, long long token, Status& status) {
    guarded(status, "launch_host_function", [&] {
        if (token <= 0) throw invalid("cuLaunchHostFunc", "token: " + std::to_string(token) + " (expected: > 0)");
        cuvmm::launch_host_function(require_stream(stream, "cuLaunchHostFunc"), token,
                                    Step{"queueing the host function"});
    });
}

long long next_host_function(long long timeout_ms) { return cuvmm::next_host_function(timeout_ms); }
void host_function_done(long long token) { cuvmm::host_function_done(token); }
long long host_functions_pending() { return cuvmm::host_functions_pending(); }

void pinned_allocate(PinnedHandle& out, long long bytes, Status& status) {
    guarded(status, "pinned_allocate", [&] {
        if (bytes <= 0) throw invalid("cuMemHostAlloc", "size: " + std::to_string(bytes) + " (expected: > 0)");
        out.pinned = PinnedHost::allocate(static_cast<size_t>(bytes));
    });
}

void pinned_register(PinnedHandle& out, long long address, long long bytes, Status& status) {
    guarded(status, "pinned_register", [&] {
        if (address == 0) throw invalid("cuMemHostRegister", "address is null");
        if (bytes <= 0) throw invalid("cuMemHostRegister", "size: " + std::to_string(bytes) + " (expected: > 0)");
        out.pinned = PinnedHost::register_memory(reinterpret_cast<void*>(static_cast<uintptr_t>(address)),
                                                 static_cast<size_t>(bytes));
    });
}

// ---- stream-ordered data ----

namespace {

// The RecordAfter of an async op called from Java: its events (a null pointer: none, so Java
// refuses a deallocated handle before the call; a handle with no event is refused here), and
// where to say that the op was queued.
RecordAfter records_of(const EventHandle* first, const EventHandle* second, bool* queued) {
    RecordAfter after;
    after.first = first == nullptr ? nullptr : &require_event(*first, "cuEventRecord");
    after.second = second == nullptr ? nullptr : &require_event(*second, "cuEventRecord");
    after.queued = queued;
    return after;
}

}  // namespace

int write_pinned_async(const RangeHandle& dst, long long offset, const PinnedHandle& src, long long src_offset,
                       long long bytes, const StreamHandle& stream, const EventHandle* record1,
                       const EventHandle* record2, Status& status) {
    bool queued = false;
    guarded(status, "copyFromAsync", [&] {
        const Range& r = require_range(dst, "cuMemcpyHtoDAsync");
        const Stream& s = require_stream(stream, "cuMemcpyHtoDAsync");
        const char* host = pinned_window(src, src_offset, bytes, "cuMemcpyHtoDAsync");
        const RecordAfter after = records_of(record1, record2, &queued);
        copy_host_to_range_async(r, require_non_negative(offset, "cuMemcpyHtoDAsync", "offset"), host,
                                 static_cast<size_t>(bytes), s, after);
    });
    return queued ? 1 : 0;
}

int read_pinned_async(const RangeHandle& src, long long offset, const PinnedHandle& dst, long long dst_offset,
                      long long bytes, const StreamHandle& stream, const EventHandle* record1,
                      const EventHandle* record2, Status& status) {
    bool queued = false;
    guarded(status, "copyToAsync", [&] {
        const Range& r = require_range(src, "cuMemcpyDtoHAsync");
        const Stream& s = require_stream(stream, "cuMemcpyDtoHAsync");
        char* host = pinned_window(dst, dst_offset, bytes, "cuMemcpyDtoHAsync");
        const RecordAfter after = records_of(record1, record2, &queued);
        copy_range_to_host_async(r, require_non_negative(offset, "cuMemcpyDtoHAsync", "offset"), host,
                                 static_cast<size_t>(bytes), s, after);
    });
    return queued ? 1 : 0;
}

int copy_range_async(const RangeHandle& dst, long long dst_offset, const RangeHandle& src, long long src_offset,
                     long long bytes, const StreamHandle& stream, const EventHandle* record1,
                     const EventHandle* record2, Status& status) {
    bool queued = false;
    guarded(status, "copyFromAsync", [&] {
        const Range& d = require_range(dst, "cuMemcpyDtoDAsync");
        const size_t d_off = require_non_negative(dst_offset, "cuMemcpyDtoDAsync", "destination offset");
        const Range& r = require_range(src, "cuMemcpyDtoDAsync");
        const size_t r_off = require_non_negative(src_offset, "cuMemcpyDtoDAsync", "source offset");
        const size_t n = require_non_negative(bytes, "cuMemcpyDtoDAsync", "length");
        const Stream& s = require_stream(stream, "cuMemcpyDtoDAsync");
        const RecordAfter after = records_of(record1, record2, &queued);
        copy_range_to_range_async(d, d_off, r, r_off, n, s, after);
    });
    return queued ? 1 : 0;
}

int fill_async(const RangeHandle& dst, long long offset, long long bytes, int value, const StreamHandle& stream,
               const EventHandle* record1, const EventHandle* record2, Status& status) {
    bool queued = false;
    guarded(status, "fillAsync", [&] {
        const Range& d = require_range(dst, "cuMemsetD8Async");
        const size_t off = require_non_negative(offset, "cuMemsetD8Async", "offset");
        const size_t n = require_non_negative(bytes, "cuMemsetD8Async", "length");
        const Stream& s = require_stream(stream, "cuMemsetD8Async");
        const RecordAfter after = records_of(record1, record2, &queued);
        fill_range_async(d, off, n, static_cast<uint8_t>(value), s, after);
    });
    return queued ? 1 : 0;
}

void write_address_on(const RangeHandle& dst, long long offset, long long address, long long bytes,
                      const StreamHandle& stream, Status& status) {
    guarded(status, "write", [&] {
        const Range& r = require_range(dst, "write");
        const Stream& s = require_stream(stream, "write");
        if (address == 0) throw invalid("write", "source address is null");
        copy_host_to_range_async(r, require_non_negative(offset, "write", "offset"),
                                 reinterpret_cast<const void*>(static_cast<uintptr_t>(address)),
                                 require_non_negative(bytes, "write", "length"), s);
        s.synchronize(Step{"waiting for the copy from host memory"});
    });
}

void read_address_on(const RangeHandle& src, long long offset, long long address, long long bytes,
                     const StreamHandle& stream, Status& status) {
    guarded(status, "read", [&] {
        const Range& r = require_range(src, "read");
        const Stream& s = require_stream(stream, "read");
        if (address == 0) throw invalid("read", "destination address is null");
        copy_range_to_host_async(r, require_non_negative(offset, "read", "offset"),
                                 reinterpret_cast<void*>(static_cast<uintptr_t>(address)),
                                 require_non_negative(bytes, "read", "length"), s);
        s.synchronize(Step{"waiting for the copy to host memory"});
    });
}

void copy_range_on(const RangeHandle& dst, long long dst_offset, const RangeHandle& src, long long src_offset,
                   long long bytes, const StreamHandle& stream, Status& status) {
    guarded(status, "copy", [&] {
        const Stream& s = require_stream(stream, "copy");
        copy_range_to_range_async(require_range(dst, "copy"), require_non_negative(dst_offset, "copy", "destination offset"),
                                  require_range(src, "copy"), require_non_negative(src_offset, "copy", "source offset"),
                                  require_non_negative(bytes, "copy", "length"), s);
        s.synchronize(Step{"waiting for the copy between buffers"});
    });
}

void fill_on(const RangeHandle& dst, long long offset, long long bytes, int value, const StreamHandle& stream,
             Status& status) {
    guarded(status, "fill", [&] {
        const Stream& s = require_stream(stream, "fill");
        fill_range_async(require_range(dst, "fill"), require_non_negative(offset, "fill", "offset"),
                         require_non_negative(bytes, "fill", "length"), static_cast<uint8_t>(value), s);
        s.synchronize(Step{"waiting for the fill"});
    });
}

long long mapping_read(long long dst, long long mapping, long long bytes) {
    if (dst == 0 || mapping == 0 || bytes < 0) return -EINVAL;
    return copy_from_mapping(reinterpret_cast<void*>(static_cast<uintptr_t>(dst)),
                             reinterpret_cast<const void*>(static_cast<uintptr_t>(mapping)), static_cast<size_t>(bytes));
}

long long mapping_write(long long mapping, long long src, long long bytes) {
    if (mapping == 0 || src == 0 || bytes < 0) return -EINVAL;
    return copy_to_mapping(reinterpret_cast<void*>(static_cast<uintptr_t>(mapping)),
                           reinterpret_cast<const void*>(static_cast<uintptr_t>(src)), static_cast<size_t>(bytes));
}

void host_stream_delay(long long micros, Status& status) {
    guarded(status, "host_stream_delay", [&] {
        if (driver_kind() != DriverKind::host) {
            throw DriverError(CUDA_ERROR_NOT_SUPPORTED, "host_stream_delay", "setting the host stream delay",
                              "only the host driver has a stream delay (the " + driver_kind_name() + " driver runs)");
        }
        if (micros < 0) throw invalid("host_stream_delay", "micros: " + std::to_string(micros) + " (expected: >= 0)");
        host_set_stream_delay_micros(micros);
    });
}

void host_fail_next_event_record(long long stream, int code, Status& status) {
    guarded(status, "host_fail_next_event_record", [&] {
        if (driver_kind() != DriverKind::host) {
            throw DriverError(CUDA_ERROR_NOT_SUPPORTED, "host_fail_next_event_record", "arming a record failure",
                              "only the host driver injects failures (the " + driver_kind_name() + " driver runs)");
        }
        cuvmm::host_fail_next_event_record(reinterpret_cast<CUstream>(static_cast<uintptr_t>(stream)),
                                           static_cast<CUresult>(code));
    });
}

void host_peer_access(int device, int peer, bool can, Status& status) {
    guarded(status, "host_peer_access", [&] {
        if (driver_kind() != DriverKind::host) {
            throw DriverError(CUDA_ERROR_NOT_SUPPORTED, "host_peer_access", "setting peer capability",
                              "only the host driver sets peer capability (the " + driver_kind_name() + " driver runs)");
        }
        int count = 0;
        CUVMM_CALL(cuDeviceGetCount, Step{"counting devices"}, &count);
        if (device < 0 || device >= count || peer < 0 || peer >= count || device == peer) {
            throw invalid("host_peer_access", "device " + std::to_string(device) + ", peer " + std::to_string(peer) +
                                                  " (expected: two distinct devices, 0 to " + std::to_string(count - 1) + ")");
        }
        cuvmm::host_set_peer_access(device, peer, can);
    });
}

int entry_count() { return kEntryCount; }

std::string entry_name(int index) {
    const char* n = cuvmm::entry_name(index);
    return n ? n : "";
}

long long call_count(int index) {
    return index >= 0 && index < kEntryCount ? cuvmm::call_count(static_cast<Entry>(index)) : 0;
}

void reset_call_counts() { cuvmm::reset_call_counts(); }

long long host_live(int what) {
    if (driver_kind() != DriverKind::host) return 0;
    HostLiveCounts c = host_live_counts();
    switch (what) {
        case 0: return c.allocations;
        case 1: return c.reservations;
        case 2: return c.mappings;
        case 3: return c.memfds;
        default: return -1;
    }
}

long long object_live(int what) {
    ObjectCounts c = object_counts();
    switch (what) {
        case 0: return c.allocations;
        case 1: return c.reservations;
        case 2: return c.mappings;
        case 3: return c.ranges;
        default: return -1;
    }
}

long long cleanup_failures() { return cuvmm::cleanup_failure_count(); }

// ---- steady-state sharing support (issue 11) ----

int allocation_ids(const RangeHandle& range, long long* out, int capacity) {
    if (!range.range) return 0;
    const auto& mappings = range.range->mappings();
    const int count = static_cast<int>(mappings.size());
    for (int i = 0; i < count && i < capacity && out != nullptr; ++i) {
        out[i] = static_cast<long long>(mappings[i]->allocation()->id());
    }
    return count;
}

namespace {
// Calls fn(allocation id, first byte, end) for each chunk of `r` that holds part of the window
// [offset, offset + bytes), with the part's bounds inside that chunk's allocation.
template <typename Fn>
void for_each_chunk_in(const Range& r, size_t offset, size_t bytes, Fn&& fn) {
    size_t start = 0;
    for (const auto& m : r.mappings()) {
        const size_t end = start + m->size();
        if (start >= offset + bytes) break;
        if (end > offset) fn(m->allocation()->id(), std::max(offset, start) - start, std::min(offset + bytes, end) - start);
        start = end;
    }
}
}  // namespace

int windows_overlap(const RangeHandle& a, long long a_offset, const RangeHandle& b, long long b_offset,
                    long long bytes) {
    if (!a.range || !b.range || a_offset < 0 || b_offset < 0 || bytes <= 0) return 0;
    bool overlap = false;
    for_each_chunk_in(*a.range, static_cast<size_t>(a_offset), static_cast<size_t>(bytes),
                      [&](uint64_t id, size_t lo, size_t hi) {
        if (overlap) return;
        for_each_chunk_in(*b.range, static_cast<size_t>(b_offset), static_cast<size_t>(bytes),
                          [&](uint64_t other, size_t lo2, size_t hi2) {
            if (id == other && lo < hi2 && lo2 < hi) overlap = true;
        });
    });
    return overlap ? 1 : 0;
}

int export_chunk_fds(const RangeHandle& range, const int* chunks, int count, int* out_fds, long long* out_sizes,
                     Status& status) {
    int exported = -1;
    guarded(status, "export", [&] {
        const Range& r = require_range(range, "export");
        if (count < 0 || (count > 0 && (chunks == nullptr || out_fds == nullptr || out_sizes == nullptr))) {
            throw invalid("export", "count: " + std::to_string(count) + " (expected: 0 or more, with non-null arrays)");
        }
        std::vector<size_t> list;
        list.reserve(static_cast<size_t>(count));
        for (int k = 0; k < count; ++k) {
            if (chunks[k] < 0) {
                throw invalid("export", "chunk index " + std::to_string(chunks[k]) + " (expected: 0 to " +
                                            std::to_string(r.mappings().size()) + " exclusive, the chunks of the buffer)");
            }
            list.push_back(static_cast<size_t>(chunks[k]));
        }
        std::vector<int> fds = export_chunk_fds(r, list);
        for (size_t k = 0; k < fds.size(); ++k) {
            out_fds[k] = fds[k];
            out_sizes[k] = static_cast<long long>(r.mappings()[list[k]]->size());
        }
        exported = static_cast<int>(fds.size());
    });
    return exported;
}

void release_notices(int on) { set_release_notices(on != 0); }

int take_released_allocations(long long* out, long long* sequences, int capacity, long long timeout_ms) {
    if (out == nullptr || sequences == nullptr || capacity <= 0) return 0;
    std::vector<uint64_t> ids(static_cast<size_t>(capacity));
    std::vector<uint64_t> seqs(static_cast<size_t>(capacity));
    const size_t n = cuvmm::take_released_allocations(ids.data(), ids.size(), timeout_ms, seqs.data());
    for (size_t i = 0; i < n; ++i) {
        out[i] = static_cast<long long>(ids[i]);
        sequences[i] = static_cast<long long>(seqs[i]);
    }
    return static_cast<int>(n);
}

long long release_notice_sequence() { return static_cast<long long>(cuvmm::release_notice_sequence()); }

}  // namespace jni
}  // namespace cuvmm
