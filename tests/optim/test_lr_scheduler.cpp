// StepLR against its closed form base_lr * gamma^floor(epoch / step_size), and the updates
// the optimizer makes with the scheduled rates.
#include <cmath>
#include <vector>

#include "core/host_values.h"
#include "optim/lr_scheduler.h"
#include "optim/sgd.h"
#include "test_util.h"

using namespace ember;

TEST_CASE("StepLR follows base_lr * gamma^floor(epoch / step_size)", "[optim]") {
  Tensor a = test::make({1.0}, {1}, kFloat64).requires_grad_();
  Tensor b = test::make({1.0}, {1}, kFloat64).requires_grad_();
  std::vector<optim::ParamGroup> groups;
  groups.emplace_back(std::vector<Tensor>{a}, optim::SGDOptions(0.1));
  groups.emplace_back(std::vector<Tensor>{b}, optim::SGDOptions(0.8));
  optim::SGD opt(groups, optim::SGDOptions(1.0));
  optim::StepLR sched(opt, 3, 0.5);
  CHECK(sched.last_epoch() == 0);
  CHECK(sched.get_last_lr() == std::vector<double>{0.1, 0.8});
  for (int epoch = 1; epoch <= 10; ++epoch) {
    // The update of this epoch uses the lr set at the end of the previous one.
    const double lr_a = opt.get_lr(0);
    const double before = test::read(a)[0];
    a.set_grad(test::make({1.0}, {1}, kFloat64));
    opt.step();
    CHECK(test::read(a)[0] ==
          before - static_cast<double>(static_cast<float>(lr_a)));  // the device lr is float32
    sched.step();
    INFO("epoch " << epoch);
    const double factor = std::pow(0.5, epoch / 3);
    CHECK(sched.last_epoch() == epoch);
    CHECK(sched.get_last_lr()[0] == Approx(0.1 * factor).epsilon(1e-15));
    CHECK(sched.get_last_lr()[1] == Approx(0.8 * factor).epsilon(1e-15));
    CHECK(opt.get_lr(0) == sched.get_last_lr()[0]);
    CHECK(opt.get_lr(1) == sched.get_last_lr()[1]);
  }
}

TEST_CASE("StepLR decays a rate changed by hand, like PyTorch's chainable form", "[optim]") {
  Tensor a = test::make({1.0}, {1}, kFloat32).requires_grad_();
  optim::SGD opt({a}, optim::SGDOptions(1.0));
  optim::StepLR sched(opt, 2, 0.1);
  sched.step();  // epoch 1: unchanged
  CHECK(opt.get_lr(0) == 1.0);
  opt.set_lr(4.0);
  sched.step();  // epoch 2: decays what is there now
  CHECK(opt.get_lr(0) == Approx(0.4));
}

TEST_CASE("StepLR rejects bad arguments", "[optim]") {
  Tensor a = test::make({1.0}, {1}, kFloat32).requires_grad_();
  optim::SGD opt({a}, optim::SGDOptions(1.0));
  CHECK_THROWS_AS(optim::StepLR(opt, 0, 0.1), Error);
  CHECK_THROWS_AS(optim::StepLR(opt, 1, -0.5), Error);
  CHECK_THROWS_AS(optim::StepLR(opt, 1, std::nan("")), Error);
}
