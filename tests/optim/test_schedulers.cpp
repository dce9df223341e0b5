// The learning-rate schedules against PyTorch's sequences (tools/make_optim_fixtures.py,
// optim_schedules.safetensors: group 0's lr after construction and after each step(), from a
// base lr of 0.1), and a state_dict round trip that resumes the same sequence.
#include <cmath>
#include <filesystem>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/host_values.h"
#include "nn/serialize.h"
#include "optim/schedulers.h"
#include "optim/serialize.h"
#include "optim/sgd.h"
#include "test_util.h"

using namespace ember;
using json = nlohmann::json;
using Catch::Matchers::Contains;

namespace {

nn::TensorFile schedules() {
  const std::string path = std::string(EMBER_FIXTURE_DIR) + "/optim_schedules.safetensors";
  if (!std::filesystem::exists(path))
    FAIL("missing " << path << "; make it with `python3 tools/make_optim_fixtures.py`");
  return nn::load_tensor_file(path);
}

std::shared_ptr<optim::LRScheduler> build(optim::Optimizer& opt, const json& c) {
  const std::string kind = c["kind"];
  if (kind == "StepLR")
    return std::make_shared<optim::StepLR>(opt, c["step_size"].get<int64_t>(),
                                           c["gamma"].get<double>());
  if (kind == "MultiStepLR")
    return std::make_shared<optim::MultiStepLR>(opt, c["milestones"].get<std::vector<int64_t>>(),
                                                c["gamma"].get<double>());
  if (kind == "ExponentialLR")
    return std::make_shared<optim::ExponentialLR>(opt, c["gamma"].get<double>());
  if (kind == "CosineAnnealingLR")
    return std::make_shared<optim::CosineAnnealingLR>(opt, c["T_max"].get<int64_t>(),
                                                      c["eta_min"].get<double>());
  if (kind == "LinearLR")
    return std::make_shared<optim::LinearLR>(opt, c["start_factor"].get<double>(),
                                             c["end_factor"].get<double>(),
                                             c["total_iters"].get<int64_t>());
  if (kind == "OneCycleLR") {
    optim::OneCycleOptions o;
    o.pct_start = c["pct_start"];
    o.div_factor = c["div_factor"];
    o.final_div_factor = c["final_div_factor"];
    o.cosine = c["anneal_strategy"] == "cos";
    return std::make_shared<optim::OneCycleLR>(opt, c["max_lr"].get<double>(),
                                               c["total_steps"].get<int64_t>(), o);
  }
  if (kind == "SequentialLR") {
    std::vector<std::shared_ptr<optim::LRScheduler>> children;
    for (const json& child : c["schedulers"]) children.push_back(build(opt, child));
    return std::make_shared<optim::SequentialLR>(opt, children,
                                                 c["milestones"].get<std::vector<int64_t>>());
  }
  if (kind == "LambdaLR")  // the fixture's "0.95 ** epoch / (1 + epoch)"
    return std::make_shared<optim::LambdaLR>(
        opt, [](int64_t e) { return std::pow(0.95, static_cast<double>(e)) / (1.0 + e); });
  FAIL("unknown scheduler " << kind);
  return nullptr;
}

optim::PlateauOptions plateau_options(const json& c) {
  optim::PlateauOptions o;
  o.mode_max = c["mode"] == "max";
  o.factor = c["factor"];
  o.patience = c["patience"];
  o.threshold = c["threshold"];
  o.threshold_abs = c["threshold_mode"] == "abs";
  o.cooldown = c["cooldown"];
  o.min_lr = c["min_lr"];
  return o;
}

}  // namespace

TEST_CASE("lr schedules follow PyTorch's sequences", "[optim][sched]") {
  const nn::TensorFile f = schedules();
  const std::vector<std::string> cases = json::parse(f.metadata.at("cases"));
  CHECK(cases.size() == 11);
  for (const std::string& name : cases) {
    DYNAMIC_SECTION(name) {
      const json c = json::parse(f.metadata.at(name));
      const std::vector<double> want = test::read(f.tensors.at(name));
      Tensor p = test::make({0.0}, {1}, kFloat32).requires_grad_();
      optim::SGD opt({p}, optim::SGDOptions(0.1));
      std::vector<double> got;
      if (c["kind"] == "ReduceLROnPlateau") {
        const std::vector<double> metric = test::read(f.tensors.at(name + ".metric"));
        optim::ReduceLROnPlateau s(opt, plateau_options(c));
        got.push_back(opt.get_lr(0));
        for (size_t e = 0; e + 1 < want.size(); ++e) {
          s.step(metric[e]);
          got.push_back(opt.get_lr(0));
        }
      } else {
        auto s = build(opt, c);
        got.push_back(opt.get_lr(0));
        for (size_t e = 0; e + 1 < want.size(); ++e) {
          s->step();
          got.push_back(opt.get_lr(0));
          CHECK(s->get_last_lr()[0] == opt.get_lr(0));
        }
      }
      REQUIRE(got.size() == want.size());
      for (size_t e = 0; e < want.size(); ++e) {
        INFO(name << " epoch " << e << ": " << got[e] << " vs PyTorch " << want[e]);
        CHECK(std::abs(got[e] - want[e]) <= 1e-12 * std::max(1e-3, std::abs(want[e])));
      }
    }
  }
}

TEST_CASE("lr schedules: state_dict resumes the same sequence and bad options are errors",
          "[optim][sched]") {
  Tensor p = test::make({0.0}, {1}, kFloat32).requires_grad_();
  optim::SGD a({p}, optim::SGDOptions(0.1));
  auto make = [](optim::SGD& opt) {
    auto warm = std::make_shared<optim::LinearLR>(opt, 0.2, 1.0, 3);
    auto cos = std::make_shared<optim::CosineAnnealingLR>(opt, 10, 0.001);
    return std::make_shared<optim::SequentialLR>(
        opt, std::vector<std::shared_ptr<optim::LRScheduler>>{warm, cos}, std::vector<int64_t>{3});
  };
  auto sa = make(a);
  for (int i = 0; i < 5; ++i) sa->step();
  const optim::OptimizerState saved = sa->state_dict();
  test::TempDir dir;
  const std::string file = (dir.path() / "sched.safetensors").string();
  optim::save(*sa, file);
  std::vector<double> rest;
  for (int i = 0; i < 6; ++i) {
    sa->step();
    rest.push_back(a.get_lr(0));
  }
  optim::SGD b({p}, optim::SGDOptions(0.1));
  auto sb = make(b);
  optim::load(*sb, file);
  b.set_lr(0, saved.tensors.at("last_lr").to_vector<double>()[0]);  // the optimizer's own state
  for (int i = 0; i < 6; ++i) {
    sb->step();
    CHECK(b.get_lr(0) == rest[static_cast<size_t>(i)]);
  }
  optim::StepLR other(b, 2);
  CHECK_THROWS_WITH(optim::load(other, file), Contains("the state is for 'SequentialLR'"));
  CHECK_THROWS_WITH(optim::LinearLR(b, 0.0), Contains("start_factor"));
  CHECK_THROWS_WITH(optim::CosineAnnealingLR(b, 0), Contains("T_max"));
  CHECK_THROWS_WITH(optim::OneCycleLR(b, 0.1, 0), Contains("total_steps"));
  // A warm-up of one step has no length (its first rate would be 0 / 0); one of two is fine.
  optim::OneCycleOptions one;
  one.pct_start = 0.1;
  CHECK_THROWS_WITH(optim::OneCycleLR(b, 0.1, 10, one), Contains("warm-up of one step"));
  one.pct_start = 0.2;
  optim::OneCycleLR two(b, 0.1, 10, one);
  CHECK(std::isfinite(b.get_lr(0)));
  CHECK(b.get_lr(0) == Approx(0.1 / 25));
  // A tensor metric is read on the host; it must be one number.
  optim::PlateauOptions po;
  po.patience = 0;
  optim::ReduceLROnPlateau plateau(b, po);
  const double before = b.get_lr(0);
  plateau.step(test::make({1.0}, {}, kFloat32));
  plateau.step(test::make({2.0}, {}, kFloat32));  // worse, patience 0: the lr drops
  CHECK(b.get_lr(0) == Approx(before * 0.1));
  CHECK_THROWS_WITH(plateau.step(test::make({1.0, 2.0}, {2}, kFloat32)), Contains("one number"));
}
