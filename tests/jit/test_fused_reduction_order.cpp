// A reduction the JIT fuses into its producer must equal eager's reduction of the producer's
// output bit for bit: both cut the work the same way (kernels/reduce_grid.h) and fold and
// combine in the same order. First the case that found it: a convolution's bias gradient in a
// compiled step is the fused relu-backward + sum over (N, H, W), whose long rows the fused
// kernel once combined in another order than eager (a compiled CNN step differed from eager by
// one unit in the last place of a bias element); then rows, columns and whole-tensor sums of
// other layouts: contiguous rows (which eager folds with vector loads) of lengths that are and
// are not a multiple of the vector, means, and split reductions.
#include <string>
#include <vector>

#include "core/factory.h"
#include "core/host_values.h"
#include "core/ops.h"
#include "jit/compile.h"
#include "test_util.h"

using namespace ember;

namespace {

void check_device(Device dev) {
  const TensorOptions o = TensorOptions().device(dev);
  const Shape shapes[] = {{64, 32, 28, 28}, {64, 64, 28, 28}, {256, 64, 28, 28}, {7, 5, 9, 11}};
  for (const Shape& s : shapes) {
    // The bias's gradient through autograd's own formulas: relu(x + b) against an incoming
    // gradient, as a Conv2d + ReLU's backward computes it.
    Tensor b = zeros({s[1]}, o).requires_grad_(true);
    auto bias_grad = [&](const Tensor& pre, const Tensor& g) {
      b.set_grad(Tensor());
      sum(mul(relu(add(pre, b.view({1, s[1], 1, 1}))), g)).backward();
      return b.grad();
    };
    auto compiled = jit::compile(bias_grad);
    for (int seed = 0; seed < 6; ++seed) {
      manual_seed(100 + static_cast<uint64_t>(seed));
      const Tensor pre = randn(s, o), g = mul(randn(s, o), 1e-3);
      const std::vector<double> eager = test::read(bias_grad(pre, g));
      std::vector<double> fused;
      for (int i = 0; i < 3; ++i) fused = test::read(compiled(pre, g));  // traced, then replays
      size_t differ = 0, first = 0;
      for (size_t e = 0; e < eager.size(); ++e)
        if (eager[e] != fused[e] && differ++ == 0) first = e;
      INFO("shape " << s << ", seed " << seed << ": " << differ << " of " << eager.size()
                    << " differ, first [" << first << "]");
      CHECK(differ == 0);
    }
    CHECK(compiled.stats().replays >= 1);
  }
}

struct Case {
  Shape shape;
  Dims dims;
  bool mean;
  bool vector_order;  // eager reads these rows 16 bytes at a time (contiguous trailing dims)
};

void check_reductions(Device dev) {
  const TensorOptions o = TensorOptions().device(dev);
  const Case cases[] = {
      {{64, 1000}, {1}, false, true},          // contiguous rows, short
      {{37, 1001}, {1}, false, true},          // rows whose starts are not 16-byte aligned
      {{3, 50001}, {1}, true, true},           // few long rows: split, a block per row
      {{4096, 1030}, {1}, false, true},        // many long rows
      {{8, 6, 515}, {1, 2}, false, true},      // two trailing dims
      {{1 << 20}, {0}, false, true},           // a whole-tensor sum (a loss's)
      {{999, 777}, {}, true, true},            // the mean of all
      {{16, 12, 7, 9}, {0, 2}, false, false},  // rows over non-trailing dims
      {{8192, 10}, {0}, false, false},         // columns
      {{5, 300, 33}, {0, 2}, false, false},
  };
  for (const Case& c : cases) {
    auto f = [&](const Tensor& x, const Tensor& g) {
      const Tensor y = mul(relu(x), g);
      return c.mean ? mean(y, c.dims) : sum(y, c.dims);
    };
    auto compiled = jit::compile(f);
    for (int seed = 0; seed < 3; ++seed) {
      manual_seed(200 + static_cast<uint64_t>(seed));
      const Tensor x = randn(c.shape, o), g = randn(c.shape, o);
      const std::vector<double> eager = test::read(f(x, g));
      std::vector<double> fused;
      for (int i = 0; i < 3; ++i) fused = test::read(compiled(x, g));
      size_t differ = 0, first = 0;
      for (size_t e = 0; e < eager.size(); ++e)
        if (eager[e] != fused[e] && differ++ == 0) first = e;
      INFO("shape " << c.shape << ", " << c.dims.size() << " dims reduced, seed " << seed << ": "
                    << differ << " of " << eager.size() << " differ, first [" << first << "]");
      CHECK(differ == 0);
    }
    CHECK(compiled.stats().replays >= 1);
    if (dev.is_cuda()) {  // the reduction did run fused, in the order the case expects
      const Tensor x = randn(c.shape, o);
      const jit::Explanation e = jit::explain(f, x, x);
      std::string all;
      for (const std::string& l : e.lowerings) all += l + "\n";
      INFO("shape " << c.shape << ", lowerings:\n" << all);
      CHECK(all.find("nvrtc reduction kernel") != std::string::npos);
      CHECK((all.find("eager's vector order") != std::string::npos) == c.vector_order);
    }
  }
}

}  // namespace

TEST_CASE("a fused relu-backward + bias sum equals eager bit for bit (CPU)", "[jit][reduction]") {
  check_device(Device::cpu());
}

TEST_CASE("a fused relu-backward + bias sum equals eager bit for bit (CUDA)",
          "[jit][reduction][cuda]") {
  EMBER_REQUIRE_CUDA();
  check_device(Device::cuda(0));
}

TEST_CASE("fused reductions of any layout equal eager's bit for bit (CPU)", "[jit][reduction]") {
  check_reductions(Device::cpu());
}

TEST_CASE("fused reductions of any layout equal eager's bit for bit (CUDA)",
          "[jit][reduction][cuda]") {
  EMBER_REQUIRE_CUDA();
  check_reductions(Device::cuda(0));
}
