// An experiment kept for its figures (bench/NOTES.md): launch shapes of the reduced
// cross-entropy kernels (kernels/cuda/cross_entropy.cuh) at 10 classes, timed back to back with
// CUDA events on zeroed inputs (timing only): one thread per row (the shape up to the
// twenty-fifth session) against a group of 16 lanes per row, counting the targets in every
// block or in a kernel of its own first. Not part of the build; from the project root:
//   nvcc -O3 -arch=sm_90 -std=c++20 --expt-relaxed-constexpr -I. \
//     -o cross_entropy_variants bench/experiments/cross_entropy_variants.cu
#include <cuda_runtime.h>

#include <cstdio>

#include "kernels/cuda/cross_entropy.cuh"
using namespace ember::kernels::cuda::dev;
using ember::kernels::cuda::DeviceErrorFlag;
template <class F>
float time_us(F f) {
  cudaEvent_t s, e;
  cudaEventCreate(&s);
  cudaEventCreate(&e);
  for (int i = 0; i < 5; ++i) f();
  cudaEventRecord(s);
  for (int i = 0; i < 200; ++i) f();
  cudaEventRecord(e);
  cudaEventSynchronize(e);
  float ms;
  cudaEventElapsedTime(&ms, s, e);
  return ms * 1000 / 200;
}
int main() {
  const int C = 10;
  for (int n : {1024, 8192, 32768}) {
    float *x, *dx, *loss;
    long long* t;
    double* ps;
    long long *pc, *cnt;
    unsigned* tk;
    DeviceErrorFlag* flag;
    cudaMalloc(&x, n * C * 4);
    cudaMalloc(&dx, n * C * 4);
    cudaMalloc(&loss, 4);
    cudaMalloc(&t, n * 8);
    cudaMalloc(&ps, 8192 * 8);
    cudaMalloc(&pc, 8192 * 8);
    cudaMalloc(&cnt, 8);
    cudaMalloc(&tk, 4);
    cudaMalloc(&flag, sizeof(DeviceErrorFlag));
    cudaMemset(x, 0, n * C * 4);
    cudaMemset(t, 0, n * 8);
    cudaMemset(tk, 0, 4);
    cudaMemset(flag, 0, sizeof(DeviceErrorFlag));
    const int64_t* ti = reinterpret_cast<const int64_t*>(t);
    auto lanes = [&](int g, bool count_first) {
      const int rows = 256 / g,
                blocks = (n + rows - 1) / rows < 1056 ? (n + rows - 1) / rows : 1056;
      return time_us([&] {
        if (count_first) count_targets_kernel<<<1, 1024>>>(ti, n, -100, cnt);
        cross_entropy_reduced_kernel<float, float, true, true>
            <<<blocks, dim3(g, rows)>>>(x, ti, nullptr, 1.f, loss, dx, n, C, -100, 0.f, true,
                                        count_first ? cnt : nullptr, ps, pc, tk, flag);
      });
    };
    const int rt_blocks = (n + 255) / 256;
    const float rowthread = time_us([&] {
      if (n > 16384) count_targets_kernel<<<1, 1024>>>(ti, n, -100, cnt);
      cross_entropy_rowthread_kernel<float, float, true, true>
          <<<rt_blocks, 256>>>(x, ti, nullptr, 1.f, loss, dx, n, C, -100, 0.f, true,
                               n > 16384 ? cnt : nullptr, ps, pc, tk, flag);
    });
    std::printf(
        "N=%5d C=%d us: rowthread %.2f | 16 lanes, count first %.2f | 16 lanes, count in "
        "blocks %.2f | 8 lanes, count first %.2f | count only %.2f\n",
        n, C, rowthread, lanes(16, true), lanes(16, false), lanes(8, true),
        time_us([&] { count_targets_kernel<<<1, 1024>>>(ti, n, -100, cnt); }));
  }
  std::printf("err %s\n", cudaGetErrorString(cudaGetLastError()));
}
