// An experiment kept for its figures (bench/NOTES.md, third session): variants of the small-N
// GEMM D[M,10] = A[M,512] W[10,512]^T, timed back to back with CUDA events on zeroed inputs
// (timing only; the results are not checked). Not part of the build:
//   nvcc -O3 -arch=sm_90 -std=c++17 -o small_n_variants bench/experiments/small_n_variants.cu
#include <cstdio>
#include <cuda_runtime.h>
constexpr int N = 10, K = 512;

// V1: warp per row, lanes over k (stride 32), unroll 4 (the library's kernel).
__global__ void v1(const float* __restrict__ a, const float* __restrict__ w, float* d, int m) {
  int lane = threadIdx.x & 31, row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= m) return;
  float acc[N] = {};
  const float* ar = a + (size_t)row * K;
#pragma unroll 4
  for (int k = lane; k < K; k += 32) {
    float x = ar[k];
#pragma unroll
    for (int c = 0; c < N; ++c) acc[c] = fmaf(x, w[c * K + k], acc[c]);
  }
#pragma unroll
  for (int c = 0; c < N; ++c)
    for (int o = 16; o; o >>= 1) acc[c] += __shfl_xor_sync(~0u, acc[c], o);
  if (lane < N) {
#pragma unroll
    for (int c = 0; c < N; ++c) if (lane == c) d[row * N + c] = acc[c];
  }
}
// V1 with int64 loop and runtime strides (as in the library).
__global__ void v1s(const float* __restrict__ a, long long ars, long long acs, const float* __restrict__ b, long long brs, long long bcs, float* d, long long m, long long kk) {
  int lane = threadIdx.x & 31;
  for (long long row = (long long)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; row < m; row += (long long)gridDim.x * (blockDim.x/32)) {
  float acc[N] = {};
  const float* ar = a + row * ars;
#pragma unroll 4
  for (long long k = lane; k < kk; k += 32) {
    float x = ar[k * acs];
    const float* bk = b + k * brs;
#pragma unroll
    for (int c = 0; c < N; ++c) acc[c] = fmaf(x, bk[c * bcs], acc[c]);
  }
#pragma unroll
  for (int c = 0; c < N; ++c)
    for (int o = 16; o; o >>= 1) acc[c] = __fadd_rn(acc[c], __shfl_xor_sync(~0u, acc[c], o));
#pragma unroll
  for (int c = 0; c < N; ++c) if (lane == c) d[row * N + c] = acc[c];
  }
}
// V2: float4 along k.
__global__ void v2(const float* __restrict__ a, const float* __restrict__ w, float* d, int m) {
  int lane = threadIdx.x & 31, row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= m) return;
  float acc[N] = {};
  const float4* ar = reinterpret_cast<const float4*>(a + (size_t)row * K);
#pragma unroll
  for (int j = 0; j < K / 128; ++j) {
    float4 x = ar[lane + 32 * j];
#pragma unroll
    for (int c = 0; c < N; ++c) {
      float4 v = reinterpret_cast<const float4*>(w + c * K)[lane + 32 * j];
      acc[c] = fmaf(x.x, v.x, acc[c]); acc[c] = fmaf(x.y, v.y, acc[c]);
      acc[c] = fmaf(x.z, v.z, acc[c]); acc[c] = fmaf(x.w, v.w, acc[c]);
    }
  }
#pragma unroll
  for (int c = 0; c < N; ++c)
    for (int o = 16; o; o >>= 1) acc[c] += __shfl_xor_sync(~0u, acc[c], o);
#pragma unroll
  for (int c = 0; c < N; ++c) if (lane == c) d[row * N + c] = acc[c];
}
// V3: W staged in shared memory (20 KB), warp per row.
__global__ void v3(const float* __restrict__ a, const float* __restrict__ w, float* d, int m) {
  __shared__ float ws[N * K];
  for (int i = threadIdx.x; i < N * K; i += blockDim.x) ws[i] = w[i];
  __syncthreads();
  int lane = threadIdx.x & 31;
  for (int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; row < m; row += gridDim.x * (blockDim.x / 32)) {
    float acc[N] = {};
    const float* ar = a + (size_t)row * K;
#pragma unroll 4
    for (int k = lane; k < K; k += 32) {
      float x = ar[k];
#pragma unroll
      for (int c = 0; c < N; ++c) acc[c] = fmaf(x, ws[c * K + k], acc[c]);
    }
#pragma unroll
    for (int c = 0; c < N; ++c)
      for (int o = 16; o; o >>= 1) acc[c] += __shfl_xor_sync(~0u, acc[c], o);
#pragma unroll
    for (int c = 0; c < N; ++c) if (lane == c) d[row * N + c] = acc[c];
  }
}
__global__ void empty_k() {}

template <class F> float time_us(F f) {
  cudaEvent_t s, e; cudaEventCreate(&s); cudaEventCreate(&e);
  for (int i = 0; i < 5; ++i) f();
  cudaEventRecord(s);
  for (int i = 0; i < 200; ++i) f();
  cudaEventRecord(e); cudaEventSynchronize(e);
  float ms; cudaEventElapsedTime(&ms, s, e); return ms * 1000 / 200;
}
int main() {
  for (int m : {64, 1024, 8192}) {
    float *a, *w, *d;
    cudaMalloc(&a, (size_t)m * K * 4); cudaMalloc(&w, N * K * 4); cudaMalloc(&d, (size_t)m * N * 4);
    cudaMemset(a, 0, (size_t)m * K * 4); cudaMemset(w, 0, N * K * 4);
    int b8 = (m + 7) / 8;
    printf("M=%5d empty %.2f | v1 %.2f | v1 1warp/blk %.2f | v1s(lib) %.2f | v2 f4 %.2f | v2 1warp/blk %.2f | v3 smem %.2f\n", m,
      time_us([&] { empty_k<<<1, 32>>>(); }),
      time_us([&] { v1<<<b8, 256>>>(a, w, d, m); }),
      time_us([&] { v1<<<m, 32>>>(a, w, d, m); }),
      time_us([&] { v1s<<<b8 < 1056 ? b8 : 1056, 256>>>(a, K, 1, w, 1, K, d, m, K); }),
      time_us([&] { v2<<<b8, 256>>>(a, w, d, m); }),
      time_us([&] { v2<<<m, 32>>>(a, w, d, m); }),
      time_us([&] { v3<<<(m + 63) / 64 < 132 ? (m + 63) / 64 : 132, 256>>>(a, w, d, m); }));
    cudaFree(a); cudaFree(w); cudaFree(d);
  }
  printf("err %s\n", cudaGetErrorString(cudaGetLastError()));
}
