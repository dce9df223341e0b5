// Device names: what parses, what is refused and how, and moving a tensor to a GPU that is not
// there.
#include <functional>
#include <string>

#include "core/cuda_runtime.h"
#include "core/factory.h"
#include "core/ops.h"
#include "test_util.h"

using namespace ember;
using Catch::Matchers::Contains;

namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  FAIL_CHECK("did not throw");
  return "";
}

}  // namespace

TEST_CASE("device: parse accepts cpu, cuda and cuda:N", "[device]") {
  CHECK(Device::parse("cpu") == Device::cpu());
  CHECK(Device::parse("cuda") == Device::cuda(0));
  CHECK(Device::parse("cuda:0") == Device::cuda(0));
  CHECK(Device::parse("cuda:7").index == 7);
  CHECK(Device::parse("cuda:127").index == 127);
}

TEST_CASE("device: parse refuses what it cannot represent and says what it expects", "[device]") {
  for (const char* bad : {"cuda:-1", "cuda:", "cuda:x", "gpu", "cuda:128", "cuda:99999", "cpu:0"}) {
    INFO(bad);
    const std::string msg = error_of([&] { (void)Device::parse(bad); });
    CHECK_THAT(msg, Contains(std::string("'") + bad + "'"));
    CHECK_THAT(msg, Contains("expected cpu, cuda or cuda:N"));
  }
  CHECK_THAT(error_of([] { (void)Device::parse("cuda:-1"); }), Contains("from 0 to 127"));
}

TEST_CASE("device: moving a tensor to a missing GPU names the device", "[device]") {
  const Tensor x = zeros({3});
  const int n = cuda::device_count();
  const Device missing = Device::cuda(n);  // one past the last (cuda:0 without any)
  const std::string msg = error_of([&] { (void)x.to(missing); });
  CHECK_THAT(msg, Contains("to(" + missing.str() + ")"));
  if (n == 0) {
    CHECK_THAT(msg, Contains("CUDA is not available"));
  } else {
    CHECK_THAT(msg, Contains("does not exist") && Contains(std::to_string(n)));
  }
  CHECK_THAT(msg, !Contains("allocator"));
}
