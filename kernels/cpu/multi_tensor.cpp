// CPU multi-tensor optimizer updates: sgd_update, PyTorch's SGD step for every parameter of a
// group in one call, in place. Inputs (validated by meta, core/meta.cpp):
//   [hyper float32[4] = {lr, momentum, dampening, weight_decay}, step float32 scalar (steps the
//    group already took), params[n], grads[n], (momentum buffers[n] if attrs.momentum_buffers)]
// The hyperparameters and the step are tensors, not attrs, so the optimizer can change them
// between calls without a new trace; this kernel reads them here on every call. With
// attrs.increment_step the step becomes step + 1 once every parameter is updated (the update
// itself uses the value read before).
// 16-bit floats compute in float, float64 in double.
#include <cstdint>
#include <type_traits>

#include "core/parallel.h"
#include "kernels/cpu/cpu_kernels.h"

namespace ember::kernels::cpu {
namespace {

template <class Acc>
struct SgdParams {
  Acc lr, momentum, dampening, weight_decay;
  bool first_step, nesterov, maximize, momentum_buffers;
};

// One parameter, PyTorch's order of operations per element:
//   d = maximize ? -g : g;  d += wd * p;
//   buf = first ? d : momentum * buf + (1 - dampening) * d;  d = nesterov ? d + momentum * buf :
//   buf p -= lr * d
// The options are template arguments, so each loop is branch-free and the compiler vectorises it.
template <class T, class Acc, bool kMaximize, bool kDecay, bool kBuffers, bool kFirst,
          bool kNesterov>
void sgd_range(T* p, const T* g, T* buf, int64_t i0, int64_t i1, const SgdParams<Acc>& h) {
  const Acc keep = Acc(1) - h.dampening;
  for (int64_t i = i0; i < i1; ++i) {
    const Acc pi = static_cast<Acc>(p[i]);
    Acc d = static_cast<Acc>(g[i]);
    if constexpr (kMaximize) d = -d;
    if constexpr (kDecay) d += h.weight_decay * pi;
    if constexpr (kBuffers) {
      if constexpr (kFirst) {
        buf[i] = T(d);
      } else {
        buf[i] = T(h.momentum * static_cast<Acc>(buf[i]) + keep * d);
      }
      // Nesterov reads the buffer as stored, as PyTorch does.
      if constexpr (kNesterov) {
        d = d + h.momentum * static_cast<Acc>(buf[i]);
      } else {
        d = static_cast<Acc>(buf[i]);
      }
    }
    p[i] = T(pi - h.lr * d);
  }
}

// Calls f(std::bool_constant<b>) for the run-time b.
template <class F>
void with_bool(bool b, const F& f) {
  if (b) {
    f(std::true_type{});
  } else {
    f(std::false_type{});
  }
}

template <class T, class Acc>
void sgd_one(T* p, const T* g, T* buf, int64_t n, const SgdParams<Acc>& h) {
  with_bool(h.maximize, [&](auto mx) {
    with_bool(h.weight_decay != Acc(0), [&](auto wd) {
      with_bool(h.momentum_buffers, [&](auto bufs) {
        with_bool(h.first_step, [&](auto first) {
          with_bool(h.nesterov, [&](auto nest) {
            // Without buffers the first step and Nesterov change nothing: one instantiation.
            constexpr bool kBufs = decltype(bufs)::value;
            constexpr bool kFirst = kBufs && decltype(first)::value;
            constexpr bool kNesterov = kBufs && decltype(nest)::value;
            parallel_for(n, kParallelGrainElements, [&](int64_t b, int64_t e) {
              sgd_range<T, Acc, decltype(mx)::value, decltype(wd)::value, kBufs, kFirst, kNesterov>(
                  p, g, buf, b, e, h);
            });
          });
        });
      });
    });
  });
}

void sgd_update(const KernelCall& call) {
  const auto& in = call.inputs;
  const Attrs& a = call.attrs;
  const int64_t n = a.num_tensors;
  const size_t want = MultiTensorLayout::of(a).inputs();
  EMBER_CHECK(n > 0 && in.size() == want, "sgd_update: expected ", want, " tensors for ", n,
              " parameters, got ", in.size());
  if (found_inf_set(call)) return;  // GradScaler's skipped step: nothing moves, nor the count
  EMBER_CHECK(in[0].dtype() == kFloat32 && in[0].numel() == 4 && in[0].is_contiguous() &&
                  in[1].dtype() == kFloat32 && in[1].numel() == 1,
              "sgd_update: expected float32 hyperparameters [4] and a float32 step, got ",
              dtype_name(in[0].dtype()), " ", in[0].sizes(), " and ", dtype_name(in[1].dtype()),
              " ", in[1].sizes());
  const float* hyper = static_cast<const float*>(in[0].raw_data());
  float* const step_cell = static_cast<float*>(in[1].raw_data());
  const float step = *step_cell;
  for (int64_t i = 0; i < n; ++i) {
    const Tensor& p = in[static_cast<size_t>(2 + i)];
    const Tensor& g = in[static_cast<size_t>(2 + n + i)];
    const Tensor* b = a.momentum_buffers ? &in[static_cast<size_t>(2 + 2 * n + i)] : nullptr;
    EMBER_CHECK(
        p.is_contiguous() && g.is_contiguous() && g.sizes() == p.sizes() &&
            g.dtype() == p.dtype() &&
            (!b || (b->is_contiguous() && b->sizes() == p.sizes() && b->dtype() == p.dtype())),
        "sgd_update: parameter ", i, " (", dtype_name(p.dtype()), " ", p.sizes(),
        ") needs a contiguous gradient", b ? " and momentum buffer" : "",
        " of its dtype and shape");
    if (p.numel() == 0) continue;
    visit_dtype(p.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_integral_v<T>) {
        EMBER_FAIL("sgd_update: parameter ", i, " has dtype ", dtype_name(p.dtype()),
                   "; expected a floating dtype");
      } else {
        using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
        const SgdParams<Acc> h{static_cast<Acc>(hyper[0]),
                               static_cast<Acc>(hyper[1]),
                               static_cast<Acc>(hyper[2]),
                               static_cast<Acc>(hyper[3]),
                               step == 0.0f,
                               a.nesterov,
                               a.maximize,
                               a.momentum_buffers};
        sgd_one<T, Acc>(static_cast<T*>(p.raw_data()), static_cast<const T*>(g.raw_data()),
                        b ? static_cast<T*>(b->raw_data()) : nullptr, p.numel(), h);
      }
    });
  }
  // After the loop: old + 1 from the value read above, as the CUDA kernel writes it.
  if (a.increment_step) *step_cell = step + 1.0f;
}

}  // namespace

bool found_inf_set(const KernelCall& call) {
  const MultiTensorLayout layout = MultiTensorLayout::of(call.attrs);
  if (!layout.reads_found_inf) return false;
  const Tensor& f = call.inputs[layout.found_inf()];
  EMBER_CHECK(f.dtype() == kFloat32 && f.numel() == 1 && f.device().is_cpu(), op_name(call.op),
              ": found_inf must be a float32 scalar on the cpu");
  return *static_cast<const float*>(f.raw_data()) != 0.0f;
}

void multi_tensor(const KernelCall& call) {
  switch (call.op) {
    case OpId::sgd_update:
      return sgd_update(call);
    case OpId::amp_unscale:
      return amp_unscale(call);
    default:
      return optimizer_update(call);  // the Adam family (optimizer_kernels.cpp)
  }
}

}  // namespace ember::kernels::cpu
