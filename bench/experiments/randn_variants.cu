// An experiment kept for its figures (bench/NOTES.md, fourth session): randn of the batch-8192
// MLP input ([8192, 784] float32, 6.4 M draws) as the library draws it (one element per thread
// step: the Philox call, log and sqrt done for each element of a pair, sine or cosine in
// double) against one thread per pair (Philox, log and sqrt once, sin and cos of the same
// argument). µs per launch back to back (CUDA events, median of 7 repeats of 50); the two must
// agree bit for bit. Not part of the build:
//   nvcc -O3 -arch=sm_90 -std=c++20 -I. -o randn_variants bench/experiments/randn_variants.cu
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <vector>

#include "core/philox.h"

using namespace ember;

__global__ void per_element(float* out, long long n, uint64_t seed, uint64_t offset) {
  const long long step = (long long)gridDim.x * blockDim.x;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += step)
    out[i] = (float)philox::normal(seed, offset, (uint64_t)i);
}

__global__ void per_pair(float* out, long long n, uint64_t seed, uint64_t offset) {
  const long long step = (long long)gridDim.x * blockDim.x;
  const long long pairs = (n + 1) / 2;
  for (long long p = blockIdx.x * (long long)blockDim.x + threadIdx.x; p < pairs; p += step) {
    const philox::U32x4 r = philox::philox4x32_10(offset + (uint64_t)p, seed);
    const uint64_t a = (static_cast<uint64_t>(r.v[1]) << 32) | r.v[0];
    const uint64_t b = (static_cast<uint64_t>(r.v[3]) << 32) | r.v[2];
    const double u1 = 1.0 - static_cast<double>(a >> 11) * (1.0 / 9007199254740992.0);
    const double u2 = static_cast<double>(b >> 11) * (1.0 / 9007199254740992.0);
    constexpr double kTwoPi = 6.283185307179586476925286766559;
    const double rad = ::sqrt(-2.0 * ::log(u1));
    const double x = kTwoPi * u2;
    const float c = (float)(rad * ::cos(x)), s = (float)(rad * ::sin(x));
    const long long i = 2 * p;
    if (i + 1 < n && (n & 1) == 0) {
      reinterpret_cast<float2*>(out)[p] = make_float2(c, s);
    } else {
      out[i] = c;
      if (i + 1 < n) out[i + 1] = s;
    }
  }
}

// Two pairs per thread step, interleaved: two independent chains of double-precision work for
// the scheduler to overlap (same values).
__device__ __forceinline__ float2 pair_values(uint64_t seed, uint64_t offset, long long p) {
  double e, o;
  philox::normal_pair(seed, offset, static_cast<uint64_t>(p), e, o);
  return make_float2(static_cast<float>(e), static_cast<float>(o));
}
__global__ void per_pair_x2(float* out, long long n, uint64_t seed, uint64_t offset) {
  const long long pairs = n / 2;  // n even here
  const long long step = (long long)gridDim.x * blockDim.x;
  long long p = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  for (; p + step < pairs; p += 2 * step) {
    const float2 a = pair_values(seed, offset, p), b = pair_values(seed, offset, p + step);
    reinterpret_cast<float2*>(out)[p] = a;
    reinterpret_cast<float2*>(out)[p + step] = b;
  }
  if (p < pairs) reinterpret_cast<float2*>(out)[p] = pair_values(seed, offset, p);
}

// Variants for the fifth session: where the 40 µs go. The Philox bits alone (written as floats),
// double precision with sincospi (no argument reduction by 2*pi), float math throughout
// (24-bit uniforms, logf, sincospif), as curand's float Box-Muller does, and the library's float
// pair math philox::box_muller_f32 on words 0 and 1, as the fifth session's draw was (no libm,
// no FMA contraction; the library now feeds words 2 and 3 to a second pair).
template <int kMath>
__global__ void per_pair_math(float* out, long long n, uint64_t seed, uint64_t offset) {
  const long long pairs = n / 2;
  const long long step = (long long)gridDim.x * blockDim.x;
  for (long long p = blockIdx.x * (long long)blockDim.x + threadIdx.x; p < pairs; p += step) {
    const philox::U32x4 r = philox::philox4x32_10(offset + (uint64_t)p, seed);
    float c, s;
    if constexpr (kMath == 0) {
      c = (float)r.v[0] * 2.3283064e-10f + (float)r.v[1];
      s = (float)r.v[2] * 2.3283064e-10f + (float)r.v[3];
    } else if constexpr (kMath == 1) {
      const uint64_t a = (static_cast<uint64_t>(r.v[1]) << 32) | r.v[0];
      const uint64_t b = (static_cast<uint64_t>(r.v[3]) << 32) | r.v[2];
      const double u1 = 1.0 - static_cast<double>(a >> 11) * (1.0 / 9007199254740992.0);
      const double u2 = static_cast<double>(b >> 11) * (1.0 / 9007199254740992.0);
      const double rad = ::sqrt(-2.0 * ::log(u1));
      double sd, cd;
      ::sincospi(2.0 * u2, &sd, &cd);
      c = (float)(rad * cd);
      s = (float)(rad * sd);
    } else if constexpr (kMath == 3) {
      // The library's float pair (core/philox.h): own log and sincos from IEEE-exact
      // operations, bit-identical to the CPU, on words 0 and 1.
      philox::box_muller_f32(r.v[0], r.v[1], c, s);
    } else {
      const float u1 = 1.0f - (float)(r.v[0] >> 8) * (1.0f / 16777216.0f);
      const float u2 = (float)(r.v[1] >> 8) * (1.0f / 16777216.0f);
      const float rad = ::sqrtf(-2.0f * ::logf(u1));
      float sf, cf;
      ::sincospif(2.0f * u2, &sf, &cf);
      c = rad * cf;
      s = rad * sf;
    }
    reinterpret_cast<float2*>(out)[p] = make_float2(c, s);
  }
}

int main() {
  const long long n = 8192ll * 784;
  float *a, *b;
  cudaMalloc(&a, n * 4);
  cudaMalloc(&b, n * 4);
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  auto time = [&](auto launch) {
    std::vector<float> v;
    for (int r = 0; r < 7; ++r) {
      cudaEventRecord(e0);
      for (int i = 0; i < 50; ++i) launch(i);
      cudaEventRecord(e1);
      cudaEventSynchronize(e1);
      float ms;
      cudaEventElapsedTime(&ms, e0, e1);
      v.push_back(ms * 1000 / 50);
    }
    std::sort(v.begin(), v.end());
    return v[3];
  };
  for (int per_sm : {4, 8, 16}) {
    const int grid = per_sm * sms;
    const float t1 = time([&](int i) { per_element<<<grid, 256>>>(a, n, 42, 1000 * i); });
    const float t2 = time([&](int i) { per_pair<<<grid, 256>>>(b, n, 42, 1000 * i); });
    const float t3 = time([&](int i) { per_pair_x2<<<grid, 256>>>(b, n, 42, 1000 * i); });
    std::printf("%2d blocks/SM: two pairs per thread step %7.2f us\n", per_sm, t3);
    const float m0 = time([&](int i) { per_pair_math<0><<<grid, 256>>>(b, n, 42, 1000 * i); });
    const float m1 = time([&](int i) { per_pair_math<1><<<grid, 256>>>(b, n, 42, 1000 * i); });
    const float m2 = time([&](int i) { per_pair_math<2><<<grid, 256>>>(b, n, 42, 1000 * i); });
    const float m3 = time([&](int i) { per_pair_math<3><<<grid, 256>>>(b, n, 42, 1000 * i); });
    std::printf("%2d blocks/SM: philox only %7.2f us, double+sincospi %7.2f us, float %7.2f us\n",
                per_sm, m0, m1, m2);
    std::printf("%2d blocks/SM: box_muller_f32 (bit-identical to the CPU) %7.2f us\n", per_sm, m3);
    per_element<<<grid, 256>>>(a, n, 7, 3);
    per_pair_x2<<<grid, 256>>>(b, n, 7, 3);
    std::vector<float> ha(n), hb(n);
    cudaMemcpy(ha.data(), a, n * 4, cudaMemcpyDeviceToHost);
    cudaMemcpy(hb.data(), b, n * 4, cudaMemcpyDeviceToHost);
    long long diff = 0;
    for (long long i = 0; i < n; ++i) diff += std::memcmp(&ha[i], &hb[i], 4) != 0;
    std::printf("%2d blocks/SM: per element %7.2f us, per pair %7.2f us, %lld of %lld differ\n",
                per_sm, t1, t2, diff, n);
  }
  return 0;
}
