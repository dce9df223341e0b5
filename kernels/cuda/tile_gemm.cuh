#pragma once
// The Tiled small GEMM (kernels/cuda/small_gemm.h), float32: for products of a few tens of
// MFLOP, such as the seed MLP's [64,784]x[784,512] forward and its weight gradients, where
// cuBLASLt's kernels run 8 output tiles on 132 SMs or pay a fixed cost larger than the work.
//
// Each 256-thread block computes a BM x BN tile of D over one slice of k. It stages a chunk of
// up to KCH k of A and B in shared memory with every global load issued before the first is
// used (float4 along the contiguous dimension where rows are 16-byte aligned), so a slice costs
// about one memory latency, not one per step of k. With S > 1 slices the S blocks of a tile form
// a thread-block cluster (sm_90): after the products each block leaves its partial tile in its
// shared memory, and the cluster sums the S partials through distributed shared memory, block r
// finishing rows r*BM/S.. of the tile. No workspace, no atomics, nothing to reset between
// launches or graph replays.
//
// Order of the sum (fixed by the shapes and the device's plan, never by timing): within a slice,
// acc = fma(A[i,k], B[k,j], acc) for k ascending; then v = ((0 + P_0) + P_1) + ... + P_{S-1}
// over the slices; then the epilogue of small_gemm_epilogue (bias added with one rounding, then
// Ember's relu). Eager mm and the JIT's GEMM lowering launch the same plan for the same shapes
// and device, so they agree bit for bit.
#include <cooperative_groups.h>

#include <cstdint>

#include "kernels/cuda/small_gemm.cuh"

namespace ember::kernels::cuda::dev {

inline constexpr int kTileThreads = 256;  // 16 x 16: thread (tx, ty) owns outputs ty+16i, tx+16j

template <int BM, int BN>
struct TileShape {
  static constexpr int KCH = (BM + BN) <= 64 ? 128 : 64;          // k per staged chunk
  static constexpr int AS = KCH * (BM + 1), BS = KCH * (BN + 1);  // +1: no bank conflicts
  static constexpr int kSmem = (AS + BS) > BM* BN ? (AS + BS) : BM* BN;
  static constexpr int AQ = BM * KCH / 4, BQ = BN * KCH / 4;  // float4 units per chunk
  static constexpr int AI = (AQ + kTileThreads - 1) / kTileThreads;
  static constexpr int BI = (BQ + kTileThreads - 1) / kTileThreads;
};

// Loads the quad q of an R x KCH chunk of operand X (R = BM for A, BN for B) into `v`: four
// consecutive elements along X's contiguous dimension (k when KC, else the row index r), zeros
// outside the matrix or the chunk. X(r, k) at x[r * rs + k * ks].
template <int R, int KCH, bool KC>
__device__ __forceinline__ float4 tile_load_quad(const float* __restrict__ x, int64_t rs,
                                                 int64_t ks, int q, int r0, int rows, int k0,
                                                 int kn, bool vec) {
  float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
  float* e = &v.x;
  const int r = KC ? q / (KCH / 4) : (q % (R / 4)) * 4;
  const int kk = KC ? (q % (KCH / 4)) * 4 : q / (R / 4);
  const int gr = r0 + r;
  if (KC) {
    if (gr >= rows) return v;
    const float* p = x + gr * rs + static_cast<int64_t>(k0 + kk) * ks;
    if (vec && kk + 3 < kn) return *reinterpret_cast<const float4*>(p);
#pragma unroll
    for (int j = 0; j < 4; ++j) e[j] = kk + j < kn ? p[j * ks] : 0.f;
  } else {
    if (kk >= kn) return v;
    const float* p = x + static_cast<int64_t>(gr) * rs + static_cast<int64_t>(k0 + kk) * ks;
    if (vec && gr + 3 < rows) return *reinterpret_cast<const float4*>(p);
#pragma unroll
    for (int j = 0; j < 4; ++j) e[j] = gr + j < rows ? p[j * rs] : 0.f;
  }
  return v;
}

// Stores a quad loaded by tile_load_quad into the k-major staging array xs[k][r].
template <int R, int KCH, bool KC>
__device__ __forceinline__ void tile_store_quad(float (*xs)[R + 1], int q, const float4& v) {
  const float* e = &v.x;
  if (KC) {
    const int r = q / (KCH / 4), kk = (q % (KCH / 4)) * 4;
#pragma unroll
    for (int j = 0; j < 4; ++j) xs[kk + j][r] = e[j];
  } else {
    const int r = (q % (R / 4)) * 4, kk = q / (R / 4);
#pragma unroll
    for (int j = 0; j < 4; ++j) xs[kk][r + j] = e[j];
  }
}

// AK: A's k is contiguous (a_cs == 1), else its rows index is (a_rs == 1). BK: B's k is
// contiguous (b_rs == 1), else its column index is (b_cs == 1). `slice`: k per gridDim.z slice,
// a multiple of 4; gridDim.z is the cluster's size (1: no cluster). vec: float4 loads allowed
// (every row start along the contiguous dimension 16-byte aligned).
template <int BM, int BN, bool AK, bool BK>
__global__ void __launch_bounds__(kTileThreads)
    tile_gemm_kernel(const SmallGemmArgs<float> p, int slice, bool vec) {
  using C = TileShape<BM, BN>;
  constexpr int TM = BM / 16, TN = BN / 16;
  __shared__ float smem[C::kSmem];
  auto* As = reinterpret_cast<float(*)[BM + 1]>(smem);
  auto* Bs = reinterpret_cast<float(*)[BN + 1]>(smem + C::AS);
  const int t = threadIdx.x, tx = t % 16, ty = t / 16;
  const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
  const int M = static_cast<int>(p.m), N = static_cast<int>(p.n), K = static_cast<int>(p.k);
  const int k_begin = blockIdx.z * slice, k_end = min(K, k_begin + slice);
  // A as rows m (stride a_rs) by k (stride a_cs); B as rows n (stride b_cs) by k (stride b_rs).
  float acc[TM][TN] = {};
  for (int k0 = k_begin; k0 < k_end; k0 += C::KCH) {
    const int kn = min(C::KCH, k_end - k0);
    float4 ra[C::AI], rb[C::BI];
#pragma unroll
    for (int r = 0; r < C::AI; ++r) {
      const int q = t + kTileThreads * r;
      ra[r] = q < C::AQ ? tile_load_quad<BM, C::KCH, AK>(p.a, p.a_rs, p.a_cs, q, m0, M, k0, kn, vec)
                        : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int r = 0; r < C::BI; ++r) {
      const int q = t + kTileThreads * r;
      rb[r] = q < C::BQ ? tile_load_quad<BN, C::KCH, BK>(p.b, p.b_cs, p.b_rs, q, n0, N, k0, kn, vec)
                        : make_float4(0.f, 0.f, 0.f, 0.f);
    }
#pragma unroll
    for (int r = 0; r < C::AI; ++r)
      if (t + kTileThreads * r < C::AQ)
        tile_store_quad<BM, C::KCH, AK>(As, t + kTileThreads * r, ra[r]);
#pragma unroll
    for (int r = 0; r < C::BI; ++r)
      if (t + kTileThreads * r < C::BQ)
        tile_store_quad<BN, C::KCH, BK>(Bs, t + kTileThreads * r, rb[r]);
    __syncthreads();
#pragma unroll 4
    for (int kk = 0; kk < kn; ++kk) {
      float av[TM], bv[TN];
#pragma unroll
      for (int i = 0; i < TM; ++i) av[i] = As[kk][ty + 16 * i];
#pragma unroll
      for (int j = 0; j < TN; ++j) bv[j] = Bs[kk][tx + 16 * j];
#pragma unroll
      for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
    __syncthreads();
  }
  auto finish = [&](int gm, int gn, float v) {
    p.d[static_cast<int64_t>(gm) * p.ld_d + gn] = small_gemm_epilogue(v, p.bias, gn, p.relu);
  };
  if (gridDim.z == 1) {
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
      for (int j = 0; j < TN; ++j) {
        const int gm = m0 + ty + 16 * i, gn = n0 + tx + 16 * j;
        if (gm < M && gn < N) finish(gm, gn, acc[i][j]);
      }
    return;
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  // The staging arrays are free after the last __syncthreads: the partial tile goes there.
  namespace cg = cooperative_groups;
  float* P = smem;
#pragma unroll
  for (int i = 0; i < TM; ++i)
#pragma unroll
    for (int j = 0; j < TN; ++j) P[(ty + 16 * i) * BN + tx + 16 * j] = acc[i][j];
  cg::cluster_group cluster = cg::this_cluster();
  cluster.sync();
  const int S = static_cast<int>(gridDim.z);
  const int rows = (BM + S - 1) / S;
  const int r0 = static_cast<int>(cluster.block_rank()) * rows;
  for (int i = t; i < rows * BN; i += kTileThreads) {
    const int mm = r0 + i / BN, nn = i % BN;
    if (mm >= BM) break;
    float v = 0.f;
    for (int q = 0; q < S; ++q) v = add_rn(v, cluster.map_shared_rank(P, q)[mm * BN + nn]);
    const int gm = m0 + mm, gn = n0 + nn;
    if (gm < M && gn < N) finish(gm, gn, v);
  }
  cluster.sync();  // every block's partial stays alive until the cluster has read it
#else
  __trap();  // the host plans S > 1 only on devices with clusters
#endif
}

}  // namespace ember::kernels::cuda::dev
