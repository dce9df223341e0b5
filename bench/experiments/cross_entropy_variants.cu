// An experiment kept for its figures (bench/NOTES.md, third session): launch shapes of the
// reduced cross-entropy kernels (kernels/cuda/cross_entropy.cuh) against the per-row kernel, timed
// back to back with CUDA events on zeroed inputs (timing only). Not part of the build; from the
// project root:
//   nvcc -O3 -arch=sm_90 -std=c++20 --expt-relaxed-constexpr -I. \
//     -o cross_entropy_variants bench/experiments/cross_entropy_variants.cu
#include <cstdio>
#include <cuda_runtime.h>
#include "kernels/cuda/cross_entropy.cuh"
using namespace ember::kernels::cuda::dev;
using ember::kernels::cuda::DeviceErrorFlag;
template <class F> float time_us(F f) {
  cudaEvent_t s, e; cudaEventCreate(&s); cudaEventCreate(&e);
  for (int i = 0; i < 5; ++i) f();
  cudaEventRecord(s);
  for (int i = 0; i < 200; ++i) f();
  cudaEventRecord(e); cudaEventSynchronize(e);
  float ms; cudaEventElapsedTime(&ms, s, e); return ms * 1000 / 200;
}
__global__ void empty_k() {}
int main() {
  const int C = 10;
  for (int n : {64, 1024, 8192}) {
    float *x, *dx, *loss, *g; long long* t; double* ps; long long* pc; long long* cnt; unsigned* tk;
    DeviceErrorFlag* flag;
    cudaMalloc(&x, n * C * 4); cudaMalloc(&dx, n * C * 4); cudaMalloc(&loss, n * 4); cudaMalloc(&g, 4);
    cudaMalloc(&t, n * 8); cudaMalloc(&ps, 8192 * 8); cudaMalloc(&pc, 8192 * 8); cudaMalloc(&cnt, 8);
    cudaMalloc(&tk, 4); cudaMalloc(&flag, sizeof(DeviceErrorFlag));
    cudaMemset(x, 0, n * C * 4); cudaMemset(t, 0, n * 8); cudaMemset(tk, 0, 4); cudaMemset(g, 0, 4);
    cudaMemset(flag, 0, sizeof(DeviceErrorFlag));
    const int64_t* ti = reinterpret_cast<const int64_t*>(t);
    auto red = [&](dim3 grid, dim3 block) {
      return time_us([&] {
        if (grid.x > 1) count_targets_kernel<<<1, 1024>>>(ti, n, -100, cnt);
        cross_entropy_reduced_kernel<float, float, true, true><<<grid, block>>>(
            x, ti, g, loss, dx, n, C, -100, 0.f, true, cnt, ps, pc, tk, flag);
      });
    };
    auto rt = [&](int blocks) {
      return time_us([&] {
        if (blocks > 1) count_targets_kernel<<<1, 1024>>>(ti, n, -100, cnt);
        cross_entropy_rowthread_kernel<float, float, true, true><<<blocks, 256>>>(
            x, ti, g, loss, dx, n, C, -100, 0.f, true, cnt, ps, pc, tk, flag);
      });
    };
    printf("N=%5d rowthread %.2f\n", n, rt(n <= 1024 ? 1 : (n + 255) / 256));
    printf("N=%5d empty %.2f | per-row %.2f | 1 block x1024 %.2f | 1 block x256 %.2f | 8-row blocks %.2f | 4-row blocks %.2f | count only %.2f\n", n,
      time_us([&] { empty_k<<<1, 32>>>(); }),
      time_us([&] { cross_entropy_rows_kernel<float, float, true, true><<<(n + 7) / 8, dim3(32, 8)>>>(x, ti, g, 0, loss, dx, n, C, -100, 0.f, flag); }),
      red(dim3(1), dim3(32, 32)), red(dim3(1), dim3(32, 8)),
      red(dim3((n + 7) / 8 < 1056 ? (n + 7) / 8 : 1056), dim3(32, 8)),
      red(dim3((n + 3) / 4 < 1056 ? (n + 3) / 4 : 1056), dim3(32, 4)),
      time_us([&] { count_targets_kernel<<<1, 1024>>>(ti, n, -100, cnt); }));
  }
  printf("err %s\n", cudaGetErrorString(cudaGetLastError()));
}
