// Convolution, pooling and batch-norm layers against PyTorch (tests/fixtures/conv_layers.safetensors, made by
// tools/make_conv_fixtures.py): outputs and the gradients of input, weight and bias, float64,
// within 1e-10 (relative above 1) on the CPU and on CUDA; batch norm's running statistics after a
// training call and its eval output too.
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/host_values.h"
#include "core/ops.h"
#include "nn/batch_norm.h"
#include "nn/conv.h"
#include "nn/serialize.h"
#include "test_util.h"

using namespace ember;
using json = nlohmann::json;
namespace F = ember::nn::functional;

namespace {

std::vector<int64_t> ints(const json& j) {
  std::vector<int64_t> v;
  for (const json& e : j) v.push_back(e.get<int64_t>());
  return v;
}

void check_case(const nn::TensorFile& fx, const std::string& name, const json& c, Device dev) {
  INFO(name << " on " << dev.str());
  auto get = [&](const std::string& k) -> Tensor {
    const auto it = fx.tensors.find(name + "." + k);
    return it == fx.tensors.end() ? Tensor() : it->second.to(dev);
  };
  Tensor x = get("x").requires_grad_(), w = get("weight"), b = get("bias");
  if (w.defined()) w.requires_grad_();
  if (b.defined()) b.requires_grad_();
  const std::string op = c["op"];
  Tensor y, rm, rv;
  if (op == "conv2d" || op == "conv1d") {
    F::ConvArgs a;
    a.stride = ints(c["stride"]);
    a.dilation = ints(c["dilation"]);
    a.groups = c["groups"];
    if (c["padding"].is_string())
      a.same = true;
    else
      a.padding = ints(c["padding"]);
    y = op == "conv2d" ? F::conv2d(x, w, b, a) : F::conv1d(x, w, b, a);
  } else if (op == "batch_norm") {
    rm = get("running_mean");
    rv = get("running_var");
    y = F::batch_norm(x, rm, rv, w, b, true, c["momentum"], c["eps"]);
  } else if (op == "adaptive_avg_pool2d") {
    y = F::adaptive_avg_pool2d(x, ints(c["output_size"]));
  } else {
    F::PoolArgs a;
    a.kernel_size = ints(c["kernel_size"]);
    a.stride = ints(c["stride"]);
    a.padding = ints(c["padding"]);
    a.ceil_mode = c["ceil_mode"];
    if (op == "max_pool2d") {
      a.dilation = ints(c["dilation"]);
      y = F::max_pool2d(x, a);
    } else {
      a.count_include_pad = c["count_include_pad"];
      y = F::avg_pool2d(x, a);
    }
  }
  sum(mul(y, get("grad_out"))).backward();
  auto close = [&](const Tensor& got, const std::string& key) {
    INFO(key);
    const Tensor want = get(key);
    REQUIRE(got.defined());
    REQUIRE(got.sizes() == want.sizes());
    const std::vector<double> g = test::read(got), e = test::read(want);
    for (size_t i = 0; i < g.size(); ++i)
      CHECK(std::abs(g[i] - e[i]) <= 1e-10 * std::max(1.0, std::abs(e[i])));
  };
  close(y, "out");
  close(x.grad(), "grad_x");
  if (w.defined()) close(w.grad(), "grad_weight");
  if (b.defined()) close(b.grad(), "grad_bias");
  if (op == "batch_norm") {
    close(rm, "running_mean.after");
    close(rv, "running_var.after");
    close(F::batch_norm(x.detach(), rm, rv, w.detach(), b.detach(), false, 0.1, c["eps"]),
          "out_eval");
  }
}

void check_all(Device dev) {
  const std::string path = std::string(EMBER_FIXTURE_DIR) + "/conv_layers.safetensors";
  if (!std::filesystem::exists(path))
    FAIL("missing " << path << "; make it with `python3 tools/make_conv_fixtures.py`");
  const nn::TensorFile fx = nn::load_tensor_file(path);
  int cases = 0;
  for (const auto& [key, value] : fx.metadata) {
    if (key == "torch_version" || key == "generator") continue;
    check_case(fx, key, json::parse(value), dev);
    ++cases;
  }
  CHECK(cases == 11);
}

}  // namespace

TEST_CASE("conv and pooling parity with PyTorch, float64 (CPU)", "[nn][conv][parity]") {
  check_all(Device::cpu());
}

TEST_CASE("conv and pooling parity with PyTorch, float64 (CUDA)", "[nn][conv][parity][cuda]") {
  EMBER_REQUIRE_CUDA();
  check_all(Device::cuda(0));
}
