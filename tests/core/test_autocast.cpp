// autocast: PyTorch's per-op policy (lower / fp32 / promote / untouched, float64 left alone),
// values against float64 products of the rounded operands, gradients against the same model
// with the casts written out by hand, the parameter-cast cache (one cast per region while the
// parameter is unchanged), backward with autocast off, and the JIT retracing when the state
// changes. CPU here; the CUDA cases run the same checks on the GPU.
#include <cmath>
#include <vector>

#include "autograd/grad_mode.h"
#include "core/autocast.h"
#include "core/dispatch.h"
#include "core/factory.h"
#include "core/host_values.h"
#include "core/ops.h"
#include "jit/compile.h"
#include "nn/functional.h"
#include "nn/linear.h"
#include "test_util.h"

using namespace ember;
using Catch::Matchers::Contains;

namespace {

// Counts the cast ops dispatched while alive.
struct CastCounter {
  static inline int count = 0;
  static inline OpObserver prev = nullptr;
  CastCounter() {
    count = 0;
    prev = trace_observer();
    set_trace_observer([](OpId op, std::span<const Tensor>, const Attrs&, const Tensor&, bool) {
      if (op == OpId::cast) ++count;
    });
  }
  ~CastCounter() { set_trace_observer(prev); }
};

Tensor randn_on(const Shape& s, Device dev) {
  return randn(s).to(dev);
}

void check_policy(Device dev, DType low) {
  manual_seed(1);
  const Tensor a = randn_on({4, 8}, dev), b = randn_on({8, 3}, dev);
  const Tensor t = test::make({0, 2, 1, 2}, {4}, kInt64, dev);
  AutocastGuard amp(dev.type, low);
  CHECK(autocast_enabled(dev.type));
  const Tensor p = mm(a, b);
  CHECK(p.dtype() == low);                                    // lower list
  CHECK(relu(p).dtype() == low);                              // untouched: runs as given
  CHECK(softmax(p, 1).dtype() == kFloat32);                   // fp32 list
  CHECK(log_softmax(p, 1).dtype() == kFloat32);
  CHECK(exp(p).dtype() == kFloat32);
  CHECK(sum(p).dtype() == kFloat32);
  CHECK(cross_entropy_per_sample(p, t).dtype() == kFloat32);
  CHECK(cat({p, a.slice(1, 0, 3)}, 0).dtype() == kFloat32);  // promote: the widest
  CHECK(cat({p, p}, 0).dtype() == low);
  CHECK(mm(a.to(kFloat64), b.to(kFloat64)).dtype() == kFloat64);  // float64 is left alone
  CHECK(add(p, 1.0).dtype() == low);
  nn::Linear fc(8, 3);
  fc->to(dev);
  CHECK(fc->forward(a).dtype() == low);  // the bias is cast too
  CHECK(nn::functional::layer_norm(p, {3}, Tensor(), Tensor(), 1e-5).dtype() == kFloat32);
  {
    AutocastGuard off(dev.type, low, false);
    CHECK(mm(a, b).dtype() == kFloat32);
    CHECK_FALSE(autocast_enabled(dev.type));
  }
  CHECK(mm(a, b).dtype() == low);
  // The other device type's region is not this one.
  const DeviceType other = dev.is_cpu() ? DeviceType::CUDA : DeviceType::CPU;
  CHECK_FALSE(autocast_enabled(other));
}

// mm under autocast against the float64 product of the operands rounded to `low`: float32
// accumulation, then one rounding to `low`.
void check_values(Device dev, DType low) {
  manual_seed(2);
  const Tensor a = randn_on({16, 64}, dev), b = randn_on({64, 8}, dev);
  Tensor p;
  {
    AutocastGuard amp(dev.type, low);
    p = mm(a, b);
  }
  const std::vector<double> av = test::read(a), bv = test::read(b), pv = test::read(p);
  const double ulp = low == kBFloat16 ? 1.0 / 128 : 1.0 / 1024;
  for (int64_t i = 0; i < 16; ++i)
    for (int64_t j = 0; j < 8; ++j) {
      double want = 0, mag = 0;
      for (int64_t k = 0; k < 64; ++k) {
        const double x = test::round_to(low, av[i * 64 + k]), y = test::round_to(low, bv[k * 8 + j]);
        want += x * y;
        mag += std::abs(x * y);
      }
      INFO("p[" << i << "][" << j << "]");
      // One rounding to `low` of the result, plus float32 accumulation error on the terms.
      CHECK(std::abs(pv[i * 8 + j] - want) <= ulp * std::abs(want) + 1e-6 * mag);
    }
}

// A Linear -> ReLU -> Linear -> cross entropy step under autocast, against the same step with
// the casts written out by hand: the loss and the float32 gradients agree bit for bit.
void check_gradients(Device dev, DType low) {
  manual_seed(3);
  const Tensor x = randn_on({6, 5}, dev);
  const Tensor y = test::make({0, 3, 1, 2, 3, 0}, {6}, kInt64, dev);
  auto make = [&](const Shape& s) { return randn_on(s, dev).requires_grad_(); };
  Tensor w1 = make({7, 5}), b1 = make({7}), w2 = make({4, 7}), b2 = make({4});
  auto grads = [&] {
    std::vector<Tensor> g = {w1.grad(), b1.grad(), w2.grad(), b2.grad()};
    for (Tensor* p : {&w1, &b1, &w2, &b2}) p->set_grad(Tensor());
    return g;
  };
  Tensor loss_auto;
  {
    AutocastGuard amp(dev.type, low);
    const Tensor h = relu(linear(x, w1, b1));
    loss_auto = cross_entropy_reduced(linear(h, w2, b2), y, -100, 0, LossReduction::Mean);
  }
  CHECK(loss_auto.dtype() == kFloat32);
  loss_auto.backward();
  const std::vector<Tensor> g_auto = grads();
  auto c = [&](const Tensor& t) { return t.to(low); };
  const Tensor h = relu(add(mm(c(x), c(w1).t()), c(b1)));
  const Tensor logits = add(mm(h, c(w2).t()), c(b2));
  const Tensor loss_hand =
      cross_entropy_reduced(logits.to(kFloat32), y, -100, 0, LossReduction::Mean);
  loss_hand.backward();
  const std::vector<Tensor> g_hand = grads();
  CHECK(loss_auto.item<float>() == loss_hand.item<float>());
  for (size_t i = 0; i < g_auto.size(); ++i) {
    INFO("gradient " << i);
    REQUIRE(g_auto[i].defined());
    CHECK(g_auto[i].dtype() == kFloat32);
    CHECK(test::read(g_auto[i]) == test::read(g_hand[i]));
  }
}

}  // namespace

TEST_CASE("autocast: PyTorch's per-op policy on the CPU", "[autocast]") {
  check_policy(Device::cpu(), kBFloat16);
  check_policy(Device::cpu(), kFloat16);
  CHECK_FALSE(autocast_enabled(DeviceType::CPU));  // the guards put the state back
  CHECK(autocast_key() == 0);
}

TEST_CASE("autocast: mm rounds once to the low dtype from float32 sums (CPU)", "[autocast]") {
  check_values(Device::cpu(), kBFloat16);
  check_values(Device::cpu(), kFloat16);
}

TEST_CASE("autocast: gradients equal the hand-cast model's, in float32 (CPU)", "[autocast]") {
  check_gradients(Device::cpu(), kBFloat16);
  check_gradients(Device::cpu(), kFloat16);
}

TEST_CASE("autocast: a parameter is cast once per region while unchanged", "[autocast]") {
  manual_seed(4);
  Tensor w = randn({3, 3}).requires_grad_();
  const Tensor x = randn({2, 3}), act = randn({3, 3});
  AutocastGuard amp(DeviceType::CPU, kBFloat16);
  {
    CastCounter c;
    mm(x, w);
    mm(x, w);
    mm(w, w);  // w on both sides: still the one cast
    CHECK(CastCounter::count == 3);  // w once; x, an activation, at each of its two uses
  }
  {
    CastCounter c;
    mm(x, w);
    CHECK(CastCounter::count == 1);  // x only: w's cast is cached
    mm(act, act);
    CHECK(CastCounter::count == 3);  // activations are cast at each use
  }
  {
    NoGradGuard no_grad;
    w.add_(1.0);  // a new version: the cached cast is stale
  }
  {
    CastCounter c;
    const Tensor p = mm(w, w);
    CHECK(CastCounter::count == 1);
    CHECK(test::read(p) == test::read(mm(w.detach().to(kBFloat16), w.detach().to(kBFloat16))));
  }
}

TEST_CASE("autocast: bad dtypes are errors naming them", "[autocast]") {
  CHECK_THROWS_WITH(AutocastGuard(DeviceType::CPU, kFloat32), Contains("float32"));
  CHECK_THROWS_WITH(AutocastGuard(DeviceType::CUDA, kInt64), Contains("int64"));
  CHECK_FALSE(autocast_enabled(DeviceType::CPU));
  CHECK_THROWS_WITH(set_float32_matmul_precision("fast"), Contains("\"fast\""));
  set_float32_matmul_precision("high");
  CHECK(allow_tf32());
  CHECK(float32_matmul_precision() == "high");
  set_float32_matmul_precision("highest");
  CHECK_FALSE(allow_tf32());
}

TEST_CASE("autocast: a compiled step retraces when the autocast state changes", "[autocast][jit]") {
  manual_seed(5);
  Tensor w = randn({4, 3}).requires_grad_(), b = randn({4}).requires_grad_();
  const Tensor x = randn({5, 3});
  auto fn = [&](const Tensor& in) {
    w.set_grad(Tensor());
    b.set_grad(Tensor());
    Tensor loss = sum(relu(linear(in, w, b)));
    loss.backward();
    return std::vector<Tensor>{loss, w.grad()};
  };
  auto compiled = jit::compile(fn);
  std::vector<double> eager_auto, eager_plain, eager_auto_grad;
  {
    AutocastGuard amp(DeviceType::CPU, kBFloat16);
    const auto out = fn(x);
    eager_auto = test::read(out[0]);
    eager_auto_grad = test::read(out[1]);
  }
  eager_plain = test::read(fn(x)[0]);
  REQUIRE(eager_auto != eager_plain);  // bfloat16 rounding shows
  for (int i = 0; i < 3; ++i) {
    {
      AutocastGuard amp(DeviceType::CPU, kBFloat16);
      const auto out = compiled(x);
      CHECK(test::read(out[0]) == eager_auto);
      CHECK(test::read(out[1]) == eager_auto_grad);
    }
    CHECK(test::read(compiled(x)[0]) == eager_plain);
  }
  const jit::CompileStats& s = compiled.stats();
  CHECK(s.executables == 2);  // one per autocast state, each replayed
  CHECK(s.eager_calls == 0);
  CHECK(s.replays >= 2);
}
