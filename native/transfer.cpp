#include "cuvmm/transfer.hpp"

namespace cuvmm {
namespace {

void check_window(const Range& range, size_t offset, size_t bytes, const char* call, const char* role) {
    if (offset > range.size() || bytes > range.size() - offset) {
        throw DriverError(CUDA_ERROR_INVALID_VALUE, call, std::string("checking the ") + role + " window",
                          "offset " + std::to_string(offset) + " + length " + std::to_string(bytes) +
                              " is outside the buffer of " + std::to_string(range.size()) + " bytes");
    }
}

// cuMemcpyHtoD from pageable memory, cuMemcpyDtoD and cuMemsetD8 may return before the
// device is done (CUDA "API synchronization behavior"), and cuMemUnmap does not wait for
// pending work. Every buffer operation is complete when it returns, so that a close, an
// export or a pool reuse right after it sees finished data: wait on the legacy stream.
void finish(const Step& step) { CUVMM_CALL(cuStreamSynchronize, step, nullptr); }

}  // namespace

void copy_host_to_range(const Range& dst, size_t offset, const void* src, size_t bytes) {
    check_window(dst, offset, bytes, "cuMemcpyHtoD", "destination");
    if (bytes == 0) return;
    DeviceContextScope context(dst.spec()->device);
    CUVMM_CALL(cuMemcpyHtoD, Step{"copying from host memory"}, dst.address() + offset, src, bytes);
    finish(Step{"waiting for the copy from host memory"});
}

void copy_range_to_host(const Range& src, size_t offset, void* dst, size_t bytes) {
    check_window(src, offset, bytes, "cuMemcpyDtoH", "source");
    if (bytes == 0) return;
    DeviceContextScope context(src.spec()->device);
    CUVMM_CALL(cuMemcpyDtoH, Step{"copying to host memory"}, dst, src.address() + offset, bytes);
}

void copy_range_to_range(const Range& dst, size_t dst_offset, const Range& src, size_t src_offset, size_t bytes) {
    check_window(dst, dst_offset, bytes, "cuMemcpyDtoD", "destination");
    check_window(src, src_offset, bytes, "cuMemcpyDtoD", "source");
    if (bytes == 0) return;
    DeviceContextScope context(dst.spec()->device);
    CUVMM_CALL(cuMemcpyDtoD, Step{"copying between buffers"}, dst.address() + dst_offset, src.address() + src_offset,
               bytes);
    finish(Step{"waiting for the copy between buffers"});
}

void fill_range(const Range& dst, size_t offset, size_t bytes, uint8_t value) {
    check_window(dst, offset, bytes, "cuMemsetD8", "fill");
    if (bytes == 0) return;
    DeviceContextScope context(dst.spec()->device);
    CUVMM_CALL(cuMemsetD8, Step{"filling"}, dst.address() + offset, value, bytes);
    finish(Step{"waiting for the fill"});
}

}  // namespace cuvmm
