// A convolution's bias gradient in a compiled step is the JIT's fused relu-backward + sum over
// (N, H, W); eager runs the same ops one by one. The two must agree bit for bit (the reduction
// kernels sum in one fixed order) on the shapes a CNN produces, for many random inputs: the
// compiled CNN step was seen to differ from eager by one unit in the last place of one bias
// element (bench/NOTES.md), and this isolates the reduction from the convolutions.
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

}  // namespace

TEST_CASE("a fused relu-backward + bias sum equals eager bit for bit (CPU)", "[jit][reduction]") {
  check_device(Device::cpu());
}

TEST_CASE("a fused relu-backward + bias sum equals eager bit for bit (CUDA)",
          "[jit][reduction][cuda]") {
  EMBER_REQUIRE_CUDA();
  check_device(Device::cuda(0));
}
