// Convolutions and pooling (nn/conv.h) against float64 loops written out here from PyTorch's
// definitions (stride, padding incl. "same", dilation, groups; ceil_mode, count_include_pad,
// adaptive windows), float64 gradcheck through each, the modules' parameters and init, bad
// shapes named, and a compiled CNN training step equal to eager.
#include <cmath>
#include <limits>
#include <vector>

#include "autograd/grad_mode.h"
#include "autograd/gradcheck.h"
#include "core/factory.h"
#include "core/host_values.h"
#include "core/ops.h"
#include "jit/compile.h"
#include "nn/activation.h"
#include "nn/batch_norm.h"
#include "nn/clip_grad.h"
#include "nn/conv.h"
#include "nn/flatten.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/sequential.h"
#include "optim/sgd.h"
#include "test_util.h"

using namespace ember;
using Catch::Matchers::Contains;
namespace F = ember::nn::functional;

namespace {

using Vec = std::vector<double>;

struct Conv {
  int64_t N, C, H, W, OC, kh, kw, sh, sw, pt, pb, pl, pr, dh, dw, G;
  bool bias;
};

int64_t osize(int64_t in, int64_t k, int64_t s, int64_t d, int64_t pad) {
  return (in + pad - d * (k - 1) - 1) / s + 1;
}

// out[n][o][y][x] = b[o] + sum_{c in o's group, i, j} w[o][c][i][j] x[n][c][y sh - pt + i dh][...]
Vec conv_reference(const Conv& c, const Vec& x, const Vec& w, const Vec& b, int64_t& oh,
                   int64_t& ow) {
  oh = osize(c.H, c.kh, c.sh, c.dh, c.pt + c.pb);
  ow = osize(c.W, c.kw, c.sw, c.dw, c.pl + c.pr);
  const int64_t Cg = c.C / c.G, OCg = c.OC / c.G;
  Vec out(static_cast<size_t>(c.N * c.OC * oh * ow));
  for (int64_t n = 0; n < c.N; ++n)
    for (int64_t o = 0; o < c.OC; ++o)
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t xx = 0; xx < ow; ++xx) {
          double acc = c.bias ? b[o] : 0;
          const int64_t g = o / OCg;
          for (int64_t ci = 0; ci < Cg; ++ci)
            for (int64_t i = 0; i < c.kh; ++i)
              for (int64_t j = 0; j < c.kw; ++j) {
                const int64_t h = y * c.sh - c.pt + i * c.dh, ww = xx * c.sw - c.pl + j * c.dw;
                if (h < 0 || h >= c.H || ww < 0 || ww >= c.W) continue;
                const int64_t cin = g * Cg + ci;
                acc += w[((o * Cg + ci) * c.kh + i) * c.kw + j] *
                       x[((n * c.C + cin) * c.H + h) * c.W + ww];
              }
          out[((n * c.OC + o) * oh + y) * ow + xx] = acc;
        }
  return out;
}

Vec draws(int64_t n, uint64_t seed) {
  manual_seed(seed);
  return test::read(randn({n}, TensorOptions(kFloat64)));
}

void check_conv(const Conv& c, bool same) {
  const Vec x = draws(c.N * c.C * c.H * c.W, 1), w = draws(c.OC * (c.C / c.G) * c.kh * c.kw, 2),
            b = draws(c.OC, 3);
  int64_t oh = 0, ow = 0;
  const Vec want = conv_reference(c, x, w, b, oh, ow);
  const Tensor xt = test::make(x, {c.N, c.C, c.H, c.W}, kFloat64);
  const Tensor wt = test::make(w, {c.OC, c.C / c.G, c.kh, c.kw}, kFloat64);
  const Tensor bt = c.bias ? test::make(b, {c.OC}, kFloat64) : Tensor();
  F::ConvArgs a;
  a.stride = {c.sh, c.sw};
  a.dilation = {c.dh, c.dw};
  a.groups = c.G;
  a.same = same;
  if (!same) a.padding = {c.pt, c.pl};
  const Tensor y = F::conv2d(xt, wt, bt, a);
  REQUIRE(y.sizes() == Shape{c.N, c.OC, oh, ow});
  const Vec got = test::read(y);
  for (size_t i = 0; i < want.size(); ++i) CHECK(got[i] == Approx(want[i]).margin(1e-12));
  // float32 too, within float32's rounding of the same sums.
  const Vec got32 = test::read(
      F::conv2d(xt.to(kFloat32), wt.to(kFloat32), c.bias ? bt.to(kFloat32) : Tensor(), a));
  for (size_t i = 0; i < want.size(); ++i) CHECK(got32[i] == Approx(want[i]).margin(1e-4));
  // Gradients of input, weight and bias against finite differences.
  std::vector<Tensor> in = {xt.clone().requires_grad_(), wt.clone().requires_grad_()};
  if (c.bias) in.push_back(bt.clone().requires_grad_());
  const std::string report = autograd::gradcheck_report(
      [&](const std::vector<Tensor>& v) {
        return F::conv2d(v[0], v[1], c.bias ? v[2] : Tensor(), a);
      },
      in);
  CHECK(report == "");
}

}  // namespace

TEST_CASE("conv2d matches a float64 loop: stride, padding, dilation, groups, no bias",
          "[nn][conv]") {
  // N C H W OC kh kw sh sw pt pb pl pr dh dw G bias
  check_conv({2, 3, 7, 6, 4, 3, 2, 2, 1, 1, 1, 0, 0, 1, 2, 1, true}, false);
  check_conv({1, 6, 5, 5, 3, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 3, true}, false);   // groups 3
  check_conv({2, 4, 4, 5, 4, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 4, false}, false);  // depthwise 1x1
  check_conv({1, 2, 9, 9, 2, 3, 3, 3, 2, 2, 2, 1, 1, 1, 1, 1, true}, false);   // stride 3x2
}

TEST_CASE("conv2d padding='same': the output keeps the input's size, odd totals to the end",
          "[nn][conv]") {
  // kernel 4 (total 3: 1 before, 2 after), kernel 3 with dilation 2 (total 4: 2 and 2).
  check_conv({1, 2, 6, 7, 3, 4, 3, 1, 1, 1, 2, 2, 2, 1, 2, 1, true}, true);
}

TEST_CASE("conv1d matches conv2d on a height-1 input and a float64 loop", "[nn][conv]") {
  const Vec x = draws(2 * 3 * 10, 4), w = draws(5 * 3 * 3, 5);
  const Tensor xt = test::make(x, {2, 3, 10}, kFloat64), wt = test::make(w, {5, 3, 3}, kFloat64);
  F::ConvArgs a;
  a.stride = {2};
  a.padding = {1};
  const Tensor y = F::conv1d(xt, wt, Tensor(), a);
  REQUIRE(y.sizes() == Shape{2, 5, 5});
  const Vec got = test::read(y);
  for (int64_t n = 0; n < 2; ++n)
    for (int64_t o = 0; o < 5; ++o)
      for (int64_t l = 0; l < 5; ++l) {
        double acc = 0;
        for (int64_t c = 0; c < 3; ++c)
          for (int64_t k = 0; k < 3; ++k) {
            const int64_t p = l * 2 - 1 + k;
            if (p >= 0 && p < 10) acc += w[(o * 3 + c) * 3 + k] * x[(n * 3 + c) * 10 + p];
          }
        CHECK(got[(n * 5 + o) * 5 + l] == Approx(acc).margin(1e-12));
      }
}

TEST_CASE("max_pool2d, avg_pool2d, adaptive_avg_pool2d match float64 loops", "[nn][conv]") {
  const int64_t N = 2, C = 3, H = 7, W = 8;
  const Vec x = draws(N * C * H * W, 6);
  const Tensor xt = test::make(x, {N, C, H, W}, kFloat64);
  auto at = [&](int64_t n, int64_t c, int64_t h, int64_t w) {
    return x[((n * C + c) * H + h) * W + w];
  };
  for (bool ceil_mode : {false, true}) {
    for (bool include_pad : {true, false}) {
      INFO("ceil_mode " << ceil_mode << ", count_include_pad " << include_pad);
      F::PoolArgs a{{3, 2}, {2, 2}, {1, 1}, {1}, ceil_mode, include_pad};
      const Tensor mx = F::max_pool2d(xt, a), av = F::avg_pool2d(xt, a);
      // PyTorch's output size: floor or ceil of (H + 2p - k) / s + 1, the last window starting
      // inside the input or its left padding.
      auto out = [&](int64_t in, int64_t k, int64_t s, int64_t p) {
        const int64_t span = in + 2 * p - k;
        int64_t o = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
        if (ceil_mode && (o - 1) * s >= in + p) --o;
        return o;
      };
      const int64_t oh = out(H, 3, 2, 1), ow = out(W, 2, 2, 1);
      REQUIRE(mx.sizes() == Shape{N, C, oh, ow});
      REQUIRE(av.sizes() == Shape{N, C, oh, ow});
      const Vec m = test::read(mx), v = test::read(av);
      for (int64_t n = 0; n < N; ++n)
        for (int64_t c = 0; c < C; ++c)
          for (int64_t y = 0; y < oh; ++y)
            for (int64_t xx = 0; xx < ow; ++xx) {
              const int64_t h0 = y * 2 - 1, w0 = xx * 2 - 1;
              double best = -std::numeric_limits<double>::infinity(), s = 0;
              for (int64_t h = h0; h < h0 + 3; ++h)
                for (int64_t w = w0; w < w0 + 2; ++w)
                  if (h >= 0 && h < H && w >= 0 && w < W) {
                    best = std::max(best, at(n, c, h, w));
                    s += at(n, c, h, w);
                  }
              const int64_t he = std::min(h0 + 3, H + 1), we = std::min(w0 + 2, W + 1);
              const double cnt =
                  include_pad ? static_cast<double>((he - h0) * (we - w0))
                              : static_cast<double>((std::min(he, H) - std::max<int64_t>(h0, 0)) *
                                                    (std::min(we, W) - std::max<int64_t>(w0, 0)));
              const size_t k = static_cast<size_t>(((n * C + c) * oh + y) * ow + xx);
              CHECK(m[k] == best);
              CHECK(v[k] == Approx(s / cnt).margin(1e-12));
            }
    }
  }
  const Tensor ad = F::adaptive_avg_pool2d(xt, {3, 5});
  REQUIRE(ad.sizes() == Shape{N, C, 3, 5});
  const Vec a = test::read(ad);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t y = 0; y < 3; ++y)
        for (int64_t xx = 0; xx < 5; ++xx) {
          const int64_t h0 = y * H / 3, h1 = ((y + 1) * H + 2) / 3;
          const int64_t w0 = xx * W / 5, w1 = ((xx + 1) * W + 4) / 5;
          double s = 0;
          for (int64_t h = h0; h < h1; ++h)
            for (int64_t w = w0; w < w1; ++w) s += at(n, c, h, w);
          CHECK(a[static_cast<size_t>(((n * C + c) * 3 + y) * 5 + xx)] ==
                Approx(s / static_cast<double>((h1 - h0) * (w1 - w0))).margin(1e-12));
        }
  // Gradients (random inputs: no ties in the max).
  const F::PoolArgs pa{{2, 2}, {1, 2}, {1, 0}, {1}, false, true};
  auto grad_ok = [&](auto fn) {
    return autograd::gradcheck_report([&](const std::vector<Tensor>& v) { return fn(v[0]); },
                                      {xt.clone().requires_grad_()});
  };
  CHECK(grad_ok([&](const Tensor& t) { return F::max_pool2d(t, pa); }) == "");
  CHECK(grad_ok([&](const Tensor& t) { return F::avg_pool2d(t, pa); }) == "");
  CHECK(grad_ok([&](const Tensor& t) { return F::adaptive_avg_pool2d(t, {2, 3}); }) == "");
}

namespace {

// Ties and NaNs, in windows the kernels hold in registers (2x2, 3x3) and in larger ones (4x4):
// the winner is the first maximum in row-major order, a NaN winning.
void check_pool_winners(Device dev) {
  for (int64_t k : {2, 3, 4}) {
    INFO(dev.str() << ", window " << k);
    const int64_t H = 2 * k;
    // All ones: every window ties. One NaN in the second window of the first row.
    std::vector<double> x(static_cast<size_t>(H * H), 1.0);
    const int64_t nan_at = (k - 1) * H + k + 1;  // inside window (0, 1), not its first element
    x[static_cast<size_t>(nan_at)] = std::nan("");
    const Tensor xt = test::make(x, {1, 1, H, H}, kFloat32).to(dev).requires_grad_();
    const Tensor y = F::max_pool2d(xt, {{k}});
    REQUIRE(y.sizes() == Shape{1, 1, 2, 2});
    y.sum().backward();
    const Vec g = test::read(xt.grad());
    for (int64_t i = 0; i < H * H; ++i) {
      const int64_t r = i / H, c = i % H;
      const bool first_of_window = r % k == 0 && c % k == 0 && !(r == 0 && c == k);
      INFO("element " << i);
      CHECK(g[static_cast<size_t>(i)] == (i == nan_at || first_of_window ? 1.0 : 0.0));
    }
    const Vec yv = test::read(y);
    CHECK(yv[0] == 1.0);
    CHECK(std::isnan(yv[1]));
  }
}

}  // namespace

TEST_CASE("max_pool2d's gradient goes to each window's first maximum, a NaN winning",
          "[nn][conv]") {
  check_pool_winners(Device::cpu());
}

TEST_CASE("max_pool2d's gradient goes to each window's first maximum, a NaN winning (CUDA)",
          "[nn][conv][cuda]") {
  EMBER_REQUIRE_CUDA();
  check_pool_winners(Device::cuda(0));
}

TEST_CASE("conv and pooling: bad shapes are errors naming the layer and the shapes", "[nn][conv]") {
  const Tensor x = zeros({1, 4, 5, 5});
  CHECK_THROWS_WITH(F::conv2d(x, zeros({2, 3, 3, 3})),
                    Contains("conv2d") && Contains("[1, 4, 5, 5]"));
  F::ConvArgs g;
  g.groups = 3;
  CHECK_THROWS_WITH(F::conv2d(x, zeros({3, 1, 3, 3}), Tensor(), g),
                    Contains("divisible by groups = 3"));
  CHECK_THROWS_WITH(F::conv2d(x, zeros({2, 4, 7, 7})),
                    Contains("larger than the padded input 5x5"));
  CHECK_THROWS_WITH(F::conv2d(zeros({4, 5, 5}), zeros({2, 4, 3, 3})), Contains("4-D input"));
  F::ConvArgs st;
  st.stride = {2};
  st.same = true;
  CHECK_THROWS_WITH(F::conv2d(x, zeros({2, 4, 3, 3}), Tensor(), st),
                    Contains("'same' needs stride 1"));
  CHECK_THROWS_WITH(F::max_pool2d(x, {{2}, {}, {2}}), Contains("at most half the kernel"));
  CHECK_THROWS_WITH(F::max_pool2d(x, {{7}}), Contains("larger than the padded input"));
  CHECK_THROWS_WITH(nn::Conv2d(nn::ConvOptions(4, 6, {3}).groups(4)),
                    Contains("divisible by groups 4"));
}

TEST_CASE("conv2d and max_pool2d on an empty batch: empty outputs, zero parameter gradients",
          "[nn][conv]") {
  auto check_on = [](Device dev) {
    INFO(dev.str());
    const Tensor x = zeros({0, 2, 5, 5}, TensorOptions(kFloat32).device(dev)).requires_grad_();
    const Tensor w = ones({3, 2, 3, 3}, TensorOptions(kFloat32).device(dev)).requires_grad_();
    const Tensor b = ones({3}, TensorOptions(kFloat32).device(dev)).requires_grad_();
    F::ConvArgs a;
    a.padding = {1};
    const Tensor y = F::max_pool2d(F::conv2d(x, w, b, a), {{2}});
    CHECK(y.sizes() == Shape{0, 3, 2, 2});
    sum(y).backward();
    CHECK(x.grad().sizes() == Shape{0, 2, 5, 5});
    CHECK(test::read(w.grad()) == std::vector<double>(54, 0.0));
    CHECK(test::read(b.grad()) == std::vector<double>(3, 0.0));
  };
  check_on(Device::cpu());
  if (cuda::is_available()) check_on(Device::cuda(0));
}

TEST_CASE("Conv2d and Conv1d: PyTorch's names, shapes and init bounds", "[nn][conv]") {
  nn::Conv2d conv(nn::ConvOptions(4, 6, {3, 2}).groups(2));
  const auto named = conv->named_parameters();
  REQUIRE(named.size() == 2);
  CHECK(named[0].first == "weight");
  CHECK(named[1].first == "bias");
  CHECK(conv->weight.sizes() == Shape{6, 2, 3, 2});
  const double bound =
      1.0 / std::sqrt(2.0 * 3 * 2);  // kaiming_uniform(a = sqrt(5)): 1/sqrt(fan_in)
  for (double v : test::read(conv->weight)) CHECK(std::abs(v) <= bound);
  for (double v : test::read(conv->bias)) CHECK(std::abs(v) <= bound);
  nn::Conv1d c1(3, 5, 4);
  CHECK(c1->weight.sizes() == Shape{5, 3, 4});
  CHECK(c1->forward(zeros({2, 3, 9})).sizes() == Shape{2, 5, 6});
  nn::MaxPool2d mp(2);
  CHECK(mp->forward(zeros({1, 1, 5, 4})).sizes() == Shape{1, 1, 2, 2});
}

TEST_CASE("a compiled CNN training step equals eager", "[nn][conv][jit]") {
  auto run = [](bool compiled_run) {
    manual_seed(11);
    nn::Sequential net(nn::Conv2d(nn::ConvOptions(1, 4, {3}).padding({1})), nn::ReLU(),
                       nn::MaxPool2d(2), nn::Flatten(), nn::Linear(4 * 4 * 4, 10));
    optim::SGD opt(net->parameters(), optim::SGDOptions(0.05).momentum(0.9));
    nn::CrossEntropyLoss criterion;
    auto step = [&](const Tensor& x, const Tensor& y) {
      opt.zero_grad();
      Tensor loss = criterion(net->forward(x), y);
      loss.backward();
      opt.step();
      return loss;
    };
    auto compiled = jit::compile(step);
    Vec losses;
    for (int i = 0; i < 6; ++i) {
      const Tensor x = randn({5, 1, 8, 8});
      const Tensor y = randint(0, 10, {5});
      losses.push_back((compiled_run ? compiled(x, y) : step(x, y)).item<float>());
    }
    if (compiled_run) {
      CHECK(compiled.stats().eager_calls == 0);
      CHECK(compiled.stats().replays >= 2);
    }
    return losses;
  };
  const Vec eager = run(false), compiled = run(true);
  CHECK(eager == compiled);
  CHECK(eager.front() != eager.back());  // it trains
}

// The benchmark's cnn on CUDA, where cuDNN picks FFT and Winograd algorithms for these sizes:
// every parameter after every step equals eager's bit for bit (a step that differs is named).
TEST_CASE("a compiled CNN training step equals eager on CUDA, parameter by parameter",
          "[nn][conv][jit][cuda]") {
  EMBER_REQUIRE_CUDA();
  const Device dev = Device::cuda(0);
  using Snapshot = std::vector<std::pair<std::string, Vec>>;
  auto run = [&](bool compiled_run) {
    manual_seed(3);
    nn::Sequential net(nn::Conv2d(nn::ConvOptions(1, 32, {3}).padding({1})), nn::ReLU(),
                       nn::Conv2d(nn::ConvOptions(32, 64, {3}).padding({1})), nn::ReLU(),
                       nn::MaxPool2d(2), nn::Flatten(), nn::Linear(64 * 14 * 14, 128), nn::ReLU(),
                       nn::Linear(128, 10));
    net->to(dev);
    optim::SGD opt(net->parameters(), optim::SGDOptions(0.01));
    nn::CrossEntropyLoss criterion;
    auto step = [&](const Tensor& x, const Tensor& y) {
      opt.zero_grad();
      Tensor loss = criterion(net->forward(x), y);
      loss.backward();
      opt.step();
      return loss;
    };
    auto compiled = jit::compile(step);
    std::vector<Snapshot> after;
    for (int i = 0; i < 5; ++i) {
      const Tensor x = randn({64, 1, 28, 28}, TensorOptions().device(dev));
      const Tensor y = randint(0, 10, {64}, TensorOptions(kInt64).device(dev));
      (compiled_run ? compiled(x, y) : step(x, y)).item<float>();
      Snapshot s;
      for (const auto& [name, p] : net->named_parameters()) s.emplace_back(name, test::read(p));
      after.push_back(std::move(s));
    }
    if (compiled_run) CHECK(compiled.stats().replays >= 2);
    return after;
  };
  // Elements that differ, reported as a count and the first one (the vectors are long).
  auto compare = [](const std::vector<Snapshot>& a, const std::vector<Snapshot>& b,
                    const char* what) {
    for (size_t i = 0; i < a.size(); ++i)
      for (size_t k = 0; k < a[i].size(); ++k) {
        const Vec &x = a[i][k].second, &y = b[i][k].second;
        size_t differ = 0, first = 0;
        for (size_t e = 0; e < x.size(); ++e)
          if (x[e] != y[e] && differ++ == 0) first = e;
        INFO(what << ", after step " << i + 1 << ", parameter " << a[i][k].first << ": " << differ
                  << " of " << x.size() << " differ, first [" << first << "] "
                  << (differ ? x[first] : 0.0) << " vs " << (differ ? y[first] : 0.0));
        CHECK(differ == 0);
      }
  };
  // Eager against itself first: cuDNN algorithms that are not reproducible would show there.
  const auto eager = run(false), again = run(false), compiled = run(true);
  compare(eager, again, "eager twice");
  compare(eager, compiled, "eager against compiled");
}

TEST_CASE("BatchNorm2d: running statistics, eval, num_batches_tracked, a compiled step",
          "[nn][conv][batchnorm]") {
  manual_seed(12);
  nn::BatchNorm2d bn(3);
  CHECK(bn->named_parameters().size() == 2);
  const auto buffers = bn->named_buffers();
  REQUIRE(buffers.size() == 3);
  CHECK(buffers[0].first == "running_mean");
  CHECK(buffers[2].first == "num_batches_tracked");
  const Tensor x = randn({4, 3, 2, 5}, TensorOptions(kFloat64));
  bn->to(kFloat64);
  const Tensor y = bn->forward(x);
  // Each channel of the output has mean 0 and biased variance 1 / (1 + eps / var).
  const Tensor m = mean(y, {0, 2, 3});
  for (double v : test::read(m)) CHECK(std::abs(v) < 1e-12);
  // running_mean = 0.9 * 0 + 0.1 * batch mean; running_var = 0.9 + 0.1 * unbiased variance.
  const std::vector<double> xv = test::read(x), rm = test::read(bn->running_mean),
                            rv = test::read(bn->running_var);
  for (int64_t c = 0; c < 3; ++c) {
    double s = 0, s2 = 0;
    for (int64_t n = 0; n < 4; ++n)
      for (int64_t k = 0; k < 10; ++k) s += xv[static_cast<size_t>((n * 3 + c) * 10 + k)];
    const double mu = s / 40;
    for (int64_t n = 0; n < 4; ++n)
      for (int64_t k = 0; k < 10; ++k) {
        const double d = xv[static_cast<size_t>((n * 3 + c) * 10 + k)] - mu;
        s2 += d * d;
      }
    CHECK(rm[static_cast<size_t>(c)] == Approx(0.1 * mu).margin(1e-14));
    CHECK(rv[static_cast<size_t>(c)] == Approx(0.9 + 0.1 * s2 / 39).margin(1e-14));
  }
  CHECK(test::read(bn->num_batches_tracked)[0] == 1);
  bn->eval();
  const Tensor ye = bn->forward(x);
  CHECK(test::read(bn->num_batches_tracked)[0] == 1);  // eval leaves the statistics alone
  CHECK(test::read(bn->running_mean) == rm);
  CHECK(test::read(ye)[0] == Approx((xv[0] - rm[0]) / std::sqrt(rv[0] + 1e-5)).margin(1e-12));
  CHECK_THROWS_WITH(bn->forward(zeros({2, 4, 3, 3}, TensorOptions(kFloat64))),
                    Contains("num_features = 3"));
}

TEST_CASE("a compiled step with BatchNorm updates the running statistics as eager does",
          "[nn][conv][batchnorm][jit]") {
  auto run = [](bool compiled_run) {
    manual_seed(13);
    nn::Sequential net(nn::Conv2d(nn::ConvOptions(1, 3, {3}).padding({1})), nn::BatchNorm2d(3),
                       nn::ReLU(), nn::Flatten(), nn::Linear(3 * 6 * 6, 4));
    optim::SGD opt(net->parameters(), optim::SGDOptions(0.05));
    nn::CrossEntropyLoss criterion;
    auto step = [&](const Tensor& x, const Tensor& y) {
      opt.zero_grad();
      Tensor loss = criterion(net->forward(x), y);
      loss.backward();
      opt.step();
      return loss;
    };
    auto compiled = jit::compile(step);
    Vec out;
    for (int i = 0; i < 6; ++i) {
      const Tensor x = randn({4, 1, 6, 6}), y = randint(0, 4, {4});
      out.push_back((compiled_run ? compiled(x, y) : step(x, y)).item<float>());
    }
    for (const auto& [name, b] : net->named_buffers())
      for (double v : test::read(b)) out.push_back(v);
    if (compiled_run) CHECK(compiled.stats().replays >= 2);
    return out;
  };
  const Vec eager = run(false), compiled = run(true);
  CHECK(eager == compiled);  // losses, then running_mean, running_var, num_batches_tracked
}

TEST_CASE("a compiled residual BatchNorm step with clipping equals eager, gradients included",
          "[nn][conv][batchnorm][jit]") {
  // Two BatchNorms fed the same gradient (a main path and a shortcut joined by an add) get equal
  // bias gradients, which the compiled step must keep in separate memory; the clipping scales
  // every gradient in place inside the step; weight decay and momentum read them afterwards.
  auto run = [](bool compiled_run, bool clip) {
    manual_seed(15);
    nn::Conv2d conv(nn::ConvOptions(2, 3, {3}).padding({1})), skip(nn::ConvOptions(2, 3, {1}));
    nn::BatchNorm2d bn_main(3), bn_skip(3);
    nn::Linear head(3 * 5 * 5, 4);
    std::vector<Tensor> params;
    for (nn::Module* m :
         std::vector<nn::Module*>{conv.get(), skip.get(), bn_main.get(), bn_skip.get(), head.get()})
      for (const Tensor& p : m->parameters()) params.push_back(p);
    optim::SGD opt(params, optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-3));
    nn::CrossEntropyLoss criterion;
    auto step = [&](const Tensor& x, const Tensor& y) {
      opt.zero_grad();
      const Tensor h =
          relu(add(bn_main->forward(conv->forward(x)), bn_skip->forward(skip->forward(x))));
      Tensor loss = criterion(head->forward(h.flatten(1)), y);
      loss.backward();
      if (clip) nn::utils::clip_grad_norm_(params, 0.5);
      opt.step();
      return loss;
    };
    auto compiled = jit::compile(step);
    Vec out;
    for (int i = 0; i < 6; ++i) {
      const Tensor x = randn({4, 2, 5, 5}), y = randint(0, 4, {4});
      out.push_back((compiled_run ? compiled(x, y) : step(x, y)).item<float>());
    }
    // Each parameter's gradient is its own memory: scaling one changes no other.
    Tensor skip_grad = bn_skip->bias.grad();
    skip_grad.mul_(2.0);
    for (const Tensor& p : params) {
      for (double v : test::read(p)) out.push_back(v);
      for (double v : test::read(p.grad())) out.push_back(v);
    }
    if (compiled_run) CHECK(compiled.stats().replays >= 2);
    return out;
  };
  for (bool clip : {false, true}) {
    INFO("clip_grad_norm_ " << clip);
    const Vec eager = run(false, clip), compiled = run(true, clip);
    CHECK(eager == compiled);
  }
}

TEST_CASE("a compiled step toggled between train() and eval() every epoch, short last batches",
          "[nn][conv][batchnorm][jit]") {
  // The loop of a real training run: each epoch trains (full batches and a short last one) and
  // then evaluates, so every epoch changes the host configuration twice. The short batch's
  // signature is traced anew each epoch; that must neither crash nor diverge from eager.
  auto run = [](bool compiled_run) {
    manual_seed(14);
    nn::Sequential net(nn::Conv2d(nn::ConvOptions(1, 2, {3}).padding({1})), nn::BatchNorm2d(2),
                       nn::ReLU(), nn::Flatten(), nn::Linear(2 * 4 * 4, 3));
    optim::SGD opt(net->parameters(), optim::SGDOptions(0.05));
    nn::CrossEntropyLoss criterion;
    auto step = [&](const Tensor& x, const Tensor& y) {
      opt.zero_grad();
      Tensor loss = criterion(net->forward(x), y);
      loss.backward();
      opt.step();
      return loss;
    };
    jit::Options jo;
    jo.dynamic = true;
    auto compiled = jit::compile(step, jo);
    Vec out;
    for (int epoch = 0; epoch < 10; ++epoch) {
      net->train();
      for (int64_t b : {4, 4, 3}) {
        const Tensor x = randn({b, 1, 4, 4}), y = randint(0, 3, {b});
        out.push_back((compiled_run ? compiled(x, y) : step(x, y)).item<float>());
      }
      net->eval();
      NoGradGuard no_grad;
      out.push_back(sum(net->forward(randn({2, 1, 4, 4}))).item<float>());
    }
    return out;
  };
  const Vec eager = run(false), compiled = run(true);
  CHECK(eager == compiled);
}
