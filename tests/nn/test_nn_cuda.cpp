// The nn layer on the GPU: modules moved to CUDA keep their handles, and layers and losses give
// the CPU's values and gradients (the CPU side is checked against float64 references in the
// other nn tests).
#include <string>
#include <vector>

#include "core/factory.h"
#include "core/generator.h"
#include "core/ops.h"
#include "nn/activation.h"
#include "nn/dropout.h"
#include "nn/embedding.h"
#include "nn/functional.h"
#include "nn/layer_norm.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/sequential.h"
#include "nn_test_util.h"

using namespace ember;
using Catch::Matchers::Contains;
using nntest::i64;
using nntest::Vec;
namespace F = ember::nn::functional;

namespace {

const Device kCuda = Device::cuda(0);

Tensor leaf(Tensor t) {
  t.requires_grad_(true);
  return t;
}

// Values of a CUDA result against the CPU one.
void check_same(const Tensor& gpu, const Tensor& cpu, double rtol = 1e-5, double atol = 1e-6) {
  REQUIRE(gpu.defined());
  REQUIRE(cpu.defined());
  CHECK(gpu.is_cuda());
  CHECK(gpu.sizes() == cpu.sizes());
  CHECK_VALUES(gpu, test::read(cpu), rtol, atol);
}

}  // namespace

TEST_CASE("cuda: a model moved to the GPU keeps its handles and matches the CPU", "[nn][cuda]") {
  EMBER_REQUIRE_CUDA();
  manual_seed(10);
  nn::Sequential cpu_model(nn::Linear(8, 16), nn::GELU(), nn::LayerNorm(16), nn::Linear(16, 4));
  manual_seed(10);
  nn::Sequential gpu_model(nn::Linear(8, 16), nn::GELU(), nn::LayerNorm(16), nn::Linear(16, 4));
  const std::vector<Tensor> handles = gpu_model->parameters();
  gpu_model->to(kCuda);
  const std::vector<Tensor> moved = gpu_model->parameters();
  REQUIRE(moved.size() == handles.size());
  for (size_t i = 0; i < moved.size(); ++i) {
    CHECK(moved[i].is_same(handles[i]));
    CHECK(handles[i].is_cuda());
    CHECK(handles[i].is_leaf());
    CHECK(handles[i].requires_grad());
  }
  CHECK(gpu_model->at<nn::LinearImpl>(0).weight.is_cuda());

  const Tensor x = randn({5, 8});
  const Tensor y_cpu = cpu_model(x);
  const Tensor y_gpu = gpu_model(x.to(kCuda));
  check_same(y_gpu, y_cpu);

  const Tensor target = i64({0, 3, 1, 2, 3}, {5});
  nn::CrossEntropyLoss criterion;
  criterion(y_cpu, target).backward();
  criterion(y_gpu, target.to(kCuda)).backward();
  const auto cpu_params = cpu_model->named_parameters();
  const auto gpu_params = gpu_model->named_parameters();
  for (size_t i = 0; i < cpu_params.size(); ++i) {
    INFO(cpu_params[i].first);
    REQUIRE(gpu_params[i].second.grad().defined());
    check_same(gpu_params[i].second.grad(), cpu_params[i].second.grad(), 1e-4, 1e-5);
  }

  // And back: the same handles return to the host with the values they had.
  gpu_model->to(Device::cpu());
  CHECK_FALSE(handles[0].is_cuda());
  CHECK(equal(handles[0], cpu_model->parameters()[0]));

  // A CPU input to a GPU layer names the devices.
  nn::Linear lin(3, 2);
  lin->to(kCuda);
  CHECK_ERROR(lin(zeros({1, 3})), Contains("Linear") && Contains("cuda:0") && Contains("cpu"));
}

TEST_CASE("cuda: losses give the CPU's values and gradients", "[nn][cuda][loss]") {
  EMBER_REQUIRE_CUDA();
  manual_seed(11);
  const Tensor logits = randn({7, 5});
  const Tensor target = i64({0, 4, -100, 2, 1, 3, -100}, {7});
  for (const double eps : {0.0, 0.1}) {
    for (const nn::Reduction r : {nn::Reduction::None, nn::Reduction::Mean, nn::Reduction::Sum}) {
      INFO("label_smoothing " << eps << ", reduction " << nn::reduction_name(r));
      const auto opts = nn::CrossEntropyLossOptions().label_smoothing(eps).reduction(r);
      const Tensor xc = leaf(logits.clone()), xg = leaf(logits.to(kCuda));
      const Tensor lc = F::cross_entropy(xc, target, opts);
      const Tensor lg = F::cross_entropy(xg, target.to(kCuda), opts);
      check_same(lg, lc);
      lc.sum().backward();
      lg.sum().backward();
      check_same(xg.grad(), xc.grad());
    }
  }

  const Tensor logp = F::log_softmax(logits, 1);
  check_same(F::nll_loss(logp.to(kCuda), target.to(kCuda)), F::nll_loss(logp, target));

  const Tensor a = randn({4, 3}), b = randn({4, 3});
  check_same(F::mse_loss(a.to(kCuda), b.to(kCuda)), F::mse_loss(a, b));

  const Tensor probs = rand({4, 3});
  nn::BCEWithLogitsLoss bce(nn::BCEWithLogitsLossOptions().pos_weight(full({3}, 2.0)));
  const Tensor bc = bce(a, probs);
  bce->to(kCuda);  // the pos_weight buffer moves with the module
  check_same(bce(a.to(kCuda), probs.to(kCuda)), bc);

  // Out-of-range targets on the GPU are an error, not a crash.
  CHECK_ERROR(
      F::cross_entropy(logits.to(kCuda), i64({0, 9, 1, 1, 1, 1, 1}, {7}).to(kCuda)).item<float>(),
      Contains("cross_entropy"));
}

TEST_CASE("cuda: Dropout draws the CPU's mask for the same seed", "[nn][cuda][dropout]") {
  EMBER_REQUIRE_CUDA();
  const Tensor x = randn({33, 65});
  manual_seed(21);
  const Tensor cpu = F::dropout(x, 0.4);
  manual_seed(21);
  const Tensor gpu = F::dropout(x.to(kCuda), 0.4);
  check_same(gpu, cpu, 0, 0);
}

TEST_CASE("cuda: Embedding and LayerNorm match the CPU", "[nn][cuda]") {
  EMBER_REQUIRE_CUDA();
  manual_seed(31);
  nn::Embedding emb(10, 4);
  const Tensor idx = i64({3, 3, 9, 0, 1, 3}, {2, 3});
  const Tensor y_cpu = emb(idx);
  y_cpu.sum().backward();
  const Tensor g_cpu = emb->weight.grad().clone();
  emb->zero_grad();
  emb->to(kCuda);
  const Tensor y_gpu = emb(idx.to(kCuda));
  check_same(y_gpu, y_cpu, 0, 0);
  y_gpu.sum().backward();
  check_same(emb->weight.grad(), g_cpu, 0, 0);

  const Tensor x = randn({6, 32});
  nn::LayerNorm ln(32);
  const Tensor l_cpu = ln(x);
  ln->to(kCuda);
  check_same(ln(x.to(kCuda)), l_cpu, 1e-4, 1e-5);
}
