// CPU cat along attrs.dim: each input is copied into its slab of the output. The slab is
// described as a strided view of the output's storage, so kernels/iter.h can coalesce the
// copy into the fewest runs (one memcpy when both sides are dense).
#include <cstdint>
#include <cstring>
#include <memory>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/iter.h"

namespace ember::kernels::cpu {
namespace {

template <class W>
void copy_runs(const Iter& it) {
  constexpr int64_t es = sizeof(W);
  for_each_run(it, [](char** p, const int64_t* s, int64_t n) {
    if (s[0] == es && s[1] == es) {
      std::memcpy(p[0], p[1], static_cast<size_t>(n) * es);
      return;
    }
    for (int64_t i = 0; i < n; ++i)
      *reinterpret_cast<W*>(p[0] + i * s[0]) = *reinterpret_cast<const W*>(p[1] + i * s[1]);
  });
}

void copy_into(const Tensor& dst, const Tensor& src) {
  const Iter it = make_iter(dst, std::span<const Tensor>(&src, 1));
  switch (src.element_size()) {
    case 1:
      return copy_runs<uint8_t>(it);
    case 2:
      return copy_runs<uint16_t>(it);
    case 4:
      return copy_runs<uint32_t>(it);
    case 8:
      return copy_runs<uint64_t>(it);
    default:
      EMBER_FAIL("cat: unsupported element size ", src.element_size());
  }
}

}  // namespace

void cat(const KernelCall& call) {
  const Tensor& out = call.out;
  const int64_t dim = call.attrs.dim;
  const int nd = out.dim();
  EMBER_CHECK(dim >= 0 && dim < nd, "cat: dim ", dim, " out of range for output of shape ",
              out.sizes());
  int64_t pos = 0;
  for (size_t i = 0; i < call.inputs.size(); ++i) {
    const Tensor& t = call.inputs[i];
    EMBER_CHECK(t.dtype() == out.dtype(), "cat: input ", i, " is ", dtype_name(t.dtype()),
                ", output is ", dtype_name(out.dtype()));
    if (t.numel() == 0 && t.dim() != nd) continue;  // a legacy empty [0] input adds nothing
    bool fits = t.dim() == nd && pos + t.size(dim) <= out.size(dim);
    for (int d = 0; fits && d < nd; ++d) fits = d == dim || t.size(d) == out.size(d);
    EMBER_CHECK(fits, "cat: input ", i, " of shape ", t.sizes(), " does not fit output ",
                out.sizes(), " along dim ", dim, " at offset ", pos);
    if (t.numel() > 0) {
      auto slab = std::make_shared<TensorImpl>();
      slab->storage = out.impl()->storage;
      slab->sizes = t.sizes();
      slab->strides = out.strides();
      slab->offset = out.storage_offset() + pos * out.stride(dim);
      slab->dtype = out.dtype();
      slab->device = out.device();
      copy_into(Tensor(std::move(slab)), t);
    }
    pos += t.size(dim);
  }
  EMBER_CHECK(pos == out.size(dim), "cat: inputs fill ", pos, " of the output's ", out.size(dim),
              " along dim ", dim);
}

}  // namespace ember::kernels::cpu
