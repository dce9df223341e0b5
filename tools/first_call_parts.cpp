// Where the first training step of a new process spends its time on the GPU: each part of the
// seed MLP's step (784-512-ReLU-10, CrossEntropyLoss, SGD) run once, in order, with a
// synchronize after it, timed on the host. The first column is the first call of that part in
// the process (library initialisation and lazy kernel loading included), the second a repeat.
//   first_call_parts [--batch 64]
#include <ember/ember.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>

#include "optim/sgd.h"

using namespace ember;

int main(int argc, char** argv) {
  const int64_t batch = argc > 1 ? std::stoll(argv[1]) : 64;
  if (!cuda::is_available()) {
    std::printf("no CUDA device\n");
    return 0;
  }
  const Device dev = Device::cuda(0);
  using Clock = std::chrono::steady_clock;
  auto time_ms = [&](const std::function<void()>& f) {
    const auto t0 = Clock::now();
    f();
    cuda::synchronize(0);
    return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  };
  std::printf("%-34s %10s %10s\n", "part", "first ms", "again ms");
  auto part = [&](const char* name, const std::function<void()>& f) {
    const double a = time_ms(f), b = time_ms(f);
    std::printf("%-34s %10.3f %10.3f\n", name, a, b);
  };
  part("context (synchronize)", [] {});
  nn::Linear fc1(784, 512), fc2(512, 10);
  part("model to device", [&] {
    fc1->to(dev);
    fc2->to(dev);
  });
  Tensor x, y, h, logits, loss;
  part("randn + randint", [&] {
    x = randn({batch, 784}, dev);
    y = randint(0, 10, {batch}, dev);
  });
  // cuBLASLt's start-up apart from the kernels the step needs: a product no handwritten kernel
  // takes (above small_gemm.h's 2^25 multiply-adds).
  const Tensor sa = randn({256, 512}, dev), sb = randn({512, 512}, dev);
  part("first cuBLASLt matmul, 256x512x512", [&] { (void)mm(sa, sb); });
  part(batch * 784 * 512 > (int64_t{1} << 25) ? "linear 1 (cuBLASLt)" : "linear 1 (tiled kernel)",
       [&] { h = fc1(x); });
  part("relu", [&] { h = relu(h); });
  part("linear 2", [&] { logits = fc2(h); });
  nn::CrossEntropyLoss ce;
  part("cross entropy", [&] { loss = ce(logits, y); });
  part("backward", [&] {
    fc1->zero_grad();
    fc2->zero_grad();
    Tensor l = ce(fc2(relu(fc1(x))), y);
    l.backward();
  });
  std::vector<Tensor> params = fc1->parameters();
  for (const Tensor& p : fc2->parameters()) params.push_back(p);
  optim::SGD opt(params, optim::SGDOptions(0.01));
  part("sgd step", [&] { opt.step(); });
  part("item", [&] { (void)loss.item<float>(); });
  return 0;
}
