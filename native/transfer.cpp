#include "cuvmm/transfer.hpp"

#include <cstdio>
#include <string>

namespace cuvmm {
namespace {

void check_window(const Range& range, size_t offset, size_t bytes, const char* call, const char* role) {
    if (offset > range.size() || bytes > range.size() - offset) {
        throw DriverError(CUDA_ERROR_INVALID_VALUE, call, std::string("checking the ") + role + " window",
                          "offset " + std::to_string(offset) + " + length " + std::to_string(bytes) +
                              " is outside the buffer of " + std::to_string(range.size()) + " bytes");
    }
}

const char* access_name(unsigned long long flags) {
    switch (flags) {
        case CU_MEM_ACCESS_FLAGS_PROT_NONE: return "no";
        case CU_MEM_ACCESS_FLAGS_PROT_READ: return "READ";
        case CU_MEM_ACCESS_FLAGS_PROT_READWRITE: return "READ_WRITE"; // as AccessMode names it
        default: return "unknown";
    }
}

// What `device` may do with `mapping`: its access list as cuMemSetAccess applied it (a
// later descriptor for the same location wins; a device not named has none).
unsigned long long device_access(const Mapping& mapping, int device) {
    unsigned long long flags = CU_MEM_ACCESS_FLAGS_PROT_NONE;
    for (const CUmemAccessDesc& d : mapping.access()) {
        if (d.location.type == CU_MEM_LOCATION_TYPE_DEVICE && d.location.id == device) flags = d.flags;
    }
    return flags;
}

// Audit A4: on a GPU, a copy or fill through a mapping the current device may not access
// (no access, or READ for a destination) is not a clean error but a device fault
// (CUDA_ERROR_ILLEGAL_ADDRESS) that leaves the primary context unusable for the rest of
// the process. So cuvmm refuses it before the driver sees it, with the code the host
// driver gives (INVALID_VALUE), naming the buffer, the device and the access it has.
// Access is fixed per mapping when it is mapped (Mapping::access), so this is exact.
// What to allocate with instead: selfAccess on the buffer's own device (the one its resource
// was made for), peers and peerAccess on another (an independent probe: a peer's write was
// told selfAccess; a review: then the own device was offered peers of itself, which create
// refuses).
std::string access_advice(const Range& range, int device, bool write) {
    const bool own = range.spec() && range.spec()->device == device;
    const char* level = write ? "READ_WRITE" : "READ or READ_WRITE";
    if (own) return std::string("allocate with selfAccess ") + level + " (device " + std::to_string(device) +
                    " is the buffer's own device)";
    return "allocate with peers(" + std::to_string(device) + ") and peerAccess " + level + " (device " +
           std::to_string(device) + " is a peer of the buffer's device " +
           (range.spec() ? std::to_string(range.spec()->device) : std::string("?")) + ")";
}

void check_access(const Range& range, size_t offset, size_t bytes, int device, bool write, const char* call,
                  const char* role) {
    const unsigned long long need = write ? CU_MEM_ACCESS_FLAGS_PROT_READWRITE : CU_MEM_ACCESS_FLAGS_PROT_READ;
    const auto& mappings = range.mappings();
    const int chunks = static_cast<int>(mappings.size());
    size_t at = 0;
    for (int i = 0; i < chunks && at < offset + bytes; ++i) {
        const Mapping& m = *mappings[i];
        const size_t begin = at;
        at += m.size();
        if (at <= offset) continue;
        const unsigned long long has = device_access(m, device);
        if ((has & need) == need) continue;
        char buffer[96];
        std::snprintf(buffer, sizeof buffer, "VirtualMemoryBuffer[0x%llx, %zu bytes]",
                      static_cast<unsigned long long>(range.address()), range.size());
        throw DriverError(CUDA_ERROR_INVALID_VALUE, call, std::string("checking the ") + role + "'s access",
                          std::string("device ") + std::to_string(device) + " has " + access_name(has) +
                              " access to the " + role + " " + buffer + " (chunk " + std::to_string(i + 1) +
                              " of " + std::to_string(chunks) + ", bytes " + std::to_string(begin) + " to " +
                              std::to_string(at) + "); " + (write ? "writing" : "reading") + " it needs " +
                              access_name(need) + ". Refused by cuvmm before calling the driver (on a GPU the "
                              "access would fault the context); " + access_advice(range, device, write));
    }
}

// cuMemcpyHtoD from pageable memory, cuMemcpyDtoD and cuMemsetD8 may return before the
// device is done (CUDA "API synchronization behavior"), and cuMemUnmap does not wait for
// pending work. Every buffer operation is complete when it returns, so that a close, an
// export or a pool reuse right after it sees finished data: wait on the legacy stream.
void finish(const Step& step) { CUVMM_CALL(cuStreamSynchronize, step, nullptr); }

// RecordAfter's events belong to the stream's device (before any driver call).
void check_records(const RecordAfter& after, const Stream& stream, const char* call) {
    for (const Event* e : {after.first, after.second}) {
        if (e != nullptr && e->device() != stream.device()) {
            throw DriverError(CUDA_ERROR_INVALID_VALUE, call, "checking the events to record",
                              "an event of device " + std::to_string(e->device()) + " cannot be recorded on a stream of device " +
                                  std::to_string(stream.device()) + " (expected: an event of the stream's device)");
        }
    }
}

// The op was queued (or had nothing to queue): says so, then records RecordAfter's events,
// the caller's context scope still open.
void record_after(const RecordAfter& after, const Stream& stream, bool queued) {
    if (after.queued != nullptr) *after.queued = queued;
    for (const Event* e : {after.first, after.second}) {
        if (e != nullptr) CUVMM_CALL(cuEventRecord, Step{"recording the stream's use of the memory"}, e->handle(), stream.handle());
    }
}

bool records_any(const RecordAfter& after) { return after.first != nullptr || after.second != nullptr; }

}  // namespace

void copy_host_to_range(const Range& dst, size_t offset, const void* src, size_t bytes) {
    check_window(dst, offset, bytes, "cuMemcpyHtoD", "destination");
    if (bytes == 0) return;
    check_access(dst, offset, bytes, dst.spec()->device, true, "cuMemcpyHtoD", "destination");
    DeviceContextScope context(dst.spec()->device);
    CUVMM_CALL(cuMemcpyHtoD, Step{"copying from host memory"}, dst.address() + offset, src, bytes);
    finish(Step{"waiting for the copy from host memory"});
}

void copy_range_to_host(const Range& src, size_t offset, void* dst, size_t bytes) {
    check_window(src, offset, bytes, "cuMemcpyDtoH", "source");
    if (bytes == 0) return;
    check_access(src, offset, bytes, src.spec()->device, false, "cuMemcpyDtoH", "source");
    DeviceContextScope context(src.spec()->device);
    CUVMM_CALL(cuMemcpyDtoH, Step{"copying to host memory"}, dst, src.address() + offset, bytes);
}

void copy_range_to_range(const Range& dst, size_t dst_offset, const Range& src, size_t src_offset, size_t bytes) {
    check_window(dst, dst_offset, bytes, "cuMemcpyDtoD", "destination");
    check_window(src, src_offset, bytes, "cuMemcpyDtoD", "source");
    if (bytes == 0) return;
    // The copy runs on the destination's device, which must be able to read the source.
    check_access(dst, dst_offset, bytes, dst.spec()->device, true, "cuMemcpyDtoD", "destination");
    check_access(src, src_offset, bytes, dst.spec()->device, false, "cuMemcpyDtoD", "source");
    DeviceContextScope context(dst.spec()->device);
    CUVMM_CALL(cuMemcpyDtoD, Step{"copying between buffers"}, dst.address() + dst_offset, src.address() + src_offset,
               bytes);
    finish(Step{"waiting for the copy between buffers"});
}

void fill_range(const Range& dst, size_t offset, size_t bytes, uint8_t value) {
    check_window(dst, offset, bytes, "cuMemsetD8", "fill");
    if (bytes == 0) return;
    check_access(dst, offset, bytes, dst.spec()->device, true, "cuMemsetD8", "destination");
    DeviceContextScope context(dst.spec()->device);
    CUVMM_CALL(cuMemsetD8, Step{"filling"}, dst.address() + offset, value, bytes);
    finish(Step{"waiting for the fill"});
}

void copy_host_to_range_async(const Range& dst, size_t offset, const void* src, size_t bytes, const Stream& stream,
                              const RecordAfter& after) {
    check_window(dst, offset, bytes, "cuMemcpyHtoDAsync", "destination");
    check_records(after, stream, "cuMemcpyHtoDAsync");
    if (bytes == 0 && !records_any(after)) return;
    if (bytes != 0) check_access(dst, offset, bytes, stream.device(), true, "cuMemcpyHtoDAsync", "destination");
    DeviceContextScope context(stream.device());
    if (bytes != 0) {
        CUVMM_CALL(cuMemcpyHtoDAsync, Step{"queueing a copy from host memory"}, dst.address() + offset, src, bytes,
                   stream.handle());
    }
    record_after(after, stream, bytes != 0);
}

void copy_range_to_host_async(const Range& src, size_t offset, void* dst, size_t bytes, const Stream& stream,
                              const RecordAfter& after) {
    check_window(src, offset, bytes, "cuMemcpyDtoHAsync", "source");
    check_records(after, stream, "cuMemcpyDtoHAsync");
    if (bytes == 0 && !records_any(after)) return;
    if (bytes != 0) check_access(src, offset, bytes, stream.device(), false, "cuMemcpyDtoHAsync", "source");
    DeviceContextScope context(stream.device());
    if (bytes != 0) {
        CUVMM_CALL(cuMemcpyDtoHAsync, Step{"queueing a copy to host memory"}, dst, src.address() + offset, bytes,
                   stream.handle());
    }
    record_after(after, stream, bytes != 0);
}

void copy_range_to_range_async(const Range& dst, size_t dst_offset, const Range& src, size_t src_offset, size_t bytes,
                               const Stream& stream, const RecordAfter& after) {
    check_window(dst, dst_offset, bytes, "cuMemcpyDtoDAsync", "destination");
    check_window(src, src_offset, bytes, "cuMemcpyDtoDAsync", "source");
    check_records(after, stream, "cuMemcpyDtoDAsync");
    if (bytes == 0 && !records_any(after)) return;
    if (bytes != 0) {
        check_access(dst, dst_offset, bytes, stream.device(), true, "cuMemcpyDtoDAsync", "destination");
        check_access(src, src_offset, bytes, stream.device(), false, "cuMemcpyDtoDAsync", "source");
    }
    DeviceContextScope context(stream.device());
    if (bytes != 0) {
        CUVMM_CALL(cuMemcpyDtoDAsync, Step{"queueing a copy between buffers"}, dst.address() + dst_offset,
                   src.address() + src_offset, bytes, stream.handle());
    }
    record_after(after, stream, bytes != 0);
}

void fill_range_async(const Range& dst, size_t offset, size_t bytes, uint8_t value, const Stream& stream,
                      const RecordAfter& after) {
    check_window(dst, offset, bytes, "cuMemsetD8Async", "fill");
    check_records(after, stream, "cuMemsetD8Async");
    if (bytes == 0 && !records_any(after)) return;
    if (bytes != 0) check_access(dst, offset, bytes, stream.device(), true, "cuMemsetD8Async", "destination");
    DeviceContextScope context(stream.device());
    if (bytes != 0) {
        CUVMM_CALL(cuMemsetD8Async, Step{"queueing a fill"}, dst.address() + offset, value, bytes, stream.handle());
    }
    record_after(after, stream, bytes != 0);
}

}  // namespace cuvmm
