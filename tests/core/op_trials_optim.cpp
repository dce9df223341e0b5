// Op-table trials of the multi-tensor optimizer updates: sgd_update, three consecutive steps
// (step counts 0, 1, 2, a fresh gradient each time) against PyTorch's SGD written out here as
// a float64 loop. Parameters and momentum buffers are stored in their dtype after every step,
// so the reference rounds them there too.
#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "core/dispatch.h"
#include "core/op_table_harness.h"
#include "core/ops.h"

namespace ember::test::optable {
namespace {

struct SgdCase {
  std::vector<Shape> shapes;
  double lr, momentum, dampening, weight_decay;
  bool nesterov, maximize, buffers;
};

constexpr int kSteps = 3;

// The learning rate of step s: it changes between steps, as a scheduler would change it.
double lr_at(const SgdCase& k, int s) { return k.lr * (1 + 0.5 * s); }

std::vector<SgdCase> sgd_cases() {
  std::vector<SgdCase> v = {
      // plain
      {{{7}, {3, 5}}, 0.25, 0, 0, 0, false, false, false},
      // momentum with dampening and weight decay
      {{{4, 6}, {1}, {33}}, 0.2, 0.9, 0.1, 0.01, false, false, true},
      // nesterov (an empty parameter among them)
      {{{5, 5}, {0}, {2, 3, 4}}, 0.3, 0.9, 0, 0.05, true, false, true},
      // maximize with momentum and dampening
      {{{130}}, 0.15, 0.5, 0.3, 0.02, false, true, true},
      // maximize, weight decay, no momentum
      {{{9}, {2, 2}}, 0.2, 0, 0, 0.1, false, true, false},
      // nesterov with weight decay and maximize
      {{{17}}, 0.1, 0.8, 0, 0.03, true, true, true},
  };
  // More parameters than one CUDA launch takes.
  SgdCase many{{}, 0.2, 0.7, 0.2, 0.01, true, false, true};
  for (int i = 0; i < 70; ++i) many.shapes.push_back({i % 5 + 1});
  v.push_back(many);
  return v;
}

}  // namespace

// Inputs: params[n], then the gradients of step 0, 1 and 2 ([n] each), then the momentum
// buffers [n] (random: the first step must overwrite them). The call runs the three updates
// and returns every parameter and buffer, flattened and concatenated.
void sgd_update_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out) {
  for (const SgdCase& k : sgd_cases()) {
    const int64_t n = static_cast<int64_t>(k.shapes.size());
    Trial t;
    t.writes_inputs = true;
    std::vector<Vec> p(k.shapes.size()), buf(k.shapes.size());
    std::vector<std::vector<Vec>> g(kSteps, std::vector<Vec>(k.shapes.size()));
    for (int64_t i = 0; i < n; ++i)
      t.inputs.push_back(make_input(k.shapes[i], Layout::Contiguous, dt, c.domain, r, p[i]));
    for (int s = 0; s < kSteps; ++s)
      for (int64_t i = 0; i < n; ++i)
        t.inputs.push_back(make_input(k.shapes[i], Layout::Contiguous, dt, c.domain, r, g[s][i]));
    if (k.buffers)
      for (int64_t i = 0; i < n; ++i)
        t.inputs.push_back(make_input(k.shapes[i], Layout::Contiguous, dt, c.domain, r, buf[i]));
    std::ostringstream what;
    what << "sgd_update(" << n << " " << dtype_name(dt) << " tensors, lr " << k.lr
         << " (x1, x1.5, x2)"
         << ", momentum " << k.momentum << ", dampening " << k.dampening << ", weight_decay "
         << k.weight_decay << (k.nesterov ? ", nesterov" : "") << (k.maximize ? ", maximize" : "")
         << (k.buffers ? ", momentum buffers" : "") << "; 3 steps)";
    t.what = what.str();
    t.call = [k, n](const std::vector<Tensor>& in, Device dev) {
      Attrs a;
      a.num_tensors = n;
      a.nesterov = k.nesterov;
      a.maximize = k.maximize;
      a.momentum_buffers = k.buffers;
      for (int s = 0; s < kSteps; ++s) {
        std::vector<Tensor> args;
        args.push_back(
            test::make({lr_at(k, s), k.momentum, k.dampening, k.weight_decay}, {4}, kFloat32, dev));
        args.push_back(test::make({static_cast<double>(s)}, {}, kFloat32, dev));
        for (int64_t i = 0; i < n; ++i) args.push_back(in[static_cast<size_t>(i)]);
        for (int64_t i = 0; i < n; ++i) args.push_back(in[static_cast<size_t>((1 + s) * n + i)]);
        if (k.buffers)
          for (int64_t i = 0; i < n; ++i)
            args.push_back(in[static_cast<size_t>((1 + kSteps) * n + i)]);
        dispatch(OpId::sgd_update, std::span<const Tensor>(args), a);
      }
      std::vector<Tensor> flat;
      for (int64_t i = 0; i < n; ++i) flat.push_back(in[static_cast<size_t>(i)].flatten());
      if (k.buffers)
        for (int64_t i = 0; i < n; ++i)
          flat.push_back(in[static_cast<size_t>((1 + kSteps) * n + i)].flatten());
      return cat(flat, 0);
    };

    // The reference: hyperparameters as the float32 values the kernel reads, math in double,
    // parameters and buffers rounded to dt where they are stored. `mag` bounds the magnitude of
    // everything that went into a value: the error scale.
    const auto f32 = [](double v) { return static_cast<double>(static_cast<float>(v)); };
    const double mom = f32(k.momentum), keep = 1 - f32(k.dampening), wd = f32(k.weight_decay);
    std::vector<Vec> pmag(p.size()), bmag(p.size());
    for (int64_t i = 0; i < n; ++i) {
      pmag[i].resize(p[i].size());
      bmag[i].assign(p[i].size(), 0);
      for (size_t e = 0; e < p[i].size(); ++e) pmag[i][e] = std::fabs(p[i][e]);
    }
    for (int s = 0; s < kSteps; ++s) {
      const double lr = f32(lr_at(k, s));
      for (int64_t i = 0; i < n; ++i) {
        for (size_t e = 0; e < p[i].size(); ++e) {
          double d = k.maximize ? -g[s][i][e] : g[s][i][e];
          double dmag = std::fabs(d);
          if (wd != 0) {
            d += wd * p[i][e];
            dmag += wd * pmag[i][e];
          }
          if (k.buffers) {
            buf[i][e] = test::round_to(dt, s == 0 ? d : mom * buf[i][e] + keep * d);
            bmag[i][e] = s == 0 ? dmag : mom * bmag[i][e] + keep * dmag;
            if (k.nesterov) {
              d += mom * buf[i][e];
              dmag += mom * bmag[i][e];
            } else {
              d = buf[i][e];
              dmag = bmag[i][e];
            }
          }
          p[i][e] = test::round_to(dt, p[i][e] - lr * d);
          pmag[i][e] += lr * dmag;
        }
      }
    }
    // 16-bit values are rounded at every store on both sides; the kernel's float intermediates
    // may land a rounding one step apart from the double reference's, so allow a few units.
    const double slack = dt == kFloat16 || dt == kBFloat16 ? 4 : 1;
    int64_t total = 0;
    for (int64_t i = 0; i < n; ++i) {
      total += static_cast<int64_t>(p[i].size());
      t.expect.v.insert(t.expect.v.end(), p[i].begin(), p[i].end());
      for (double m : pmag[i]) t.expect.scale.push_back(slack * m);
    }
    if (k.buffers) {
      for (int64_t i = 0; i < n; ++i) {
        total += static_cast<int64_t>(buf[i].size());
        t.expect.v.insert(t.expect.v.end(), buf[i].begin(), buf[i].end());
        for (double m : bmag[i]) t.expect.scale.push_back(slack * m);
      }
    }
    t.expect.shape = {total};
    t.expect.dtype = dt;
    out.push_back(std::move(t));
  }
}

}  // namespace ember::test::optable

namespace ember::test::optable {

// amp_unscale: [inv_scale, found_inf, grads...]. The call unscales in place and returns every
// gradient, flattened and concatenated, then found_inf (in the gradients' dtype). The reference:
// g * inv_scale in float64, rounded to dt; found_inf 1 exactly when a gradient was not finite
// (the case that plants an infinity), else the 0 it started at.
void amp_unscale_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out) {
  struct Case {
    std::vector<Shape> shapes;
    double inv_scale;
    bool plant_inf;
  };
  std::vector<Case> cases = {{{{7}, {3, 5}}, 1.0 / 1024, false},
                             {{{130}, {0}, {4, 4}}, 0.3, false},
                             {{{9}, {33}}, 0.125, true}};
  Case many{{}, 0.7, false};
  for (int i = 0; i < 100; ++i) many.shapes.push_back({i % 7 + 1});  // more than one launch holds
  cases.push_back(many);
  for (const Case& k : cases) {
    const int64_t n = static_cast<int64_t>(k.shapes.size());
    Trial t;
    t.writes_inputs = true;
    std::vector<Vec> g(k.shapes.size());
    for (int64_t i = 0; i < n; ++i)
      t.inputs.push_back(make_input(k.shapes[i], Layout::Contiguous, dt, c.domain, r, g[i]));
    std::ostringstream what;
    what << "amp_unscale(" << n << " " << dtype_name(dt) << " tensors, inv_scale " << k.inv_scale
         << (k.plant_inf ? ", an infinity planted" : "") << ")";
    t.what = what.str();
    t.call = [k, n, dt](const std::vector<Tensor>& in, Device dev) {
      if (k.plant_inf) in[1].flatten().slice(0, 2, 3).fill_(INFINITY);
      const Tensor found = zeros({}, TensorOptions(kFloat32).device(dev));
      std::vector<Tensor> args = {test::make({k.inv_scale}, {1}, kFloat32, dev), found};
      for (int64_t i = 0; i < n; ++i) args.push_back(in[static_cast<size_t>(i)]);
      Attrs a;
      a.num_tensors = n;
      a.grads_only = true;
      dispatch(OpId::amp_unscale, std::span<const Tensor>(args), a);
      std::vector<Tensor> flat;
      for (int64_t i = 0; i < n; ++i) flat.push_back(in[static_cast<size_t>(i)].flatten());
      flat.push_back(found.to(dt).view({1}));
      return cat(flat, 0);
    };
    if (k.plant_inf) g[1][2] = INFINITY;
    const double inv = static_cast<float>(k.inv_scale);
    int64_t total = 0;
    for (const Vec& v : g) {
      total += static_cast<int64_t>(v.size());
      for (double x : v) {
        // (round_to's 16-bit encoder takes finite values only; an infinity stays one.)
        t.expect.v.push_back(std::isfinite(x) ? test::round_to(dt, x * inv) : x * inv);
        t.expect.scale.push_back(std::fabs(x * inv));
      }
    }
    t.expect.v.push_back(k.plant_inf ? 1.0 : 0.0);
    t.expect.scale.push_back(0);
    t.expect.shape = {total + 1};
    t.expect.dtype = dt;
    out.push_back(std::move(t));
  }
}

}  // namespace ember::test::optable
