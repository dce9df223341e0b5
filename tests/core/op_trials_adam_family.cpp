// Op-table trials of adam_update, rmsprop_update and adagrad_update: three consecutive steps
// (step counts 0, 1, 2; a fresh gradient and a different lr each time, as a scheduler sets
// them) from random state, against PyTorch's single-tensor loops written out here in float64
// (torch/optim/{adam,adamw,rmsprop,adagrad}.py), independent of kernels/optimizer_rules.h.
// Parameters and states are rounded to their dtype where they are stored, so the reference
// rounds them there too.
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "core/dispatch.h"
#include "core/op_table_harness.h"
#include "core/ops.h"

namespace ember::test::optable {
namespace {

constexpr int kSteps = 3;

struct Case {
  std::vector<Shape> shapes;
  std::vector<double> hyper;  // the op's float64 hyperparameters (lr first)
  bool f1 = false, f2 = false, f3 = false;  // the op's flags (see states_of / flags_of)
  bool maximize = false;
};

double lr_at(double lr, int s) { return lr * (1 + 0.5 * s); }

// States per parameter and their names, by op and flags.
int states_of(OpId op, const Case& k) {
  if (op == OpId::adam_update) return k.f1 ? 3 : 2;             // f1 amsgrad, f2 decoupled
  if (op == OpId::rmsprop_update) return 1 + k.f1 + k.f2;       // f1 momentum, f2 centered
  return 1;                                                      // adagrad: sum
}

Attrs attrs_of(OpId op, const Case& k, int64_t n) {
  Attrs a;
  a.num_tensors = n;
  a.num_states = states_of(op, k);
  a.maximize = k.maximize;
  if (op == OpId::adam_update) {
    a.amsgrad = k.f1;
    a.decoupled_weight_decay = k.f2;
  } else if (op == OpId::rmsprop_update) {
    a.momentum_buffers = k.f1;
    a.centered = k.f2;
  }
  return a;
}

std::vector<Case> cases_of(OpId op) {
  std::vector<Case> v;
  if (op == OpId::adam_update) {
    // {lr, beta1, beta2, eps, weight_decay}
    v.push_back({{{7}, {3, 5}}, {0.1, 0.9, 0.999, 1e-8, 0}, false, false, false, false});
    v.push_back({{{4, 6}, {1}, {33}}, {0.05, 0.8, 0.99, 1e-6, 0.1}, true, false, false, false});
    v.push_back({{{5, 5}, {0}, {2, 3, 4}}, {0.2, 0.85, 0.995, 1e-3, 0.05}, false, true, false,
                 true});
    v.push_back({{{130}}, {0.1, 0.5, 0.9, 1e-8, 0.02}, true, true, false, true});
  } else if (op == OpId::rmsprop_update) {
    // {lr, alpha, eps, weight_decay, momentum}
    v.push_back({{{7}, {3, 5}}, {0.05, 0.99, 1e-8, 0, 0}, false, false, false, false});
    v.push_back({{{4, 6}, {1}}, {0.02, 0.9, 1e-6, 0.1, 0.5}, true, false, false, true});
    v.push_back({{{33}, {0}}, {0.03, 0.8, 1e-4, 0, 0}, false, true, false, false});
    v.push_back({{{130}}, {0.01, 0.95, 1e-8, 0.01, 0.9}, true, true, false, false});
  } else {
    // {lr, lr_decay, weight_decay, eps}
    v.push_back({{{7}, {3, 5}}, {0.1, 0, 0, 1e-10}, false, false, false, false});
    v.push_back({{{4, 6}, {0}, {33}}, {0.05, 0.1, 0.02, 1e-6}, false, false, false, true});
  }
  // More parameters than one CUDA launch takes.
  Case many = v.back();
  many.shapes.clear();
  for (int i = 0; i < 70; ++i) many.shapes.push_back({i % 5 + 1});
  v.push_back(many);
  return v;
}

// One element's update in float64, PyTorch's order; `st` in layout order; returns nothing,
// updates p and st in place, rounding stores to dt.
void reference_step(OpId op, const Case& k, const std::vector<double>& h, int step, DType dt,
                    double& p, double g, std::vector<double>& st) {
  auto r = [&](double x) { return round_to(dt, x); };
  const double f32lr = h[0];
  double d = k.maximize ? -g : g;
  const double t = step + 1;
  if (op == OpId::adam_update) {
    const double b1 = h[1], b2 = h[2], eps = h[3], wd = h[4];
    if (k.f2)
      p = r(p * (1 - f32lr * wd));
    else if (wd != 0)
      d = d + wd * p;
    st[0] = r(st[0] * b1 + (1 - b1) * d);
    st[1] = r(st[1] * b2 + (1 - b2) * d * d);
    double vhat = st[1];
    if (k.f1) vhat = st[2] = std::max(st[2], st[1]);
    const double denom = std::sqrt(vhat) / std::sqrt(1 - std::pow(b2, t)) + eps;
    p = r(p - f32lr / (1 - std::pow(b1, t)) * st[0] / denom);
  } else if (op == OpId::rmsprop_update) {
    const double alpha = h[1], eps = h[2], wd = h[3], mom = h[4];
    if (wd != 0) d = d + wd * p;
    st[0] = r(st[0] * alpha + (1 - alpha) * d * d);
    double avg;
    if (k.f2) {
      double& ga = st[k.f1 ? 2 : 1];
      ga = r(ga * alpha + (1 - alpha) * d);
      avg = std::sqrt(st[0] - ga * ga) + eps;
    } else {
      avg = std::sqrt(st[0]) + eps;
    }
    if (k.f1) {
      st[1] = r(st[1] * mom + d / avg);
      p = r(p - f32lr * st[1]);
    } else {
      p = r(p - f32lr * d / avg);
    }
  } else {
    const double lr_decay = h[1], wd = h[2], eps = h[3];
    if (wd != 0) d = d + wd * p;
    const double clr = f32lr / (1 + (t - 1) * lr_decay);
    st[0] = r(st[0] + d * d);
    p = r(p - clr * d / (std::sqrt(st[0]) + eps));
  }
}

// Squared-average states start non-negative (|x|), RMSprop's grad_avg at 0, so the centered
// variance stays non-negative; everything else from the input as drawn.
double initial_state(OpId op, const Case& k, int state, double x) {
  if (op == OpId::adam_update) return state == 0 ? x : std::fabs(x);
  if (op == OpId::rmsprop_update) {
    if (state == 0) return std::fabs(x);
    if (k.f2 && state == (k.f1 ? 2 : 1)) return 0;
    return x;
  }
  return std::fabs(x);
}

void adam_family_trials(const Coverage& c, DType dt, Rng& rng, std::vector<Trial>& out) {
  const OpId op = c.op;
  for (const Case& k : cases_of(op)) {
    const int64_t n = static_cast<int64_t>(k.shapes.size());
    const int S = states_of(op, k);
    Trial t;
    t.writes_inputs = true;
    std::vector<Vec> p(n);
    std::vector<std::vector<Vec>> g(kSteps, std::vector<Vec>(n));
    std::vector<std::vector<Vec>> st(S, std::vector<Vec>(n));
    for (int64_t i = 0; i < n; ++i)
      t.inputs.push_back(make_input(k.shapes[i], Layout::Contiguous, dt, c.domain, rng, p[i]));
    for (int s = 0; s < kSteps; ++s)
      for (int64_t i = 0; i < n; ++i)
        t.inputs.push_back(make_input(k.shapes[i], Layout::Contiguous, dt, c.domain, rng, g[s][i]));
    for (int j = 0; j < S; ++j)
      for (int64_t i = 0; i < n; ++i)
        t.inputs.push_back(make_input(k.shapes[i], Layout::Contiguous, dt, c.domain, rng, st[j][i]));
    std::ostringstream what;
    what << op_name(op) << "(" << n << " " << dtype_name(dt) << " tensors, hyper {";
    for (double v : k.hyper) what << v << " ";
    what << "} flags " << k.f1 << k.f2 << (k.maximize ? " maximize" : "") << "; 3 steps)";
    t.what = what.str();
    t.call = [op, k, n, S](const std::vector<Tensor>& in, Device dev) {
      const size_t states_at = static_cast<size_t>((1 + kSteps) * n);
      // The states' starting values (see initial_state), made on the device in place.
      for (int j = 0; j < S; ++j)
        for (int64_t i = 0; i < n; ++i) {
          Tensor s = in[states_at + static_cast<size_t>(j * n + i)];
          if (op == OpId::rmsprop_update && k.f2 && j == (k.f1 ? 2 : 1))
            s.zero_();
          else if (!(op == OpId::adam_update && j == 0) &&
                   !(op == OpId::rmsprop_update && j == 1 && k.f1))
            s.copy_(abs(s));
        }
      const Attrs a = attrs_of(op, k, n);
      for (int s = 0; s < kSteps; ++s) {
        std::vector<double> h = k.hyper;
        h[0] = lr_at(h[0], s);
        std::vector<Tensor> args;
        args.push_back(test::make(h, {static_cast<int64_t>(h.size())}, kFloat64, dev));
        args.push_back(test::make({static_cast<double>(s)}, {}, kFloat32, dev));
        for (int64_t i = 0; i < n; ++i) args.push_back(in[static_cast<size_t>(i)]);
        for (int64_t i = 0; i < n; ++i) args.push_back(in[static_cast<size_t>((1 + s) * n + i)]);
        for (int j = 0; j < S; ++j)
          for (int64_t i = 0; i < n; ++i) args.push_back(in[states_at + static_cast<size_t>(j * n + i)]);
        dispatch(op, std::span<const Tensor>(args), a);
      }
      std::vector<Tensor> flat;
      for (int64_t i = 0; i < n; ++i) flat.push_back(in[static_cast<size_t>(i)].flatten());
      for (int j = 0; j < S; ++j)
        for (int64_t i = 0; i < n; ++i)
          flat.push_back(in[states_at + static_cast<size_t>(j * n + i)].flatten());
      return cat(flat, 0);
    };

    // The reference, with a magnitude per value: its start plus every change it went through
    // (the error scale, since the kernel's float intermediates round differently).
    std::vector<Vec> pmag(n);
    std::vector<std::vector<Vec>> smag(S, std::vector<Vec>(n));
    for (int64_t i = 0; i < n; ++i) {
      for (int j = 0; j < S; ++j)
        for (double& x : st[j][i]) x = initial_state(op, k, j, x);
      pmag[i].resize(p[i].size());
      for (size_t e = 0; e < p[i].size(); ++e) pmag[i][e] = std::fabs(p[i][e]);
      for (int j = 0; j < S; ++j) {
        smag[j][i].resize(p[i].size());
        for (size_t e = 0; e < p[i].size(); ++e) smag[j][i][e] = std::fabs(st[j][i][e]);
      }
    }
    for (int s = 0; s < kSteps; ++s) {
      std::vector<double> h = k.hyper;
      h[0] = lr_at(h[0], s);
      for (int64_t i = 0; i < n; ++i)
        for (size_t e = 0; e < p[i].size(); ++e) {
          std::vector<double> sv(S);
          for (int j = 0; j < S; ++j) sv[j] = st[j][i][e];
          const double p0 = p[i][e];
          reference_step(op, k, h, s, dt, p[i][e], g[s][i][e], sv);
          pmag[i][e] += std::fabs(p[i][e] - p0);
          for (int j = 0; j < S; ++j) {
            smag[j][i][e] += std::fabs(sv[j] - st[j][i][e]) + std::fabs(sv[j]);
            st[j][i][e] = sv[j];
          }
        }
    }
    const double slack = dt == kFloat16 || dt == kBFloat16 ? 4 : 2;
    int64_t total = 0;
    for (int64_t i = 0; i < n; ++i) {
      total += static_cast<int64_t>(p[i].size());
      t.expect.v.insert(t.expect.v.end(), p[i].begin(), p[i].end());
      for (double m : pmag[i]) t.expect.scale.push_back(slack * m);
    }
    for (int j = 0; j < S; ++j)
      for (int64_t i = 0; i < n; ++i) {
        total += static_cast<int64_t>(p[i].size());
        t.expect.v.insert(t.expect.v.end(), st[j][i].begin(), st[j][i].end());
        for (double m : smag[j][i]) t.expect.scale.push_back(slack * m);
      }
    t.expect.shape = {total};
    t.expect.dtype = dt;
    out.push_back(std::move(t));
  }
}

}  // namespace

void adam_update_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out) {
  adam_family_trials(c, dt, r, out);
}
void rmsprop_update_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out) {
  adam_family_trials(c, dt, r, out);
}
void adagrad_update_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out) {
  adam_family_trials(c, dt, r, out);
}

}  // namespace ember::test::optable
