// Implementation of the JNI-facing surface: argument checks that protect native code,
// then the object model, with every exception turned into a Status.
#include "cuvmm/jni_api.hpp"

#include "cuvmm/cuda_errors.hpp"
#include "cuvmm/fd_utils.hpp"
#include "cuvmm/sharing.hpp"
#include "cuvmm/transfer.hpp"

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

}  // namespace jni
}  // namespace cuvmm
