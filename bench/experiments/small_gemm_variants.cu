// The SmallK and SmallN kernels (kernels/cuda/small_gemm.cuh) against variants that keep every
// output's order of summation (so the bits must not change) but load less:
//  - SmallK "rows": a thread keeps its column quad of B (K float4) in registers and walks R rows,
//    instead of reloading B for every output quad;
//  - SmallN "R rows per warp": a warp folds R rows at once, each B float4 loaded once for R.
// The seed MLP's shapes at batch 64, 1024 and 8192: dA = dO [B,10] x W2 [10,512] and the layer-2
// forward [B,512] x W2^T. µs per launch, 200 launches back to back (CUDA events, median of 7);
// random inputs; the variants' outputs compared with the library kernel's bit for bit.
//   nvcc -O3 -std=c++20 -arch=sm_90 -I. bench/experiments/small_gemm_variants.cu -o sgv
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cuda/small_gemm.cuh"

using namespace ember::kernels::cuda::dev;

// SmallK: block of 128 threads over column quads (blockIdx.x), R rows per block (blockIdx.y).
template <int kK, int kR>
__global__ void __launch_bounds__(128) small_k_rows(SmallGemmArgs<float> p) {
  const int64_t quads = p.n / 4;
  const int64_t q = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (q >= quads) return;
  float4 w[kK];
#pragma unroll
  for (int k = 0; k < kK; ++k) w[k] = *reinterpret_cast<const float4*>(p.b + q * 4 + k * p.b_rs);
  const int64_t i0 = static_cast<int64_t>(blockIdx.y) * kR;
#pragma unroll 2
  for (int r = 0; r < kR; ++r) {
    const int64_t i = i0 + r;
    if (i >= p.m) break;
    const float* __restrict__ ar = p.a + i * p.a_rs;
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
#pragma unroll
    for (int k = 0; k < kK; ++k) {
      const float x = ar[k * p.a_cs];
      acc.x = fmaf(x, w[k].x, acc.x);
      acc.y = fmaf(x, w[k].y, acc.y);
      acc.z = fmaf(x, w[k].z, acc.z);
      acc.w = fmaf(x, w[k].w, acc.w);
    }
    const int64_t j = q * 4;
    float4 out;
    out.x = small_gemm_epilogue(acc.x, p.bias, j, p.relu);
    out.y = small_gemm_epilogue(acc.y, p.bias, j + 1, p.relu);
    out.z = small_gemm_epilogue(acc.z, p.bias, j + 2, p.relu);
    out.w = small_gemm_epilogue(acc.w, p.bias, j + 3, p.relu);
    *reinterpret_cast<float4*>(p.d + i * p.ld_d + j) = out;
  }
}

// SmallN vec4 with R rows per warp (rows w*R .. w*R+R-1 of the warp's turn).
template <int kN, int kR>
__global__ void __launch_bounds__(256) small_n_rows(SmallGemmArgs<float> p) {
  const int lane = static_cast<int>(threadIdx.x & 31u);
  const int64_t warps = static_cast<int64_t>(gridDim.x) * 8;
  const int quads = static_cast<int>(p.k / 4);
  const float4* __restrict__ bcol[kN];
#pragma unroll
  for (int c = 0; c < kN; ++c) bcol[c] = reinterpret_cast<const float4*>(p.b + c * p.b_cs);
  for (int64_t i0 = (static_cast<int64_t>(blockIdx.x) * 8 + (threadIdx.x >> 5)) * kR; i0 < p.m;
       i0 += warps * kR) {
    float acc[kR][kN];
#pragma unroll
    for (int r = 0; r < kR; ++r)
#pragma unroll
      for (int c = 0; c < kN; ++c) acc[r][c] = 0.f;
    const float4* __restrict__ ar[kR];
#pragma unroll
    for (int r = 0; r < kR; ++r)
      ar[r] = reinterpret_cast<const float4*>(p.a + (i0 + r < p.m ? i0 + r : p.m - 1) * p.a_rs);
#pragma unroll 2
    for (int q = lane; q < quads; q += 32) {
      float4 x[kR];
#pragma unroll
      for (int r = 0; r < kR; ++r) x[r] = ar[r][q];
#pragma unroll
      for (int c = 0; c < kN; ++c) {
        const float4 w = bcol[c][q];
#pragma unroll
        for (int r = 0; r < kR; ++r) {
          acc[r][c] = fmaf(x[r].x, w.x, acc[r][c]);
          acc[r][c] = fmaf(x[r].y, w.y, acc[r][c]);
          acc[r][c] = fmaf(x[r].z, w.z, acc[r][c]);
          acc[r][c] = fmaf(x[r].w, w.w, acc[r][c]);
        }
      }
    }
#pragma unroll
    for (int r = 0; r < kR; ++r)
      if (i0 + r < p.m) small_n_finish(p, i0 + r, lane, acc[r]);
  }
}

int sms() {
  int v = 0;
  cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, 0);
  return v;
}

template <class F>
float time_us(F launch) {
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  for (int i = 0; i < 20; ++i) launch();
  std::vector<float> v;
  for (int r = 0; r < 7; ++r) {
    cudaEventRecord(e0);
    for (int i = 0; i < 200; ++i) launch();
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float ms;
    cudaEventElapsedTime(&ms, e0, e1);
    v.push_back(ms * 1000 / 200);
  }
  std::sort(v.begin(), v.end());
  return v[3];
}

std::vector<float> fetch(const float* d, size_t n) {
  std::vector<float> h(n);
  cudaMemcpy(h.data(), d, n * 4, cudaMemcpyDeviceToHost);
  return h;
}

float* upload(size_t n, std::mt19937& g) {
  std::normal_distribution<float> nd;
  std::vector<float> h(n);
  for (float& x : h) x = nd(g);
  float* d;
  cudaMalloc(&d, n * 4);
  cudaMemcpy(d, h.data(), n * 4, cudaMemcpyHostToDevice);
  return d;
}

int main() {
  std::mt19937 g(7);
  const int n_sm = sms();
  for (int64_t m : {64, 1024, 8192}) {
    // SmallK: dA [m,512] = dO [m,10] x W2 [10,512].
    {
      float *a = upload(m * 10, g), *b = upload(10 * 512, g), *d0, *d1;
      cudaMalloc(&d0, m * 512 * 4);
      cudaMalloc(&d1, m * 512 * 4);
      SmallGemmArgs<float> p{a, 10, 1, b, 512, 1, d0, 512, nullptr, m, 512, 10, false};
      const int64_t total = m * 128;
      const unsigned blocks = (unsigned)std::min<int64_t>((total + 255) / 256, 8 * n_sm);
      const float t0 = time_us([&] { small_k_gemm_vec4_kernel<10, uint32_t><<<blocks, 256>>>(p); });
      const auto ref = fetch(d0, m * 512);
      std::printf("B=%-5lld small-K [B,10]x[10,512]  library %7.2f us", (long long)m, t0);
      SmallGemmArgs<float> q = p;
      q.d = d1;
      auto rows = [&](auto rr) {
        constexpr int R = decltype(rr)::value;
        const dim3 grid(1, (unsigned)((m + R - 1) / R));
        const float t = time_us([&] { small_k_rows<10, R><<<grid, 128>>>(q); });
        const auto got = fetch(d1, m * 512);
        const bool same = std::memcmp(got.data(), ref.data(), got.size() * 4) == 0;
        std::printf(" | rows R=%d %7.2f us%s", R, t, same ? "" : " (BITS DIFFER)");
      };
      rows(std::integral_constant<int, 4>{});
      rows(std::integral_constant<int, 8>{});
      rows(std::integral_constant<int, 16>{});
      rows(std::integral_constant<int, 32>{});
      std::printf("\n");
      cudaFree(a), cudaFree(b), cudaFree(d0), cudaFree(d1);
    }
    // SmallN: O [m,10] = A [m,512] x W2^T (W2 [10,512] row-major: B[k,c] = w2[c*512 + k]).
    {
      float *a = upload(m * 512, g), *b = upload(10 * 512, g), *d0, *d1;
      cudaMalloc(&d0, m * 10 * 4);
      cudaMalloc(&d1, m * 10 * 4);
      SmallGemmArgs<float> p{a, 512, 1, b, 1, 512, d0, 10, nullptr, m, 10, 512, false};
      const unsigned blocks = (unsigned)std::min<int64_t>((m + 7) / 8, 8 * n_sm);
      const float t0 = time_us([&] { small_n_gemm_vec4_kernel<10><<<blocks, 256>>>(p); });
      const auto ref = fetch(d0, m * 10);
      std::printf("B=%-5lld small-N [B,512]x[512,10] library %7.2f us", (long long)m, t0);
      SmallGemmArgs<float> q = p;
      q.d = d1;
      auto rows = [&](auto rr) {
        constexpr int R = decltype(rr)::value;
        const int64_t warps = (m + R - 1) / R;
        const unsigned bl = (unsigned)std::min<int64_t>((warps + 7) / 8, 8 * n_sm);
        const float t = time_us([&] { small_n_rows<10, R><<<bl, 256>>>(q); });
        const auto got = fetch(d1, m * 10);
        const bool same = std::memcmp(got.data(), ref.data(), got.size() * 4) == 0;
        std::printf(" | R=%d %7.2f us%s", R, t, same ? "" : " (BITS DIFFER)");
      };
      rows(std::integral_constant<int, 1>{});
      rows(std::integral_constant<int, 2>{});
      rows(std::integral_constant<int, 4>{});
      std::printf("\n");
      cudaFree(a), cudaFree(b), cudaFree(d0), cudaFree(d1);
    }
  }
  return 0;
}
