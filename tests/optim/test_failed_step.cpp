// A training step on the GPU that fails leaves the model as it was. Bad targets are found by
// the cross entropy's kernel, which raises the device error flag and carries on, so the error
// reaches the host only at the next synchronize, after the rest of the step was queued; the
// optimizer's update reads the flag on the device and changes nothing (parameters, momentum
// buffers, the step count), eagerly and compiled, in a CUDA graph too. A step on a batch too big
// for the device fails in allocation, before anything is written. Each failure is followed by a
// valid step that trains exactly as eager does from the same state.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <ember/ember.h>
#include <catch2/catch.hpp>

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
  return "<no ember::Error thrown>";
}

std::vector<uint32_t> bits_of(const Tensor& t) {
  const std::vector<float> v = t.cpu().to_vector<float>();
  std::vector<uint32_t> out(v.size());
  std::memcpy(out.data(), v.data(), v.size() * sizeof(float));
  return out;
}

void check_same_bits(const Tensor& got, const Tensor& want, const std::string& what) {
  INFO(what << ": shape " << got.sizes().str() << ", expected " << want.sizes().str());
  REQUIRE(got.sizes() == want.sizes());
  const std::vector<uint32_t> a = bits_of(got), b = bits_of(want);
  size_t bad = 0;
  for (size_t i = 0; i < a.size(); ++i) bad += a[i] != b[i];
  INFO(bad << " of " << a.size() << " elements differ");
  CHECK(bad == 0);
}

struct NetImpl : nn::Module {
  nn::Linear fc1{nullptr}, fc2{nullptr};
  NetImpl(int64_t in, int64_t hidden) {
    fc1 = register_module("fc1", nn::Linear(in, hidden));
    fc2 = register_module("fc2", nn::Linear(hidden, 10));
  }
  Tensor forward(const Tensor& x) { return fc2(relu(fc1(x))); }
};
EMBER_MODULE(Net);

std::vector<Tensor> parameters_on(Net& net, Device dev) {
  net->to(dev);
  return net->parameters();
}

struct Trainer {
  Net net;
  optim::SGD opt;
  nn::CrossEntropyLoss crit;
  Trainer(int64_t in, int64_t hidden, Device dev)
      : net(in, hidden), opt(parameters_on(net, dev), optim::SGDOptions(0.05).momentum(0.9)) {}
  Tensor step(const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss = crit(net(x), y);
    loss.backward();
    opt.step();
    return loss;
  }
};

// Clones of everything a step may write: parameters and the optimizer's tensors (momentum
// buffers, the step count, hyperparameters).
struct Snapshot {
  std::vector<Tensor> params;
  std::map<std::string, Tensor> opt;
};

Snapshot snapshot(Trainer& t) {
  Snapshot s;
  for (const Tensor& p : t.net->parameters()) s.params.push_back(p.detach().clone());
  const optim::OptimizerState st = t.opt.state_dict();
  for (const auto& [key, v] : st.tensors) s.opt[key] = v.clone();
  return s;
}

// Writes `s` into `t` in place (the state_dict's tensors alias the live state).
void restore(Trainer& t, const Snapshot& s) {
  NoGradGuard g;
  auto params = t.net->parameters();
  for (size_t i = 0; i < params.size(); ++i) params[i].copy_(s.params[i]);
  const optim::OptimizerState st = t.opt.state_dict();
  REQUIRE(st.tensors.size() == s.opt.size());
  for (const auto& [key, v] : s.opt) {
    Tensor live = st.tensors.at(key);
    live.copy_(v);
  }
}

void check_unchanged(Trainer& t, const Snapshot& before, const std::string& what) {
  auto params = t.net->parameters();
  for (size_t i = 0; i < params.size(); ++i)
    check_same_bits(params[i], before.params[i], what + ": parameter " + std::to_string(i));
  const optim::OptimizerState st = t.opt.state_dict();
  CHECK(st.tensors.size() == before.opt.size());
  size_t buffers = 0;
  for (const auto& [key, v] : before.opt) {
    INFO(what << ": optimizer state " << key);
    REQUIRE(st.tensors.count(key) == 1);
    if (v.dtype() == kFloat32) check_same_bits(st.tensors.at(key), v, what + ": " + key);
    buffers += key.find("momentum_buffer") != std::string::npos;
  }
  CHECK(buffers == params.size());  // momentum buffers exist, so they were compared
}

void check_close(const Tensor& got, const Tensor& want, const std::string& what) {
  INFO(what);
  const std::vector<float> a = got.cpu().to_vector<float>(), b = want.cpu().to_vector<float>();
  REQUIRE(a.size() == b.size());
  size_t bad = 0;
  for (size_t i = 0; i < a.size(); ++i)
    bad += !(std::abs(a[i] - b[i]) <= 1e-6f * (1 + std::abs(b[i])));
  INFO(bad << " of " << a.size() << " elements differ by more than 1e-6");
  CHECK(bad == 0);
}

enum class How { Eager, Default, ReduceOverhead };

const char* how_name(How h) {
  return h == How::Eager ? "eager" : h == How::Default ? "Default" : "ReduceOverhead";
}

// The step `t` takes: eager, or compiled in a mode.
std::function<Tensor(const Tensor&, const Tensor&)> step_fn(Trainer& t, How how,
                                                            jit::Options opts = {}) {
  if (how == How::Eager) return [&t](const Tensor& x, const Tensor& y) { return t.step(x, y); };
  opts.mode = how == How::ReduceOverhead ? jit::Mode::ReduceOverhead : jit::Mode::Default;
  opts.fullgraph = true;
  auto body = [&t](const Tensor& x, const Tensor& y) { return t.step(x, y); };
  auto compiled = std::make_shared<decltype(jit::compile(body, opts))>(jit::compile(body, opts));
  return [compiled](const Tensor& x, const Tensor& y) { return (*compiled)(x, y); };
}

void check_out_of_range_target(How how, Device dev) {
  const std::string what = std::string(how_name(how)) + " on " + dev.str();
  INFO(what);
  manual_seed(41);
  Trainer subject(40, 64, dev);
  Trainer reference(40, 64, dev);  // eager, for what eager leaves behind
  auto step = step_fn(subject, how);
  // Past the traces and the plain replay: the failed step below is a replay (a graph launch in
  // ReduceOverhead).
  for (int i = 0; i < 6; ++i) {
    const Tensor x = randn({32, 40}, dev), y = randint(0, 10, {32}, dev);
    const Tensor loss = step(x, y);
    reference.step(x, y);
    REQUIRE(std::isfinite(loss.item<float>()));
  }
  const Snapshot before = snapshot(subject);
  restore(reference, before);

  const Tensor x = randn({32, 40}, dev);
  std::vector<int64_t> labels(32);
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<int64_t>(i % 10);
  labels[13] = 10;  // one past the last class
  const Tensor bad = from_vector(labels, {32}, TensorOptions(kInt64).device(dev));
  Tensor loss;
  std::string msg = error_of([&] { loss = step(x, bad); });
  // Eagerly on the GPU every kernel of the step is queued before anything waits for the device;
  // compiled, the error may surface inside the call or at the read. The CPU throws at once.
  if (how == How::Eager && dev.is_cuda()) CHECK(msg == "<no ember::Error thrown>");
  if (loss.defined()) msg = error_of([&] { (void)loss.item<float>(); });
  CHECK_THAT(msg, Contains("target 10 ") && Contains("out of range for 10 classes"));
  if (dev.is_cuda()) CHECK_THAT(msg, Contains("(detected on cuda:0)"));
  check_unchanged(subject, before, what + " after the failed step");
  if (dev.is_cuda()) CHECK_NOTHROW(cuda::synchronize(0));  // reported once, then cleared

  // The same failed step eagerly, from the same state: it raises (on the GPU at the next sync)
  // and leaves the model alone; the gradients it leaves are what the subject holds.
  const std::string eager_msg = error_of([&] { (void)reference.step(x, bad).item<float>(); });
  CHECK_THAT(eager_msg, Contains("target 10 ") && Contains("out of range for 10 classes"));
  check_unchanged(reference, before, what + ": the eager reference after the failed step");
  auto sp = subject.net->parameters(), rp = reference.net->parameters();
  for (size_t i = 0; i < sp.size(); ++i) {
    // On the GPU backward ran (its rows of a bad target are zero); on the CPU the forward threw
    // after zero_grad, so there is no gradient (compiled: none left pointing into memory the
    // failed replay overwrote).
    INFO("parameter " << i << " has a gradient: " << sp[i].grad().defined() << ", eager "
                      << rp[i].grad().defined());
    REQUIRE(rp[i].grad().defined() == dev.is_cuda());
    REQUIRE(sp[i].grad().defined() == rp[i].grad().defined());
    if (dev.is_cuda())
      check_same_bits(sp[i].grad(), rp[i].grad(), what + ": gradient " + std::to_string(i));
  }

  // Training goes on: the next steps equal a fresh eager run from the state before the failure.
  restore(reference, before);
  for (int i = 0; i < 2; ++i) {
    const Tensor gx = randn({32, 40}, dev), gy = randint(0, 10, {32}, dev);
    const float got = step(gx, gy).item<float>();
    const float want = reference.step(gx, gy).item<float>();
    INFO("valid step " << i + 1 << " after the failure: " << got << ", eager " << want);
    // The first loss reads only the parameters, which are eager's bit for bit.
    if (i == 0) CHECK(got == want);
    CHECK(std::abs(got - want) <= 1e-6f * std::abs(want));
  }
  for (size_t i = 0; i < sp.size(); ++i)
    check_close(sp[i], rp[i], what + ": parameter " + std::to_string(i) + " after training on");
}

}  // namespace

TEST_CASE("optim: a step with an out-of-range target changes no parameter or buffer",
          "[optim][jit]") {
  for (How how : {How::Eager, How::Default, How::ReduceOverhead})
    check_out_of_range_target(how, Device::cpu());
}

TEST_CASE("optim: a CUDA step with an out-of-range target changes no parameter or buffer",
          "[optim][jit][cuda]") {
  EMBER_REQUIRE_CUDA();
  for (How how : {How::Eager, How::Default, How::ReduceOverhead})
    check_out_of_range_target(how, Device::cuda(0));
}

TEST_CASE("optim: a CUDA step too big for the device fails in allocation and changes nothing",
          "[optim][jit][cuda]") {
  EMBER_REQUIRE_CUDA();
  const Device dev = Device::cuda(0);
  constexpr int64_t kIn = 16, kHidden = 4096;
  for (How how : {How::Default, How::ReduceOverhead}) {
    // dynamic=false: the new batch size is traced, and the eager forward fails to allocate;
    // dynamic=true: it gets an executable of the traced template, whose arena fails.
    for (bool dynamic : {false, true}) {
      const std::string what =
          std::string(how_name(how)) + (dynamic ? ", dynamic" : ", specialized");
      INFO(what);
      manual_seed(43);
      Trainer subject(kIn, kHidden, dev);
      Trainer reference(kIn, kHidden, dev);
      auto step = step_fn(subject, how, {.dynamic = dynamic, .recompile_limit = 16});
      for (int64_t n : {8, 16, 24, 16, 8, 16}) {
        const Tensor x = randn({n, kIn}, dev), y = randint(0, 10, {n}, dev);
        REQUIRE(std::isfinite(step(x, y).item<float>()));
        reference.step(x, y);  // so it has momentum buffers for restore()
      }
      const Snapshot before = snapshot(subject);
      {
        // The hidden activation alone is a quarter more than the device has free; the batch
        // itself is 1/256 of that.
        const cuda::DeviceMemoryInfo mem = cuda::memory_info(0);
        const int64_t rows = mem.free / 4 * 5 / (kHidden * 4) + 1;
        INFO("free " << mem.free << " of " << mem.total << " bytes; batch of " << rows << " rows");
        const Tensor x = randn({rows, kIn}, dev), y = randint(0, 10, {rows}, dev);
        const std::string msg = error_of([&] { (void)step(x, y).item<float>(); });
        CHECK_THAT(msg, Contains("out of memory"));
      }
      check_unchanged(subject, before, what + " after the failed step");
      restore(reference, before);
      for (int i = 0; i < 2; ++i) {
        const Tensor x = randn({16, kIn}, dev), y = randint(0, 10, {16}, dev);
        const float got = step(x, y).item<float>();
        const float want = reference.step(x, y).item<float>();
        INFO("valid step " << i + 1 << " after the failure: " << got << ", eager " << want);
        if (i == 0) CHECK(got == want);
        CHECK(std::abs(got - want) <= 1e-6f * std::abs(want));
      }
      auto sp = subject.net->parameters(), rp = reference.net->parameters();
      for (size_t i = 0; i < sp.size(); ++i)
        check_close(sp[i], rp[i], what + ": parameter " + std::to_string(i) + " after training on");
    }
  }
}
