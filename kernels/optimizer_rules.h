#pragma once
// The per-element update rules of adam_update, rmsprop_update and adagrad_update, shared by the
// CPU kernels (kernels/cpu/optimizer_kernels.cpp) and the CUDA ones
// (kernels/cuda/optimizer_kernels.cuh), so both devices compute one text.
//
// Each rule is PyTorch's single-tensor loop (torch/optim/{adam,adamw,rmsprop,adagrad}.py) in
// its order of operations: `a.mul_(s).add_(b, alpha=c)` is (a * s) + c * b, addcmul
// `a + v * b * c`, addcdiv `a + v * (b / c)`. Values are in the compute type Acc (float for
// float32 and 16-bit storage, double for float64); the scalars that PyTorch computes in Python
// floats (1 - beta, bias corrections, lr / bias correction, 1 - lr * weight_decay) are computed
// here in double from the float64 hyperparameters and the step, once per launch, then rounded
// to Acc as PyTorch rounds a Python scalar for a float tensor.
#include <cmath>

#include "core/macros.h"

namespace ember::kernels::optim_rules {

// The compute type's own square root on the host and the device (sqrt(float) on the host may
// otherwise resolve to the double one).
EMBER_HD float acc_sqrt(float x) { return sqrtf(x); }
EMBER_HD double acc_sqrt(double x) { return sqrt(x); }

// ---- Adam / AdamW: hyper = {lr, beta1, beta2, eps, weight_decay} --------------------------

template <class Acc>
struct AdamScalars {
  Acc beta1, one_minus_beta1, beta2, one_minus_beta2, eps, weight_decay;
  Acc decay;          // AdamW: 1 - lr * weight_decay
  Acc neg_step_size;  // -lr / (1 - beta1^t)
  Acc bc2_sqrt;       // sqrt(1 - beta2^t)
};

// `step`: the updates taken before this one (the kernel reads the old counter; t = step + 1).
template <class Acc>
EMBER_HD AdamScalars<Acc> adam_scalars(const double* h, float step) {
  const double lr = h[0], b1 = h[1], b2 = h[2], t = static_cast<double>(step) + 1.0;
  const double bc1 = 1.0 - pow(b1, t), bc2 = 1.0 - pow(b2, t);
  AdamScalars<Acc> s;
  s.beta1 = static_cast<Acc>(b1);
  s.one_minus_beta1 = static_cast<Acc>(1.0 - b1);
  s.beta2 = static_cast<Acc>(b2);
  s.one_minus_beta2 = static_cast<Acc>(1.0 - b2);
  s.eps = static_cast<Acc>(h[3]);
  s.weight_decay = static_cast<Acc>(h[4]);
  s.decay = static_cast<Acc>(1.0 - lr * h[4]);
  s.neg_step_size = static_cast<Acc>(-(lr / bc1));
  s.bc2_sqrt = static_cast<Acc>(acc_sqrt(bc2));
  return s;
}

struct AdamFlags {
  bool amsgrad, decoupled, maximize;
};

// One element: p, exp_avg m, exp_avg_sq v and (amsgrad) max_exp_avg_sq vmax, in place.
template <class Acc>
EMBER_HD void adam_element(Acc& p, Acc g, Acc& m, Acc& v, Acc& vmax, const AdamScalars<Acc>& s,
                           AdamFlags f) {
  Acc d = f.maximize ? -g : g;
  if (f.decoupled)
    p = p * s.decay;
  else if (s.weight_decay != Acc(0))
    d = d + s.weight_decay * p;
  m = m * s.beta1 + s.one_minus_beta1 * d;
  v = v * s.beta2 + s.one_minus_beta2 * d * d;
  Acc vhat = v;
  if (f.amsgrad) {
    vmax = (vmax != vmax || vmax > v) ? vmax : v;  // torch.maximum: a NaN on either side wins
    vhat = vmax;
  }
  const Acc denom = acc_sqrt(vhat) / s.bc2_sqrt + s.eps;
  p = p + s.neg_step_size * (m / denom);
}

// ---- RMSprop: hyper = {lr, alpha, eps, weight_decay, momentum} ----------------------------

template <class Acc>
struct RmspropScalars {
  Acc neg_lr, alpha, one_minus_alpha, eps, weight_decay, momentum;
};

template <class Acc>
EMBER_HD RmspropScalars<Acc> rmsprop_scalars(const double* h) {
  RmspropScalars<Acc> s;
  s.neg_lr = static_cast<Acc>(-h[0]);
  s.alpha = static_cast<Acc>(h[1]);
  s.one_minus_alpha = static_cast<Acc>(1.0 - h[1]);
  s.eps = static_cast<Acc>(h[2]);
  s.weight_decay = static_cast<Acc>(h[3]);
  s.momentum = static_cast<Acc>(h[4]);
  return s;
}

struct RmspropFlags {
  bool momentum, centered, maximize;
};

// square_avg sq, (momentum buffer buf), (grad_avg ga), in place.
template <class Acc>
EMBER_HD void rmsprop_element(Acc& p, Acc g, Acc& sq, Acc& buf, Acc& ga,
                              const RmspropScalars<Acc>& s, RmspropFlags f) {
  Acc d = f.maximize ? -g : g;
  if (s.weight_decay != Acc(0)) d = d + s.weight_decay * p;
  sq = sq * s.alpha + s.one_minus_alpha * d * d;
  Acc avg;
  if (f.centered) {
    ga = ga * s.alpha + s.one_minus_alpha * d;
    avg = acc_sqrt(sq + (-ga) * ga);
  } else {
    avg = acc_sqrt(sq);
  }
  avg = avg + s.eps;
  if (f.momentum) {
    buf = buf * s.momentum + d / avg;
    p = p + s.neg_lr * buf;
  } else {
    p = p + s.neg_lr * (d / avg);
  }
}

// ---- Adagrad: hyper = {lr, lr_decay, weight_decay, eps} -----------------------------------

template <class Acc>
struct AdagradScalars {
  Acc neg_clr, weight_decay, eps;
};

template <class Acc>
EMBER_HD AdagradScalars<Acc> adagrad_scalars(const double* h, float step) {
  // t = step + 1; clr = lr / (1 + (t - 1) * lr_decay)
  const double clr = h[0] / (1.0 + static_cast<double>(step) * h[1]);
  AdagradScalars<Acc> s;
  s.neg_clr = static_cast<Acc>(-clr);
  s.weight_decay = static_cast<Acc>(h[2]);
  s.eps = static_cast<Acc>(h[3]);
  return s;
}

// state_sum in place.
template <class Acc>
EMBER_HD void adagrad_element(Acc& p, Acc g, Acc& sum, const AdagradScalars<Acc>& s,
                              bool maximize) {
  Acc d = maximize ? -g : g;
  if (s.weight_decay != Acc(0)) d = d + s.weight_decay * p;
  sum = sum + d * d;
  const Acc std_dev = acc_sqrt(sum) + s.eps;
  p = p + s.neg_clr * (d / std_dev);
}

}  // namespace ember::kernels::optim_rules
