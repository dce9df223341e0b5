// Op-table trials of the pointwise ops: unary, binary, where, cast, fill.
#include <algorithm>
#include <cmath>
#include <functional>
#include <numbers>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "core/factory.h"
#include "core/op_table_harness.h"
#include "core/ops.h"

namespace ember::test::optable {

namespace {

const std::vector<ShapeLayout>& unary_cases() {
  static const std::vector<ShapeLayout> k = {
      {{}, Layout::Contiguous},         {{1}, Layout::Contiguous},
      {{7}, Layout::Contiguous},        {{7}, Layout::Strided},
      {{7}, Layout::Expanded},          {{3, 5}, Layout::Contiguous},
      {{3, 5}, Layout::Transposed},     {{3, 5}, Layout::Strided},
      {{3, 5}, Layout::Expanded},       {{2, 3, 17}, Layout::Contiguous},
      {{2, 3, 17}, Layout::Transposed}, {{2, 3, 17}, Layout::Strided},
      {{2, 3, 17}, Layout::Expanded},
  };
  return k;
}

void add_unary(OpId op, const std::string& label, DType dt, Domain dom,
               std::function<double(double)> ref, std::function<Tensor(const Tensor&)> api, Rng& r,
               std::vector<Trial>& out) {
  const DType odt = out_dtype(op, compute_dtype(op, dt));
  for (const ShapeLayout& c : unary_cases()) {
    Trial t;
    Vec x;
    t.inputs.push_back(make_input(c.shape, c.layout, dt, dom, r, x));
    t.what = label + "(" + t.inputs[0].str() + ")";
    t.call = [api](const std::vector<Tensor>& in, Device) { return api(in[0]); };
    t.expect.shape = c.shape;
    t.expect.dtype = odt;
    for (double v : x) t.expect.v.push_back(ref(v));
    out.push_back(std::move(t));
  }
}

}  // namespace

void unary_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out) {
  const Api1 api = c.api1;
  add_unary(
      c.op, std::string(op_name(c.op)), dt, c.domain, c.ref1,
      [api](const Tensor& a) { return api(a); }, r, out);
}

namespace {
double gelu_erf(double x) { return 0.5 * x * (1 + std::erf(x / std::sqrt(2.0))); }
double gelu_tanh(double x) {
  const double k = std::sqrt(2.0 / std::numbers::pi);
  return 0.5 * x * (1 + std::tanh(k * (x + 0.044715 * x * x * x)));
}

}  // namespace

void gelu_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out) {
  add_unary(
      c.op, "gelu", dt, c.domain, gelu_erf, [](const Tensor& a) { return gelu(a); }, r, out);
  add_unary(
      c.op, "gelu(tanh)", dt, c.domain, gelu_tanh, [](const Tensor& a) { return gelu(a, true); }, r,
      out);
}

void clamp_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out) {
  // Bounds inside the drawn range so both sides clip; integers for integer tensors.
  const bool ints = is_integral(dt);
  const double lo = ints ? -4 : -0.75, hi = ints ? 5 : 1.25;
  const Scalar slo = ints ? Scalar(int64_t(-4)) : Scalar(-0.75);
  const Scalar shi = ints ? Scalar(int64_t(5)) : Scalar(1.25);
  add_unary(
      c.op, "clamp[lo,hi]", dt, c.domain, [=](double x) { return std::min(std::max(x, lo), hi); },
      [=](const Tensor& a) { return clamp(a, slo, shi); }, r, out);
  add_unary(
      c.op, "clamp[lo,]", dt, c.domain, [=](double x) { return std::max(x, lo); },
      [=](const Tensor& a) { return clamp(a, slo, std::nullopt); }, r, out);
  add_unary(
      c.op, "clamp[,hi]", dt, c.domain, [=](double x) { return std::min(x, hi); },
      [=](const Tensor& a) { return clamp(a, std::nullopt, shi); }, r, out);
}

namespace {

struct BinaryCase {
  ShapeLayout a, b;
};
const std::vector<BinaryCase>& binary_cases() {
  using L = Layout;
  static const std::vector<BinaryCase> k = {
      {{{}, L::Contiguous}, {{}, L::Contiguous}},
      {{{1}, L::Contiguous}, {{1}, L::Contiguous}},
      {{{7}, L::Contiguous}, {{7}, L::Strided}},
      {{{3, 1}, L::Contiguous}, {{1, 5}, L::Contiguous}},
      {{{}, L::Contiguous}, {{2, 3}, L::Contiguous}},
      {{{2, 3}, L::Transposed}, {{}, L::Contiguous}},
      {{{3, 5}, L::Transposed}, {{3, 5}, L::Strided}},
      {{{3, 5}, L::Expanded}, {{5}, L::Strided}},
      {{{2, 3, 17}, L::Strided}, {{17}, L::Contiguous}},
      {{{2, 3, 17}, L::Expanded}, {{2, 3, 17}, L::Transposed}},
      {{{1}, L::Contiguous}, {{2, 3, 17}, L::Contiguous}},
      {{{2, 1, 17}, L::Strided}, {{3, 1}, L::Transposed}},
  };
  return k;
}

// Trials of `c` on operands of dtypes `da` and `db` (promoted by result_type2, per case).
void add_binary(const Coverage& c, DType da, DType db, Rng& r, std::vector<Trial>& out) {
  const Api2 api = c.api2;
  const Ref2 ref = c.ref2;
  for (const BinaryCase& bc : binary_cases()) {
    const DType promoted = result_type2(da, bc.a.shape.size() == 0, db, bc.b.shape.size() == 0);
    if (!in_set(op_info(c.op).dtypes, compute_dtype(c.op, promoted))) continue;
    Trial t;
    Vec a, b;
    t.inputs.push_back(make_input(bc.a.shape, bc.a.layout, da, c.domain, r, a));
    t.inputs.push_back(make_input(bc.b.shape, bc.b.layout, db, c.domain_b, r, b));
    t.what = std::string(op_name(c.op)) + "(" + t.inputs[0].str() + ", " + t.inputs[1].str() + ")";
    t.call = [api](const std::vector<Tensor>& in, Device) { return api(in[0], in[1]); };
    const Shape s = broadcast(bc.a.shape, bc.b.shape);
    const Vec ba = broadcast_values(a, bc.a.shape, s), bb = broadcast_values(b, bc.b.shape, s);
    t.expect.shape = s;
    t.expect.dtype = out_dtype(c.op, compute_dtype(c.op, promoted));
    for (size_t i = 0; i < ba.size(); ++i) t.expect.v.push_back(ref(ba[i], bb[i]));
    out.push_back(std::move(t));
  }
}

}  // namespace

void binary_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out) {
  add_binary(c, dt, dt, r, out);
  // Mixed dtypes, promoted like PyTorch (0-dim operands included): once, on the float32 pass.
  if (dt != kFloat32) return;
  for (const auto& [a, b] :
       {std::pair{kInt32, kFloat32}, std::pair{kInt32, kInt64}, std::pair{kFloat16, kBFloat16},
        std::pair{kFloat64, kInt64}, std::pair{kBool, kFloat16}}) {
    add_binary(c, a, b, r, out);
  }
}

void where_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out) {
  using L = Layout;
  struct Case {
    ShapeLayout cond, a, b;
  };
  const std::vector<Case> cases = {
      {{{}, L::Contiguous}, {{}, L::Contiguous}, {{}, L::Contiguous}},
      {{{7}, L::Strided}, {{7}, L::Contiguous}, {{7}, L::Contiguous}},
      {{{3, 1}, L::Contiguous}, {{1, 5}, L::Contiguous}, {{}, L::Contiguous}},
      {{{2, 3, 17}, L::Transposed}, {{2, 3, 17}, L::Strided}, {{17}, L::Contiguous}},
      {{{3, 5}, L::Contiguous}, {{3, 5}, L::Expanded}, {{3, 5}, L::Transposed}},
      {{{5}, L::Expanded}, {{3, 1}, L::Contiguous}, {{3, 5}, L::Strided}},
  };
  std::vector<std::pair<DType, DType>> mixes = {{dt, dt}};
  if (dt == kFloat32) mixes.push_back({kInt32, kFloat32});
  if (dt == kInt64) mixes.push_back({kBool, kInt32});
  for (const auto& [da, db] : mixes) {
    for (const Case& k : cases) {
      Trial t;
      Vec cond, a, b;
      t.inputs.push_back(make_input(k.cond.shape, k.cond.layout, kBool, c.domain, r, cond));
      t.inputs.push_back(make_input(k.a.shape, k.a.layout, da, c.domain, r, a));
      t.inputs.push_back(make_input(k.b.shape, k.b.layout, db, c.domain, r, b));
      t.what =
          "where(" + t.inputs[0].str() + ", " + t.inputs[1].str() + ", " + t.inputs[2].str() + ")";
      t.call = [](const std::vector<Tensor>& in, Device) { return where(in[0], in[1], in[2]); };
      const Shape s = broadcast(broadcast(k.cond.shape, k.a.shape), k.b.shape);
      const Vec bc = broadcast_values(cond, k.cond.shape, s);
      const Vec ba = broadcast_values(a, k.a.shape, s), bb = broadcast_values(b, k.b.shape, s);
      t.expect.shape = s;
      t.expect.dtype = result_type2(da, k.a.shape.size() == 0, db, k.b.shape.size() == 0);
      for (size_t i = 0; i < bc.size(); ++i) t.expect.v.push_back(bc[i] != 0 ? ba[i] : bb[i]);
      out.push_back(std::move(t));
    }
  }
}

void cast_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out) {
  // Values exact in every float dtype (8 significant bits) and a few zeros for bool.
  const std::vector<ShapeLayout> cases = {{{}, Layout::Contiguous},
                                          {{7}, Layout::Contiguous},
                                          {{3, 5}, Layout::Transposed},
                                          {{2, 3, 17}, Layout::Strided},
                                          {{3, 5}, Layout::Expanded}};
  for (int k = 0; k < kNumDTypes; ++k) {
    const DType to = static_cast<DType>(k);
    for (const ShapeLayout& sl : cases) {
      Trial t;
      Vec x;
      t.inputs.push_back(make_input(sl.shape, sl.layout, dt, Domain::Wide, r, x));
      t.what = "cast(" + t.inputs[0].str() + " -> " + std::string(dtype_name(to)) + ")";
      t.call = [to](const std::vector<Tensor>& in, Device) { return cast(in[0], to); };
      t.expect.shape = sl.shape;
      t.expect.dtype = to;
      for (double v : x) t.expect.v.push_back(test::round_to(to, v));
      out.push_back(std::move(t));
    }
  }
}

namespace {
Scalar fill_value(DType dt) {
  if (dt == kBool) return Scalar(true);
  if (is_integral(dt)) return Scalar(int64_t(-7));
  return Scalar(2.5);
}

}  // namespace

void fill_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out) {
  const Scalar v = fill_value(dt);
  const double vd = v.to_double();
  // The base is returned, so the untouched elements are checked too.
  struct Case {
    Shape base;
    std::string view;
    std::function<Tensor(const Tensor&)> take;
    std::function<bool(const std::vector<int64_t>&)> covered;
  };
  const std::vector<Case> cases = {
      {{}, "whole 0-dim", [](const Tensor& b) { return b; }, [](auto&) { return true; }},
      {{7},
       "[0:7:2]",
       [](const Tensor& b) { return b.slice(0, 0, 7, 2); },
       [](auto& i) { return i[0] % 2 == 0; }},
      {{5, 3}, "transposed", [](const Tensor& b) { return b.t(); }, [](auto&) { return true; }},
      {{2, 3, 17},
       "[:, 1:3, 4::3]",
       [](const Tensor& b) { return b.slice(1, 1, 3).slice(2, 4, 17, 3); },
       [](auto& i) { return i[1] >= 1 && i[2] >= 4 && (i[2] - 4) % 3 == 0; }},
  };
  for (const Case& k : cases) {
    Trial t;
    Vec x;
    t.inputs.push_back(make_input(k.base, Layout::Contiguous, dt, Domain::Any, r, x));
    t.what = "fill_(" + t.inputs[0].str() + " " + k.view + ", " + std::to_string(vd) + ")";
    auto take = k.take;
    t.call = [take, v](const std::vector<Tensor>& in, Device) {
      take(in[0]).fill_(v);
      return in[0];
    };
    t.writes_inputs = true;
    t.expect.shape = k.base;
    t.expect.dtype = dt;
    for (size_t i = 0; i < x.size(); ++i)
      t.expect.v.push_back(k.covered(unravel(static_cast<int64_t>(i), k.base)) ? vd : x[i]);
    out.push_back(std::move(t));
  }
}

}  // namespace ember::test::optable
