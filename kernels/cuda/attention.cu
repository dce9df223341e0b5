// The fused attention rows on CUDA (core/ops.yaml "fused attention") in SIMT arithmetic, for
// float and double storage (half and bfloat16 take the tensor-core rows, attention_mma.cu),
// flash-attention style:
// a block takes a 64-row tile of queries (keys, for attention_backward_kv) against the other
// side streamed through shared memory in 64-row tiles, so the [L, S] scores never reach memory.
// The forward keeps a running row maximum and sum (online softmax); the backward rows
// recompute the probabilities from the row logsumexp. Causal tiles wholly above the diagonal are
// never loaded. float storage computes in float, double (head sizes up to 64) in double. Scores
// are kept in base 2 (the queries are scaled by scale * log2(e)) so each exponential is one exp2.
//
// Work split: 128 threads; thread (tr, tc) = (tid / 8, tid % 8) owns rows 4 tr .. 4 tr + 3 of a
// tile and columns tc + 8 j, so a row's 8 owners are neighbouring lanes (row sums and maxima
// are three shuffles) and shared-memory reads are conflict-free: a row of A is broadcast,
// the 8 columns of B fall in distinct banks (row pitch D + 1).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <type_traits>

#include "kernels/cuda/attention_common.cuh"
#include "kernels/cuda/block_reduce.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/launch_util.h"
#include "kernels/cuda/runtime.h"

namespace ember::kernels::cuda {
namespace {

using attn::kLn2;
using attn::kLog2e;
using attn::kThreads;
using attn::kTile;
using attn::Params;
constexpr int kPitchP = kTile + 2;  // probability tiles: 4 row groups of a warp in distinct banks

// float64 storage computes in double, everything else in float.
template <class T>
using AccOf = std::conditional_t<std::is_same_v<T, double>, double, float>;
__device__ __forceinline__ float ex2(float x) { return exp2f(x); }
__device__ __forceinline__ double ex2(double x) { return exp2(x); }
__device__ __forceinline__ float lg2(float x) { return log2f(x); }
__device__ __forceinline__ double lg2(double x) { return log2(x); }
__device__ __forceinline__ float max_of(float a, float b) { return fmaxf(a, b); }
__device__ __forceinline__ double max_of(double a, double b) { return fmax(a, b); }
__device__ __forceinline__ float fma_of(float a, float b, float c) { return fmaf(a, b, c); }
__device__ __forceinline__ double fma_of(double a, double b, double c) { return fma(a, b, c); }

using attn::batch_rows;
using attn::result_row;
using attn::tile_of;
using attn::TileOf;

// Rows [r0, r0 + kTile) of an operand into a [kTile][D + 1] Acc tile, times `mul`; zeros past
// `rows` and past the head size E. A thread's elements are loaded in batches of 8 into
// registers before any is stored: the compiler cannot move a global load above a shared store it
// might alias, so element-by-element copying would wait out one memory latency per element.
template <class T, int D, class Acc>
__device__ __forceinline__ void load_tile(Acc* dst, const T* src, int64_t pitch, int r0, int rows,
                                          int E, std::type_identity_t<Acc> mul) {
  constexpr int kPer = kTile * D / kThreads;  // elements per thread
  constexpr int kBatch = 8;
  static_assert(kPer % kBatch == 0);
#pragma unroll 1
  for (int b0 = 0; b0 < kPer; b0 += kBatch) {
    Acc x[kBatch];
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int idx = threadIdx.x + (b0 + i) * kThreads, r = idx / D, e = idx % D;
      x[i] = r0 + r < rows && e < E
                 ? dev::to_acc<Acc>(src[static_cast<int64_t>(r0 + r) * pitch + e]) * mul
                 : Acc(0);
    }
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int idx = threadIdx.x + (b0 + i) * kThreads;
      dst[idx / D * (D + 1) + idx % D] = x[i];
    }
  }
}

// s[i][j] = A[4 tr + i] . B[tc + 8 j] over D, for [kTile][D + 1] tiles A and B.
template <int D, class Acc>
__device__ __forceinline__ void tile_dot(const Acc* A, const Acc* B, Acc (&s)[4][8]) {
  const int tr = threadIdx.x / 8, tc = threadIdx.x % 8;
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < 8; ++j) s[i][j] = Acc(0);
#pragma unroll 4
  for (int k = 0; k < D; ++k) {
    Acc a[4], b[8];
#pragma unroll
    for (int i = 0; i < 4; ++i) a[i] = A[(4 * tr + i) * (D + 1) + k];
#pragma unroll
    for (int j = 0; j < 8; ++j) b[j] = B[(tc + 8 * j) * (D + 1) + k];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < 8; ++j) s[i][j] = fma_of(a[i], b[j], s[i][j]);
  }
}

// acc[i][j] += sum_n P[4 tr + i][n] * V[n][tc + 8 j] for a [kTile][kPitchP] P and a
// [kTile][D + 1] V.
template <int D, class Acc>
__device__ __forceinline__ void tile_times(const Acc* P, const Acc* V, Acc (&acc)[4][D / 8]) {
  const int tr = threadIdx.x / 8, tc = threadIdx.x % 8;
#pragma unroll 4
  for (int n = 0; n < kTile; ++n) {
    Acc a[4], b[D / 8];
#pragma unroll
    for (int i = 0; i < 4; ++i) a[i] = P[(4 * tr + i) * kPitchP + n];
#pragma unroll
    for (int j = 0; j < D / 8; ++j) b[j] = V[n * (D + 1) + tc + 8 * j];
#pragma unroll
    for (int i = 0; i < 4; ++i)
#pragma unroll
      for (int j = 0; j < D / 8; ++j) acc[i][j] = fma_of(a[i], b[j], acc[i][j]);
  }
}

// Over a row's 8 owning lanes.
template <class Acc>
__device__ __forceinline__ Acc row_max(Acc x) {
#pragma unroll
  for (int m = 1; m < 8; m <<= 1) x = max_of(x, __shfl_xor_sync(0xffffffffu, x, m));
  return x;
}
template <class Acc>
__device__ __forceinline__ Acc row_sum(Acc x) {
#pragma unroll
  for (int m = 1; m < 8; m <<= 1) x += __shfl_xor_sync(0xffffffffu, x, m);
  return x;
}

// attention (kLseOnly false: writes the output) and attention_lse (kLseOnly: writes the row
// logsumexp, natural log, Acc).
template <class T, int D, bool kLseOnly>
__global__ void __launch_bounds__(kThreads) attention_forward(Params p) {
  extern __shared__ __align__(16) unsigned char attention_smem[];
  using Acc = AccOf<T>;
  Acc* sm = reinterpret_cast<Acc*>(attention_smem);
  Acc* Qs = sm;
  Acc* Ks = Qs + kTile * (D + 1);
  Acc* Vs = Ks + kTile * (D + 1);
  Acc* Ps = Vs + kTile * (D + 1);
  const int tr = threadIdx.x / 8, tc = threadIdx.x % 8;
  const TileOf at = tile_of(p, p.causal);
  const int m0 = at.t * kTile;
  const T* q = batch_rows<T>(p.q, at.b, p.batch2);
  const T* k = batch_rows<T>(p.k, at.b, p.batch2);
  const T* v = kLseOnly ? nullptr : batch_rows<T>(p.v, at.b, p.batch2);
  load_tile<T, D>(Qs, q, p.q.row, m0, p.L, p.E, p.scale2);
  Acc m[4], l[4], acc[4][D / 8];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    m[i] = -INFINITY;
    l[i] = Acc(0);
#pragma unroll
    for (int j = 0; j < D / 8; ++j) acc[i][j] = Acc(0);
  }
  const int n_end = p.causal ? min(p.S, m0 + kTile) : p.S;
  for (int n0 = 0; n0 < n_end; n0 += kTile) {
    __syncthreads();  // the previous tile's reads are done
    load_tile<T, D>(Ks, k, p.k.row, n0, p.S, p.E, Acc(1));
    if (!kLseOnly) load_tile<T, D>(Vs, v, p.v.row, n0, p.S, p.E, Acc(1));
    __syncthreads();
    Acc s[4][8];
    tile_dot<D>(Qs, Ks, s);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = m0 + 4 * tr + i;
      Acc mx = -INFINITY;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int col = n0 + tc + 8 * j;
        if (col >= p.S || (p.causal && col > row)) s[i][j] = -INFINITY;
        mx = max_of(mx, s[i][j]);
      }
      const Acc mnew = max_of(m[i], row_max(mx));
      // A row that has seen no key yet keeps m = -inf; its terms must be 0, not exp2(NaN).
      const Acc base = mnew == -INFINITY ? Acc(0) : mnew;
      const Acc alpha = ex2(m[i] - base);
      Acc sum = Acc(0);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const Acc e = ex2(s[i][j] - base);
        sum += e;
        if (!kLseOnly) Ps[(4 * tr + i) * kPitchP + tc + 8 * j] = e;
      }
      l[i] = l[i] * alpha + row_sum(sum);
      m[i] = mnew;
      if (!kLseOnly) {
#pragma unroll
        for (int j = 0; j < D / 8; ++j) acc[i][j] *= alpha;
      }
    }
    if (!kLseOnly) {
      __syncthreads();
      tile_times<D>(Ps, Vs, acc);
    }
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int row = m0 + 4 * tr + i;
    if (row >= p.L) continue;
    const int64_t r = at.b * p.L + row;
    if (kLseOnly) {
      if (tc == 0)
        static_cast<Acc*>(p.out)[r] = l[i] > Acc(0) ? (m[i] + lg2(l[i])) * Acc(kLn2) : -INFINITY;
      continue;
    }
    const Acc inv = l[i] > Acc(0) ? Acc(1) / l[i] : Acc(0);
    T* o = static_cast<T*>(p.out) + result_row(p, at.b, row, p.L) * p.E;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      const int e = tc + 8 * j;
      if (e < p.E) o[e] = dev::from_acc<T, Acc>(acc[i][j] * inv);
    }
  }
}

// attention_backward_query: dq_i = scale sum_j P_ij (dO_i . v_j - delta_i) k_j.
template <class T, int D>
__global__ void __launch_bounds__(kThreads) attention_backward_query(Params p) {
  extern __shared__ __align__(16) unsigned char attention_smem[];
  using Acc = AccOf<T>;
  Acc* sm = reinterpret_cast<Acc*>(attention_smem);
  Acc* Qs = sm;
  Acc* Gs = Qs + kTile * (D + 1);
  Acc* Ks = Gs + kTile * (D + 1);
  Acc* Vs = Ks + kTile * (D + 1);
  Acc* Ds = Vs + kTile * (D + 1);
  const int tr = threadIdx.x / 8, tc = threadIdx.x % 8;
  const TileOf at = tile_of(p, p.causal);
  const int m0 = at.t * kTile;
  const T* k = batch_rows<T>(p.k, at.b, p.batch2);
  const T* v = batch_rows<T>(p.v, at.b, p.batch2);
  load_tile<T, D>(Qs, batch_rows<T>(p.q, at.b, p.batch2), p.q.row, m0, p.L, p.E, p.scale2);
  load_tile<T, D>(Gs, batch_rows<T>(p.go, at.b, p.batch2), p.go.row, m0, p.L, p.E, Acc(1));
  Acc lse2[4], dl[4], dq[4][D / 8];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int row = m0 + 4 * tr + i;
    const bool in = row < p.L;
    lse2[i] = in ? static_cast<const Acc*>(p.lse)[at.b * p.L + row] * Acc(kLog2e) : Acc(0);
    dl[i] = in ? static_cast<const Acc*>(p.delta)[at.b * p.L + row] : Acc(0);
#pragma unroll
    for (int j = 0; j < D / 8; ++j) dq[i][j] = Acc(0);
  }
  const int n_end = p.causal ? min(p.S, m0 + kTile) : p.S;
  for (int n0 = 0; n0 < n_end; n0 += kTile) {
    __syncthreads();
    load_tile<T, D>(Ks, k, p.k.row, n0, p.S, p.E, Acc(1));
    load_tile<T, D>(Vs, v, p.v.row, n0, p.S, p.E, Acc(1));
    __syncthreads();
    Acc s[4][8], dp[4][8];
    tile_dot<D>(Qs, Ks, s);
    tile_dot<D>(Gs, Vs, dp);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = m0 + 4 * tr + i;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int col = n0 + tc + 8 * j;
        const bool seen = row < p.L && col < p.S && !(p.causal && col > row);
        const Acc pr = seen ? ex2(s[i][j] - lse2[i]) : Acc(0);
        Ds[(4 * tr + i) * kPitchP + tc + 8 * j] = pr * (dp[i][j] - dl[i]);
      }
    }
    __syncthreads();
    tile_times<D>(Ds, Ks, dq);
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int row = m0 + 4 * tr + i;
    if (row >= p.L) continue;
    T* o = static_cast<T*>(p.out) + result_row(p, at.b, row, p.L) * p.E;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      const int e = tc + 8 * j;
      if (e < p.E) o[e] = dev::from_acc<T, Acc>(dq[i][j] * Acc(p.scale));
    }
  }
}

// attention_backward_kv: for key j, dv_j = sum_i P_ij dO_i and dk_j = scale sum_i dS_ij q_i
// over the queries that see it; written as [2, ..., S, E] (dk, then dv).
template <class T, int D>
__global__ void __launch_bounds__(kThreads) attention_backward_kv(Params p) {
  extern __shared__ __align__(16) unsigned char attention_smem[];
  using Acc = AccOf<T>;
  Acc* sm = reinterpret_cast<Acc*>(attention_smem);
  Acc* Ks = sm;
  Acc* Vs = Ks + kTile * (D + 1);
  Acc* Qs = Vs + kTile * (D + 1);
  Acc* Gs = Qs + kTile * (D + 1);
  Acc* Ps = Gs + kTile * (D + 1);
  Acc* Ds = Ps + kTile * kPitchP;
  Acc* lse2 = Ds + kTile * kPitchP;
  Acc* dl = lse2 + kTile;
  const int tr = threadIdx.x / 8, tc = threadIdx.x % 8;
  const TileOf at = tile_of(p, false);
  const int n0 = at.t * kTile;
  const T* q = batch_rows<T>(p.q, at.b, p.batch2);
  const T* go = batch_rows<T>(p.go, at.b, p.batch2);
  load_tile<T, D>(Ks, batch_rows<T>(p.k, at.b, p.batch2), p.k.row, n0, p.S, p.E, p.scale2);
  load_tile<T, D>(Vs, batch_rows<T>(p.v, at.b, p.batch2), p.v.row, n0, p.S, p.E, Acc(1));
  Acc dk[4][D / 8], dv[4][D / 8];
#pragma unroll
  for (int i = 0; i < 4; ++i)
#pragma unroll
    for (int j = 0; j < D / 8; ++j) dk[i][j] = dv[i][j] = Acc(0);
  // Queries before the key tile's first row see none of it when causal.
  for (int m0 = p.causal ? n0 / kTile * kTile : 0; m0 < p.L; m0 += kTile) {
    __syncthreads();
    load_tile<T, D>(Qs, q, p.q.row, m0, p.L, p.E, Acc(1));
    load_tile<T, D>(Gs, go, p.go.row, m0, p.L, p.E, Acc(1));
    for (int r = threadIdx.x; r < kTile; r += kThreads) {
      const bool in = m0 + r < p.L;
      lse2[r] = in ? static_cast<const Acc*>(p.lse)[at.b * p.L + m0 + r] * Acc(kLog2e) : Acc(0);
      dl[r] = in ? static_cast<const Acc*>(p.delta)[at.b * p.L + m0 + r] : Acc(0);
    }
    __syncthreads();
    Acc s[4][8], dp[4][8];
    tile_dot<D>(Ks, Qs, s);  // [key][query]
    tile_dot<D>(Vs, Gs, dp);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int key = n0 + 4 * tr + i;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int c = tc + 8 * j, row = m0 + c;
        const bool seen = row < p.L && key < p.S && !(p.causal && key > row);
        const Acc pr = seen ? ex2(s[i][j] - lse2[c]) : Acc(0);
        Ps[(4 * tr + i) * kPitchP + c] = pr;
        Ds[(4 * tr + i) * kPitchP + c] = pr * (dp[i][j] - dl[c]);
      }
    }
    __syncthreads();
    tile_times<D>(Ps, Gs, dv);
    tile_times<D>(Ds, Qs, dk);
  }
  T* out = static_cast<T*>(p.out);
  const int64_t plane = (gridDim.x / p.tiles) * static_cast<int64_t>(p.S) * p.E;  // dv's offset
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int key = n0 + 4 * tr + i;
    if (key >= p.S) continue;
    const int64_t r = result_row(p, at.b, key, p.S) * p.E;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      const int e = tc + 8 * j;
      if (e >= p.E) continue;
      out[r + e] = dev::from_acc<T, Acc>(dk[i][j] * Acc(p.scale));
      out[plane + r + e] = dev::from_acc<T, Acc>(dv[i][j]);
    }
  }
}

// Shared memory per block, in accumulator elements.
template <int D>
constexpr int smem_floats(OpId op) {
  const int tile = kTile * (D + 1), probs = kTile * kPitchP;
  switch (op) {
    case OpId::attention_lse:
      return 2 * tile;
    case OpId::attention:
      return 3 * tile + probs;
    case OpId::attention_backward_query:
      return 4 * tile + probs;
    default:
      return 4 * tile + 2 * probs + 2 * kTile;
  }
}

template <class T, int D>
void run(const KernelCall& call, int dev) {
  int64_t blocks = 0;
  const Params p = attn::params_of(call, &blocks);
  const size_t smem = sizeof(AccOf<T>) * static_cast<size_t>(smem_floats<D>(call.op));
  switch (call.op) {
    case OpId::attention:
      attn::launch<attention_forward<T, D, false>>(p, blocks, smem, dev);
      break;
    case OpId::attention_lse:
      attn::launch<attention_forward<T, D, true>>(p, blocks, smem, dev);
      break;
    case OpId::attention_backward_query:
      attn::launch<attention_backward_query<T, D>>(p, blocks, smem, dev);
      break;
    default:
      attn::launch<attention_backward_kv<T, D>>(p, blocks, smem, dev);
      break;
  }
  check_launch(op_name(call.op).data());
}

}  // namespace

void attention(const KernelCall& call) {
  const std::string_view name = op_name(call.op);
  const bool backward = attn::is_backward(call.op);
  const Tensor& q = call.inputs[backward ? 1 : 0];
  const Tensor& k = call.inputs[backward ? 2 : 1];
  const int64_t E = q.size(-1);
  EMBER_CHECK(E <= 128, name, ": the CUDA kernels take head sizes up to 128, got ", E);
  EMBER_CHECK(q.size(-2) < (int64_t{1} << 30) && k.size(-2) < (int64_t{1} << 30), name,
              ": sequence lengths ", q.size(-2), " and ", k.size(-2), " are too long");
  // float64 tiles take twice the shared memory: up to 64 wide.
  EMBER_CHECK(q.dtype() != kFloat64 || E <= 64, name,
              ": the CUDA kernels take float64 head sizes up to 64, got ", E);
  if (call.out.numel() == 0) return;
  const int dev = call.out.device().index;
  visit_float_dtype(q.dtype(), name.data(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (!std::is_same_v<T, float> && !std::is_same_v<T, double>) {
      static_assert(attn::kMmaMaxHead >= 128);
      attn::attention_mma(call);
    } else if (E <= 32) {
      run<T, 32>(call, dev);
    } else if constexpr (std::is_same_v<T, double>) {
      run<T, 64>(call, dev);
    } else if (E <= 64) {
      run<T, 64>(call, dev);
    } else {
      run<T, 128>(call, dev);
    }
  });
}

}  // namespace ember::kernels::cuda
