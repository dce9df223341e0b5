// Where a training step's wall time goes, per mode, on the seed MLP (784-512-ReLU-10,
// CrossEntropyLoss, SGD) with a fresh batch every step, as ember_bench runs it:
//   loop     randn + randint + step + loss.item(), µs per step (what ember_bench reports)
//   no-item  the same without item(), one synchronize per 200 steps: the larger of host and device
//   device   the steps queued behind a kernel that holds the stream, then run back to back:
//            device time alone (Timeline)
//   host     how long the host took to queue those steps (Timeline::queued_us)
//   item     loss.item() on a loss that is already computed: the copy back and the wait
// Medians of 5 repeats. If device + item ≈ loop, the device chain is the limit; if host > device,
// the host is.
//   step_anatomy [--batch 64]
#include <ember/ember.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "kernels/cuda/timeline.h"
#include "optim/sgd.h"

using namespace ember;

namespace {

struct NetImpl : nn::Module {
  nn::Linear fc1{nullptr}, fc2{nullptr};
  NetImpl() {
    fc1 = register_module("fc1", nn::Linear(784, 512));
    fc2 = register_module("fc2", nn::Linear(512, 10));
  }
  Tensor forward(const Tensor& x) { return fc2(relu(fc1(x))); }
};
EMBER_MODULE(Net);

using Clock = std::chrono::steady_clock;
double us_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::micro>(Clock::now() - t0).count();
}
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void anatomy(const char* name, bool compiled, jit::Mode mode, int64_t batch) {
  const Device dev = Device::cuda(0);
  manual_seed(1);
  Net net;
  net->to(dev);
  optim::SGD opt(net->parameters(), optim::SGDOptions(0.01));
  nn::CrossEntropyLoss crit;
  auto body = [&](const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss = crit(net(x), y);
    loss.backward();
    opt.step();
    return loss;
  };
  auto fn = jit::compile(body, {.mode = mode, .fullgraph = true, .name = "anatomy"});
  auto step = [&] {
    const Tensor x = randn({batch, 784}, dev), y = randint(0, 10, {batch}, dev);
    return compiled ? fn(x, y) : body(x, y);
  };
  for (int i = 0; i < 30; ++i) (void)step().item<float>();

  const int n = 200;
  std::vector<double> loop, no_item, device, host, item;
  for (int r = 0; r < 5; ++r) {
    auto t0 = Clock::now();
    for (int i = 0; i < n; ++i) (void)step().item<float>();
    cuda::synchronize(0);  // item() may return before the last step's update ran
    loop.push_back(us_since(t0) / n);

    t0 = Clock::now();
    Tensor last;
    for (int i = 0; i < n; ++i) last = step();
    cuda::synchronize(0);
    no_item.push_back(us_since(t0) / n);

    const int held = 50;
    cuda::Timeline tl(0, 2);
    tl.hold(30.0);
    tl.mark(0);
    for (int i = 0; i < held; ++i) last = step();
    tl.mark(1);
    const std::vector<double> e = tl.elapsed_us();
    device.push_back(tl.held_through() ? e[1] / held : -1.0);
    host.push_back(tl.queued_us() / held);

    cuda::synchronize(0);
    t0 = Clock::now();
    for (int i = 0; i < n; ++i) (void)last.item<float>();
    item.push_back(us_since(t0) / n);
  }
  std::printf("%-16s %8.1f %8.1f %8.1f %8.1f %8.1f   (graph replays %d)\n", name, median(loop),
              median(no_item), median(device), median(host), median(item),
              fn.stats().graph_replays);
}

}  // namespace

int main(int argc, char** argv) {
  int64_t batch = 64;
  for (int i = 1; i + 1 < argc; ++i)
    if (std::string(argv[i]) == "--batch") batch = std::stoll(argv[i + 1]);
  if (!cuda::is_available()) {
    std::printf("no CUDA device\n");
    return 0;
  }
  std::printf("batch %lld; µs per step (device -1: the host did not queue the steps in time)\n",
              static_cast<long long>(batch));
  std::printf("%-16s %8s %8s %8s %8s %8s\n", "mode", "loop", "no-item", "device", "host", "item");
  anatomy("eager", false, jit::Mode::Default, batch);
  anatomy("default", true, jit::Mode::Default, batch);
  anatomy("reduce-overhead", true, jit::Mode::ReduceOverhead, batch);
  return 0;
}
