// A short tour of Ember's tensors: factories, matmul, softmax, reductions, broadcasting and
// random numbers, on the GPU when one is present (or --device says so), else on the CPU.
//   demo [--device auto|cpu|cuda|cuda:N] [--seed N]
#include <ember/ember.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <iostream>
#include <string>

using namespace ember;

namespace {

void show(const char* what, const Tensor& t) { std::cout << what << " =\n" << t << "\n\n"; }

Device pick_device(const std::string& name) {
  if (name == "auto") return cuda::is_available() ? Device::cuda(0) : Device::cpu();
  const Device d = Device::parse(name);
  EMBER_CHECK(!d.is_cuda() || cuda::is_available(), "demo: --device ", name,
              " asked for, but no CUDA device is available",
              " (Ember built without CUDA, or no GPU visible)");
  EMBER_CHECK(!d.is_cuda() || d.index < cuda::device_count(), "demo: --device ", name, ": only ",
              cuda::device_count(), " CUDA device(s)");
  return d;
}

void run(Device dev, uint64_t seed) {
  manual_seed(seed);
  std::cout << "Ember demo on " << dev.str() << " (seed " << seed << ")\n\n";
  const TensorOptions f32 = TensorOptions(kFloat32).device(dev);

  Tensor x = arange(12, f32).reshape({3, 4});
  Tensor w = randn({4, 2}, f32);
  show("x = arange(12).reshape(3, 4)", x);
  show("w = randn(4, 2)", w);

  Tensor y = matmul(x, w);
  show("y = x @ w", y);
  if (dev.is_cuda()) {
    // The same product on the CPU, as a cross-check of the device result.
    const bool same = allclose(y.cpu(), matmul(x.cpu(), w.cpu()), 1e-4, 1e-4);
    std::cout << "x @ w agrees with the CPU result: " << (same ? "yes" : "NO") << "\n\n";
  }

  Tensor p = softmax(y, 1);
  show("softmax(y, dim=1)", p);
  show("softmax(y, dim=1).sum(1)", sum(p, {1}));

  show("x.sum()", x.sum());
  show("x.mean(0)", mean(x, {0}));
  show("amax(x, 1, keepdim=True)", amax(x, {1}, true));
  show("x.argmax(1)", x.argmax(1));
  show("relu(x - 5) * arange(4)  (broadcast over rows)", relu(x - 5) * arange(4, f32));

  show("rand(2, 3)", rand({2, 3}, f32));
  show("randint(0, 10, (2, 5))", randint(0, 10, {2, 5}, TensorOptions(kInt64).device(dev)));

  if (dev.is_cuda()) {
    // One Philox stream serves both devices: the same seed gives the same numbers.
    manual_seed(seed);
    Tensor on_gpu = randn({4}, f32);
    manual_seed(seed);
    Tensor on_cpu = randn({4});
    show("randn(4) drawn on the GPU", on_gpu);
    show("randn(4) drawn on the CPU with the same seed", on_cpu);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Ember demo: tensors and ops on the GPU if present, else the CPU"};
  std::string device = "auto";
  uint64_t seed = 0;
  app.add_option("--device", device, "auto (GPU if present), cpu, cuda or cuda:N")
      ->capture_default_str();
  app.add_option("--seed", seed, "seed of the default random generator")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  try {
    run(pick_device(device), seed);
  } catch (const Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
