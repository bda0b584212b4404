// hostcuda_test, H4 and H5: a VMM sequence with export / import of a POSIX fd, the pointer
// queries, then a stream, an event, async copies and a host function, all through the host
// library's table (resolved with cuGetProcAddress_v2) and its exports (dlsym).
#include "cuvmm/driver_table.hpp"
#include "test/hostcuda_test_util.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <vector>

using namespace cuvmm;

namespace {

using AddressRange = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);
using PointerAttribute = CUresult (*)(void*, CUpointer_attribute, CUdeviceptr);

void CUDA_CB set_flag(void* user) { static_cast<std::atomic<int>*>(user)->fetch_add(1); }

void test_streams(const DriverTable& t, CUdeviceptr dev, size_t n) {
    CUstream s1 = nullptr, s2 = nullptr;
    CHECK(t.cuStreamCreate(&s1, CU_STREAM_NON_BLOCKING) == CUDA_SUCCESS);
    CHECK(t.cuStreamCreateWithPriority(&s2, CU_STREAM_DEFAULT, -1) == CUDA_SUCCESS);
    CUevent start = nullptr, done = nullptr;
    CHECK(t.cuEventCreate(&start, CU_EVENT_DEFAULT) == CUDA_SUCCESS);
    CHECK(t.cuEventCreate(&done, CU_EVENT_DEFAULT) == CUDA_SUCCESS);
    void* src = nullptr;
    void* dst = nullptr;
    CHECK(t.cuMemHostAlloc(&src, n, 0) == CUDA_SUCCESS && src != nullptr);
    CHECK(t.cuMemHostAlloc(&dst, n, 0) == CUDA_SUCCESS && dst != nullptr);
    if (src == nullptr || dst == nullptr) return;
    for (size_t i = 0; i < n; ++i) static_cast<unsigned char*>(src)[i] = static_cast<unsigned char>(i * 7 + 1);
    std::memset(dst, 0, n);
    std::atomic<int> ran{0};
    CHECK(t.cuEventRecord(start, s1) == CUDA_SUCCESS);
    CHECK(t.cuMemsetD8Async(dev, 0, n, s1) == CUDA_SUCCESS);
    CHECK(t.cuMemcpyHtoDAsync(dev, src, n, s1) == CUDA_SUCCESS);
    CHECK(t.cuLaunchHostFunc(s1, &set_flag, &ran) == CUDA_SUCCESS);
    CHECK(t.cuEventRecord(done, s1) == CUDA_SUCCESS);
    CHECK(t.cuStreamWaitEvent(s2, done, 0) == CUDA_SUCCESS);  // s2's copy sees s1's
    CHECK(t.cuMemcpyDtoHAsync(dst, dev, n, s2) == CUDA_SUCCESS);
    CHECK(t.cuStreamSynchronize(s2) == CUDA_SUCCESS);
    CHECK(std::memcmp(src, dst, n) == 0);
    CHECK(t.cuEventSynchronize(done) == CUDA_SUCCESS && t.cuEventQuery(done) == CUDA_SUCCESS);
    CHECK(ran.load() == 1);
    CHECK(t.cuStreamSynchronize(s1) == CUDA_SUCCESS && t.cuStreamQuery(s1) == CUDA_SUCCESS);
    float ms = -1;
    CHECK(t.cuEventElapsedTime(&ms, start, done) == CUDA_SUCCESS && ms >= 0);
    CHECK(t.cuMemcpyDtoDAsync(dev + n, dev, n, nullptr) == CUDA_SUCCESS);  // the legacy stream
    CHECK(t.cuCtxSynchronize() == CUDA_SUCCESS);
    int least = 1, greatest = 1;
    CHECK(t.cuCtxGetStreamPriorityRange(&least, &greatest) == CUDA_SUCCESS && greatest <= least);
    CHECK(t.cuEventDestroy(start) == CUDA_SUCCESS && t.cuEventDestroy(done) == CUDA_SUCCESS);
    CHECK(t.cuStreamDestroy(s1) == CUDA_SUCCESS && t.cuStreamDestroy(s2) == CUDA_SUCCESS);
    CHECK(t.cuStreamQuery(s1) == CUDA_ERROR_INVALID_HANDLE);
    CHECK(t.cuMemFreeHost(src) == CUDA_SUCCESS && t.cuMemFreeHost(dst) == CUDA_SUCCESS);
    std::vector<unsigned char> host(n);
    CHECK(t.cuMemHostRegister(host.data(), n, 0) == CUDA_SUCCESS);
    CHECK(t.cuMemHostUnregister(host.data()) == CUDA_SUCCESS);
}

}  // namespace

void test_vmm_and_streams(const DriverTable& t) {
    auto range = reinterpret_cast<AddressRange>(dlsym(g_lib, "cuMemGetAddressRange_v2"));
    auto attribute = reinterpret_cast<PointerAttribute>(dlsym(g_lib, "cuPointerGetAttribute"));
    CHECK(range != nullptr && attribute != nullptr);
    int count = 0;
    CHECK(t.cuDeviceGetCount(&count) == CUDA_SUCCESS && count == 2);
    CUdevice dev = -1;
    CHECK(t.cuDeviceGet(&dev, 0) == CUDA_SUCCESS && dev == 0);
    char name[64] = {};
    CHECK(t.cuDeviceGetName(name, sizeof name, 0) == CUDA_SUCCESS && name[0] != '\0');
    size_t total = 0;
    CHECK(t.cuDeviceTotalMem(&total, 0) == CUDA_SUCCESS && total > 0);
    int vmm = 0, peer = 0;
    CHECK(t.cuDeviceGetAttribute(&vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, 0) == CUDA_SUCCESS && vmm == 1);
    CHECK(t.cuDeviceCanAccessPeer(&peer, 0, 1) == CUDA_SUCCESS && peer == 1);
    CUcontext ctx = nullptr, cur = nullptr;
    CHECK(t.cuDevicePrimaryCtxRetain(&ctx, 0) == CUDA_SUCCESS && ctx != nullptr);
    CHECK(t.cuCtxSetCurrent(ctx) == CUDA_SUCCESS);
    CHECK(t.cuCtxGetCurrent(&cur) == CUDA_SUCCESS && cur == ctx);

    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    size_t g = 0;
    CHECK(t.cuMemGetAllocationGranularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM) == CUDA_SUCCESS && g > 0);
    CUmemGenericAllocationHandle h = 0, imported = 0, retained = 0;
    CHECK(t.cuMemCreate(&h, g, &prop, 0) == CUDA_SUCCESS);
    CUmemAllocationProp got{};
    CHECK(t.cuMemGetAllocationPropertiesFromHandle(&got, h) == CUDA_SUCCESS &&
          got.requestedHandleTypes == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    CUdeviceptr base = 0;
    CHECK(t.cuMemAddressReserve(&base, 3 * g, g, 0, 0) == CUDA_SUCCESS && base != 0);
    CHECK(t.cuMemMap(base, g, 0, h, 0) == CUDA_SUCCESS);
    int fd = -1;
    CHECK(t.cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0) == CUDA_SUCCESS && fd >= 0);
    CHECK(t.cuMemImportFromShareableHandle(&imported, reinterpret_cast<void*>(static_cast<intptr_t>(fd)),
                                           CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) == CUDA_SUCCESS);
    close(fd);
    CHECK(t.cuMemMap(base + g, g, 0, imported, 0) == CUDA_SUCCESS);
    CUmemAccessDesc rw{};
    rw.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    rw.location.id = 0;
    rw.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    CHECK(t.cuMemSetAccess(base, 2 * g, &rw, 1) == CUDA_SUCCESS);
    unsigned long long flags = 0;
    CHECK(t.cuMemGetAccess(&flags, &rw.location, base + g) == CUDA_SUCCESS && flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
    CHECK(t.cuMemRetainAllocationHandle(&retained, reinterpret_cast<void*>(base + 5)) == CUDA_SUCCESS && retained == h);
    CHECK(t.cuMemRelease(retained) == CUDA_SUCCESS);

    // Copies: what is written through the first mapping is read through the imported one.
    const char text[] = "one implementation, two faces";
    char back[sizeof text] = {};
    CHECK(t.cuMemsetD8(base, 0x5a, g) == CUDA_SUCCESS);
    CHECK(t.cuMemcpyHtoD(base + 64, text, sizeof text) == CUDA_SUCCESS);
    CHECK(t.cuMemcpyDtoH(back, base + g + 64, sizeof text) == CUDA_SUCCESS && std::memcmp(back, text, sizeof text) == 0);
    CHECK(t.cuMemcpyDtoD(base + 4096, base + 64, sizeof text) == CUDA_SUCCESS);
    unsigned char first = 0;
    CHECK(t.cuMemcpyDtoH(&first, base + g, 1) == CUDA_SUCCESS && first == 0x5a);

    // Pointer queries: the mapping holding the address.
    CUdeviceptr rbase = 0;
    size_t rsize = 0;
    CHECK(range(&rbase, &rsize, base + 10) == CUDA_SUCCESS && rbase == base && rsize == g);
    CHECK(range(&rbase, &rsize, base + g + g - 1) == CUDA_SUCCESS && rbase == base + g && rsize == g);
    CHECK(range(nullptr, &rsize, base) == CUDA_SUCCESS);  // a null out-pointer is ignored
    CHECK(range(&rbase, &rsize, base + 2 * g) == CUDA_ERROR_NOT_FOUND);  // reserved, unmapped
    unsigned char buf[8] = {};
    CHECK(attribute(buf, CU_POINTER_ATTRIBUTE_MAPPED, base + 1) == CUDA_SUCCESS && buf[0] == 1);
    std::memset(buf, 0xff, sizeof buf);
    CHECK(attribute(buf, CU_POINTER_ATTRIBUTE_MAPPED, base + 2 * g) == CUDA_SUCCESS && buf[0] == 0);
    CHECK(attribute(buf, CU_POINTER_ATTRIBUTE_MAPPED, 4096) == CUDA_ERROR_INVALID_VALUE);  // no reservation
    CUdeviceptr start = 0;
    // The RANGE attributes are the reservation (cuda.h: the mappable address range), not the chunk.
    CHECK(attribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, base + g + 3) == CUDA_SUCCESS && start == base);
    size_t size = 0;
    CHECK(attribute(&size, CU_POINTER_ATTRIBUTE_RANGE_SIZE, base + g) == CUDA_SUCCESS && size == 3 * g);
    unsigned int type = 0;
    CHECK(attribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, base) == CUDA_SUCCESS && type == CU_MEMORYTYPE_DEVICE);
    int ordinal = -1;
    CHECK(attribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, base) == CUDA_SUCCESS && ordinal == 0);
    unsigned long long types = 0;
    CHECK(attribute(&types, CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, base) == CUDA_SUCCESS &&
          types == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    CHECK(attribute(nullptr, CU_POINTER_ATTRIBUTE_MAPPED, base) == CUDA_ERROR_INVALID_VALUE);
    // Not modelled (a known divergence, VMM_DESIGN §5 "Pointer queries": a GPU answers a context).
    CHECK(attribute(buf, CU_POINTER_ATTRIBUTE_CONTEXT, base) == CUDA_ERROR_INVALID_VALUE);

    test_streams(t, base, g / 2);

    CHECK(t.cuMemUnmap(base, 2 * g) == CUDA_SUCCESS);
    CHECK(attribute(buf, CU_POINTER_ATTRIBUTE_MAPPED, base) == CUDA_SUCCESS && buf[0] == 0);
    CHECK(t.cuMemRelease(imported) == CUDA_SUCCESS);
    CHECK(t.cuMemRelease(h) == CUDA_SUCCESS);
    CHECK(t.cuMemRelease(h) == CUDA_ERROR_INVALID_VALUE);
    CHECK(t.cuMemAddressFree(base, 3 * g) == CUDA_SUCCESS);
    CHECK(t.cuCtxSetCurrent(nullptr) == CUDA_SUCCESS);
    CHECK(t.cuDevicePrimaryCtxRelease(0) == CUDA_SUCCESS);
}
