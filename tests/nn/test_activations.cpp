// The activation modules: each computes its functional form, takes its options (defaults as in
// PyTorch, setters, and the first option alone as in LeakyReLU(0.2)), and prints like PyTorch.
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "core/factory.h"
#include "core/ops.h"
#include "nn/activation.h"
#include "nn/functional.h"
#include "nn/sequential.h"
#include "test_util.h"

using namespace ember;
namespace F = ember::nn::functional;

namespace {

Tensor inputs() {
  return from_vector<double>({-30, -4, -3, -1.5, -0.5, 0, 0.25, 1, 2.5, 3, 4.5, 7, 30}, {13});
}

// Bitwise the same: the module is the functional form, not another formula.
void same(const Tensor& got, const Tensor& want) {
  REQUIRE(got.sizes() == want.sizes());
  CHECK(got.to_vector<double>() == want.to_vector<double>());
}

}  // namespace

TEST_CASE("activation modules compute their functional forms", "[nn]") {
  const Tensor x = inputs();
  same(nn::SiLU()->forward(x), F::silu(x));
  same(nn::LeakyReLU()->forward(x), F::leaky_relu(x, 0.01));
  same(nn::ELU()->forward(x), F::elu(x, 1));
  same(nn::Softplus()->forward(x), F::softplus(x, 1, 20));
  same(nn::Hardtanh()->forward(x), F::hardtanh(x, -1, 1));
  same(nn::ReLU6()->forward(x), F::relu6(x));
  same(nn::ReLU6()->forward(x), F::hardtanh(x, 0, 6));
  same(nn::Hardswish()->forward(x), F::hardswish(x));
  same(nn::Mish()->forward(x), F::mish(x));
  same(nn::LogSigmoid()->forward(x), F::logsigmoid(x));
  // The functional forms are the public ops.
  same(F::silu(x), silu(x));
  same(F::sign(x), sign(x));
  same(F::abs(x), abs(x));
  same(F::rsqrt(abs(x) + 1), rsqrt(abs(x) + 1));
  same(F::clamp(x, -1.0, std::nullopt), clamp(x, -1.0, std::nullopt));
  same(F::minimum(x, x * 0.5), minimum(x, x * 0.5));
  same(F::maximum(x, x * 0.5), maximum(x, x * 0.5));
}

TEST_CASE("activation modules take their options", "[nn]") {
  const Tensor x = inputs();
  CHECK(nn::LeakyReLUOptions().negative_slope() == 0.01);
  CHECK(nn::ELUOptions().alpha() == 1);
  CHECK(nn::SoftplusOptions().beta() == 1);
  CHECK(nn::SoftplusOptions().threshold() == 20);
  CHECK(nn::HardtanhOptions().min_val() == -1);
  CHECK(nn::HardtanhOptions().max_val() == 1);

  same(nn::LeakyReLU(0.2)->forward(x), F::leaky_relu(x, 0.2));
  same(nn::LeakyReLU(nn::LeakyReLUOptions().negative_slope(0.3))->forward(x),
       F::leaky_relu(x, 0.3));
  same(nn::ELU(nn::ELUOptions().alpha(0.5))->forward(x), F::elu(x, 0.5));
  same(nn::Softplus(nn::SoftplusOptions(2).threshold(3))->forward(x), F::softplus(x, 2, 3));
  same(nn::Hardtanh(nn::HardtanhOptions().min_val(-2).max_val(0.5))->forward(x),
       F::hardtanh(x, -2, 0.5));
  // Values a wrong option would change.
  const std::vector<double> lr = nn::LeakyReLU(0.2)->forward(x).to_vector<double>();
  CHECK(lr[1] == -0.8);
  CHECK(lr[7] == 1);
  const std::vector<double> ht =
      nn::Hardtanh(nn::HardtanhOptions(-2).max_val(0.5))->forward(x).to_vector<double>();
  CHECK(ht[0] == -2);
  CHECK(ht[12] == 0.5);
  CHECK(ht[4] == -0.5);
}

TEST_CASE("activation modules print like PyTorch's", "[nn]") {
  nn::Sequential seq(nn::SiLU(), nn::LeakyReLU(0.2), nn::Softplus(nn::SoftplusOptions(2)),
                     nn::Hardtanh(), nn::ReLU6(), nn::Mish());
  std::ostringstream os;
  os << seq;
  const std::string s = os.str();
  CHECK_THAT(s, Catch::Matchers::Contains("(0): SiLU()"));
  CHECK_THAT(s, Catch::Matchers::Contains("(1): LeakyReLU(negative_slope=0.2)"));
  CHECK_THAT(s, Catch::Matchers::Contains("(2): Softplus(beta=2, threshold=20)"));
  CHECK_THAT(s, Catch::Matchers::Contains("(3): Hardtanh(min_val=-1, max_val=1)"));
  CHECK_THAT(s, Catch::Matchers::Contains("(4): ReLU6()"));
  CHECK_THAT(s, Catch::Matchers::Contains("(5): Mish()"));
}
