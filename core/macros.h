#pragma once
// Qualifiers shared by code that nvcc, NVRTC and the host compiler all see.
#if defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define EMBER_HD __host__ __device__ __forceinline__
#define EMBER_DEVICE_CODE 1
#else
#define EMBER_HD inline
#endif
