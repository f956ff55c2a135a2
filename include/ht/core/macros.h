// Portability macros shared by host code and CUDA kernels. Public, and free of
// any CUDA header: HT_HD marks math written once for both drivers.
#pragma once

#if defined(__CUDACC__)
#define HT_HD __host__ __device__ __forceinline__
#else
#define HT_HD inline
#endif
