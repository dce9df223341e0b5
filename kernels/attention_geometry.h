#pragma once
// The shapes and strides the attention rows' kernels read (core/ops.yaml, "fused attention"),
// shared by the CPU and CUDA kernels. Inputs have one or two batch dims; a single one is
// treated as the second with a first of size 1, so both kernels index (b1, b2, row, col).
#include <cstdint>

#include "core/op.h"
#include "core/tensor.h"

namespace ember::kernels {

struct AttentionOperand {
  int64_t b1 = 0, b2 = 0, row = 0;  // element strides; the last dim's is 1
};

struct AttentionGeometry {
  int64_t batch1 = 1, batch2 = 1;  // the batch dims
  int64_t L = 0, S = 0, E = 0;     // queries, keys, head size
  double scale = 1;
  bool causal = false;
  bool interleaved = false;  // results [B1, rows, B2, E] instead of [B1, B2, rows, E]
  int64_t batches() const { return batch1 * batch2; }
  // The index of result row r of batch entry b (= b1 * batch2 + b2) among `rows` per entry.
  int64_t result_row(int64_t b, int64_t r, int64_t rows) const {
    return interleaved ? ((b / batch2) * rows + r) * batch2 + b % batch2 : b * rows + r;
  }
};

inline AttentionOperand attention_operand(const Tensor& t) {
  const int64_t n = t.dim();
  return {n == 4 ? t.stride(0) : 0, t.stride(n - 3), t.stride(n - 2)};
}

// From (q, k): attention and attention_lse; from (grad, q, k, ...): the backward rows.
inline AttentionGeometry attention_geometry(const Tensor& q, const Tensor& k, const Attrs& a) {
  AttentionGeometry g;
  const int64_t n = q.dim();
  g.batch1 = n == 4 ? q.size(0) : 1;
  g.batch2 = q.size(n - 3);
  g.L = q.size(n - 2);
  g.S = k.size(n - 2);
  g.E = q.size(n - 1);
  g.scale = a.attn_scale;
  g.causal = a.causal;
  g.interleaved = a.interleaved;
  return g;
}

}  // namespace ember::kernels
