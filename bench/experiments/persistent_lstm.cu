// An experiment kept for its figures (bench/NOTES.md, twenty-seventh session): how fast can an
// LSTM's time loop run as one persistent kernel, against the per-step kernels Ember's compiled
// step runs today (the Tiled product, then a gate kernel, once per time step, in a CUDA graph)?
// The lstm workload's sizes: batch 64, hidden 256, 32 time steps, the input projection
// (x_t W_ih^T + biases) computed beforehand for all steps at once.
//
// Persistent forward: H / U blocks, block c owning hidden units [cU, cU + U); its 4U rows of
// W_hh (gate g's row g H + u) stay in shared memory for the whole loop. Per time step a block
// copies h_{t-1} into shared memory, thread (b, j) computes the four gate pre-activations of
// row b, unit j (four dot products of length H), the cell update, and stores h_t, c_t and the
// activated gates (the backward's inputs); then a grid-wide barrier. One launch, T barriers.
// Persistent backward (the hidden-state chain only): thread (b, j) forms dG (four gates) from
// dh, dc and the saved gates, stores dG_t, barrier, then dh_rec(b, j) = dG_t[b, :] . W_hh[:, u]
// over the 4H gate columns (W_hh's U columns of the block in shared memory).
// Baseline: per time step the library's Tiled kernel (64x64 tiles, 4 k slices as tile_plan
// picks) and a one-thread-per-element gate kernel, T times, captured as one CUDA graph.
// Second form (below): cp.async staging and float4 dot products. Third (forward only): the
// product split over k in a cluster, partial tiles summed through distributed shared memory.
// Each is timed over 20 replays / launches after a warm-up, median; the forward is checked
// against a float64 host loop, the backward against a float64 host loop too.
// Not part of the build (from the repository root):
//   nvcc -O3 -arch=sm_90 -std=c++20 --expt-relaxed-constexpr -I. \
//     -o /tmp/persistent_lstm bench/experiments/persistent_lstm.cu
#include <cooperative_groups.h>
#include <cuda_pipeline.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "kernels/cuda/tile_gemm.cuh"

#include "check_cuda.h"

namespace cg = cooperative_groups;
namespace dev = ember::kernels::cuda::dev;

constexpr int B = 64, H = 256, T = 32, G = 4 * H;

__device__ __forceinline__ float sigm(float x) { return 1.f / (1.f + expf(-x)); }

// The cell update of row b, unit u at step t from its four gate pre-activations and the cell
// state before: stores h_t, c_t and the activated gates (act[t][b][g H + u]); returns c_t.
__device__ __forceinline__ float lstm_cell(const float pre[4], float c, int t, int b, int u,
                                           float* hs, float* cs, float* act) {
  const float ig = sigm(pre[0]), fg = sigm(pre[1]), gg = tanhf(pre[2]), og = sigm(pre[3]);
  c = fg * c + ig * gg;
  const int e = (t * B + b) * H + u;
  hs[e] = og * tanhf(c);
  cs[e] = c;
  float* a = act + (t * B + b) * G + u;
  a[0] = ig;
  a[H] = fg;
  a[2 * H] = gg;
  a[3 * H] = og;
  return c;
}

// Its backward, from the gradient reaching h_t (dh) and the cell state's gradient from step t+1
// (dc): stores the four gate gradients dg[t][b][g H + u]; returns the cell state's gradient
// carried to step t-1.
__device__ __forceinline__ float lstm_cell_backward(float dh, float dc, int t, int b, int u,
                                                    const float* cs, const float* act, float* dg) {
  const float* a = act + (t * B + b) * G + u;
  const float ig = a[0], fg = a[H], gg = a[2 * H], og = a[3 * H];
  const int e = (t * B + b) * H + u;
  const float c_prev = t > 0 ? cs[e - B * H] : 0.f, tc = tanhf(cs[e]);
  dc = dc + dh * og * (1.f - tc * tc);
  float* d = dg + (t * B + b) * G + u;
  d[0] = dc * gg * ig * (1.f - ig);
  d[H] = dc * c_prev * fg * (1.f - fg);
  d[2 * H] = dc * ig * (1.f - gg * gg);
  d[3 * H] = dh * tc * og * (1.f - og);
  return dc * fg;
}

// xp [T][B][G], w [G][H] (PyTorch's weight_hh), hs/cs [T][B][H], act [T][B][G] (i, f, g, o
// activated). h_{-1} = c_{-1} = 0.
template <int U>
__global__ void __launch_bounds__(B* U)
    persistent_forward(const float* __restrict__ xp, const float* __restrict__ w, float* hs,
                       float* cs, float* act) {
  extern __shared__ float sm[];
  float* ws = sm;              // [4U][H]: row g*U + j is w's row g*H + u0 + j
  float* hp = sm + 4 * U * H;  // [B][H + 1]
  const int u0 = blockIdx.x * U, tid = threadIdx.x, b = tid / U, j = tid % U;
  for (int i = tid; i < 4 * U * H; i += B * U) {
    const int r = i / H, k = i % H, g = r / U, jj = r % U;
    ws[i] = w[(g * H + u0 + jj) * H + k];
  }
  cg::grid_group grid = cg::this_grid();
  float c = 0.f;
  for (int t = 0; t < T; ++t) {
    float pre[4];
#pragma unroll
    for (int g = 0; g < 4; ++g) pre[g] = xp[(t * B + b) * G + g * H + u0 + j];
    if (t > 0) {
      const float* h = hs + (t - 1) * B * H;
      for (int i = tid; i < B * H; i += B * U) hp[(i / H) * (H + 1) + i % H] = h[i];
      __syncthreads();
      float acc[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll 8
      for (int k = 0; k < H; ++k) {
        const float hv = hp[b * (H + 1) + k];
#pragma unroll
        for (int g = 0; g < 4; ++g) acc[g] = fmaf(hv, ws[(g * U + j) * H + k], acc[g]);
      }
#pragma unroll
      for (int g = 0; g < 4; ++g) pre[g] += acc[g];
      __syncthreads();
    }
    c = lstm_cell(pre, c, t, b, u0 + j, hs, cs, act);
    grid.sync();
  }
}

// dh_top [T][B][H]: the loss's gradient reaching each h_t from above; dg [T][B][G] out.
template <int U>
__global__ void __launch_bounds__(B* U)
    persistent_backward(const float* __restrict__ dh_top, const float* __restrict__ w,
                        const float* __restrict__ cs, const float* __restrict__ act, float* dg) {
  extern __shared__ float sm[];
  float* wc = sm;  // [G][U]: w's column u0 + j
  const int u0 = blockIdx.x * U, tid = threadIdx.x, b = tid / U, j = tid % U;
  for (int i = tid; i < G * U; i += B * U) wc[i] = w[(i / U) * H + u0 + i % U];
  __syncthreads();
  cg::grid_group grid = cg::this_grid();
  float dh_rec = 0.f, dc = 0.f;
  for (int t = T - 1; t >= 0; --t) {
    const int e = (t * B + b) * H + u0 + j;
    dc = lstm_cell_backward(dh_top[e] + dh_rec, dc, t, b, u0 + j, cs, act, dg);
    grid.sync();
    if (t == 0) break;
    const float* drow = dg + (t * B + b) * G;
    float acc = 0.f;
#pragma unroll 8
    for (int q = 0; q < G; ++q) acc = fmaf(drow[q], wc[q * U + j], acc);
    dh_rec = acc;
  }
}

// Second form of both loops: what the first form's figures pointed at. Operands are staged
// with cp.async (16 bytes per copy, every copy of a chunk in flight at once, no registers),
// shared rows are padded by 4 floats (float4-aligned, consecutive rows 4 banks apart), and the
// dot products read float4s: per 4 k a warp issues 2 wavefronts for h and 1 per gate for W,
// against 5 per k in the first form.
constexpr int kPad = 4;

__device__ __forceinline__ void copy16(float* dst, const float* src) {
  __pipeline_memcpy_async(dst, src, 16);
}

template <int U>
__global__ void __launch_bounds__(B* U)
    persistent_forward2(const float* __restrict__ xp, const float* __restrict__ w, float* hs,
                        float* cs, float* act) {
  extern __shared__ __align__(16) float sm[];
  constexpr int HP = H + kPad, NT = B * U;
  float* ws = sm;               // [4U][HP]: row g*U + j is w's row g*H + u0 + j
  float* hp = sm + 4 * U * HP;  // [B][HP]
  const int u0 = blockIdx.x * U, tid = threadIdx.x, b = tid / U, j = tid % U;
  for (int i = tid; i < 4 * U * H / 4; i += NT) {
    const int r = i / (H / 4), k4 = i % (H / 4), g = r / U, jj = r % U;
    copy16(ws + r * HP + 4 * k4, w + (g * H + u0 + jj) * H + 4 * k4);
  }
  __pipeline_commit();
  cg::grid_group grid = cg::this_grid();
  float c = 0.f;
  for (int t = 0; t < T; ++t) {
    float pre[4];
#pragma unroll
    for (int g = 0; g < 4; ++g) pre[g] = xp[(t * B + b) * G + g * H + u0 + j];
    if (t > 0) {
      const float* h = hs + (t - 1) * B * H;
      for (int i = tid; i < B * H / 4; i += NT)
        copy16(hp + (i / (H / 4)) * HP + 4 * (i % (H / 4)), h + 4 * i);
      __pipeline_commit();
      __pipeline_wait_prior(0);
      __syncthreads();
      float acc[4] = {0.f, 0.f, 0.f, 0.f};
      const float4* h4 = reinterpret_cast<const float4*>(hp + b * HP);
#pragma unroll 4
      for (int k4 = 0; k4 < H / 4; ++k4) {
        const float4 hv = h4[k4];
#pragma unroll
        for (int g = 0; g < 4; ++g) {
          const float4 wv = reinterpret_cast<const float4*>(ws + (g * U + j) * HP)[k4];
          acc[g] = fmaf(hv.x, wv.x, acc[g]);
          acc[g] = fmaf(hv.y, wv.y, acc[g]);
          acc[g] = fmaf(hv.z, wv.z, acc[g]);
          acc[g] = fmaf(hv.w, wv.w, acc[g]);
        }
      }
#pragma unroll
      for (int g = 0; g < 4; ++g) pre[g] += acc[g];
      __syncthreads();
    }
    c = lstm_cell(pre, c, t, b, u0 + j, hs, cs, act);
    grid.sync();
  }
}

// dG_t's rows are staged in chunks of CH gate columns, two buffers: chunk q+1's copies are in
// flight while chunk q is summed.
template <int U>
__global__ void __launch_bounds__(B* U)
    persistent_backward2(const float* __restrict__ dh_top, const float* __restrict__ w,
                         const float* __restrict__ cs, const float* __restrict__ act, float* dg) {
  extern __shared__ __align__(16) float sm[];
  constexpr int CH = 128, CP = CH + kPad, NT = B * U, NCH = G / CH;
  float* wc = sm;                   // [U][G + kPad]: w's column u0 + j, as a row
  float* ds = sm + U * (G + kPad);  // [2][B][CP]
  const int u0 = blockIdx.x * U, tid = threadIdx.x, b = tid / U, j = tid % U;
  for (int i = tid; i < G * U; i += NT)
    wc[(i % U) * (G + kPad) + i / U] = w[(i / U) * H + u0 + i % U];
  __syncthreads();
  cg::grid_group grid = cg::this_grid();
  float dh_rec = 0.f, dc = 0.f;
  for (int t = T - 1; t >= 0; --t) {
    const int e = (t * B + b) * H + u0 + j;
    dc = lstm_cell_backward(dh_top[e] + dh_rec, dc, t, b, u0 + j, cs, act, dg);
    grid.sync();
    if (t == 0) break;
    const float* dgt = dg + t * B * G;
    auto stage = [&](int q, int buf) {
      float* dst = ds + buf * B * CP;
      for (int i = tid; i < B * CH / 4; i += NT) {
        const int r = i / (CH / 4), c4 = i % (CH / 4);
        copy16(dst + r * CP + 4 * c4, dgt + r * G + q * CH + 4 * c4);
      }
      __pipeline_commit();
    };
    stage(0, 0);
    float acc = 0.f;
    for (int q = 0; q < NCH; ++q) {
      if (q + 1 < NCH) {
        stage(q + 1, (q + 1) & 1);
        __pipeline_wait_prior(1);
      } else {
        __pipeline_wait_prior(0);
      }
      __syncthreads();
      const float4* d4 = reinterpret_cast<const float4*>(ds + (q & 1) * B * CP + b * CP);
      const float4* w4 = reinterpret_cast<const float4*>(wc + j * (G + kPad) + q * CH);
#pragma unroll 4
      for (int c4 = 0; c4 < CH / 4; ++c4) {
        const float4 dv = d4[c4], wv = w4[c4];
        acc = fmaf(dv.x, wv.x, acc);
        acc = fmaf(dv.y, wv.y, acc);
        acc = fmaf(dv.z, wv.z, acc);
        acc = fmaf(dv.w, wv.w, acc);
      }
      __syncthreads();  // the buffer is refilled two chunks later
    }
    dh_rec = acc;
  }
}

// Third form of the forward, the product split over k inside a thread-block cluster: cluster c
// owns units [cU, cU + U) (4U gate columns); its P blocks each take H / P of k, so a block copies
// only its k part of h_{t-1} (B x H / P floats: a quarter of form 2's L2 reads at P = 4) and
// keeps only that part of the 4U rows of W_hh. The P partial [B, 4U] tiles are summed through
// distributed shared memory, block p finishing rows [pB/P, (p+1)B/P) with the gate arithmetic
// (one thread per row and unit: its cell state stays in a register). The grid barrier is a
// counter and a generation word in global memory (every block is resident: checked on the host).
struct Barrier {
  unsigned count, generation;
};

__device__ __forceinline__ void grid_barrier(Barrier* bar, unsigned blocks) {
  __syncthreads();
  if (threadIdx.x == 0) {
    volatile unsigned* gen = &bar->generation;
    const unsigned g = *gen;
    __threadfence();
    if (atomicAdd(&bar->count, 1u) == blocks - 1) {
      bar->count = 0;
      __threadfence();
      atomicAdd(&bar->generation, 1u);
    } else {
      while (*gen == g) {
      }
    }
    __threadfence();
  }
  __syncthreads();
}

template <int U, int P>
__global__ void __launch_bounds__(256)
    persistent_forward3(const float* __restrict__ xp, const float* __restrict__ w, float* hs,
                        float* cs, float* act, Barrier* bar, int t_begin, int t_end) {
  constexpr int KP = H / P, KPP = KP + kPad, Q = 4 * U, NT = 256;
  static_assert((B / P) * U <= NT, "one finishing thread per row and unit");
  static_assert(B * Q % NT == 0 && (Q % (B * Q / NT)) == 0, "whole output runs per thread");
  constexpr int PER = B * Q / NT;  // outputs per thread: row b, columns [qg*PER, qg*PER + PER)
  extern __shared__ __align__(16) float sm[];
  float* ws = sm;              // [Q][KPP]
  float* hp = ws + Q * KPP;    // [B][KPP]
  float* part = hp + B * KPP;  // [B][Q]
  cg::cluster_group cluster = cg::this_cluster();
  const int p = static_cast<int>(cluster.block_rank());
  const int u0 = (blockIdx.x / P) * U, k0 = p * KP, tid = threadIdx.x;
  for (int i = tid; i < Q * KP / 4; i += NT) {
    const int q = i / (KP / 4), k4 = i % (KP / 4), g = q / U, j = q % U;
    copy16(ws + q * KPP + 4 * k4, w + (g * H + u0 + j) * H + k0 + 4 * k4);
  }
  __pipeline_commit();
  const int b = tid / (Q / PER), qg = tid % (Q / PER);
  // The finishing thread's element: row fb of this block's rows, unit fj.
  const bool finisher = tid < (B / P) * U;
  const int fb = p * (B / P) + tid / U, fj = tid % U;
  // Launched for steps [t_begin, t_end): all T at once (one barrier per step), or one step per
  // launch (the per-step form, c_{t-1} read back from cs).
  float c = finisher && t_begin > 0 ? cs[((t_begin - 1) * B + fb) * H + u0 + fj] : 0.f;
  for (int t = t_begin; t < t_end; ++t) {
    if (t > 0) {
      const float* h = hs + (t - 1) * B * H;
      for (int i = tid; i < B * KP / 4; i += NT) {
        const int r = i / (KP / 4), k4 = i % (KP / 4);
        copy16(hp + r * KPP + 4 * k4, h + r * H + k0 + 4 * k4);
      }
      __pipeline_commit();
      __pipeline_wait_prior(0);
      __syncthreads();
      float acc[PER] = {};
      const float4* h4 = reinterpret_cast<const float4*>(hp + b * KPP);
#pragma unroll 4
      for (int k4 = 0; k4 < KP / 4; ++k4) {
        const float4 hv = h4[k4];
#pragma unroll
        for (int o = 0; o < PER; ++o) {
          const float4 wv = reinterpret_cast<const float4*>(ws + (qg * PER + o) * KPP)[k4];
          acc[o] = fmaf(hv.x, wv.x, acc[o]);
          acc[o] = fmaf(hv.y, wv.y, acc[o]);
          acc[o] = fmaf(hv.z, wv.z, acc[o]);
          acc[o] = fmaf(hv.w, wv.w, acc[o]);
        }
      }
#pragma unroll
      for (int o = 0; o < PER; ++o) part[b * Q + qg * PER + o] = acc[o];
    }
    cluster.sync();  // every block's partial tile is written
    if (finisher) {
      float pre[4];
#pragma unroll
      for (int g = 0; g < 4; ++g) {
        float v = 0.f;
        if (t > 0)
          for (int r = 0; r < P; ++r) v += cluster.map_shared_rank(part, r)[fb * Q + g * U + fj];
        pre[g] = xp[(t * B + fb) * G + g * H + u0 + fj] + v;
      }
      c = lstm_cell(pre, c, t, fb, u0 + fj, hs, cs, act);
    }
    cluster.sync();  // the partial tiles are read before the next step overwrites them
    if (t + 1 < t_end) grid_barrier(bar, gridDim.x);
  }
}

// Baseline gate kernel: one thread per (b, u); pre = product + xp_t.
__global__ void gate_kernel(const float* __restrict__ prod, const float* __restrict__ xp_t,
                            const float* __restrict__ c_prev, float* h, float* c, float* act) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= B * H) return;
  const int b = i / H, u = i % H;
  float pre[4];
  for (int g = 0; g < 4; ++g)
    pre[g] = xp_t[b * G + g * H + u] + (prod ? prod[b * G + g * H + u] : 0.f);
  lstm_cell(pre, c_prev ? c_prev[i] : 0.f, 0, b, u, h, c, act);  // pointers already at step t
}

float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int main() {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> hxp(size_t(T) * B * G), hw(size_t(G) * H), hdt(size_t(T) * B * H);
  for (auto& v : hxp) v = 0.5f * nd(rng);
  for (auto& v : hw) v = nd(rng) / 16.f;  // ~ PyTorch's U(-1/sqrt(H), 1/sqrt(H)) scale
  for (auto& v : hdt) v = 0.01f * nd(rng);

  // float64 reference: forward, then the hidden-state chain backward.
  std::vector<double> rh(size_t(T) * B * H), rc(size_t(T) * B * H), ra(size_t(T) * B * G);
  for (int t = 0; t < T; ++t)
    for (int b = 0; b < B; ++b)
      for (int u = 0; u < H; ++u) {
        double pre[4];
        for (int g = 0; g < 4; ++g) {
          double s = hxp[(size_t(t) * B + b) * G + g * H + u];
          if (t > 0)
            for (int k = 0; k < H; ++k)
              s += rh[(size_t(t - 1) * B + b) * H + k] * hw[size_t(g * H + u) * H + k];
          pre[g] = s;
        }
        auto sg = [](double x) { return 1.0 / (1.0 + std::exp(-x)); };
        const double ig = sg(pre[0]), fg = sg(pre[1]), gg = std::tanh(pre[2]), og = sg(pre[3]);
        const size_t e = (size_t(t) * B + b) * H + u;
        const double cv = fg * (t > 0 ? rc[e - B * H] : 0.0) + ig * gg;
        rc[e] = cv;
        rh[e] = og * std::tanh(cv);
        const size_t a = (size_t(t) * B + b) * G + u;
        ra[a] = ig, ra[a + H] = fg, ra[a + 2 * H] = gg, ra[a + 3 * H] = og;
      }
  std::vector<double> rdg(size_t(T) * B * G), dhr(size_t(B) * H, 0.0), dcr(size_t(B) * H, 0.0);
  for (int t = T - 1; t >= 0; --t) {
    for (int b = 0; b < B; ++b)
      for (int u = 0; u < H; ++u) {
        const size_t e = (size_t(t) * B + b) * H + u, a = (size_t(t) * B + b) * G + u;
        const double ig = ra[a], fg = ra[a + H], gg = ra[a + 2 * H], og = ra[a + 3 * H];
        const double cp = t > 0 ? rc[e - B * H] : 0.0, tc = std::tanh(rc[e]);
        const double dh = hdt[e] + dhr[b * H + u];
        double& dc = dcr[b * H + u];
        dc += dh * og * (1 - tc * tc);
        rdg[a] = dc * gg * ig * (1 - ig);
        rdg[a + H] = dc * cp * fg * (1 - fg);
        rdg[a + 2 * H] = dc * ig * (1 - gg * gg);
        rdg[a + 3 * H] = dh * tc * og * (1 - og);
        dc *= fg;
      }
    for (int b = 0; b < B; ++b)
      for (int u = 0; u < H; ++u) {
        double s = 0;
        for (int q = 0; q < G; ++q) s += rdg[(size_t(t) * B + b) * G + q] * hw[size_t(q) * H + u];
        dhr[b * H + u] = s;
      }
  }

  float *xp, *w, *hs, *cs, *act, *dt, *dg, *prod;
  CK(cudaMalloc(&xp, hxp.size() * 4));
  CK(cudaMalloc(&w, hw.size() * 4));
  CK(cudaMalloc(&hs, size_t(T) * B * H * 4));
  CK(cudaMalloc(&cs, size_t(T) * B * H * 4));
  CK(cudaMalloc(&act, size_t(T) * B * G * 4));
  CK(cudaMalloc(&dt, hdt.size() * 4));
  CK(cudaMalloc(&dg, size_t(T) * B * G * 4));
  CK(cudaMalloc(&prod, size_t(B) * G * 4));
  CK(cudaMemcpy(xp, hxp.data(), hxp.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(w, hw.data(), hw.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dt, hdt.data(), hdt.size() * 4, cudaMemcpyHostToDevice));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  auto time = [&](auto&& go) {
    go();
    CK(cudaStreamSynchronize(s));
    std::vector<float> us;
    for (int r = 0; r < 20; ++r) {
      CK(cudaEventRecord(e0, s));
      go();
      CK(cudaEventRecord(e1, s));
      CK(cudaEventSynchronize(e1));
      float ms = 0;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      us.push_back(ms * 1000.f);
    }
    return median(us);
  };
  auto max_rel = [](const float* dptr, const std::vector<double>& ref) {
    std::vector<float> got(ref.size());
    CK(cudaMemcpy(got.data(), dptr, got.size() * 4, cudaMemcpyDeviceToHost));
    double err = 0, scale = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      err = std::max(err, std::fabs(got[i] - ref[i]));
      scale = std::max(scale, std::fabs(ref[i]));
    }
    return err / scale;
  };

  // Baseline: per step the Tiled product [B,H]x[H,G] (A = h_{t-1}, B = w^T: k contiguous) and
  // the gate kernel, as one graph.
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int t = 0; t < T; ++t) {
    const float* hprev = hs + (t - 1) * B * H;
    if (t > 0) {
      dev::SmallGemmArgs<float> p{};
      p.a = hprev;
      p.a_rs = H;
      p.a_cs = 1;
      p.b = w;
      p.b_rs = 1;
      p.b_cs = H;
      p.d = prod;
      p.ld_d = G;
      p.m = B;
      p.n = G;
      p.k = H;
      const int slices = 4, slice = H / slices;
      cudaLaunchConfig_t cfg{};
      cfg.gridDim = dim3(G / 64, B / 64, slices);
      cfg.blockDim = dim3(dev::kTileThreads);
      cfg.stream = s;
      cudaLaunchAttribute cl[1];
      cl[0].id = cudaLaunchAttributeClusterDimension;
      cl[0].val.clusterDim.x = 1;
      cl[0].val.clusterDim.y = 1;
      cl[0].val.clusterDim.z = slices;
      cfg.attrs = cl;
      cfg.numAttrs = 1;
      CK(cudaLaunchKernelEx(&cfg, dev::tile_gemm_kernel<64, 64, true, true>, p, slice, true));
    }
    gate_kernel<<<B * H / 256, 256, 0, s>>>(t > 0 ? prod : nullptr, xp + size_t(t) * B * G,
                                            t > 0 ? cs + (t - 1) * B * H : nullptr, hs + t * B * H,
                                            cs + t * B * H, act + t * B * G);
  }
  CK(cudaStreamEndCapture(s, &graph));
  CK(cudaGraphInstantiate(&exec, graph, 0));
  const float base_fwd = time([&] { CK(cudaGraphLaunch(exec, s)); });
  std::printf("forward, per-step kernels (graph of %d): %8.1f us  (max rel err %.2e)\n", 2 * T - 1,
              base_fwd, max_rel(hs, rh));

  // form 1: the first kernels; form 2: staged with cp.async, float4 dot products.
  auto run_persistent = [&](auto u_const, int form) {
    constexpr int U = decltype(u_const)::value;
    constexpr int HP = H + kPad;
    const void* fk =
        form == 1 ? (const void*)persistent_forward<U> : (const void*)persistent_forward2<U>;
    const void* bk =
        form == 1 ? (const void*)persistent_backward<U> : (const void*)persistent_backward2<U>;
    const size_t fsm = form == 1 ? (4 * U * H + B * (H + 1)) * 4 : (4 * U * HP + B * HP) * 4;
    const size_t bsm = form == 1 ? G * U * 4 : (U * (G + kPad) + 2 * B * (128 + kPad)) * 4;
    CK(cudaFuncSetAttribute(fk, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            static_cast<int>(fsm)));
    CK(cudaFuncSetAttribute(bk, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            static_cast<int>(bsm)));
    int per_sm = 0, per_sm_b = 0, sms = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, fk, B * U, fsm));
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm_b, bk, B * U, bsm));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
    if (std::min(per_sm, per_sm_b) * sms < H / U) {
      std::printf("form %d U=%d: %d blocks do not fit at once\n", form, U, H / U);
      return;
    }
    const float* cxp = xp;
    const float* cw = w;
    void* fargs[] = {(void*)&cxp, (void*)&cw, (void*)&hs, (void*)&cs, (void*)&act};
    CK(cudaMemset(hs, 0, size_t(T) * B * H * 4));
    const float fwd =
        time([&] { CK(cudaLaunchCooperativeKernel(fk, dim3(H / U), dim3(B * U), fargs, fsm, s)); });
    const double ferr = max_rel(hs, rh);
    const float* cdt = dt;
    const float* ccs = cs;
    const float* cact = act;
    void* bargs[] = {(void*)&cdt, (void*)&cw, (void*)&ccs, (void*)&cact, (void*)&dg};
    CK(cudaMemset(dg, 0, size_t(T) * B * G * 4));
    const float bwd =
        time([&] { CK(cudaLaunchCooperativeKernel(bk, dim3(H / U), dim3(B * U), bargs, bsm, s)); });
    std::printf(
        "form %d U=%d (%3d blocks of %3d): forward %7.1f us (rel err %.2e), backward chain "
        "%7.1f us (rel err %.2e)\n",
        form, U, H / U, B * U, fwd, ferr, bwd, max_rel(dg, rdg));
  };
  // Form 3: U units per cluster of P blocks.
  Barrier* bar;
  CK(cudaMalloc(&bar, sizeof(Barrier)));
  CK(cudaMemset(bar, 0, sizeof(Barrier)));
  auto run_form3 = [&](auto u_const, auto p_const) {
    constexpr int U = decltype(u_const)::value, P = decltype(p_const)::value;
    constexpr int KPP = H / P + kPad, Q = 4 * U;
    auto* k = persistent_forward3<U, P>;
    const size_t smem = (Q * KPP + B * KPP + B * Q) * 4;
    CK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize,
                            static_cast<int>(smem)));
    if (P > 8) CK(cudaFuncSetAttribute(k, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    const int blocks = H / U * P;
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(blocks);
    cfg.blockDim = dim3(256);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute cl[1];
    cl[0].id = cudaLaunchAttributeClusterDimension;
    cl[0].val.clusterDim.x = P;
    cl[0].val.clusterDim.y = 1;
    cl[0].val.clusterDim.z = 1;
    cfg.attrs = cl;
    cfg.numAttrs = 1;
    int clusters = 0;
    CK(cudaOccupancyMaxActiveClusters(&clusters, k, &cfg));
    if (clusters * P < blocks) {
      std::printf("form 3 U=%d P=%d: %d blocks do not fit at once (%d clusters)\n", U, P, blocks,
                  clusters);
      return;
    }
    CK(cudaMemset(hs, 0, size_t(T) * B * H * 4));
    const float* cxp = xp;
    const float* cw = w;
    const float fwd =
        time([&] { CK(cudaLaunchKernelEx(&cfg, k, cxp, cw, hs, cs, act, bar, 0, T)); });
    std::printf("form 3 U=%d P=%d (%3d blocks): forward %7.1f us (rel err %.2e)\n", U, P, blocks,
                fwd, max_rel(hs, rh));
    // The same body as one kernel per time step in a CUDA graph: the product and the cell update
    // fused, no grid barrier (what a GEMM with a generated epilogue would give per step).
    CK(cudaMemset(hs, 0, size_t(T) * B * H * 4));
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int t = 0; t < T; ++t)
      CK(cudaLaunchKernelEx(&cfg, k, cxp, cw, hs, cs, act, bar, t, t + 1));
    CK(cudaStreamEndCapture(s, &graph));
    CK(cudaGraphInstantiate(&exec, graph, 0));
    const float per_step = time([&] { CK(cudaGraphLaunch(exec, s)); });
    std::printf(
        "form 3 U=%d P=%d per-step launches (graph of %d): forward %7.1f us (rel err %.2e)\n", U, P,
        T, per_step, max_rel(hs, rh));
    CK(cudaGraphExecDestroy(exec));
    CK(cudaGraphDestroy(graph));
  };
  run_form3(std::integral_constant<int, 8>{}, std::integral_constant<int, 4>{});
  run_form3(std::integral_constant<int, 8>{}, std::integral_constant<int, 2>{});
  run_form3(std::integral_constant<int, 4>{}, std::integral_constant<int, 4>{});
  run_form3(std::integral_constant<int, 16>{}, std::integral_constant<int, 8>{});
  run_form3(std::integral_constant<int, 4>{}, std::integral_constant<int, 2>{});
  for (int form : {2, 1}) {
    run_persistent(std::integral_constant<int, 1>{}, form);
    run_persistent(std::integral_constant<int, 2>{}, form);
    run_persistent(std::integral_constant<int, 4>{}, form);
    run_persistent(std::integral_constant<int, 8>{}, form);
  }
  return 0;
}
