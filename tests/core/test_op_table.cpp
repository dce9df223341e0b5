// The table-driven sweep over core/ops.yaml. Every OpId must have a coverage entry below; its
// trial generator (tests/core/op_trials_*.cpp) builds fresh random inputs in odd and broadcast
// shapes and non-contiguous layouts, for every dtype the op accepts, with a float64 reference
// computed in the test with plain std:: math. The CPU case compares against the reference; the
// [cuda] case runs the same trials on the GPU and compares against the CPU.
//
// Inputs are drawn from Catch's --rng-seed (`--rng-seed time` for fresh draws; a failure
// prints the seed of its op and dtype).
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "core/activation_rows.h"
#include "core/cuda_runtime.h"
#include "core/dispatch.h"
#include "core/factory.h"
#include "core/op_table_harness.h"
#include "core/ops.h"
#include "test_util.h"

namespace ember::test::optable {
namespace {

Tensor api_neg(const Tensor& a) { return neg(a); }
Tensor api_abs(const Tensor& a) { return abs(a); }
Tensor api_relu(const Tensor& a) { return relu(a); }
Tensor api_exp(const Tensor& a) { return exp(a); }
Tensor api_log(const Tensor& a) { return log(a); }
Tensor api_sqrt(const Tensor& a) { return sqrt(a); }
Tensor api_rsqrt(const Tensor& a) { return rsqrt(a); }
Tensor api_sigmoid(const Tensor& a) { return sigmoid(a); }
Tensor api_tanh(const Tensor& a) { return tanh(a); }
#define EMBER_BINARY_API(fn) \
  Tensor api_##fn(const Tensor& a, const Tensor& b) { return fn(a, b); }
EMBER_BINARY_API(add)
EMBER_BINARY_API(sub)
EMBER_BINARY_API(mul)
EMBER_BINARY_API(div)
EMBER_BINARY_API(pow)
EMBER_BINARY_API(maximum)
EMBER_BINARY_API(minimum)
EMBER_BINARY_API(eq)
EMBER_BINARY_API(ne)
EMBER_BINARY_API(lt)
EMBER_BINARY_API(le)
EMBER_BINARY_API(gt)
EMBER_BINARY_API(ge)
#undef EMBER_BINARY_API
// gelu_backward has no public wrapper (autograd dispatches it): promote like the API would.
Tensor api_gelu_backward(const Tensor& g, const Tensor& x) {
  const Tensor both[2] = {g, x};
  const DType t = result_type(both);
  return dispatch(OpId::gelu_backward, {g.to(t), x.to(t)});
}
double gelu_grad_ref(double g, double x) {
  const double cdf = 0.5 * (1 + std::erf(x / std::sqrt(2.0)));
  const double pdf = std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
  return g * (cdf + x * pdf);
}

double b2d(bool b) { return b ? 1.0 : 0.0; }

// Adding an op to core/ops.yaml without a line here fails the sweep below.
const std::vector<Coverage>& coverage_table() {
  using D = Domain;
  static const std::vector<Coverage> k = {
      {OpId::neg, unary_trials, D::Any, D::Any, [](double x) { return -x; }, nullptr, api_neg},
      {OpId::abs, unary_trials, D::Any, D::Any, [](double x) { return std::fabs(x); }, nullptr,
       api_abs},
      {OpId::relu, unary_trials, D::Any, D::Any, [](double x) { return x > 0 ? x : 0.0; }, nullptr,
       api_relu},
      {OpId::exp, unary_trials, D::Any, D::Any, [](double x) { return std::exp(x); }, nullptr,
       api_exp},
      {OpId::log, unary_trials, D::Positive, D::Any, [](double x) { return std::log(x); }, nullptr,
       api_log},
      {OpId::sqrt, unary_trials, D::Positive, D::Any, [](double x) { return std::sqrt(x); },
       nullptr, api_sqrt},
      {OpId::rsqrt, unary_trials, D::Positive, D::Any, [](double x) { return 1 / std::sqrt(x); },
       nullptr, api_rsqrt},
      {OpId::sigmoid, unary_trials, D::Any, D::Any, [](double x) { return 1 / (1 + std::exp(-x)); },
       nullptr, api_sigmoid},
      {OpId::tanh, unary_trials, D::Any, D::Any, [](double x) { return std::tanh(x); }, nullptr,
       api_tanh},
      {OpId::gelu, gelu_trials},
      {OpId::gelu_backward, binary_trials, D::Any, D::Any, nullptr, gelu_grad_ref, nullptr,
       api_gelu_backward},
      {OpId::clamp, clamp_trials},
      {OpId::cast, cast_trials},
      {OpId::fill, fill_trials},
      {OpId::add, binary_trials, D::Any, D::Any, nullptr, [](double a, double b) { return a + b; },
       nullptr, api_add},
      {OpId::sub, binary_trials, D::Any, D::Any, nullptr, [](double a, double b) { return a - b; },
       nullptr, api_sub},
      {OpId::mul, binary_trials, D::Any, D::Any, nullptr, [](double a, double b) { return a * b; },
       nullptr, api_mul},
      {OpId::div, binary_trials, D::Any, D::Any, nullptr, [](double a, double b) { return a / b; },
       nullptr, api_div},
      {OpId::pow, binary_trials, D::PowBase, D::PowExp, nullptr,
       [](double a, double b) { return std::pow(a, b); }, nullptr, api_pow},
      {OpId::maximum, binary_trials, D::Any, D::Any, nullptr,
       [](double a, double b) { return std::max(a, b); }, nullptr, api_maximum},
      {OpId::minimum, binary_trials, D::Any, D::Any, nullptr,
       [](double a, double b) { return std::min(a, b); }, nullptr, api_minimum},
      {OpId::eq, binary_trials, D::Discrete, D::Discrete, nullptr,
       [](double a, double b) { return b2d(a == b); }, nullptr, api_eq},
      {OpId::ne, binary_trials, D::Discrete, D::Discrete, nullptr,
       [](double a, double b) { return b2d(a != b); }, nullptr, api_ne},
      {OpId::lt, binary_trials, D::Discrete, D::Discrete, nullptr,
       [](double a, double b) { return b2d(a < b); }, nullptr, api_lt},
      {OpId::le, binary_trials, D::Discrete, D::Discrete, nullptr,
       [](double a, double b) { return b2d(a <= b); }, nullptr, api_le},
      {OpId::gt, binary_trials, D::Discrete, D::Discrete, nullptr,
       [](double a, double b) { return b2d(a > b); }, nullptr, api_gt},
      {OpId::ge, binary_trials, D::Discrete, D::Discrete, nullptr,
       [](double a, double b) { return b2d(a >= b); }, nullptr, api_ge},
      {OpId::where, where_trials},
      {OpId::sum, reduce_trials},
      {OpId::mean, reduce_trials},
      {OpId::amax, reduce_trials},
      {OpId::amin, reduce_trials},
      {OpId::argmax, reduce_trials, D::Discrete},  // ties: the first occurrence wins
      {OpId::logsumexp, reduce_trials},
      {OpId::mm, mm_trials},
      {OpId::bmm, bmm_trials},
      {OpId::conv2d, conv2d_trials},
      {OpId::conv2d_backward_input, conv2d_backward_trials},
      {OpId::conv2d_backward_weight, conv2d_backward_trials},
      {OpId::max_pool2d, max_pool2d_trials},
      {OpId::max_pool2d_backward, max_pool2d_trials},
      {OpId::attention, attention_trials},
      {OpId::attention_lse, attention_trials},
      {OpId::attention_backward_query, attention_trials},
      {OpId::attention_backward_kv, attention_trials},
      {OpId::softmax, softmax_trials},
      {OpId::log_softmax, softmax_trials},
      {OpId::layer_norm, layer_norm_trials},
      {OpId::layer_norm_backward, layer_norm_trials},
      {OpId::cross_entropy, cross_entropy_trials},
      {OpId::cross_entropy_backward, cross_entropy_backward_trials},
      {OpId::gather, gather_trials},
      {OpId::index_select, index_select_trials},
      {OpId::one_hot, one_hot_trials},
      {OpId::scatter_add, scatter_add_trials},
      {OpId::cat, cat_trials},
      {OpId::view, view_trials},
      {OpId::permute, permute_trials},
      {OpId::slice, slice_trials},
      {OpId::expand, expand_trials},
      {OpId::arange, arange_trials},
      {OpId::rand, random_trials},
      {OpId::randn, random_trials},
      {OpId::randint, random_trials},
      {OpId::sgd_update, sgd_update_trials},
      {OpId::adam_update, adam_update_trials},
      {OpId::rmsprop_update, rmsprop_update_trials},
      {OpId::adagrad_update, adagrad_update_trials},
      {OpId::amp_unscale, amp_unscale_trials},
      {OpId::multi_norm, multi_norm_trials},
      {OpId::all_reduce, all_reduce_trials},
      {OpId::to_device, to_device_trials},
  };
  return k;
}

const Coverage* find_coverage(OpId op) {
  for (const Coverage& c : coverage_table())
    if (c.op == op) return &c;
  // The activation rows (core/activation_rows.cpp) cover their ops and the generated backward
  // rows of those ops.
  static const std::vector<Coverage> from_rows = [] {
    std::vector<Coverage> v;
    for (int i = 0; i < kNumOps; ++i) {
      bool backward = false;
      if (!activation_rows_of(static_cast<OpId>(i), &backward).empty())
        v.push_back(
            {static_cast<OpId>(i), backward ? activation_backward_trials : activation_trials});
    }
    return v;
  }();
  for (const Coverage& c : from_rows)
    if (c.op == op) return &c;
  return nullptr;
}

// Every dtype the op accepts; ops that promote integers to float also get integer inputs (and
// bool, for unary ones), which must come out as float32.
std::vector<DType> sweep_dtypes(OpId op) {
  const OpInfo& info = op_info(op);
  std::vector<DType> out;
  for (int k = 0; k < kNumDTypes; ++k) {
    const DType t = static_cast<DType>(k);
    const bool promoted = info.rule == OutRule::IntToFloat && !is_floating(t) &&
                          (t != kBool || info.kind == OpKind::Unary);
    if (in_set(info.dtypes, t) || promoted) out.push_back(t);
  }
  return out;
}

uint64_t seed_for(OpId op, DType dt) {
  return (uint64_t(Catch::rngSeed()) << 20) ^ (uint64_t(op) << 8) ^ uint64_t(dt);
}

// Runs `trial` on `dev`, turning an exception into a failure that names the trial. Also checks
// the harness really built strided inputs, and that the op left its inputs alone.
std::optional<Tensor> run(const Trial& trial, Device dev) {
  try {
    std::vector<Tensor> in;
    std::vector<Vec> before;
    for (const Input& i : trial.inputs) {
      in.push_back(i.make(dev));
      if (i.must_be_strided() && in.back().is_contiguous())
        FAIL_CHECK("harness: " << i.str() << " came out contiguous");
      before.push_back(read(in.back()));
    }
    Tensor t = trial.call(in, dev);
    if (dev.is_cuda()) cuda::synchronize(dev.index);
    for (size_t k = 0; k < in.size() && !trial.writes_inputs; ++k) {
      if (read(in[k]) != before[k])
        FAIL_CHECK(trial.what << " on " << dev.str() << " modified input " << k);
    }
    return t;
  } catch (const std::exception& e) {
    FAIL_CHECK(trial.what << " on " << dev.str() << " threw: " << e.what());
    return std::nullopt;
  }
}

void sweep(bool cuda_vs_cpu) {
  for (int i = 0; i < kNumOps; ++i) {
    const OpId op = static_cast<OpId>(i);
    const Coverage* c = find_coverage(op);
    if (!c) {
      DYNAMIC_SECTION(op_name(op) << " coverage") {
        FAIL_CHECK("op '" << op_name(op)
                          << "' has no coverage entry in tests/core/test_op_table.cpp");
      }
      continue;
    }
    for (const DType dt : sweep_dtypes(op)) {
      DYNAMIC_SECTION(op_name(op) << " " << dtype_name(dt)) {
        const uint64_t seed = seed_for(op, dt);
        INFO("inputs from seed " << seed);
        Rng rng(seed);
        std::vector<Trial> trials;
        c->trials(*c, dt, rng, trials);
        CHECK(!trials.empty());
        for (const Trial& t : trials) {
          const Tol tol = tol_for(t.expect.dtype);
          const std::optional<Tensor> cpu = run(t, Device::cpu());
          if (!cuda_vs_cpu) {
            if (!cpu) continue;
            const std::string d = diff(*cpu, Device::cpu(), t.expect.dtype, t.expect.shape,
                                       t.expect.v, t.expect.scale, tol);
            INFO(t.what);
            CHECK_THAT(d, Catch::Matchers::Equals(""));
            continue;
          }
          if ((op == OpId::mm || op == OpId::bmm) && is_integral(dt)) {
            // cuBLAS has no integer GEMM: the CUDA backend rejects it (as PyTorch does).
            std::vector<Tensor> in;
            for (const Input& inp : t.inputs) in.push_back(inp.make(Device::cuda(0)));
            CHECK_THROWS_WITH(t.call(in, Device::cuda(0)),
                              Catch::Matchers::Contains("float types only"));
            continue;
          }
          const std::optional<Tensor> gpu = run(t, Device::cuda(0));
          if (!cpu || !gpu) continue;
          // Against the CPU's result, with the reference's error scale.
          Tol ct = tol;
          if (t.expect.cuda_rtol >= 0)
            ct = {t.expect.cuda_rtol, 0};
          else
            ct = {2 * tol.rtol, 2 * tol.atol};
          Vec scale = t.expect.scale;
          if (scale.empty()) scale.assign(t.expect.v.size(), 0);
          for (size_t j = 0; j < scale.size(); ++j)
            scale[j] = std::max(scale[j], std::fabs(t.expect.v[j]));
          const Device want_dev = t.expect.on_host ? Device::cpu() : Device::cuda(0);
          const std::string d =
              diff(*gpu, want_dev, cpu->dtype(), cpu->sizes(), read(*cpu), scale, ct);
          INFO(t.what << ", CUDA vs CPU");
          CHECK_THAT(d, Catch::Matchers::Equals(""));
        }
      }
    }
  }
}

}  // namespace
}  // namespace ember::test::optable

using namespace ember;
using ember::test::optable::sweep;

TEST_CASE("op table: every op matches its float64 reference on the CPU", "[op_table]") {
  sweep(false);
}

TEST_CASE("op table: CUDA matches the CPU for every op", "[op_table][cuda]") {
  EMBER_REQUIRE_CUDA();
  sweep(true);
}

TEST_CASE("op table: output dtypes follow PyTorch's rules", "[op_table]") {
  // Spelled out by hand (not derived from the table) so a wrong rule in ops.yaml shows up.
  const Tensor i32 = ones({3}, kInt32), i64 = ones({3}, kInt64), b = ones({3}, kBool);
  const Tensor f16 = ones({3}, kFloat16), f32 = ones({3}), f64 = ones({3}, kFloat64);
  CHECK(exp(i32).dtype() == kFloat32);
  CHECK(exp(i64).dtype() == kFloat32);
  CHECK(exp(b).dtype() == kFloat32);
  CHECK(sqrt(f16).dtype() == kFloat16);
  CHECK(sigmoid(f64).dtype() == kFloat64);
  CHECK(div(i32, i32).dtype() == kFloat32);
  CHECK(div(f16, i64).dtype() == kFloat16);
  CHECK(eq(f32, f32).dtype() == kBool);
  CHECK(lt(i32, f64).dtype() == kBool);
  CHECK(sum(i32).dtype() == kInt64);
  CHECK(sum(b).dtype() == kInt64);
  CHECK(sum(f16).dtype() == kFloat16);
  CHECK(mean(f16).dtype() == kFloat16);
  CHECK(argmax(f32).dtype() == kInt64);
  CHECK(amax(i32).dtype() == kInt32);
  CHECK(logsumexp(i64, {0}).dtype() == kFloat32);
  CHECK(add(i32, i64).dtype() == kInt64);
  CHECK(add(i32, f16).dtype() == kFloat16);
  CHECK(mul(b, i32).dtype() == kInt32);
  CHECK(where(b, i32, f32).dtype() == kFloat32);
  CHECK(one_hot(i64, 3).dtype() == kInt64);
  CHECK(relu(i32).dtype() == kInt32);
  CHECK(neg(i64).dtype() == kInt64);
}
