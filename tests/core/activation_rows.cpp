// The activation rows (see activation_rows.h) and their trials.
#include "core/activation_rows.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "core/dispatch.h"
#include "core/factory.h"
#include "core/ops.h"
#include "nn/functional.h"
#include "test_util.h"

namespace ember::test::optable {
namespace {

namespace F = nn::functional;
using D = Domain;

double sigmoid_ref(double x) { return 1 / (1 + std::exp(-x)); }
double softplus_ref(double x, double beta, double threshold) {
  return beta * x > threshold ? x : std::log1p(std::exp(beta * x)) / beta;
}
double softplus_dref(double x, double beta, double threshold) {
  return beta * x > threshold ? 1 : sigmoid_ref(beta * x);
}
double hardtanh_ref(double x, double lo, double hi) {
  return std::isnan(x) ? x : std::min(std::max(x, lo), hi);
}
double hardtanh_dref(double x, double lo, double hi) { return x <= lo || x >= hi ? 0 : 1; }

}  // namespace

const std::vector<ActivationRow>& activation_rows() {
  static const std::vector<ActivationRow> k = {
      {OpId::silu, "silu", [](const Tensor& a) { return silu(a); },
       [](double x) { return x * sigmoid_ref(x); },
       [](double x) { return sigmoid_ref(x) * (1 + x * (1 - sigmoid_ref(x))); }, D::Wide},
      {OpId::leaky_relu,
       "leaky_relu",
       [](const Tensor& a) { return leaky_relu(a); },
       [](double x) { return x > 0 ? x : 0.01 * x; },
       [](double x) { return x > 0 ? 1 : 0.01; },
       D::Wide,
       -4,
       4,
       {0}},
      {OpId::leaky_relu,
       "F::leaky_relu(0.2)",
       [](const Tensor& a) { return F::leaky_relu(a, 0.2); },
       [](double x) { return x > 0 ? x : 0.2 * x; },
       [](double x) { return x > 0 ? 1 : 0.2; },
       D::Any,
       -4,
       4,
       {0}},
      {OpId::elu,
       "elu",
       [](const Tensor& a) { return elu(a); },
       [](double x) { return x > 0 ? x : std::exp(x) - 1; },
       [](double x) { return x > 0 ? 1 : std::exp(x); },
       D::Wide,
       -4,
       4,
       {0}},
      {OpId::elu,
       "F::elu(0.5)",
       [](const Tensor& a) { return F::elu(a, 0.5); },
       [](double x) { return x > 0 ? x : 0.5 * (std::exp(x) - 1); },
       [](double x) { return x > 0 ? 1 : 0.5 * std::exp(x); },
       D::Any,
       -4,
       4,
       {0}},
      {OpId::softplus, "softplus", [](const Tensor& a) { return softplus(a); },
       [](double x) { return softplus_ref(x, 1, 20); },
       [](double x) { return softplus_dref(x, 1, 20); }, D::Wide, -4, 4},
      // beta * x crosses the threshold inside the drawn range
      {OpId::softplus,
       "F::softplus(10, 5)",
       [](const Tensor& a) { return F::softplus(a, 10, 5); },
       [](double x) { return softplus_ref(x, 10, 5); },
       [](double x) { return softplus_dref(x, 10, 5); },
       D::Any,
       -2,
       2,
       {0.5}},
      {OpId::hardtanh,
       "hardtanh",
       [](const Tensor& a) { return hardtanh(a); },
       [](double x) { return hardtanh_ref(x, -1, 1); },
       [](double x) { return hardtanh_dref(x, -1, 1); },
       D::Any,
       -3,
       3,
       {-1, 1}},
      {OpId::hardtanh,
       "F::hardtanh(-0.5, 1.5)",
       [](const Tensor& a) { return F::hardtanh(a, -0.5, 1.5); },
       [](double x) { return hardtanh_ref(x, -0.5, 1.5); },
       [](double x) { return hardtanh_dref(x, -0.5, 1.5); },
       D::Any,
       -3,
       3,
       {-0.5, 1.5}},
      {OpId::hardtanh,
       "relu6",
       [](const Tensor& a) { return relu6(a); },
       [](double x) { return hardtanh_ref(x, 0, 6); },
       [](double x) { return hardtanh_dref(x, 0, 6); },
       D::Wide,
       -3,
       9,
       {0, 6}},
      {OpId::hardswish,
       "hardswish",
       [](const Tensor& a) { return hardswish(a); },
       [](double x) { return x * std::min(std::max(x + 3, 0.0), 6.0) / 6; },
       [](double x) { return x < -3   ? 0
                             : x <= 3 ? (2 * x + 3) / 6
                                      : 1; },
       D::Wide,
       -5,
       5,
       {-3, 3}},
      {OpId::mish, "mish", [](const Tensor& a) { return mish(a); },
       [](double x) { return x * std::tanh(std::log1p(std::exp(x))); },
       [](double x) {
         const double t = std::tanh(std::log1p(std::exp(x)));
         return t + x * (1 - t * t) * sigmoid_ref(x);
       },
       D::Wide},
      // Written apart from the kernel's min(x, 0) - log1p(exp(-|x|)), by sign.
      {OpId::logsigmoid, "logsigmoid", [](const Tensor& a) { return logsigmoid(a); },
       [](double x) { return x >= 0 ? -std::log1p(std::exp(-x)) : x - std::log1p(std::exp(x)); },
       [](double x) { return 1 / (1 + std::exp(x)); }, D::Wide},
      {OpId::sign,
       "sign",
       [](const Tensor& a) { return sign(a); },
       [](double x) { return x > 0   ? 1.0
                             : x < 0 ? -1.0
                                     : 0.0; },
       [](double) { return 0.0; },
       D::Wide,
       -4,
       4,
       {0}},
      {OpId::pow_scalar, "pow(x, 2.5)", [](const Tensor& a) { return pow(a, 2.5); },
       [](double x) { return std::pow(x, 2.5); }, [](double x) { return 2.5 * std::pow(x, 1.5); },
       D::PowBase, 0.25, 2.5},
      {OpId::pow_scalar, "pow(x, -1.5)", [](const Tensor& a) { return pow(a, -1.5); },
       [](double x) { return std::pow(x, -1.5); },
       [](double x) { return -1.5 * std::pow(x, -2.5); }, D::PowBase, 0.25, 2.5},
      {OpId::pow_scalar, "pow(x, 3)", [](const Tensor& a) { return pow(a, 3); },
       [](double x) { return x * x * x; }, [](double x) { return 3 * x * x; }, D::Any, -2, 2},
      {OpId::pow_scalar, "pow(x, 0)", [](const Tensor& a) { return pow(a, 0); },
       [](double) { return 1.0; }, [](double) { return 0.0; }, D::Any, -2, 2},
  };
  return k;
}

std::vector<const ActivationRow*> activation_rows_of(OpId op, bool* is_backward) {
  std::vector<const ActivationRow*> out;
  for (const ActivationRow& r : activation_rows()) {
    const OpInfo& info = op_info(r.op);
    const bool bwd = info.has_grad_op && info.grad_op == op;
    if (r.op == op || bwd) {
      out.push_back(&r);
      if (is_backward) *is_backward = bwd;
    }
  }
  return out;
}

namespace {

const std::vector<ShapeLayout>& cases() {
  static const std::vector<ShapeLayout> k = {
      {{}, Layout::Contiguous},      {{7}, Layout::Contiguous},  {{7}, Layout::Strided},
      {{3, 5}, Layout::Transposed},  {{3, 5}, Layout::Expanded}, {{2, 3, 17}, Layout::Contiguous},
      {{2, 3, 17}, Layout::Strided},
  };
  return k;
}

}  // namespace

void activation_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out) {
  for (const ActivationRow* row : activation_rows_of(c.op)) {
    const DType odt = out_dtype(c.op, compute_dtype(c.op, dt));
    for (const ShapeLayout& sl : cases()) {
      Trial t;
      Vec x;
      t.inputs.push_back(make_input(sl.shape, sl.layout, dt, row->domain, r, x));
      t.what = row->label + "(" + t.inputs[0].str() + ")";
      const Api1 api = row->api;
      t.call = [api](const std::vector<Tensor>& in, Device) { return api(in[0]); };
      t.expect.shape = sl.shape;
      t.expect.dtype = odt;
      for (double v : x) t.expect.v.push_back(row->ref(v));
      out.push_back(std::move(t));
    }
  }
}

void activation_backward_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out) {
  for (const ActivationRow* row : activation_rows_of(c.op)) {
    for (const ShapeLayout& sl : cases()) {
      Trial t;
      Vec g, x;
      t.inputs.push_back(make_input(sl.shape, sl.layout, dt, Domain::Any, r, g));
      t.inputs.push_back(make_input(sl.shape, Layout::Contiguous, dt, row->domain, r, x));
      t.what = "d " + row->label + "(" + t.inputs[1].str() + ") times " + t.inputs[0].str();
      const Api1 api = row->api;
      const OpId op = c.op;
      t.call = [api, op](const std::vector<Tensor>& in, Device) {
        // No gradients of integer tensors: the row itself, with the default attributes.
        if (!is_floating(in[1].dtype())) return dispatch(op, {in[0], in[1]}, Attrs{});
        Tensor leaf = in[1].detach();
        leaf.requires_grad_();
        api(leaf).backward(in[0]);
        return leaf.grad();
      };
      t.expect.shape = sl.shape;
      t.expect.dtype = dt;
      for (size_t i = 0; i < x.size(); ++i) t.expect.v.push_back(g[i] * row->dref(x[i]));
      out.push_back(std::move(t));
    }
  }
}

}  // namespace ember::test::optable

using namespace ember;
using namespace ember::test::optable;

// The values the random sweep rarely or never draws: zeros, NaN, the kinks, far tails.
TEST_CASE("activation rows: special values match the references", "[op_table]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const std::vector<double> xs = {0, -0.0, nan, 1, -1, 3, -3, 6, 0.5, 30, -30, 100, -100};
  for (const ActivationRow& row : activation_rows()) {
    for (const DType dt : {kFloat64, kFloat32}) {
      INFO(row.label << " " << dtype_name(dt));
      const std::vector<double> got =
          row.api(from_vector(xs, {int64_t(xs.size())}).to(dt)).to(kFloat64).to_vector<double>();
      for (size_t i = 0; i < xs.size(); ++i) {
        INFO("x = " << xs[i]);
        const double want = row.ref(xs[i]);
        if (std::isnan(want)) {
          CHECK(std::isnan(got[i]));
        } else if (std::isinf(want)) {
          CHECK(got[i] == want);
        } else {
          CHECK(got[i] == Approx(want).epsilon(dt == kFloat32 ? 1e-5 : 1e-12).margin(1e-30));
        }
      }
    }
  }
}
