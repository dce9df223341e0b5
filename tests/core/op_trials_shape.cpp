// Op-table trials of indexing, joining and view ops.
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

void gather_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out) {
  using L = Layout;
  struct Case {
    ShapeLayout in;
    int64_t dim;
    Shape index;
  };
  const std::vector<Case> cases = {
      {{{3, 5}, L::Contiguous}, 0, {2, 5}},        {{{3, 5}, L::Contiguous}, 1, {3, 4}},
      {{{2, 3, 4}, L::Transposed}, -1, {2, 3, 6}}, {{{4, 6}, L::Strided}, 1, {4, 2}},
      {{{3, 5}, L::Expanded}, 0, {1, 1}},          {{{7}, L::Contiguous}, 0, {9}},
  };
  for (const Case& k : cases) {
    Trial t;
    Vec x;
    t.inputs.push_back(make_input(k.in.shape, k.in.layout, dt, c.domain, r, x));
    const int nd = k.in.shape.size();
    const int d = static_cast<int>(k.dim < 0 ? k.dim + nd : k.dim);
    Vec idx(static_cast<size_t>(numel_of(k.index)));
    for (auto& v : idx) v = static_cast<double>(integer(r, 0, k.in.shape[d] - 1));
    t.inputs.push_back(int64_input(idx, k.index));
    t.what = "gather(" + t.inputs[0].str() + ", dim " + std::to_string(k.dim) + ", index " +
             k.index.str() + ")";
    const int64_t dim = k.dim;
    t.call = [dim](const std::vector<Tensor>& in, Device) { return gather(in[0], dim, in[1]); };
    t.expect.shape = k.index;
    t.expect.dtype = dt;
    for (size_t i = 0; i < idx.size(); ++i) {
      std::vector<int64_t> p = unravel(static_cast<int64_t>(i), k.index);
      p[d] = static_cast<int64_t>(idx[i]);
      t.expect.v.push_back(x[static_cast<size_t>(ravel(p, k.in.shape))]);
    }
    out.push_back(std::move(t));
  }
}

void index_select_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out) {
  using L = Layout;
  struct Case {
    ShapeLayout in;
    int64_t dim, n;
  };
  const std::vector<Case> cases = {
      {{{4, 6}, L::Contiguous}, 0, 5},  {{{4, 6}, L::Contiguous}, 1, 3},
      {{{2, 3, 5}, L::Strided}, -1, 7}, {{{7}, L::Contiguous}, 0, 1},
      {{{3, 5}, L::Transposed}, 0, 4},  {{{2, 3, 17}, L::Expanded}, 1, 2},
  };
  for (const Case& k : cases) {
    Trial t;
    Vec x;
    t.inputs.push_back(make_input(k.in.shape, k.in.layout, dt, c.domain, r, x));
    const int nd = k.in.shape.size();
    const int d = static_cast<int>(k.dim < 0 ? k.dim + nd : k.dim);
    Vec idx(static_cast<size_t>(k.n));
    for (auto& v : idx) v = static_cast<double>(integer(r, 0, k.in.shape[d] - 1));
    t.inputs.push_back(int64_input(idx, {k.n}));
    t.what = "index_select(" + t.inputs[0].str() + ", dim " + std::to_string(k.dim) + ", index " +
             test::join(idx) + ")";
    const int64_t dim = k.dim;
    t.call = [dim](const std::vector<Tensor>& in, Device) {
      return index_select(in[0], dim, in[1]);
    };
    Shape os = k.in.shape;
    os[d] = k.n;
    t.expect.shape = os;
    t.expect.dtype = dt;
    for (int64_t i = 0; i < numel_of(os); ++i) {
      std::vector<int64_t> p = unravel(i, os);
      p[d] = static_cast<int64_t>(idx[static_cast<size_t>(p[d])]);
      t.expect.v.push_back(x[static_cast<size_t>(ravel(p, k.in.shape))]);
    }
    out.push_back(std::move(t));
  }
}

void one_hot_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out) {
  struct Case {
    Shape shape;
    Layout layout;
    int64_t classes;  // -1: inferred as max + 1
    int64_t hi;       // values drawn in [0, hi)
  };
  const std::vector<Case> cases = {{{7}, Layout::Contiguous, 5, 5},
                                   {{2, 3}, Layout::Contiguous, -1, 4},
                                   {{}, Layout::Contiguous, 6, 6},
                                   {{4}, Layout::Strided, 3, 3},
                                   {{3, 2}, Layout::Transposed, 9, 2}};
  for (const Case& k : cases) {
    Trial t;
    Vec x;
    const int64_t hi = k.hi;
    t.inputs.push_back(make_input(
        k.shape, k.layout, dt,
        [&](int64_t n) {
          Vec v(static_cast<size_t>(n));
          for (auto& e : v) e = static_cast<double>(integer(r, 0, hi - 1));
          return v;
        },
        x));
    const int64_t nc = k.classes;
    t.what = "one_hot(" + t.inputs[0].str() + " " + test::join(x) + ", " + std::to_string(nc) + ")";
    t.call = [nc](const std::vector<Tensor>& in, Device) { return one_hot(in[0], nc); };
    const int64_t cls =
        nc > 0 ? nc : static_cast<int64_t>(*std::max_element(x.begin(), x.end())) + 1;
    Shape os = k.shape;
    os.push_back(cls);
    t.expect.shape = os;
    t.expect.dtype = kInt64;
    for (double v : x)
      for (int64_t j = 0; j < cls; ++j) t.expect.v.push_back(static_cast<double>(j) == v ? 1 : 0);
    out.push_back(std::move(t));
  }
}

void cat_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out) {
  using L = Layout;
  struct Case {
    std::vector<ShapeLayout> parts;
    int64_t dim;
  };
  const std::vector<Case> cases = {
      {{{{2, 3}, L::Contiguous}, {{4, 3}, L::Contiguous}}, 0},
      {{{{3, 2}, L::Transposed}, {{3, 5}, L::Strided}, {{3, 1}, L::Contiguous}}, 1},
      {{{{2, 3, 4}, L::Transposed}, {{2, 2, 4}, L::Contiguous}}, -2},
      {{{{7}, L::Strided}}, 0},
      {{{{1}, L::Contiguous}, {{7}, L::Expanded}, {{2}, L::Contiguous}}, -1},
      {{{{2, 3, 17}, L::Expanded}, {{1, 3, 17}, L::Strided}}, 0},
  };
  std::vector<std::pair<DType, DType>> mixes = {{dt, dt}};
  if (dt == kFloat32) mixes.push_back({kInt32, kFloat32});
  for (const auto& [d0, d1] : mixes) {
    for (const Case& k : cases) {
      const DType odt = k.parts.size() > 1 ? promote(d0, d1) : d0;
      Trial t;
      std::vector<Vec> parts;
      t.what = "cat([";
      for (size_t i = 0; i < k.parts.size(); ++i) {
        Vec x;
        t.inputs.push_back(
            make_input(k.parts[i].shape, k.parts[i].layout, i == 0 ? d0 : d1, c.domain, r, x));
        parts.push_back(x);
        t.what += (i ? ", " : "") + t.inputs.back().str();
      }
      t.what += "], dim " + std::to_string(k.dim) + ")";
      const int64_t dim = k.dim;
      t.call = [dim](const std::vector<Tensor>& in, Device) { return cat(in, dim); };
      const int nd = k.parts[0].shape.size();
      const int d = static_cast<int>(dim < 0 ? dim + nd : dim);
      Shape os = k.parts[0].shape;
      os[d] = 0;
      for (const ShapeLayout& p : k.parts) os[d] += p.shape[d];
      t.expect.shape = os;
      t.expect.dtype = odt;
      for (int64_t i = 0; i < numel_of(os); ++i) {
        std::vector<int64_t> p = unravel(i, os);
        size_t part = 0;
        while (p[d] >= k.parts[part].shape[d]) p[d] -= k.parts[part++].shape[d];
        t.expect.v.push_back(parts[part][static_cast<size_t>(ravel(p, k.parts[part].shape))]);
      }
      out.push_back(std::move(t));
    }
  }
}

// ---- views --------------------------------------------------------------------------------

void view_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out) {
  using L = Layout;
  struct Case {
    ShapeLayout in;
    Shape to;      // may hold one -1
    Shape result;  // the shape that -1 resolves to
  };
  // A step-2 slice of a [3, 10] base ([3, 5], strides [10, 2]) still merges into [15] stride 2,
  // as in PyTorch; likewise [2, 3, 17] strides [102, 34, 2] into [6, 17].
  const std::vector<Case> cases = {
      {{{2, 3, 4}, L::Contiguous}, {6, 4}, {6, 4}},
      {{{2, 3, 4}, L::Contiguous}, {4, -1}, {4, 6}},
      {{{7}, L::Contiguous}, {1, 7, 1}, {1, 7, 1}},
      {{{}, L::Contiguous}, {1}, {1}},
      {{{1}, L::Contiguous}, {}, {}},
      {{{3, 5}, L::Strided}, {15}, {15}},
      {{{3, 5}, L::Transposed}, {3, 5, 1}, {3, 5, 1}},
      {{{2, 3, 17}, L::Strided}, {6, 17}, {6, 17}},
      {{{2, 3, 17}, L::Transposed}, {2, 3, 17, 1}, {2, 3, 17, 1}},
  };
  for (const Case& k : cases) {
    Trial t;
    Vec x;
    t.inputs.push_back(make_input(k.in.shape, k.in.layout, dt, c.domain, r, x));
    t.what = "view(" + t.inputs[0].str() + " -> " + k.to.str() + ")";
    const Shape to = k.to;
    t.call = [to](const std::vector<Tensor>& in, Device) { return in[0].view(to); };
    t.expect.shape = k.result;
    t.expect.dtype = dt;
    t.expect.v = x;
    out.push_back(std::move(t));
  }
}

void permute_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out) {
  using L = Layout;
  struct Case {
    ShapeLayout in;
    Dims order;
  };
  const std::vector<Case> cases = {
      {{{2, 3, 4}, L::Contiguous}, {2, 0, 1}},
      {{{3, 5}, L::Transposed}, {1, 0}},
      {{{2, 3, 17}, L::Strided}, {1, 2, 0}},
      {{{7}, L::Contiguous}, {0}},
      {{{}, L::Contiguous}, {}},
      {{{2, 3, 17}, L::Expanded}, {-1, 0, 1}},
  };
  for (const Case& k : cases) {
    Trial t;
    Vec x;
    t.inputs.push_back(make_input(k.in.shape, k.in.layout, dt, c.domain, r, x));
    t.what = "permute(" + t.inputs[0].str() + ", " + k.order.str() + ")";
    const Dims order = k.order;
    t.call = [order](const std::vector<Tensor>& in, Device) { return in[0].permute(order); };
    const int nd = k.in.shape.size();
    std::vector<int> ord;
    for (int64_t d : k.order) ord.push_back(static_cast<int>(d < 0 ? d + nd : d));
    Shape os;
    for (int d : ord) os.push_back(k.in.shape[d]);
    t.expect.shape = os;
    t.expect.dtype = dt;
    for (int64_t i = 0; i < numel_of(os); ++i) {
      const std::vector<int64_t> p = unravel(i, os);
      std::vector<int64_t> src(static_cast<size_t>(nd));
      for (int j = 0; j < nd; ++j) src[ord[j]] = p[j];
      t.expect.v.push_back(x[static_cast<size_t>(ravel(src, k.in.shape))]);
    }
    out.push_back(std::move(t));
  }
}

void slice_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out) {
  using L = Layout;
  struct Case {
    ShapeLayout in;
    int64_t dim, start, end, step;
    // PyTorch's resolved range along dim
    int64_t rstart, rlen;
  };
  const std::vector<Case> cases = {
      {{{7}, L::Contiguous}, 0, 1, 6, 2, 1, 3},
      {{{3, 5}, L::Contiguous}, 1, -4, 5, 1, 1, 4},
      {{{2, 3, 17}, L::Strided}, 2, 3, 100, 3, 3, 5},  // end past the size clamps
      {{{3, 5}, L::Transposed}, 0, 0, 3, 2, 0, 2},
      {{{4, 6}, L::Contiguous}, 0, 2, 2, 1, 2, 0},  // empty
      {{{2, 3, 17}, L::Expanded}, -3, 1, 2, 1, 1, 1},
      {{{4, 6}, L::Contiguous}, -1, -100, -2, 3, 0, 2},  // start before 0 clamps
  };
  for (const Case& k : cases) {
    Trial t;
    Vec x;
    t.inputs.push_back(make_input(k.in.shape, k.in.layout, dt, c.domain, r, x));
    std::ostringstream w;
    w << "slice(" << t.inputs[0].str() << ", dim " << k.dim << ", " << k.start << ":" << k.end
      << ":" << k.step << ")";
    t.what = w.str();
    const Case kc = k;
    t.call = [kc](const std::vector<Tensor>& in, Device) {
      return in[0].slice(kc.dim, kc.start, kc.end, kc.step);
    };
    const int nd = k.in.shape.size();
    const int d = static_cast<int>(k.dim < 0 ? k.dim + nd : k.dim);
    Shape os = k.in.shape;
    os[d] = k.rlen;
    t.expect.shape = os;
    t.expect.dtype = dt;
    for (int64_t i = 0; i < numel_of(os); ++i) {
      std::vector<int64_t> p = unravel(i, os);
      p[d] = k.rstart + p[d] * k.step;
      t.expect.v.push_back(x[static_cast<size_t>(ravel(p, k.in.shape))]);
    }
    out.push_back(std::move(t));
  }
}

void expand_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out) {
  using L = Layout;
  struct Case {
    ShapeLayout in;
    Shape to, result;
  };
  const std::vector<Case> cases = {
      {{{3, 1}, L::Contiguous}, {3, 5}, {3, 5}},
      {{{}, L::Contiguous}, {2, 3}, {2, 3}},
      {{{5}, L::Strided}, {2, 3, 5}, {2, 3, 5}},
      {{{1, 4}, L::Transposed}, {2, -1}, {2, 4}},
      {{{3, 1}, L::Strided}, {2, 3, 6}, {2, 3, 6}},
      {{{2, 1, 17}, L::Contiguous}, {2, 3, -1}, {2, 3, 17}},
  };
  for (const Case& k : cases) {
    Trial t;
    Vec x;
    t.inputs.push_back(make_input(k.in.shape, k.in.layout, dt, c.domain, r, x));
    t.what = "expand(" + t.inputs[0].str() + " -> " + k.to.str() + ")";
    const Shape to = k.to;
    t.call = [to](const std::vector<Tensor>& in, Device) { return in[0].expand(to); };
    t.expect.shape = k.result;
    t.expect.dtype = dt;
    t.expect.v = broadcast_values(x, k.in.shape, k.result);
    out.push_back(std::move(t));
  }
}

// torch.zeros(shape).scatter_add_(dim, index, src): duplicates on purpose (several source
// elements land on one output element), sources smaller than the output outside `dim`, a
// 0-dim and an empty source. Integers add exactly; floats are compared against the exact sum
// with the sum of magnitudes as the error scale. On the GPU duplicates meet in atomicAdd, which
// rounds after every add in 16-bit floats: the CUDA tolerance allows one rounding per add.
void scatter_add_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out) {
  using L = Layout;
  struct Case {
    ShapeLayout src;
    int64_t dim;
    Shape out;
  };
  const std::vector<Case> cases = {
      {{{3, 5}, L::Contiguous}, 0, {4, 5}},
      {{{3, 5}, L::Contiguous}, 1, {3, 2}},
      {{{2, 3, 4}, L::Transposed}, 2, {2, 4, 6}},
      {{{4, 6}, L::Strided}, 1, {5, 6}},
      {{{7}, L::Contiguous}, 0, {3}},
      {{{2, 3}, L::Expanded}, 0, {3, 4}},
      {{{}, L::Contiguous}, 0, {}},
      {{{0, 3}, L::Contiguous}, 0, {2, 3}},
      {{{40, 33}, L::Contiguous}, 0, {3, 33}},
  };
  for (const Case& k : cases) {
    Trial t;
    Vec x;
    t.inputs.push_back(make_input(k.src.shape, k.src.layout, dt, c.domain, r, x));
    const Shape& ss = k.src.shape;
    const int d = static_cast<int>(k.dim);
    const int64_t dim_size = k.out.size() == 0 ? 1 : k.out[d];
    Vec idx(x.size());
    for (auto& v : idx) v = static_cast<double>(integer(r, 0, dim_size - 1));
    t.inputs.push_back(int64_input(idx, ss));
    t.what = "scatter_add(" + t.inputs[0].str() + ", dim " + std::to_string(k.dim) + ", index " +
             test::join(idx) + ", into " + k.out.str() + ")";
    Attrs a;
    a.dim = k.dim;
    a.shape = k.out;
    t.call = [a](const std::vector<Tensor>& in, Device) {
      return dispatch(OpId::scatter_add, {in[0].contiguous(), in[1]}, a);
    };
    t.expect.shape = k.out;
    t.expect.dtype = dt;
    const size_t on = static_cast<size_t>(numel_of(k.out));
    t.expect.v.assign(on, 0);
    t.expect.scale.assign(on, 0);
    std::vector<int> adds(on, 0);
    for (size_t i = 0; i < x.size(); ++i) {
      size_t o = 0;
      if (ss.size() > 0) {
        std::vector<int64_t> p = unravel(static_cast<int64_t>(i), ss);
        p[d] = static_cast<int64_t>(idx[i]);
        o = static_cast<size_t>(ravel(p, k.out));
      }
      t.expect.v[o] += x[i];
      t.expect.scale[o] += std::fabs(x[i]);
      ++adds[o];
    }
    if (dt == kFloat16 || dt == kBFloat16) {
      const int most = std::max(1, *std::max_element(adds.begin(), adds.end()));
      t.expect.cuda_rtol = (most + 1) * std::ldexp(1.0, dt == kFloat16 ? -11 : -8);
    }
    out.push_back(std::move(t));
  }
}

}  // namespace ember::test::optable
