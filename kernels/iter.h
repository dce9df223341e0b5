#pragma once
// Host-side planning of an elementwise loop: broadcast every input to the output's shape,
// express strides in bytes, drop size-1 dims and merge dims that are contiguous for every
// operand. Dims are stored innermost first. The CPU loops and the CUDA launchers share it.
#include <algorithm>
#include <cstdint>
#include <span>

#include "core/tensor.h"

namespace ember::kernels {

inline constexpr int kMaxOperands = 4;  // out + up to 3 inputs

struct Iter {
  int ndim = 0;  // after coalescing; 0 means a single element
  int nops = 0;  // operand 0 is the output
  int64_t numel = 0;
  int64_t sizes[kMaxDims] = {};
  char* data[kMaxOperands] = {};
  int64_t strides[kMaxOperands][kMaxDims] = {};  // bytes, innermost first
  int64_t elem_size[kMaxOperands] = {};

  // Every operand is dense in one flat run (or a broadcast scalar with stride 0).
  bool is_flat() const;
  // Operand i is a 0-dim (or fully broadcast) value: stride 0 on every dim.
  bool is_broadcast_scalar(int i) const;
};

Iter make_iter(const Tensor& out, std::span<const Tensor> inputs);

// Calls inner(ptrs, inner_strides, n) for each innermost run of the iteration space.
template <class F>
void for_each_run(const Iter& it, F&& inner) {
  char* ptrs[kMaxOperands];
  int64_t inner_strides[kMaxOperands];
  for (int k = 0; k < it.nops; ++k) {
    ptrs[k] = it.data[k];
    inner_strides[k] = it.ndim ? it.strides[k][0] : 0;
  }
  if (it.numel == 0) return;
  if (it.ndim <= 1) {
    inner(ptrs, inner_strides, it.ndim ? it.sizes[0] : 1);
    return;
  }
  int64_t counter[kMaxDims] = {};
  const int64_t n0 = it.sizes[0];
  for (;;) {
    char* p[kMaxOperands] = {};  // zeroed: GCC 12 -O3 reports maybe-uninitialized
    for (int k = 0; k < it.nops; ++k) {
      int64_t off = 0;
      for (int d = 1; d < it.ndim; ++d) off += counter[d] * it.strides[k][d];
      p[k] = ptrs[k] + off;
    }
    inner(p, inner_strides, n0);
    int d = 1;
    for (; d < it.ndim; ++d) {
      if (++counter[d] < it.sizes[d]) break;
      counter[d] = 0;
    }
    if (d == it.ndim) return;
  }
}

// for_each_run over the elements [begin, end) of the iteration space, in the order for_each_run
// visits them (innermost dim fastest): the first and last runs may be partial.
template <class F>
void for_each_run_range(const Iter& it, int64_t begin, int64_t end, F&& inner) {
  int64_t inner_strides[kMaxOperands];
  for (int k = 0; k < it.nops; ++k) inner_strides[k] = it.ndim ? it.strides[k][0] : 0;
  if (begin >= end) return;
  if (it.ndim <= 1) {
    char* p[kMaxOperands] = {};
    for (int k = 0; k < it.nops; ++k) p[k] = it.data[k] + begin * inner_strides[k];
    inner(p, inner_strides, end - begin);
    return;
  }
  const int64_t n0 = it.sizes[0];
  int64_t counter[kMaxDims] = {};
  int64_t rest = begin / n0;
  int64_t c0 = begin % n0;
  for (int d = 1; d < it.ndim; ++d) {
    counter[d] = rest % it.sizes[d];
    rest /= it.sizes[d];
  }
  for (int64_t idx = begin; idx < end;) {
    const int64_t len = std::min(n0 - c0, end - idx);
    char* p[kMaxOperands] = {};
    for (int k = 0; k < it.nops; ++k) {
      int64_t off = c0 * inner_strides[k];
      for (int d = 1; d < it.ndim; ++d) off += counter[d] * it.strides[k][d];
      p[k] = it.data[k] + off;
    }
    inner(p, inner_strides, len);
    idx += len;
    c0 = 0;
    for (int d = 1; d < it.ndim; ++d) {
      if (++counter[d] < it.sizes[d]) break;
      counter[d] = 0;
    }
  }
}

}  // namespace ember::kernels
