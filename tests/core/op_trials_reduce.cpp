// Op-table trials of reductions, matrix products, softmax and cross entropy.
#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "core/dispatch.h"
#include "core/factory.h"
#include "core/op_table_harness.h"
#include "core/ops.h"

namespace ember::test::optable {

// Groups the elements of `x` by their position outside `dims`; each group in row-major order of
// the reduced dims. Returns the output shape.
namespace {

Shape reduce_groups(const Vec& x, const Shape& shape, const std::vector<int>& dims, bool keepdim,
                    std::vector<Vec>& groups) {
  Shape out, kept;
  for (int d = 0; d < shape.size(); ++d) {
    const bool red = std::find(dims.begin(), dims.end(), d) != dims.end();
    if (!red) kept.push_back(shape[d]);
    if (!red)
      out.push_back(shape[d]);
    else if (keepdim)
      out.push_back(1);
  }
  groups.assign(static_cast<size_t>(numel_of(kept)), {});
  for (size_t i = 0; i < x.size(); ++i) {
    const std::vector<int64_t> idx = unravel(static_cast<int64_t>(i), shape);
    std::vector<int64_t> k;
    for (int d = 0; d < shape.size(); ++d)
      if (std::find(dims.begin(), dims.end(), d) == dims.end()) k.push_back(idx[d]);
    groups[static_cast<size_t>(ravel(k, kept))].push_back(x[i]);
  }
  return out;
}

struct ReduceCase {
  ShapeLayout in;
  Dims dims;
  bool keepdim;
};

// value and error scale of one group
using GroupRef = std::pair<double, double> (*)(const Vec&);

std::pair<double, double> ref_sum(const Vec& g) {
  double s = 0, m = 0;
  for (double x : g) s += x, m += std::fabs(x);
  return {s, m};
}
std::pair<double, double> ref_mean(const Vec& g) {
  auto [s, m] = ref_sum(g);
  return {s / g.size(), m / g.size()};
}
std::pair<double, double> ref_amax(const Vec& g) {
  return {*std::max_element(g.begin(), g.end()), 0};
}
std::pair<double, double> ref_amin(const Vec& g) {
  return {*std::min_element(g.begin(), g.end()), 0};
}
std::pair<double, double> ref_argmax(const Vec& g) {
  return {static_cast<double>(std::max_element(g.begin(), g.end()) - g.begin()), 0};  // first max
}
std::pair<double, double> ref_logsumexp(const Vec& g) {
  const double m = *std::max_element(g.begin(), g.end());
  double s = 0;
  for (double x : g) s += std::exp(x - m);
  return {m + std::log(s), std::fabs(m) + 1};
}

}  // namespace

void reduce_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out) {
  using L = Layout;
  const std::vector<ReduceCase> cases = {
      {{{}, L::Contiguous}, {}, false},           {{{1}, L::Contiguous}, {0}, false},
      {{{7}, L::Contiguous}, {}, false},          {{{7}, L::Strided}, {0}, true},
      {{{3, 5}, L::Transposed}, {1}, false},      {{{3, 5}, L::Contiguous}, {0}, true},
      {{{3, 5}, L::Expanded}, {-2}, false},       {{{2, 3, 17}, L::Contiguous}, {0, 2}, false},
      {{{2, 3, 17}, L::Strided}, {1}, true},      {{{2, 3, 17}, L::Transposed}, {}, false},
      {{{2, 3, 17}, L::Expanded}, {-1, 0}, true}, {{{2, 3, 17}, L::Contiguous}, {2}, false},
  };
  const OpId op = c.op;
  GroupRef ref = op == OpId::sum      ? ref_sum
                 : op == OpId::mean   ? ref_mean
                 : op == OpId::amax   ? ref_amax
                 : op == OpId::amin   ? ref_amin
                 : op == OpId::argmax ? ref_argmax
                                      : ref_logsumexp;
  const DType odt = out_dtype(op, compute_dtype(op, dt));
  for (const ReduceCase& k : cases) {
    if (op == OpId::argmax && k.dims.size() > 1) continue;  // argmax: one dim or all
    if (op == OpId::logsumexp && k.in.shape.size() == 0) continue;
    Trial t;
    Vec x;
    t.inputs.push_back(make_input(k.in.shape, k.in.layout, dt, c.domain, r, x));
    std::ostringstream w;
    w << op_name(op) << "(" << t.inputs[0].str() << ", dims " << k.dims << ", keepdim " << k.keepdim
      << ")";
    t.what = w.str();
    const Dims dims = k.dims;
    const bool kd = k.keepdim;
    t.call = [op, dims, kd](const std::vector<Tensor>& in, Device) {
      switch (op) {
        case OpId::sum:
          return sum(in[0], dims, kd);
        case OpId::mean:
          return mean(in[0], dims, kd);
        case OpId::amax:
          return amax(in[0], dims, kd);
        case OpId::amin:
          return amin(in[0], dims, kd);
        case OpId::argmax:
          return dims.empty() ? argmax(in[0]) : argmax(in[0], dims[0], kd);
        default:
          return logsumexp(in[0], dims, kd);
      }
    };
    std::vector<int> rd;
    const int nd = k.in.shape.size();
    for (int64_t d : k.dims) rd.push_back(static_cast<int>(d < 0 ? d + nd : d));
    if (rd.empty())
      for (int d = 0; d < nd; ++d) rd.push_back(d);
    std::vector<Vec> groups;
    // argmax over all dims gives a 0-dim result whatever keepdim says (it takes no keepdim).
    t.expect.shape =
        reduce_groups(x, k.in.shape, rd, kd && !(op == OpId::argmax && dims.empty()), groups);
    t.expect.dtype = odt;
    for (const Vec& g : groups) {
      const auto [v, s] = ref(g);
      t.expect.v.push_back(v);
      t.expect.scale.push_back(s);
    }
    out.push_back(std::move(t));
  }
}

// ---- matrix products ----------------------------------------------------------------------

void mm_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out) {
  using L = Layout;
  struct Case {
    int64_t m, k, n;
    L la, lb;
  };
  const std::vector<Case> cases = {
      {1, 1, 1, L::Contiguous, L::Contiguous}, {3, 7, 5, L::Contiguous, L::Contiguous},
      {3, 7, 5, L::Transposed, L::Contiguous}, {2, 17, 3, L::Contiguous, L::Transposed},
      {5, 4, 6, L::Strided, L::Strided},       {4, 9, 2, L::Expanded, L::Transposed},
      {1, 33, 7, L::Transposed, L::Strided},
  };
  for (const Case& k : cases) {
    Trial t;
    Vec a, b;
    t.inputs.push_back(make_input({k.m, k.k}, k.la, dt, c.domain, r, a));
    t.inputs.push_back(make_input({k.k, k.n}, k.lb, dt, c.domain, r, b));
    t.what = "mm(" + t.inputs[0].str() + ", " + t.inputs[1].str() + ")";
    t.call = [](const std::vector<Tensor>& in, Device) { return mm(in[0], in[1]); };
    t.expect.shape = {k.m, k.n};
    t.expect.dtype = dt;
    for (int64_t i = 0; i < k.m; ++i)
      for (int64_t j = 0; j < k.n; ++j) {
        double s = 0, m = 0;
        for (int64_t p = 0; p < k.k; ++p) {
          const double term = a[i * k.k + p] * b[p * k.n + j];
          s += term;
          m += std::fabs(term);
        }
        t.expect.v.push_back(s);
        t.expect.scale.push_back(m);
      }
    out.push_back(std::move(t));
  }
}

void bmm_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out) {
  using L = Layout;
  struct Case {
    int64_t bs, m, k, n;
    L la, lb;
  };
  // Expanded with ndim 3 stretches the batch dim: a batch stride of 0.
  const std::vector<Case> cases = {
      {1, 1, 1, 1, L::Contiguous, L::Contiguous}, {2, 3, 4, 5, L::Contiguous, L::Contiguous},
      {2, 3, 4, 5, L::Transposed, L::Expanded},   {3, 2, 7, 1, L::Strided, L::Transposed},
      {3, 5, 3, 2, L::Expanded, L::Strided},
  };
  for (const Case& k : cases) {
    Trial t;
    Vec a, b;
    t.inputs.push_back(make_input({k.bs, k.m, k.k}, k.la, dt, c.domain, r, a));
    t.inputs.push_back(make_input({k.bs, k.k, k.n}, k.lb, dt, c.domain, r, b));
    t.what = "bmm(" + t.inputs[0].str() + ", " + t.inputs[1].str() + ")";
    t.call = [](const std::vector<Tensor>& in, Device) { return bmm(in[0], in[1]); };
    t.expect.shape = {k.bs, k.m, k.n};
    t.expect.dtype = dt;
    for (int64_t q = 0; q < k.bs; ++q)
      for (int64_t i = 0; i < k.m; ++i)
        for (int64_t j = 0; j < k.n; ++j) {
          double s = 0, m = 0;
          for (int64_t p = 0; p < k.k; ++p) {
            const double term = a[(q * k.m + i) * k.k + p] * b[(q * k.k + p) * k.n + j];
            s += term;
            m += std::fabs(term);
          }
          t.expect.v.push_back(s);
          t.expect.scale.push_back(m);
        }
    out.push_back(std::move(t));
  }
}

// ---- softmax and losses -------------------------------------------------------------------

void softmax_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out) {
  using L = Layout;
  struct Case {
    ShapeLayout in;
    int64_t dim;
  };
  const std::vector<Case> cases = {
      {{{1}, L::Contiguous}, 0},      {{{7}, L::Contiguous}, 0},
      {{{3, 5}, L::Contiguous}, 1},   {{{3, 5}, L::Transposed}, 0},
      {{{2, 3, 17}, L::Strided}, -1}, {{{2, 3, 17}, L::Contiguous}, 1},
      {{{2, 3, 17}, L::Expanded}, 0}, {{{4, 33}, L::Contiguous}, -1},
  };
  const bool log_form = c.op == OpId::log_softmax;
  for (const Case& k : cases) {
    Trial t;
    Vec x;
    t.inputs.push_back(make_input(k.in.shape, k.in.layout, dt, c.domain, r, x));
    t.what = std::string(op_name(c.op)) + "(" + t.inputs[0].str() + ", dim " +
             std::to_string(k.dim) + ")";
    const int64_t dim = k.dim;
    t.call = [log_form, dim](const std::vector<Tensor>& in, Device) {
      return log_form ? log_softmax(in[0], dim) : softmax(in[0], dim);
    };
    const Shape& s = k.in.shape;
    const int d = static_cast<int>(dim < 0 ? dim + s.size() : dim);
    t.expect.shape = s;
    t.expect.dtype = dt;
    t.expect.v.resize(x.size());
    t.expect.scale.resize(x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      std::vector<int64_t> idx = unravel(static_cast<int64_t>(i), s);
      double m = -INFINITY, sum = 0, mag = 0;
      for (int64_t j = 0; j < s[d]; ++j) {
        idx[d] = j;
        m = std::max(m, x[static_cast<size_t>(ravel(idx, s))]);
      }
      for (int64_t j = 0; j < s[d]; ++j) {
        idx[d] = j;
        const double v = x[static_cast<size_t>(ravel(idx, s))];
        sum += std::exp(v - m);
        mag = std::max(mag, std::fabs(v));
      }
      const double lse = m + std::log(sum);
      t.expect.v[i] = log_form ? x[i] - lse : std::exp(x[i] - lse);
      t.expect.scale[i] = log_form ? mag + std::fabs(lse) : 0;
    }
    out.push_back(std::move(t));
  }
}

namespace {

// Class targets for n samples of `cls` classes: with the default ignore_index (-100) about one
// sample in five is ignored; with a custom one (2), class 2 is drawn often enough to hit it.
Input ce_targets(int64_t n, int64_t cls, int64_t ignore_index, Rng& r, Vec& target) {
  target.assign(static_cast<size_t>(n), 0);
  for (auto& v : target) {
    v = static_cast<double>(integer(r, 0, cls - 1));
    if (ignore_index == -100 && integer(r, 0, 4) == 0) v = -100;
  }
  return int64_input(target, {n});
}

// Per row of x ([n, cls] row-major): the logsumexp, the plain sum and the largest magnitude.
struct RowStats {
  double lse, sum, mag;
};
RowStats row_stats(const double* row, int64_t cls) {
  double m = -INFINITY, s = 0, sum = 0, mag = 0;
  for (int64_t j = 0; j < cls; ++j) m = std::max(m, row[j]);
  for (int64_t j = 0; j < cls; ++j) {
    s += std::exp(row[j] - m);
    sum += row[j];
    mag = std::max(mag, std::fabs(row[j]));
  }
  return {m + std::log(s), sum, mag};
}

Attrs ce_attrs(int64_t ignore_index, double label_smoothing) {
  Attrs a;
  a.ignore_index = ignore_index;
  a.label_smoothing = label_smoothing;
  return a;
}

}  // namespace

// loss_i = lse(x_i) - (1 - e) x_i[t_i] - e/C sum_c x_i[c]; 0 for ignored samples.
void cross_entropy_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out) {
  using L = Layout;
  struct Case {
    int64_t n, cls;
    L layout;
    int64_t ignore_index;
    double smoothing;
  };
  const std::vector<Case> cases = {
      {1, 1, L::Contiguous, -100, 0},       {5, 7, L::Contiguous, -100, 0},
      {4, 3, L::Transposed, -100, 0},       {6, 10, L::Strided, -100, 0},
      {9, 4, L::Contiguous, 2, 0},          {3, 65, L::Expanded, -100, 0},
      {5, 7, L::Contiguous, -100, 0.1},     {4, 3, L::Transposed, 2, 0.25},
      {3, 65, L::Contiguous, -100, 1.0},    {1, 1, L::Contiguous, -100, 0.5},
      {2, 1500, L::Contiguous, -100, 0.05}, {2, 9000, L::Strided, -100, 0.2},
  };
  for (const Case& k : cases) {
    Trial t;
    Vec x, target;
    t.inputs.push_back(make_input({k.n, k.cls}, k.layout, dt, c.domain, r, x));
    t.inputs.push_back(ce_targets(k.n, k.cls, k.ignore_index, r, target));
    const int64_t ii = k.ignore_index;
    const double e = k.smoothing;
    std::ostringstream what;
    what << "cross_entropy(" << t.inputs[0].str() << ", target " << test::join(target)
         << ", ignore_index " << ii << ", label_smoothing " << e << ")";
    t.what = what.str();
    if (e == 0) {  // through the public function
      t.call = [ii](const std::vector<Tensor>& in, Device) {
        return cross_entropy_per_sample(in[0], in[1], ii);
      };
    } else {
      t.call = [ii, e](const std::vector<Tensor>& in, Device) {
        return dispatch(OpId::cross_entropy, {in[0].contiguous(), in[1]}, ce_attrs(ii, e));
      };
    }
    t.expect.shape = {k.n};
    t.expect.dtype = dt;
    for (int64_t i = 0; i < k.n; ++i) {
      const double* row = &x[static_cast<size_t>(i * k.cls)];
      const int64_t tg = static_cast<int64_t>(target[static_cast<size_t>(i)]);
      const RowStats st = row_stats(row, k.cls);
      t.expect.v.push_back(
          tg == ii ? 0.0 : st.lse - (1 - e) * row[tg] - e / static_cast<double>(k.cls) * st.sum);
      t.expect.scale.push_back(2 * std::fabs(st.lse) + 2 * st.mag + 1);
    }
    out.push_back(std::move(t));
  }
}

// dx_i[c] = grad_i (softmax(x_i)[c] - (1 - e) [c == t_i] - e/C); 0 for ignored samples. The
// gradient may be strided or an expanded scalar (what a mean's backward hands over).
void cross_entropy_backward_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out) {
  using L = Layout;
  struct Case {
    int64_t n, cls;
    L logits_layout, grad_layout;
    int64_t ignore_index;
    double smoothing;
  };
  const std::vector<Case> cases = {
      {1, 1, L::Contiguous, L::Contiguous, -100, 0},
      {5, 7, L::Contiguous, L::Contiguous, -100, 0},
      {4, 3, L::Transposed, L::Expanded, -100, 0.1},
      {6, 10, L::Strided, L::Strided, 2, 0.2},
      {3, 65, L::Expanded, L::Contiguous, -100, 1.0},
      {9, 4, L::Contiguous, L::Expanded, 2, 0},
      {3, 1500, L::Contiguous, L::Contiguous, -100, 0.05},
      {2, 9000, L::Contiguous, L::Strided, -100, 0.3},
  };
  for (const Case& k : cases) {
    Trial t;
    Vec g, x, target;
    t.inputs.push_back(make_input({k.n}, k.grad_layout, dt, c.domain, r, g));
    t.inputs.push_back(make_input({k.n, k.cls}, k.logits_layout, dt, c.domain, r, x));
    t.inputs.push_back(ce_targets(k.n, k.cls, k.ignore_index, r, target));
    const int64_t ii = k.ignore_index;
    const double e = k.smoothing;
    std::ostringstream what;
    what << "cross_entropy_backward(grad " << t.inputs[0].str() << ", " << t.inputs[1].str()
         << ", target " << test::join(target) << ", ignore_index " << ii << ", label_smoothing "
         << e << ")";
    t.what = what.str();
    t.call = [ii, e](const std::vector<Tensor>& in, Device) {
      return dispatch(OpId::cross_entropy_backward, {in[0], in[1].contiguous(), in[2]},
                      ce_attrs(ii, e));
    };
    t.expect.shape = {k.n, k.cls};
    t.expect.dtype = dt;
    for (int64_t i = 0; i < k.n; ++i) {
      const double* row = &x[static_cast<size_t>(i * k.cls)];
      const int64_t tg = static_cast<int64_t>(target[static_cast<size_t>(i)]);
      const RowStats st = row_stats(row, k.cls);
      const double gi = g[static_cast<size_t>(i)];
      for (int64_t j = 0; j < k.cls; ++j) {
        const double p = std::exp(row[j] - st.lse);
        const double onehot = j == tg ? 1.0 : 0.0;
        t.expect.v.push_back(
            tg == ii ? 0.0 : gi * (p - (1 - e) * onehot - e / static_cast<double>(k.cls)));
        t.expect.scale.push_back(2 * std::fabs(gi));
      }
    }
    out.push_back(std::move(t));
  }
}

}  // namespace ember::test::optable

namespace ember::test::optable {

// multi_norm: each tensor's p-norm from the float64 values, rounded once to the result's dtype.
// Lists with an empty tensor, a transposed one (the API makes it contiguous), one long enough
// for several chunks on either device, and more tensors than one CUDA launch takes.
void multi_norm_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out) {
  struct Case {
    std::vector<Shape> shapes;
    double p;
    Layout layout = Layout::Contiguous;
  };
  std::vector<Case> cases = {{{{7}, {3, 5}}, 2},
                             {{{130}, {0}, {4, 4}}, 1},
                             {{{9}, {33}, {2, 3, 2}}, INFINITY},
                             {{{5, 6}, {11}}, 3},
                             {{{4, 6}, {6, 5}}, 2, Layout::Transposed},
                             {{{70001}, {3}}, 2}};
  Case many{{}, 2};
  for (int i = 0; i < 100; ++i) many.shapes.push_back({i % 7 + 1, 3});
  cases.push_back(many);
  const DType res = dt == kFloat64 ? kFloat64 : kFloat32;
  for (const Case& k : cases) {
    Trial t;
    std::vector<Vec> v(k.shapes.size());
    for (size_t i = 0; i < k.shapes.size(); ++i)
      t.inputs.push_back(make_input(k.shapes[i], k.layout, dt, c.domain, r, v[i]));
    std::ostringstream what;
    what << "multi_norm(" << k.shapes.size() << " " << dtype_name(dt) << " tensors, p " << k.p
         << ", " << layout_name(k.layout) << ")";
    t.what = what.str();
    const double p = k.p;
    t.call = [p](const std::vector<Tensor>& in, Device) { return multi_norm(in, p); };
    for (const Vec& x : v) {
      double acc = 0;
      for (double e : x) {
        const double a = std::fabs(e);
        acc = std::isinf(p) ? std::max(acc, a) : acc + std::pow(a, p);
      }
      const double norm = std::isinf(p) ? acc : std::pow(acc, 1 / p);
      t.expect.v.push_back(test::round_to(res, norm));
    }
    t.expect.shape = {static_cast<int64_t>(k.shapes.size())};
    t.expect.dtype = res;
    out.push_back(std::move(t));
  }
}

}  // namespace ember::test::optable

namespace ember::test::optable {

// layer_norm and its backward row, from the float64 statistics of each row (the trailing dims
// from `dim`); the kernels read contiguous memory, so other layouts go through contiguous() as
// nn::functional::layer_norm does. Rows of one element (variance 0), odd lengths and a row
// longer than one warp's or eight warps' share.
void layer_norm_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out) {
  using L = Layout;
  struct Case {
    ShapeLayout in;
    int64_t dim;
    double eps;
  };
  const std::vector<Case> cases = {
      {{{3, 5}, L::Contiguous}, 1, 1e-5},     {{{4, 1}, L::Contiguous}, 1, 1e-5},
      {{{2, 3, 7}, L::Contiguous}, 1, 0.25},  {{{5, 6}, L::Transposed}, 1, 1e-5},
      {{{2, 3, 17}, L::Strided}, 2, 1e-5},    {{{3, 1500}, L::Contiguous}, 1, 1e-5},
      {{{2, 9000}, L::Contiguous}, 1, 1e-5},  {{{7}, L::Contiguous}, 0, 1e-3},
  };
  const bool bwd = c.op == OpId::layer_norm_backward;
  for (const Case& k : cases) {
    Trial t;
    Vec x, g;
    if (bwd) t.inputs.push_back(make_input(k.in.shape, L::Contiguous, dt, c.domain, r, g));
    t.inputs.push_back(make_input(k.in.shape, k.in.layout, dt, c.domain, r, x));
    t.what = std::string(op_name(c.op)) + "(" + t.inputs.back().str() + ", from dim " +
             std::to_string(k.dim) + ", eps " + std::to_string(k.eps) + ")";
    Attrs a;
    a.dim = k.dim;
    a.eps = k.eps;
    const OpId op = c.op;
    t.call = [a, op](const std::vector<Tensor>& in, Device) {
      std::vector<Tensor> args;
      for (const Tensor& i : in) args.push_back(i.contiguous());
      return dispatch(op, std::span<const Tensor>(args), a);
    };
    const Shape& s = k.in.shape;
    int64_t C = 1;
    for (int d = static_cast<int>(k.dim); d < s.size(); ++d) C *= s[d];
    t.expect.shape = s;
    t.expect.dtype = dt;
    for (size_t row = 0; row < x.size() / static_cast<size_t>(C); ++row) {
      const size_t b = row * static_cast<size_t>(C), n = static_cast<size_t>(C);
      double mean = 0, var = 0;
      for (size_t i = 0; i < n; ++i) mean += x[b + i] / static_cast<double>(n);
      for (size_t i = 0; i < n; ++i) var += (x[b + i] - mean) * (x[b + i] - mean) / double(n);
      const double rstd = 1 / std::sqrt(var + k.eps);
      double mg = 0, mgx = 0, gmax = 0;
      if (bwd)
        for (size_t i = 0; i < n; ++i) {
          mg += g[b + i] / static_cast<double>(n);
          mgx += g[b + i] * (x[b + i] - mean) * rstd / static_cast<double>(n);
          gmax = std::max(gmax, std::fabs(g[b + i]));
        }
      for (size_t i = 0; i < n; ++i) {
        const double xh = (x[b + i] - mean) * rstd;
        t.expect.v.push_back(bwd ? rstd * (g[b + i] - mg - xh * mgx) : xh);
        // Errors relative to the row's scale: a value near 0 is a difference of O(1) terms.
        t.expect.scale.push_back(bwd ? rstd * 3 * gmax + 1e-30 : 1.0);
      }
    }
    out.push_back(std::move(t));
  }
}

}  // namespace ember::test::optable
