#pragma once
// What the two families of CUDA attention rows share (core/ops.yaml "fused attention"): the
// kernel parameters read from a KernelCall, the block -> (batch entry, tile) map, and the
// launcher. attention.cu holds the SIMT rows (every dtype, head sizes up to 128),
// attention_mma.cu the tensor-core rows for half and bfloat16 storage.
#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

#include "core/dispatch.h"
#include "kernels/attention_geometry.h"
#include "kernels/cuda/runtime.h"

namespace ember::kernels::cuda::attn {

constexpr int kTile = 64;      // rows per tile, on both sides
constexpr int kThreads = 128;  // four warps
constexpr double kLog2e = 1.4426950408889634;
constexpr double kLn2 = 0.6931471805599453;

struct Operand {
  const void* p = nullptr;
  int64_t b1 = 0, b2 = 0, row = 0;
};

struct Params {
  Operand q, k, v, go;  // go: the output's gradient (backward rows)
  void* out = nullptr;
  const void* lse = nullptr;  // float, or double for float64 storage
  const void* delta = nullptr;
  int64_t batch2 = 1;
  int L = 0, S = 0, E = 0;
  int tiles = 1;      // tiles per batch entry on the block's own side
  double scale = 1;   // the attention's scale
  double scale2 = 1;  // scale * log2(e)
  bool causal = false;
  bool interleaved = false;  // results [B1, rows, B2, E] (kernels/attention_geometry.h)
  // 16-bit storage: every operand's rows start 16-byte aligned, so whole rows of 8 elements
  // load as one vector (the tensor-core rows' tile loads).
  bool aligned16 = false;
};

// The index of result row r of batch entry b among `rows` per entry.
__device__ __forceinline__ int64_t result_row(const Params& p, int64_t b, int r, int rows) {
  return p.interleaved ? ((b / p.batch2) * rows + r) * p.batch2 + b % p.batch2 : b * rows + r;
}

template <class T>
__device__ __forceinline__ const T* batch_rows(const Operand& o, int64_t b, int64_t batch2) {
  return static_cast<const T*>(o.p) + (b / batch2) * o.b1 + (b % batch2) * o.b2;
}

// Which tile of which batch entry a block takes; for causal work the long tiles (late query
// tiles, early key tiles) are handed out first.
struct TileOf {
  int64_t b;
  int t;
};
__device__ __forceinline__ TileOf tile_of(const Params& p, bool late_first) {
  const int64_t b = blockIdx.x / p.tiles;
  const int r = static_cast<int>(blockIdx.x % p.tiles);
  return {b, late_first ? p.tiles - 1 - r : r};
}

inline bool is_backward(OpId op) {
  return op == OpId::attention_backward_query || op == OpId::attention_backward_kv;
}

// The parameters of `call` (any of the four rows) and its block count.
inline Params params_of(const KernelCall& call, int64_t* blocks) {
  auto operand = [](const Tensor& t) {
    const AttentionOperand o = attention_operand(t);
    return Operand{t.raw_data(), o.b1, o.b2, o.row};
  };
  const std::span<const Tensor> in = call.inputs;
  const bool backward = is_backward(call.op);
  const int o = backward ? 1 : 0;
  const AttentionGeometry g = attention_geometry(in[o], in[o + 1], call.attrs);
  Params p;
  p.q = operand(in[o]);
  p.k = operand(in[o + 1]);
  if (call.op != OpId::attention_lse) p.v = operand(in[o + 2]);
  if (backward) {
    p.go = operand(in[0]);
    p.lse = in[4].raw_data();
    p.delta = in[5].raw_data();
  }
  p.out = call.out.raw_data();
  p.batch2 = g.batch2;
  p.L = static_cast<int>(g.L);
  p.S = static_cast<int>(g.S);
  p.E = static_cast<int>(g.E);
  p.scale = g.scale;
  p.scale2 = g.scale * kLog2e;
  p.causal = g.causal;
  p.interleaved = g.interleaved;
  const int64_t side = call.op == OpId::attention_backward_kv ? g.S : g.L;
  p.tiles = static_cast<int>((side + kTile - 1) / kTile);
  *blocks = g.batches() * p.tiles;
  return p;
}

// Kernels above 48 KB of shared memory must say so, once per kernel and device.
template <auto Kernel, class P>
void launch(const P& p, int64_t blocks, size_t smem, int dev) {
  static std::atomic<uint64_t> allowed{0};
  const uint64_t bit = uint64_t{1} << (dev & 63);
  if (!(allowed.load(std::memory_order_acquire) & bit)) {
    EMBER_CUDA_CHECK(cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          static_cast<int>(smem)));
    allowed.fetch_or(bit, std::memory_order_acq_rel);
  }
  Kernel<<<static_cast<unsigned>(blocks), kThreads, smem, stream(dev)>>>(p);
}

// The tensor-core rows (attention_mma.cu) for half / bfloat16 storage and head sizes up to
// kMmaMaxHead; the SIMT rows take everything else.
constexpr int64_t kMmaMaxHead = 128;
void attention_mma(const KernelCall& call);

}  // namespace ember::kernels::cuda::attn
