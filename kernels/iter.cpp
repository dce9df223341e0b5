#include "kernels/iter.h"

namespace ember::kernels {

bool Iter::is_flat() const {
  if (ndim > 1) return false;
  for (int k = 0; k < nops; ++k)
    if (ndim == 1 && strides[k][0] != elem_size[k] && strides[k][0] != 0) return false;
  return true;
}

bool Iter::is_broadcast_scalar(int i) const {
  for (int d = 0; d < ndim; ++d)
    if (strides[i][d] != 0) return false;
  return true;
}

Iter make_iter(const Tensor& out, std::span<const Tensor> inputs) {
  Iter it;
  it.nops = 1 + static_cast<int>(inputs.size());
  it.numel = out.numel();
  const Shape& shape = out.sizes();
  const int nd = shape.size();
  // Byte strides per operand in C order (outermost first) before coalescing.
  int64_t st[kMaxOperands][kMaxDims];
  auto fill = [&](int k, const Tensor& t, const Strides& s) {
    it.data[k] = static_cast<char*>(t.raw_data());
    it.elem_size[k] = t.element_size();
    for (int d = 0; d < nd; ++d) st[k][d] = s[d] * it.elem_size[k];
  };
  fill(0, out, out.strides());
  for (size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    fill(static_cast<int>(i) + 1, t, broadcast_strides(t.sizes(), t.strides(), shape));
  }
  // Innermost first, skipping size-1 dims, merging where every operand stays contiguous.
  it.ndim = 0;
  for (int d = nd - 1; d >= 0; --d) {
    if (shape[d] == 1) continue;
    if (it.ndim > 0) {
      const int j = it.ndim - 1;
      bool mergeable = true;
      for (int k = 0; k < it.nops && mergeable; ++k)
        mergeable = st[k][d] == it.strides[k][j] * it.sizes[j];
      if (mergeable) {
        it.sizes[j] *= shape[d];
        continue;
      }
    }
    it.sizes[it.ndim] = shape[d];
    for (int k = 0; k < it.nops; ++k) it.strides[k][it.ndim] = st[k][d];
    ++it.ndim;
  }
  return it;
}

}  // namespace ember::kernels
