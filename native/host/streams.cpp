// Host driver entry points for streams: handle values in the registry and nothing else,
// because all host work is synchronous.
#include "host/host_internal.hpp"

namespace cuvmm {
namespace host {

namespace entry {

CUresult CUDAAPI cuStreamCreate(CUstream* stream, unsigned int flags) {
    CUVMM_REQUIRE_INIT();
    if (stream == nullptr) return CUDA_ERROR_INVALID_VALUE;
    if (flags != CU_STREAM_DEFAULT && flags != CU_STREAM_NON_BLOCKING) return CUDA_ERROR_INVALID_VALUE;
    Exclusive lock(g_state->mutex);
    State& st = *g_state;
    int dev;
    if (!current_device(st, &dev)) return CUDA_ERROR_INVALID_CONTEXT;
    uintptr_t v = st.next_stream;
    st.next_stream += 16;
    st.streams.insert(v);
    *stream = reinterpret_cast<CUstream>(v);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamDestroy(CUstream stream) {
    CUVMM_REQUIRE_INIT();
    Exclusive lock(g_state->mutex);
    if (g_state->streams.erase(reinterpret_cast<uintptr_t>(stream)) == 0) return CUDA_ERROR_INVALID_HANDLE;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuStreamSynchronize(CUstream stream) {
    CUVMM_REQUIRE_INIT();
    if (stream == nullptr || stream == CU_STREAM_LEGACY || stream == CU_STREAM_PER_THREAD) return CUDA_SUCCESS;
    Shared lock(g_state->mutex);
    if (g_state->streams.count(reinterpret_cast<uintptr_t>(stream)) == 0) return CUDA_ERROR_INVALID_HANDLE;
    return CUDA_SUCCESS;  // all host work is synchronous
}

}  // namespace entry

}  // namespace host
}  // namespace cuvmm
