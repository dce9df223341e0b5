// The fused attention rows on tensor cores, for half and bfloat16 storage (core/ops.yaml "fused
// attention"; float and double take the SIMT rows of attention.cu). The blocks split the work
// as the SIMT rows do: a block takes a 64-row tile of its side (queries; keys for
// attention_backward_kv) against the other side streamed through shared memory in 64-row
// tiles, and causal tiles wholly above the diagonal are never loaded. Inside a block each of
// the four warps owns 16 rows, and every product is mma.sync m16n8k16 with float accumulation:
// - scores s = A B^T read from shared tiles with ldmatrix (B's rows are the columns of the
//   product, which is the "col" operand layout as stored);
// - products P B (the output, dq, dk, dv) take P straight from the score accumulators, rounded
//   to the storage type: the accumulator layout of two neighbouring 8-column tiles is the
//   m16n8k16 A-operand layout, so P never goes through shared memory. B is read with
//   ldmatrix.trans.
// Softmax arithmetic stays in float. Scores are scaled by scale * log2(e) after the product, so
// each probability is one exp2, and the four rows form a score the same way: the backward
// rows' exp2(s - lse) equal the forward's probabilities up to the last rounding.
//
// Head sizes pad to D = 32, 64 or 128 with zeros, which add nothing to a dot product. Tiles
// are [64][D + 8] 16-bit elements: the 16-byte pad puts the eight rows of one ldmatrix in
// distinct banks.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/launch_util.h"
#include "kernels/cuda/runtime.h"

namespace ember::kernels::cuda::attn {
namespace {

template <int D>
constexpr int kPitch = D + 8;  // elements per row of a shared tile

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Four 8x8 matrices of 16-bit elements; lanes 8i .. 8i + 7 give the row addresses of matrix i.
__device__ __forceinline__ void ldsm4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldsm4_t(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p)));
}

// c += a b for a 16x16 A (row-major fragment), a 16x8 B (column-major), float c.
template <class T>
__device__ __forceinline__ void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0,
                                    uint32_t b1) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  } else {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, "
        "{%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
}

// Two floats rounded to T, the first in the low half (the lower column of a fragment pair).
template <class T>
__device__ __forceinline__ uint32_t pack(float lo, float hi) {
  uint32_t u;
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    memcpy(&u, &v, 4);
  } else {
    const __half2 v = __floats2half2_rn(lo, hi);
    memcpy(&u, &v, 4);
  }
  return u;
}

// Columns e, e + 1 of a result row of E elements (a pair store where the row holds both).
template <class T>
__device__ __forceinline__ void store_pair(T* row, int e, int E, float x, float y) {
  if (e + 1 < E && E % 2 == 0) {
    const uint32_t u = pack<T>(x, y);
    memcpy(row + e, &u, 4);
    return;
  }
  if (e < E) row[e] = dev::from_acc<T, float>(x);
  if (e + 1 < E) row[e + 1] = dev::from_acc<T, float>(y);
}

// Rows [r0, r0 + kTile) of an operand (row pitch `pitch` elements) into a [kTile][kPitch<D>]
// tile as raw 16-bit words, zeros past `rows` and past the head size E. A thread's chunks of 8
// are all loaded before any is stored, so their memory latencies overlap.
template <int D>
__device__ __forceinline__ void load_tile(uint16_t* dst, const uint16_t* src, int64_t pitch, int r0,
                                          int rows, int E, bool aligned16) {
  constexpr int kChunks = D / 8;  // per row
  constexpr int kPer = kTile * kChunks / kThreads;
  uint4 x[kPer];
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int c = threadIdx.x + i * kThreads, r = c / kChunks, e0 = c % kChunks * 8;
    const bool row_in = r0 + r < rows;
    const uint16_t* s = src + static_cast<int64_t>(r0 + r) * pitch + e0;
    if (row_in && aligned16 && e0 + 8 <= E) {
      x[i] = __ldg(reinterpret_cast<const uint4*>(s));
    } else {
      uint32_t w[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const uint32_t lo = row_in && e0 + 2 * u < E ? s[2 * u] : 0u;
        const uint32_t hi = row_in && e0 + 2 * u + 1 < E ? s[2 * u + 1] : 0u;
        w[u] = lo | hi << 16;
      }
      x[i] = make_uint4(w[0], w[1], w[2], w[3]);
    }
  }
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    const int c = threadIdx.x + i * kThreads;
    *reinterpret_cast<uint4*>(dst + c / kChunks * kPitch<D> + c % kChunks * 8) = x[i];
  }
}

// s = A B^T: this warp's 16 rows of A (a shared tile from its first row) against the 64 rows of
// the shared tile B. s[n][*] is the accumulator fragment of columns 8n .. 8n + 7: elements 0, 1
// in row lane / 4, columns 2 (lane % 4) + {0, 1}; elements 2, 3 the same columns 8 rows down.
template <class T, int D>
__device__ __forceinline__ void scores(const uint16_t* A, const uint16_t* B, float (&s)[8][4]) {
  const int lane = threadIdx.x % 32, mi = lane / 8, r8 = lane % 8;
#pragma unroll
  for (int n = 0; n < 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e) s[n][e] = 0.f;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    uint32_t a[4];  // rows 0-7 / 8-15 by matrix parity, k 0-7 / 8-15 by matrix half
    ldsm4(a, A + ((mi % 2) * 8 + r8) * kPitch<D> + kk * 16 + (mi / 2) * 8);
#pragma unroll
    for (int np = 0; np < 4; ++np) {
      uint32_t b[4];  // column tiles 2 np, 2 np + 1; k 0-7 / 8-15 by matrix parity
      ldsm4(b, B + ((2 * np + mi / 2) * 8 + r8) * kPitch<D> + kk * 16 + (mi % 2) * 8);
      mma<T>(s[2 * np], a, b[0], b[1]);
      mma<T>(s[2 * np + 1], a, b[2], b[3]);
    }
  }
}

// acc += P B: P this warp's 16 x 64 block in the accumulator layout of scores(), B a [64][D]
// shared tile (its rows the reduction index). acc[d] holds columns 8d .. 8d + 7 as s does.
template <class T, int D>
__device__ __forceinline__ void accumulate(const float (&P)[8][4], const uint16_t* B,
                                           float (&acc)[D / 8][4]) {
  const int lane = threadIdx.x % 32, mi = lane / 8, r8 = lane % 8;
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint32_t a[4] = {pack<T>(P[2 * j][0], P[2 * j][1]), pack<T>(P[2 * j][2], P[2 * j][3]),
                           pack<T>(P[2 * j + 1][0], P[2 * j + 1][1]),
                           pack<T>(P[2 * j + 1][2], P[2 * j + 1][3])};
#pragma unroll
    for (int dp = 0; dp < D / 16; ++dp) {
      uint32_t b[4];  // k rows 16 j + 0-7 / 8-15 by matrix parity; column tiles 2 dp, 2 dp + 1
      ldsm4_t(b, B + (16 * j + (mi % 2) * 8 + r8) * kPitch<D> + (2 * dp + mi / 2) * 8);
      mma<T>(acc[2 * dp], a, b[0], b[1]);
      mma<T>(acc[2 * dp + 1], a, b[2], b[3]);
    }
  }
}

// Over the four lanes holding one row of an accumulator fragment.
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

template <int D>
__device__ __forceinline__ uint16_t* tile_at(unsigned char* smem, int i) {
  return reinterpret_cast<uint16_t*>(smem) + i * kTile * kPitch<D>;
}

// attention (kLseOnly false: writes the output) and attention_lse (kLseOnly: the row
// logsumexp, natural log, float).
template <class T, int D, bool kLseOnly>
__global__ void __launch_bounds__(kThreads) mma_forward(Params p) {
  extern __shared__ __align__(16) unsigned char attention_mma_smem[];
  uint16_t* Qs = tile_at<D>(attention_mma_smem, 0);
  uint16_t* Ks = tile_at<D>(attention_mma_smem, 1);
  uint16_t* Vs = tile_at<D>(attention_mma_smem, 2);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, t = lane % 4;
  const TileOf at = tile_of(p, p.causal);
  const int m0 = at.t * kTile;
  const int row0 = m0 + warp * 16 + lane / 4;  // this thread's rows: row0, row0 + 8
  const uint16_t* k = batch_rows<uint16_t>(p.k, at.b, p.batch2);
  const uint16_t* v = kLseOnly ? nullptr : batch_rows<uint16_t>(p.v, at.b, p.batch2);
  load_tile<D>(Qs, batch_rows<uint16_t>(p.q, at.b, p.batch2), p.q.row, m0, p.L, p.E, p.aligned16);
  const float scale2 = static_cast<float>(p.scale2);
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f}, acc[D / 8][4];
#pragma unroll
  for (int d = 0; d < D / 8; ++d)
#pragma unroll
    for (int e = 0; e < 4; ++e) acc[d][e] = 0.f;
  const int n_end = p.causal ? min(p.S, m0 + kTile) : p.S;
  for (int n0 = 0; n0 < n_end; n0 += kTile) {
    __syncthreads();  // the previous tile's reads are done
    load_tile<D>(Ks, k, p.k.row, n0, p.S, p.E, p.aligned16);
    if (!kLseOnly) load_tile<D>(Vs, v, p.v.row, n0, p.S, p.E, p.aligned16);
    __syncthreads();
    float s[8][4];
    scores<T, D>(Qs + warp * 16 * kPitch<D>, Ks, s);
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = n0 + 8 * n + 2 * t + (e & 1), row = row0 + (e / 2) * 8;
        const float x = col >= p.S || (p.causal && col > row) ? -INFINITY : s[n][e] * scale2;
        s[n][e] = x;
        mx[e / 2] = fmaxf(mx[e / 2], x);
      }
    float base[2], alpha[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float mnew = fmaxf(m[h], quad_max(mx[h]));
      // A row that has seen no key yet keeps m = -inf; its terms must be 0, not exp2(NaN).
      base[h] = mnew == -INFINITY ? 0.f : mnew;
      alpha[h] = exp2f(m[h] - base[h]);
      m[h] = mnew;
      l[h] *= alpha[h];  // this thread's part of the row sum; the quad's parts add at the end
    }
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[n][e] = exp2f(s[n][e] - base[e / 2]);
        l[e / 2] += s[n][e];
      }
    if (!kLseOnly) {
#pragma unroll
      for (int d = 0; d < D / 8; ++d)
#pragma unroll
        for (int e = 0; e < 4; ++e) acc[d][e] *= alpha[e / 2];
      accumulate<T, D>(s, Vs, acc);
    }
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + 8 * h;
    const float sum = quad_sum(l[h]);
    if (row >= p.L) continue;
    if (kLseOnly) {
      if (t == 0)
        static_cast<float*>(p.out)[at.b * p.L + row] =
            sum > 0.f ? (m[h] + log2f(sum)) * static_cast<float>(kLn2) : -INFINITY;
      continue;
    }
    const float inv = sum > 0.f ? 1.f / sum : 0.f;
    T* o = static_cast<T*>(p.out) + result_row(p, at.b, row, p.L) * p.E;
#pragma unroll
    for (int d = 0; d < D / 8; ++d)
      store_pair(o, 8 * d + 2 * t, p.E, acc[d][2 * h] * inv, acc[d][2 * h + 1] * inv);
  }
}

// attention_backward_query: dq_i = scale sum_j P_ij (dO_i . v_j - delta_i) k_j.
template <class T, int D>
__global__ void __launch_bounds__(kThreads) mma_backward_query(Params p) {
  extern __shared__ __align__(16) unsigned char attention_mma_smem[];
  uint16_t* Qs = tile_at<D>(attention_mma_smem, 0);
  uint16_t* Gs = tile_at<D>(attention_mma_smem, 1);
  uint16_t* Ks = tile_at<D>(attention_mma_smem, 2);
  uint16_t* Vs = tile_at<D>(attention_mma_smem, 3);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, t = lane % 4;
  const TileOf at = tile_of(p, p.causal);
  const int m0 = at.t * kTile;
  const int row0 = m0 + warp * 16 + lane / 4;
  const uint16_t* k = batch_rows<uint16_t>(p.k, at.b, p.batch2);
  const uint16_t* v = batch_rows<uint16_t>(p.v, at.b, p.batch2);
  load_tile<D>(Qs, batch_rows<uint16_t>(p.q, at.b, p.batch2), p.q.row, m0, p.L, p.E, p.aligned16);
  load_tile<D>(Gs, batch_rows<uint16_t>(p.go, at.b, p.batch2), p.go.row, m0, p.L, p.E, p.aligned16);
  const float scale2 = static_cast<float>(p.scale2);
  float lse2[2], dl[2], dq[D / 8][4];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + 8 * h;
    const bool in = row < p.L;
    lse2[h] = in ? static_cast<const float*>(p.lse)[at.b * p.L + row] * float(kLog2e) : 0.f;
    dl[h] = in ? static_cast<const float*>(p.delta)[at.b * p.L + row] : 0.f;
  }
#pragma unroll
  for (int d = 0; d < D / 8; ++d)
#pragma unroll
    for (int e = 0; e < 4; ++e) dq[d][e] = 0.f;
  const int n_end = p.causal ? min(p.S, m0 + kTile) : p.S;
  for (int n0 = 0; n0 < n_end; n0 += kTile) {
    __syncthreads();
    load_tile<D>(Ks, k, p.k.row, n0, p.S, p.E, p.aligned16);
    load_tile<D>(Vs, v, p.v.row, n0, p.S, p.E, p.aligned16);
    __syncthreads();
    float s[8][4], dp[8][4];
    scores<T, D>(Qs + warp * 16 * kPitch<D>, Ks, s);
    scores<T, D>(Gs + warp * 16 * kPitch<D>, Vs, dp);
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = n0 + 8 * n + 2 * t + (e & 1), row = row0 + (e / 2) * 8;
        const bool seen = row < p.L && col < p.S && !(p.causal && col > row);
        const float pr = seen ? exp2f(s[n][e] * scale2 - lse2[e / 2]) : 0.f;
        s[n][e] = pr * (dp[n][e] - dl[e / 2]);
      }
    accumulate<T, D>(s, Ks, dq);
  }
  const float scale = static_cast<float>(p.scale);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int row = row0 + 8 * h;
    if (row >= p.L) continue;
    T* o = static_cast<T*>(p.out) + result_row(p, at.b, row, p.L) * p.E;
#pragma unroll
    for (int d = 0; d < D / 8; ++d)
      store_pair(o, 8 * d + 2 * t, p.E, dq[d][2 * h] * scale, dq[d][2 * h + 1] * scale);
  }
}

// attention_backward_kv: for key j, dv_j = sum_i P_ij dO_i and dk_j = scale sum_i dS_ij q_i
// over the queries that see it; written as [2, ..., S, E] (dk, then dv).
template <class T, int D>
__global__ void __launch_bounds__(kThreads) mma_backward_kv(Params p) {
  extern __shared__ __align__(16) unsigned char attention_mma_smem[];
  uint16_t* Ks = tile_at<D>(attention_mma_smem, 0);
  uint16_t* Vs = tile_at<D>(attention_mma_smem, 1);
  uint16_t* Qs = tile_at<D>(attention_mma_smem, 2);
  uint16_t* Gs = tile_at<D>(attention_mma_smem, 3);
  float* lse2 = reinterpret_cast<float*>(tile_at<D>(attention_mma_smem, 4));
  float* dl = lse2 + kTile;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, t = lane % 4;
  const TileOf at = tile_of(p, false);
  const int n0 = at.t * kTile;
  const int key0 = n0 + warp * 16 + lane / 4;  // this thread's keys: key0, key0 + 8
  const uint16_t* q = batch_rows<uint16_t>(p.q, at.b, p.batch2);
  const uint16_t* go = batch_rows<uint16_t>(p.go, at.b, p.batch2);
  load_tile<D>(Ks, batch_rows<uint16_t>(p.k, at.b, p.batch2), p.k.row, n0, p.S, p.E, p.aligned16);
  load_tile<D>(Vs, batch_rows<uint16_t>(p.v, at.b, p.batch2), p.v.row, n0, p.S, p.E, p.aligned16);
  const float scale2 = static_cast<float>(p.scale2);
  float dk[D / 8][4], dv[D / 8][4];
#pragma unroll
  for (int d = 0; d < D / 8; ++d)
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[d][e] = dv[d][e] = 0.f;
  // Queries before the key tile's first row see none of it when causal.
  for (int m0 = p.causal ? n0 : 0; m0 < p.L; m0 += kTile) {
    __syncthreads();
    load_tile<D>(Qs, q, p.q.row, m0, p.L, p.E, p.aligned16);
    load_tile<D>(Gs, go, p.go.row, m0, p.L, p.E, p.aligned16);
    if (threadIdx.x < kTile) {
      const int r = threadIdx.x;
      const bool in = m0 + r < p.L;
      lse2[r] = in ? static_cast<const float*>(p.lse)[at.b * p.L + m0 + r] * float(kLog2e) : 0.f;
      dl[r] = in ? static_cast<const float*>(p.delta)[at.b * p.L + m0 + r] : 0.f;
    }
    __syncthreads();
    float s[8][4], dp[8][4];  // [key][query]
    scores<T, D>(Ks + warp * 16 * kPitch<D>, Qs, s);
    scores<T, D>(Vs + warp * 16 * kPitch<D>, Gs, dp);
#pragma unroll
    for (int n = 0; n < 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int c = 8 * n + 2 * t + (e & 1), row = m0 + c, key = key0 + (e / 2) * 8;
        const bool seen = row < p.L && key < p.S && !(p.causal && key > row);
        const float pr = seen ? exp2f(s[n][e] * scale2 - lse2[c]) : 0.f;
        s[n][e] = pr;
        dp[n][e] = pr * (dp[n][e] - dl[c]);
      }
    accumulate<T, D>(s, Gs, dv);
    accumulate<T, D>(dp, Qs, dk);
  }
  T* out = static_cast<T*>(p.out);
  const int64_t plane = (gridDim.x / p.tiles) * static_cast<int64_t>(p.S) * p.E;  // dv's offset
  const float scale = static_cast<float>(p.scale);
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const int key = key0 + 8 * h;
    if (key >= p.S) continue;
    T* r = out + result_row(p, at.b, key, p.S) * p.E;
#pragma unroll
    for (int d = 0; d < D / 8; ++d) {
      store_pair(r, 8 * d + 2 * t, p.E, dk[d][2 * h] * scale, dk[d][2 * h + 1] * scale);
      store_pair(r + plane, 8 * d + 2 * t, p.E, dv[d][2 * h], dv[d][2 * h + 1]);
    }
  }
}

bool aligned16(const Operand& o) {
  return reinterpret_cast<uintptr_t>(o.p) % 16 == 0 && o.row % 8 == 0 && o.b1 % 8 == 0 &&
         o.b2 % 8 == 0;
}

template <class T, int D>
void run(const KernelCall& call, int dev) {
  int64_t blocks = 0;
  Params p = params_of(call, &blocks);
  p.aligned16 = aligned16(p.q) && aligned16(p.k) && (!p.v.p || aligned16(p.v)) &&
                (!p.go.p || aligned16(p.go));
  const size_t tile = sizeof(uint16_t) * kTile * kPitch<D>;
  switch (call.op) {
    case OpId::attention:
      launch<mma_forward<T, D, false>>(p, blocks, 3 * tile, dev);
      break;
    case OpId::attention_lse:
      launch<mma_forward<T, D, true>>(p, blocks, 2 * tile, dev);
      break;
    case OpId::attention_backward_query:
      launch<mma_backward_query<T, D>>(p, blocks, 4 * tile, dev);
      break;
    default:
      launch<mma_backward_kv<T, D>>(p, blocks, 4 * tile + 2 * kTile * sizeof(float), dev);
      break;
  }
  check_launch(op_name(call.op).data());
}

template <class T>
void run_head(const KernelCall& call, int64_t E, int dev) {
  if (E <= 32) {
    run<T, 32>(call, dev);
  } else if (E <= 64) {
    run<T, 64>(call, dev);
  } else {
    run<T, 128>(call, dev);
  }
}

}  // namespace

void attention_mma(const KernelCall& call) {
  const Tensor& q = call.inputs[is_backward(call.op) ? 1 : 0];
  const int64_t E = q.size(-1);
  EMBER_CHECK(E <= kMmaMaxHead, op_name(call.op), ": the tensor-core rows take head sizes up to ",
              kMmaMaxHead, ", got ", E);
  const int dev = call.out.device().index;
  if (q.dtype() == kBFloat16) {
    run_head<__nv_bfloat16>(call, E, dev);
  } else {
    EMBER_CHECK(q.dtype() == kFloat16, op_name(call.op), ": the tensor-core rows take float16 or ",
                "bfloat16, got ", dtype_name(q.dtype()));
    run_head<__half>(call, E, dev);
  }
}

}  // namespace ember::kernels::cuda::attn
