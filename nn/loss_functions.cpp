// Losses as functions: cross entropy, NLL, MSE, BCE with logits.
#include "core/ops.h"
#include "nn/functional.h"

namespace ember::nn {

const char* reduction_name(Reduction r) {
  switch (r) {
    case Reduction::None:
      return "none";
    case Reduction::Mean:
      return "mean";
    case Reduction::Sum:
      return "sum";
  }
  return "?";
}

namespace detail {
namespace {

Tensor reduce(const Tensor& per_element, Reduction r) {
  switch (r) {
    case Reduction::None:
      return per_element;
    case Reduction::Mean:
      return mean(per_element);
    case Reduction::Sum:
      return sum(per_element);
  }
  EMBER_FAIL("loss: unknown reduction ", static_cast<int>(r));
}

// A class-index problem as rows: logits [M, C] and targets [M] (int64), plus the target's own
// shape for reduction None.
struct ClassRows {
  Tensor input;   // [M, C]
  Tensor target;  // [M] int64
  Shape target_shape;
};

ClassRows class_rows(const Tensor& input, const Tensor& target, const char* who) {
  EMBER_CHECK(input.defined() && target.defined(), who, ": undefined input or target");
  EMBER_CHECK(is_floating(input.dtype()), who, ": input must be floating, got ",
              dtype_name(input.dtype()), " ", input.sizes());
  EMBER_CHECK(is_integral(target.dtype()), who, ": target must hold class indices (int64), got ",
              dtype_name(target.dtype()), " ", target.sizes(),
              "; class-probability targets are not supported");
  EMBER_CHECK(input.dim() >= 1, who, ": input must be [C], [N, C] or [N, C, d1, ...], got ",
              input.sizes());
  EMBER_CHECK(input.device() == target.device(), who, ": input is on ", input.device().str(),
              " but target is on ", target.device().str());
  Shape expected;
  for (int d = 0; d < input.dim(); ++d)
    if (d != (input.dim() == 1 ? 0 : 1)) expected.push_back(input.size(d));
  EMBER_CHECK(target.sizes() == expected, who, ": target of shape ", target.sizes(),
              " does not match input of shape ", input.sizes(), " (expected a target of shape ",
              expected, ")");
  const int64_t classes = input.dim() == 1 ? input.size(0) : input.size(1);
  Tensor rows = input;
  if (input.dim() >= 3) {  // class dim last: [N, d1, ..., C]
    Dims order{0};
    for (int d = 2; d < input.dim(); ++d) order.push_back(d);
    order.push_back(1);
    rows = input.permute(order);
  }
  rows = rows.reshape({target.numel(), classes});
  const Tensor t = target.dtype() == kInt64 ? target : cast(target, kInt64);
  return {rows, t.reshape({target.numel()}), target.sizes()};
}

// Index errors raised by kernels (targets out of range) get the loss's name in front.
template <class F>
Tensor named_errors(const char* who, F&& f) {
  try {
    return f();
  } catch (const Error& e) {
    EMBER_FAIL(who, ": ", e.what());
  }
}

// Mean over the targets that are not ignored (all ignored gives NaN, as in PyTorch).
Tensor reduce_counted(const Tensor& per, const Tensor& target, int64_t ignore_index, Reduction r,
                      const Shape& shape) {
  switch (r) {
    case Reduction::None:
      return per.reshape(shape);
    case Reduction::Sum:
      return sum(per);
    case Reduction::Mean:
      return div(sum(per), sum(ne(target, ignore_index)));
  }
  EMBER_FAIL("loss: unknown reduction ", static_cast<int>(r));
}

// log(1 + exp(z)) with exp's argument never above 0 (no overflow), written so that its gradient
// is sigmoid(z) everywhere, z = 0 included: -|z| as z - 2 relu(z) differentiates to 1 at 0
// (relu' = 0) or to -1 with relu(z) adding 1 (relu' = 1), either way summing to 1/2.
Tensor stable_softplus(const Tensor& z) {
  const Tensor r = relu(z);
  return add(r, log(add(exp(sub(z, mul(r, 2.0))), 1.0)));
}

void check_broadcasts_to(const Tensor& t, const Tensor& input, const char* what, const char* who) {
  if (!t.defined()) return;
  EMBER_CHECK(t.device() == input.device(), who, ": ", what, " is on ", t.device().str(),
              " but input is on ", input.device().str());
  bool ok = t.dim() <= input.dim();
  for (int i = 1; ok && i <= t.dim(); ++i) {
    const int64_t a = t.size(t.dim() - i);
    ok = a == 1 || a == input.size(input.dim() - i);
  }
  EMBER_CHECK(ok, who, ": ", what, " of shape ", t.sizes(), " does not broadcast to input ",
              input.sizes());
}

}  // namespace

Tensor cross_entropy(const Tensor& input, const Tensor& target,
                     const CrossEntropyLossOptions& options, const char* who) {
  EMBER_CHECK(options.label_smoothing() >= 0 && options.label_smoothing() <= 1, who,
              ": label_smoothing must be in [0, 1], got ", options.label_smoothing());
  const ClassRows c = class_rows(input, target, who);
  // Mean and sum happen inside the op: one kernel on the GPU, not the per-sample losses
  // followed by a count of the targets, a sum and a division.
  const Reduction r = options.reduction();
  const LossReduction lr = r == Reduction::Mean  ? LossReduction::Mean
                           : r == Reduction::Sum ? LossReduction::Sum
                                                 : LossReduction::None;
  const Tensor loss = named_errors(who, [&] {
    return cross_entropy_reduced(c.input, c.target, options.ignore_index(),
                                 options.label_smoothing(), lr);
  });
  return lr == LossReduction::None ? loss.reshape(c.target_shape) : loss;
}

Tensor nll_loss(const Tensor& input, const Tensor& target, const NLLLossOptions& options,
                const char* who) {
  const ClassRows c = class_rows(input, target, who);
  const Tensor valid = ne(c.target, options.ignore_index());
  // Ignored rows read class 0 (any valid index) and are then zeroed.
  const Tensor safe_target = where(valid, c.target, Scalar(int64_t{0}));
  const Tensor picked =
      named_errors(who, [&] { return gather(c.input, 1, safe_target.unsqueeze(1)).squeeze(1); });
  const Tensor per = where(valid, neg(picked), Scalar(0.0));
  return reduce_counted(per, c.target, options.ignore_index(), options.reduction(), c.target_shape);
}

Tensor mse_loss(const Tensor& input, const Tensor& target, const MSELossOptions& options,
                const char* who) {
  EMBER_CHECK(input.defined() && target.defined(), who, ": undefined input or target");
  EMBER_CHECK(input.sizes() == target.sizes(), who, ": input of shape ", input.sizes(),
              " and target of shape ", target.sizes(), " must have the same shape");
  EMBER_CHECK(is_floating(input.dtype()), who, ": input must be floating, got ",
              dtype_name(input.dtype()), " ", input.sizes());
  EMBER_CHECK(input.device() == target.device(), who, ": input is on ", input.device().str(),
              " but target is on ", target.device().str());
  const Tensor diff = sub(input, target);
  return reduce(mul(diff, diff), options.reduction());
}

Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const BCEWithLogitsLossOptions& options, const char* who) {
  EMBER_CHECK(input.defined() && target.defined(), who, ": undefined input or target");
  EMBER_CHECK(input.sizes() == target.sizes(), who, ": input of shape ", input.sizes(),
              " and target of shape ", target.sizes(), " must have the same shape");
  EMBER_CHECK(is_floating(input.dtype()) && is_floating(target.dtype()), who,
              ": input and target must be floating, got ", dtype_name(input.dtype()), " and ",
              dtype_name(target.dtype()));
  EMBER_CHECK(input.device() == target.device(), who, ": input is on ", input.device().str(),
              " but target is on ", target.device().str());
  check_broadcasts_to(options.weight(), input, "weight", who);
  check_broadcasts_to(options.pos_weight(), input, "pos_weight", who);
  Tensor per;
  if (!options.pos_weight().defined()) {
    // max(x, 0) - x y + log(1 + exp(-|x|))
    per = sub(stable_softplus(input), mul(input, target));
  } else {
    // (1 - y) x + (1 + (pw - 1) y) log(1 + exp(-x)), PyTorch's weighting of positives.
    const Tensor log_weight = add(mul(sub(options.pos_weight(), 1.0), target), 1.0);
    per = add(mul(sub(1.0, target), input), mul(log_weight, stable_softplus(neg(input))));
  }
  if (options.weight().defined()) per = mul(per, options.weight());
  return reduce(per, options.reduction());
}

}  // namespace detail

namespace functional {

Tensor cross_entropy(const Tensor& input, const Tensor& target,
                     const CrossEntropyLossOptions& options) {
  return detail::cross_entropy(input, target, options, "cross_entropy");
}
Tensor nll_loss(const Tensor& input, const Tensor& target, const NLLLossOptions& options) {
  return detail::nll_loss(input, target, options, "nll_loss");
}
Tensor mse_loss(const Tensor& input, const Tensor& target, const MSELossOptions& options) {
  return detail::mse_loss(input, target, options, "mse_loss");
}
Tensor binary_cross_entropy_with_logits(const Tensor& input, const Tensor& target,
                                        const BCEWithLogitsLossOptions& options) {
  return detail::binary_cross_entropy_with_logits(input, target, options,
                                                  "binary_cross_entropy_with_logits");
}

}  // namespace functional
}  // namespace ember::nn
