// CPU kernels of the Adam-family multi-tensor updates: adam_update (Adam, AdamW),
// rmsprop_update and adagrad_update, every parameter of a group in one call, in place. Inputs
// (validated by meta, core/meta.cpp; layout: MultiTensorLayout, core/dispatch.h):
//   [hyper float64[H], step float32 scalar (updates the group already took), params[n],
//    grads[n], then each state group [n]]
// The per-element rules are kernels/optimizer_rules.h, shared with the CUDA kernels. The
// hyperparameters and the step are read here on every call, so the optimizer changes them
// between calls with no new trace. With attrs.increment_step the step becomes step + 1 once every
// parameter is updated (the update itself uses the value read before). 16-bit floats compute in
// float and are rounded where they are stored; float64 computes in double.
#include <array>
#include <cstdint>
#include <type_traits>

#include "core/parallel.h"
#include "kernels/cpu/cpu_kernels.h"
#include "kernels/optimizer_rules.h"

namespace ember::kernels::cpu {
namespace {

namespace rules = optim_rules;

constexpr int kMaxStates = 3;

// The raw pointers of parameter i: its value, gradient and up to kMaxStates state tensors.
struct Slots {
  void* p;
  const void* g;
  std::array<void*, kMaxStates> s{};
};

// Runs `element(p, g, states...)` over every element of one parameter, in Acc, storing back in
// T. `states` unused by a rule point at a dummy.
template <class T, class Acc, int S, class F>
void for_each_element(const Slots& t, int64_t n, F&& element) {
  T* p = static_cast<T*>(t.p);
  const T* g = static_cast<const T*>(t.g);
  std::array<T*, kMaxStates> st{};
  for (int k = 0; k < S; ++k) st[k] = static_cast<T*>(t.s[k]);
  // Elements are independent: large parameters split over the intra-op pool (core/parallel.h).
  parallel_for(n, kParallelGrainElements, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      Acc pv = static_cast<Acc>(p[i]);
      std::array<Acc, kMaxStates> sv{};
      for (int k = 0; k < S; ++k) sv[k] = static_cast<Acc>(st[k][i]);
      element(pv, static_cast<Acc>(g[i]), sv);
      p[i] = T(pv);
      for (int k = 0; k < S; ++k) st[k][i] = T(sv[k]);
    }
  });
}

// Visits every parameter with its dtype's storage type T and compute type Acc.
template <class F>
void for_each_param(const KernelCall& call, F&& f) {
  const MultiTensorLayout layout = MultiTensorLayout::of(call.attrs);
  const auto& in = call.inputs;
  const std::string_view name = op_name(call.op);
  EMBER_CHECK(layout.n > 0 && in.size() == layout.inputs() && layout.state_groups <= kMaxStates,
              name, ": expected ", layout.inputs(), " tensors for ", layout.n,
              " parameters, got ", in.size());
  for (int64_t i = 0; i < layout.n; ++i) {
    const Tensor& p = in[layout.param(i)];
    Slots t{p.raw_data(), in[layout.grad(i)].raw_data()};
    for (int k = 0; k < layout.state_groups; ++k) {
      const Tensor& s = in[layout.state(k, i)];
      EMBER_CHECK(s.is_contiguous() && s.sizes() == p.sizes() && s.dtype() == p.dtype(), name,
                  ": state ", k, " of parameter ", i, " must be a contiguous ",
                  dtype_name(p.dtype()), " ", p.sizes());
      t.s[k] = s.raw_data();
    }
    if (p.numel() == 0) continue;
    visit_dtype(p.dtype(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      if constexpr (std::is_integral_v<T>) {
        EMBER_FAIL(name, ": parameter ", i, " has dtype ", dtype_name(p.dtype()),
                   "; expected a floating dtype");
      } else {
        using Acc = std::conditional_t<std::is_same_v<T, double>, double, float>;
        f(T{}, Acc{}, t, p.numel());
      }
    });
  }
}

const double* hyper_of(const KernelCall& call, int64_t want) {
  const Tensor& h = call.inputs[MultiTensorLayout::kHyper];
  EMBER_CHECK(h.dtype() == kFloat64 && h.numel() == want && h.is_contiguous(), op_name(call.op),
              ": expected float64 hyperparameters [", want, "], got ", dtype_name(h.dtype()), " ",
              h.sizes());
  return static_cast<const double*>(h.raw_data());
}

float* step_of(const KernelCall& call) {
  const Tensor& s = call.inputs[MultiTensorLayout::kStep];
  EMBER_CHECK(s.dtype() == kFloat32 && s.numel() == 1, op_name(call.op),
              ": expected a float32 step, got ", dtype_name(s.dtype()), " ", s.sizes());
  return static_cast<float*>(s.raw_data());
}

void adam_update(const KernelCall& call) {
  const Attrs& a = call.attrs;
  const double* h = hyper_of(call, 5);
  float* const step_cell = step_of(call);
  const float step = *step_cell;
  const rules::AdamFlags flags{a.amsgrad, a.decoupled_weight_decay, a.maximize};
  const auto sf = rules::adam_scalars<float>(h, step);
  const auto sd = rules::adam_scalars<double>(h, step);
  for_each_param(call, [&](auto tv, auto accv, const Slots& t, int64_t n) {
    using T = decltype(tv);
    using Acc = decltype(accv);
    const auto& s = [&]() -> const rules::AdamScalars<Acc>& {
      if constexpr (std::is_same_v<Acc, double>) return sd;
      else return sf;
    }();
    auto element = [&](Acc& p, Acc g, std::array<Acc, kMaxStates>& st) {
      rules::adam_element<Acc>(p, g, st[0], st[1], st[2], s, flags);
    };
    if (a.amsgrad)
      for_each_element<T, Acc, 3>(t, n, element);
    else
      for_each_element<T, Acc, 2>(t, n, element);
  });
  if (a.increment_step) *step_cell = step + 1.0f;
}

void rmsprop_update(const KernelCall& call) {
  const Attrs& a = call.attrs;
  const double* h = hyper_of(call, 5);
  float* const step_cell = step_of(call);
  const float step = *step_cell;
  const rules::RmspropFlags flags{a.momentum_buffers, a.centered, a.maximize};
  const auto sf = rules::rmsprop_scalars<float>(h);
  const auto sd = rules::rmsprop_scalars<double>(h);
  // States in layout order: square_avg, (momentum_buffer), (grad_avg).
  const int buf_at = a.momentum_buffers ? 1 : 0;
  const int avg_at = 1 + buf_at;
  for_each_param(call, [&](auto tv, auto accv, const Slots& t, int64_t n) {
    using T = decltype(tv);
    using Acc = decltype(accv);
    const auto& s = [&]() -> const rules::RmspropScalars<Acc>& {
      if constexpr (std::is_same_v<Acc, double>) return sd;
      else return sf;
    }();
    Acc unused{};
    auto element = [&](Acc& p, Acc g, std::array<Acc, kMaxStates>& st) {
      rules::rmsprop_element<Acc>(p, g, st[0], a.momentum_buffers ? st[buf_at] : unused,
                                  a.centered ? st[avg_at] : unused, s, flags);
    };
    const int states = 1 + (a.momentum_buffers ? 1 : 0) + (a.centered ? 1 : 0);
    if (states == 1) for_each_element<T, Acc, 1>(t, n, element);
    if (states == 2) for_each_element<T, Acc, 2>(t, n, element);
    if (states == 3) for_each_element<T, Acc, 3>(t, n, element);
  });
  if (a.increment_step) *step_cell = step + 1.0f;
}

void adagrad_update(const KernelCall& call) {
  const Attrs& a = call.attrs;
  const double* h = hyper_of(call, 4);
  float* const step_cell = step_of(call);
  const float step = *step_cell;
  const auto sf = rules::adagrad_scalars<float>(h, step);
  const auto sd = rules::adagrad_scalars<double>(h, step);
  for_each_param(call, [&](auto tv, auto accv, const Slots& t, int64_t n) {
    using T = decltype(tv);
    using Acc = decltype(accv);
    const auto& s = [&]() -> const rules::AdagradScalars<Acc>& {
      if constexpr (std::is_same_v<Acc, double>) return sd;
      else return sf;
    }();
    for_each_element<T, Acc, 1>(t, n, [&](Acc& p, Acc g, std::array<Acc, kMaxStates>& st) {
      rules::adagrad_element<Acc>(p, g, st[0], s, a.maximize);
    });
  });
  if (a.increment_step) *step_cell = step + 1.0f;
}

}  // namespace

void optimizer_update(const KernelCall& call) {
  if (found_inf_set(call)) return;  // GradScaler's skipped step: nothing moves, nor the count
  switch (call.op) {
    case OpId::adam_update:
      return adam_update(call);
    case OpId::rmsprop_update:
      return rmsprop_update(call);
    case OpId::adagrad_update:
      return adagrad_update(call);
    default:
      EMBER_FAIL(op_name(call.op), ": not an Adam-family update");
  }
}

}  // namespace ember::kernels::cpu
