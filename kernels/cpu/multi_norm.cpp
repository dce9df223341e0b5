// multi_norm on the CPU: the p-norm of each tensor of a list (validated by meta, core/meta.cpp),
// stacked into out [n]. Each tensor is cut into fixed chunks; the chunks of all tensors are
// shared out over the pool, each summed in double (|x|^p, or the largest |x| for p = inf, a NaN
// winning), and each tensor's chunk results folded in chunk order. The cut depends on the sizes
// alone, so the result is the same on any number of threads.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "core/parallel.h"
#include "kernels/cpu/cpu_kernels.h"

namespace ember::kernels::cpu {
namespace {

constexpr int64_t kChunk = 16384;

struct Chunk {
  int64_t tensor, begin, end;
};

// What one element adds: |x|^p for a finite p (|x|^2 as a product, which pow need not round
// the same way), max |x| for p = inf.
struct NormTerm {
  double p;
  bool inf;
  double of(double v) const {
    const double a = std::fabs(v);
    return inf || p == 1 ? a : p == 2 ? a * a : std::pow(a, p);
  }
  // a NaN wins a max, as PyTorch's inf-norm propagates it
  double fold(double acc, double t) const {
    if (!inf) return acc + t;
    return std::isnan(acc) || !(t <= acc) ? (std::isnan(acc) ? acc : t) : acc;
  }
  double finish(double acc) const {
    if (inf) return acc;
    return p == 2 ? std::sqrt(acc) : p == 1 ? acc : std::pow(acc, 1.0 / p);
  }
};

template <class T>
double chunk_of(const T* x, int64_t b, int64_t e, const NormTerm& term) {
  double acc = 0;
  for (int64_t i = b; i < e; ++i) acc = term.fold(acc, term.of(static_cast<double>(x[i])));
  return acc;
}

}  // namespace

void multi_norm(const KernelCall& call) {
  const auto& in = call.inputs;
  const NormTerm term{call.attrs.norm_type, std::isinf(call.attrs.norm_type)};
  std::vector<Chunk> chunks;
  for (size_t k = 0; k < in.size(); ++k) {
    EMBER_CHECK(in[k].is_contiguous(), "multi_norm: tensor ", k, " (", in[k].sizes(),
                ", strides ", in[k].strides(), ") must be contiguous");
    const int64_t n = in[k].numel();
    for (int64_t b = 0; b < n; b += kChunk)
      chunks.push_back({static_cast<int64_t>(k), b, std::min(n, b + kChunk)});
  }
  std::vector<double> part(chunks.size());
  parallel_for(static_cast<int64_t>(chunks.size()), 1, [&](int64_t cb, int64_t ce) {
    for (int64_t c = cb; c < ce; ++c) {
      const Chunk& ch = chunks[static_cast<size_t>(c)];
      const Tensor& t = in[static_cast<size_t>(ch.tensor)];
      visit_dtype(t.dtype(), [&](auto tag) {
        using T = typename decltype(tag)::type;
        if constexpr (std::is_integral_v<T>) {
          EMBER_FAIL("multi_norm: tensor ", ch.tensor, " has dtype ", dtype_name(t.dtype()),
                     "; expected a floating dtype");
        } else {
          part[static_cast<size_t>(c)] =
              chunk_of(static_cast<const T*>(t.raw_data()), ch.begin, ch.end, term);
        }
      });
    }
  });
  std::vector<double> acc(in.size(), 0.0);
  for (size_t c = 0; c < chunks.size(); ++c) {
    double& a = acc[static_cast<size_t>(chunks[c].tensor)];
    a = term.fold(a, part[c]);
  }
  for (size_t k = 0; k < in.size(); ++k) {
    const double v = term.finish(acc[k]);
    if (call.out.dtype() == kFloat64)
      static_cast<double*>(call.out.raw_data())[k] = v;
    else
      static_cast<float*>(call.out.raw_data())[k] = static_cast<float>(v);
  }
}

}  // namespace ember::kernels::cpu
