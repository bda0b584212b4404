/* A stand-in libcudart.so.13 (soname libcudart.so.13) with one data symbol and no code.
 * The JavaCPP CUDA presets' libjnicudart.so names libcudart.so.13 as NEEDED; binding is
 * lazy and the presets' driver-API calls never reach it, so an empty library lets them load
 * beside the host library's libcuda.so.1 on a machine without a CUDA toolkit. Any CUDA
 * runtime-API call made through the presets fails (symbol lookup error): none of cuvmm's
 * tests makes one over the host library. */
const int cuvmmCudartStub = 1;
