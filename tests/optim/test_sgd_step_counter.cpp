// The SGD step counter is counted by the optimizer's last sgd_update of each (group, device)
// (attrs.increment_step) instead of a separate increment kernel:
//  - the op: every read of the step in the update sees the old value (a step of 0 makes every
//    new momentum buffer a copy of d_p, in every parameter of the call and, on CUDA, in every
//    block of a many-block launch), and afterwards step == old + 1 exactly; repeated launches,
//    launches split past the per-launch tensor limit, and all-empty tensor lists count once.
//  - the optimizer: after k steps the counter is k for one group, two dtypes in one group,
//    buffers born late (with and without older buffers next to them), several groups (one of
//    them skipping steps), parameters on two devices, and across state_dict / load_state_dict;
//    no increment op runs unless no update could count the step.
//  - the JIT: the traced step's only writer of the counter is the sgd_update (so passes order
//    it after every read), and compiled steps (CPU; CUDA Default and ReduceOverhead with graph
//    replays) advance it once per call and match eager.
// Expected values come from the step number and PyTorch's rule written here, never from the
// code under test.
#include <cmath>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "core/dispatch.h"
#include "core/factory.h"
#include "core/host_values.h"
#include "core/ops.h"
#include "jit/compile.h"
#include "jit/passes.h"
#include "jit/tracer.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/module.h"
#include "optim/sgd.h"
#include "optim/sgd_reference.h"
#include "test_util.h"

using namespace ember;
using test::Vec;

namespace {

double f32(double x) { return static_cast<double>(static_cast<float>(x)); }

double read_step(const Tensor& step) { return test::read(step).at(0); }

// The counter of group `g` as the optimizer saves it (slot 0's device counter).
double saved_step(const optim::SGD& opt, size_t g) {
  const optim::OptimizerState st = opt.state_dict();
  return test::read(st.tensors.at("param_groups." + std::to_string(g) + ".step")).at(0);
}

// ---- op-level helpers ----------------------------------------------------------------------

// One sgd_update over `params` (momentum buffers `bufs`), hyper {lr, momentum, dampening, 0}.
void sgd_update_call(const Tensor& hyper, const Tensor& step, const std::vector<Tensor>& params,
                     const std::vector<Tensor>& grads, const std::vector<Tensor>& bufs,
                     bool increment) {
  std::vector<Tensor> in = {hyper, step};
  in.insert(in.end(), params.begin(), params.end());
  in.insert(in.end(), grads.begin(), grads.end());
  in.insert(in.end(), bufs.begin(), bufs.end());
  Attrs a;
  a.num_tensors = static_cast<int64_t>(params.size());
  a.momentum_buffers = !bufs.empty();
  a.increment_step = increment;
  NoGradGuard no_grad;
  dispatch(OpId::sgd_update, std::span<const Tensor>(in), a);
}

// The ops one opt.step() dispatches, seen through the (thread-local) trace observer.
struct OpCount {
  int updates = 0, counting_updates = 0;  // sgd_update calls, those with increment_step
  int step_writes = 0;                    // counting updates of the watched counter
  int other_writes_to_step = 0;           // any other in-place op on the watched counter
  int inplace_adds = 0;                   // in-place adds anywhere (separate increments)
};
OpCount g_count;
const TensorImpl* g_watched_step = nullptr;  // the counter tensor to watch, if any
void count_op(OpId op, std::span<const Tensor> inputs, const Attrs& attrs, const Tensor& out,
              bool inplace) {
  if (op == OpId::sgd_update) {
    ++g_count.updates;
    if (attrs.increment_step) {
      ++g_count.counting_updates;
      if (g_watched_step && inputs[1].impl() == g_watched_step) ++g_count.step_writes;
    }
    return;
  }
  if (op == OpId::add && inplace) ++g_count.inplace_adds;
  if (inplace && out.defined() && g_watched_step && out.impl() == g_watched_step)
    ++g_count.other_writes_to_step;
}

// Counts the ops of `fn` (one opt.step()); restores the previous observer.
template <class F>
OpCount count_ops(F&& fn, const Tensor& watched_step = Tensor()) {
  g_count = OpCount{};
  g_watched_step = watched_step.defined() ? watched_step.impl() : nullptr;
  const OpObserver prev = trace_observer();
  set_trace_observer(&count_op);
  try {
    fn();
  } catch (...) {
    set_trace_observer(prev);
    throw;
  }
  set_trace_observer(prev);
  g_watched_step = nullptr;
  return g_count;
}

// The live counter of group `g`: state_dict's step tensor aliases slot 0's counter.
Tensor live_step(const optim::SGD& opt, size_t g) {
  return opt.state_dict().tensors.at("param_groups." + std::to_string(g) + ".step");
}

// ---- op level: every read sees the old value -----------------------------------------------

void check_first_step_everywhere(Device dev) {
  // Step 0 with dampening 0.5: a first step makes buf = d (= g here); a non-first one would give
  // 0.9 * 0 + 0.5 g. Every parameter of the call must see 0, so the count comes after them all.
  const Tensor hyper = test::make({0.5, 0.9, 0.5, 0.0}, {4}, kFloat32, dev);
  const Tensor step = test::make({0.0}, {}, kFloat32, dev);
  const std::vector<Vec> g0 = {{1.5, -2.0, 0.25}, {3.0}, {-0.5, 0.75}};
  std::vector<Tensor> params, grads, bufs;
  const std::vector<DType> dtypes = {kFloat32, kFloat64, kFloat32};
  for (size_t i = 0; i < g0.size(); ++i) {
    const Shape s{static_cast<int64_t>(g0[i].size())};
    params.push_back(test::make(Vec(g0[i].size(), 1.0), s, dtypes[i], dev));
    grads.push_back(test::make(g0[i], s, dtypes[i], dev));
    bufs.push_back(test::make(Vec(g0[i].size(), 7.0), s, dtypes[i], dev));  // ignored when first
  }
  const uint32_t v0 = step.version();
  sgd_update_call(hyper, step, params, grads, bufs, true);
  CHECK(read_step(step) == 1.0);
  CHECK(step.version() != v0);  // an in-place write, as autograd and the JIT see it
  for (size_t i = 0; i < g0.size(); ++i) {
    INFO("parameter " << i);
    CHECK(test::read(bufs[i]) == g0[i]);
    Vec want(g0[i].size());
    for (size_t k = 0; k < want.size(); ++k) want[k] = 1.0 - 0.5 * g0[i][k];
    CHECK(test::read(params[i]) == want);  // exact: 0.5 g and 1 - 0.5 g are representable
  }
  // Second call: step 1 is not a first step, buf = 0.9 buf + 0.5 g; the count goes on.
  sgd_update_call(hyper, step, params, grads, bufs, true);
  CHECK(read_step(step) == 2.0);
  for (size_t i = 0; i < g0.size(); ++i) {
    const Vec b = test::read(bufs[i]);
    for (size_t k = 0; k < b.size(); ++k) {
      INFO("parameter " << i << " element " << k);
      CHECK(std::fabs(b[k] - 1.4 * g0[i][k]) <= 1e-6 * std::fabs(g0[i][k]));
    }
  }
  // Without the flag the counter stays.
  sgd_update_call(hyper, step, params, grads, bufs, false);
  CHECK(read_step(step) == 2.0);
  // old + 1 exactly where float32 still counts whole numbers.
  const Tensor big = test::make({16777215.0}, {}, kFloat32, dev);
  sgd_update_call(hyper, big, params, grads, bufs, true);
  CHECK(read_step(big) == 16777216.0);
}

// ---- optimizer level ------------------------------------------------------------------------

// k steps of one group over `params` (all with gradients unless `skip(i, step)`): the counter
// after each step, and the ops each step ran.
struct Stepped {
  std::vector<double> counts;
  std::vector<OpCount> ops;
};
template <class Skip>
Stepped run_steps(optim::SGD& opt, std::vector<Tensor> params, int k, Skip&& skip,
                  size_t group = 0) {
  Stepped r;
  for (int s = 0; s < k; ++s) {
    for (size_t i = 0; i < params.size(); ++i) {
      if (skip(i, s)) {
        params[i].set_grad(Tensor());
        continue;
      }
      Tensor g = full(params[i].sizes(), 0.25 * static_cast<double>(i + 1 + s),
                      TensorOptions(params[i].dtype()).device(params[i].device()));
      params[i].set_grad(g);
    }
    r.ops.push_back(count_ops([&] { opt.step(); }, live_step(opt, group)));
    r.counts.push_back(saved_step(opt, group));
  }
  return r;
}
bool never(size_t, int) { return false; }

void check_counts(const Stepped& r, const std::string& what) {
  INFO(what);
  for (size_t s = 0; s < r.counts.size(); ++s) {
    INFO("after step " << s + 1);
    CHECK(r.counts[s] == static_cast<double>(s + 1));
  }
}

// Each step: the counter written exactly once, by a counting sgd_update, and by nothing else.
void check_counted_by_update(const Stepped& r, const std::string& what) {
  INFO(what);
  for (size_t s = 0; s < r.ops.size(); ++s) {
    INFO("step " << s + 1);
    CHECK(r.ops[s].step_writes == 1);
    CHECK(r.ops[s].other_writes_to_step == 0);
    CHECK(r.ops[s].inplace_adds == 0);
  }
}

Tensor param(const Vec& v, DType dt, Device dev) {
  return test::make(v, {static_cast<int64_t>(v.size())}, dt, dev).requires_grad_();
}

void optimizer_counts(Device dev) {
  SECTION("one group, two dtypes: one counting update per step") {
    std::vector<Tensor> ps = {param({1, 2, 3}, kFloat32, dev), param({4, 5}, kFloat64, dev),
                              param({6}, kFloat32, dev)};
    optim::SGD opt(ps, optim::SGDOptions(0.1).momentum(0.9));
    const Stepped r = run_steps(opt, ps, 5, never);
    check_counts(r, "two dtypes");
    check_counted_by_update(r, "two dtypes");
    for (const OpCount& c : r.ops) {
      CHECK(c.updates == 2);  // one per dtype
      CHECK(c.counting_updates == 1);
    }
    CHECK(opt.steps(0) == 5);
  }
  SECTION("plain SGD (no buffers) counts too") {
    std::vector<Tensor> ps = {param({1, 2}, kFloat32, dev)};
    optim::SGD opt(ps, optim::SGDOptions(0.1));
    const Stepped r = run_steps(opt, ps, 4, never);
    check_counts(r, "plain");
    check_counted_by_update(r, "plain");
  }
  SECTION("a buffer born late next to older ones") {
    // Parameter 1 gets its first gradient at step 2: its buffer goes through the fresh update
    // (reading a zero step), parameter 0's through the counting one.
    std::vector<Tensor> ps = {param({1, 2, 3}, kFloat32, dev), param({4, 5}, kFloat32, dev)};
    optim::SGD opt(ps, optim::SGDOptions(0.1).momentum(0.9).dampening(0.5));
    const Stepped r = run_steps(opt, ps, 5, [](size_t i, int s) { return i == 1 && s < 2; });
    check_counts(r, "late buffer");
    check_counted_by_update(r, "late buffer");
    CHECK(r.ops[2].updates == 2);  // ready + fresh
    CHECK(r.ops[2].counting_updates == 1);
  }
  SECTION("every buffer born late: the fresh update cannot count, an increment does") {
    std::vector<Tensor> ps = {param({1, 2, 3}, kFloat32, dev), param({4, 5}, kFloat64, dev)};
    optim::SGD opt(ps, optim::SGDOptions(0.1).dampening(0.5));
    Stepped r = run_steps(opt, ps, 2, never);
    opt.set_momentum(0, 0.9);
    // Step 3: every buffer born now starts as a copy of d_p (the fresh path reads 0).
    ps[0].set_grad(test::make({0.5, -1.0, 2.0}, {3}, kFloat32, dev));
    ps[1].set_grad(test::make({0.25, 4.0}, {2}, kFloat64, dev));
    const Tensor counter = live_step(opt, 0);
    const OpCount c = count_ops([&] { opt.step(); }, counter);
    CHECK(c.updates == 2);
    CHECK(c.counting_updates == 0);
    CHECK(c.other_writes_to_step == 1);  // the separate increment
    CHECK(c.inplace_adds == 1);
    CHECK(saved_step(opt, 0) == 3.0);
    CHECK(test::read(opt.momentum_buffer(0, 0)) == Vec{0.5, -1.0, 2.0});
    CHECK(test::read(opt.momentum_buffer(0, 1)) == Vec{0.25, 4.0});
    // Later steps count in the update again; the buffers use momentum and dampening.
    r = run_steps(opt, ps, 2, never);
    CHECK(r.counts == std::vector<double>{4.0, 5.0});
    check_counted_by_update(r, "after the late buffers");
  }
  SECTION("several groups, one of them skipping steps") {
    std::vector<Tensor> a = {param({1, 2}, kFloat32, dev)}, b = {param({3}, kFloat32, dev)};
    std::vector<optim::ParamGroup> groups;
    groups.emplace_back(a);
    groups.emplace_back(b, optim::SGDOptions(0.2).momentum(0.5));
    optim::SGD opt(groups, optim::SGDOptions(0.1).momentum(0.9));
    for (int s = 0; s < 6; ++s) {
      a[0].set_grad(full({2}, 1.0, TensorOptions(kFloat32).device(dev)));
      // Group 1 has no gradient on odd steps: it takes no step then, as before.
      b[0].set_grad(s % 2 ? Tensor() : full({1}, 1.0, TensorOptions(kFloat32).device(dev)));
      const OpCount c = count_ops([&] { opt.step(); });
      CHECK(c.updates == (s % 2 ? 1 : 2));
      CHECK(c.counting_updates == c.updates);
      CHECK(c.inplace_adds == 0);
    }
    CHECK(saved_step(opt, 0) == 6.0);
    CHECK(saved_step(opt, 1) == 3.0);
    CHECK(opt.steps(0) == 6);
    CHECK(opt.steps(1) == 3);
  }
  SECTION("state_dict saves the count, load_state_dict restores it and counting goes on") {
    std::vector<Tensor> ps = {param({1, 2, 3}, kFloat32, dev)};
    optim::SGD opt(ps, optim::SGDOptions(0.1).momentum(0.9).dampening(0.5));
    run_steps(opt, ps, 3, never);
    optim::OptimizerState saved = opt.state_dict();
    for (auto& [key, t] : saved.tensors) t = t.clone();
    CHECK(test::read(saved.tensors.at("param_groups.0.step")) == Vec{3.0});
    std::vector<Tensor> qs = {param({1, 2, 3}, kFloat32, dev)};
    optim::SGD other(qs, optim::SGDOptions(0.5));
    other.load_state_dict(saved);
    CHECK(other.steps(0) == 3);
    const Stepped r = run_steps(other, qs, 2, never);
    CHECK(r.counts == std::vector<double>{4.0, 5.0});
    check_counted_by_update(r, "after load_state_dict");
    CHECK(test::read(saved.tensors.at("param_groups.0.step")) == Vec{3.0});  // a copy
    // The loaded buffer went on (a count of 3 is not a first step): buf = 0.9 buf + 0.5 g with
    // g = 0.25 (s + 1) in run_steps, three steps in `opt`, then two in `other`.
    double want = 0;
    for (int s = 0; s < 3; ++s) want = s == 0 ? 0.25 : 0.9 * want + 0.5 * 0.25 * (s + 1);
    for (int s = 0; s < 2; ++s) want = 0.9 * want + 0.5 * 0.25 * (s + 1);
    for (double b : test::read(other.momentum_buffer(0, 0))) CHECK(std::fabs(b - want) <= 1e-6);
  }
}

// ---- the JIT --------------------------------------------------------------------------------

struct TinyNetImpl : nn::Module {
  nn::Linear fc1{nullptr}, fc2{nullptr};
  TinyNetImpl() {
    fc1 = register_module("fc1", nn::Linear(12, 16));
    fc2 = register_module("fc2", nn::Linear(16, 5));
  }
  Tensor forward(const Tensor& x) { return fc2(relu(fc1(x))); }
};
EMBER_MODULE(TinyNet);

// Traces one training step and runs the passes; checks that the counter's only writer is a
// counting sgd_update, for each group's counter in `counters`.
void check_traced_step_counts_in_update(TinyNet& net, optim::SGD& opt,
                                        const std::vector<Tensor>& counters, const Tensor& x,
                                        const Tensor& y) {
  nn::CrossEntropyLoss crit;
  jit::Graph g;
  {
    jit::Tracer tracer(true);
    tracer.add_input(x, 0);
    tracer.add_input(y, 1);
    opt.zero_grad();
    Tensor loss = crit(net(x), y);
    loss.backward();
    opt.step();
    tracer.finish({loss});
    REQUIRE(!tracer.broken());
    g = std::move(tracer.graph());
  }
  jit::optimize(g);
  INFO(g.str());
  std::vector<jit::ValueId> roots;
  for (const Tensor& counter : counters) {
    jit::ValueId root = jit::kNoValue;
    for (size_t v = 0; v < g.values.size(); ++v) {
      const jit::Value& val = g.values[v];
      if (val.kind == jit::ValueKind::State && val.root == static_cast<jit::ValueId>(v) &&
          g.state[val.slot].is_same(counter))
        root = static_cast<jit::ValueId>(v);
    }
    REQUIRE(root != jit::kNoValue);
    int writers = 0, counting_updates = 0;
    for (const jit::Node& n : g.nodes) {
      g.writes(n, roots);
      for (jit::ValueId r : roots) {
        if (r != root) continue;
        ++writers;
        if (n.op == OpId::sgd_update && n.attrs.increment_step) ++counting_updates;
      }
    }
    CHECK(writers == 1);
    CHECK(counting_updates == 1);
  }
  // No increment kernel anywhere: the traced step has no in-place add.
  for (const jit::Node& n : g.nodes) CHECK_FALSE((n.op == OpId::add && n.inplace));
}

// Trains `steps` steps eagerly or compiled on `dev`; returns the losses and final parameters;
// checks the counter after every step.
struct Trained {
  std::vector<float> losses;
  std::vector<Vec> params;
  jit::CompileStats stats;
};
Trained train(Device dev, bool compiled, jit::Mode mode, int steps) {
  manual_seed(3);
  TinyNet net;
  net->to(dev);
  // Two groups (fc1 with momentum and dampening, fc2 plain) so two counters advance.
  std::vector<optim::ParamGroup> groups;
  groups.emplace_back(net->fc1->parameters());
  groups.emplace_back(net->fc2->parameters(), optim::SGDOptions(0.05));
  optim::SGD opt(groups, optim::SGDOptions(0.1).momentum(0.9).dampening(0.5));
  nn::CrossEntropyLoss crit;
  auto body = [&](const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss = crit(net(x), y);
    loss.backward();
    opt.step();
    return loss;
  };
  auto fast = jit::compile(body, {.mode = mode, .fullgraph = true});
  manual_seed(11);
  Trained r;
  for (int s = 0; s < steps; ++s) {
    const Tensor x = randn({8, 12}, dev), y = randint(0, 5, {8}, dev);
    r.losses.push_back((compiled ? fast(x, y) : body(x, y)).item<float>());
    INFO((compiled ? "compiled" : "eager") << " step " << s + 1);
    CHECK(saved_step(opt, 0) == static_cast<double>(s + 1));
    CHECK(saved_step(opt, 1) == static_cast<double>(s + 1));
  }
  for (const Tensor& p : net->parameters()) r.params.push_back(test::read(p));
  r.stats = fast.stats();
  if (compiled) {
    // After steps, buffers exist and the counters are past 0: the steady-state trace.
    const Tensor x = randn({8, 12}, dev), y = randint(0, 5, {8}, dev);
    check_traced_step_counts_in_update(net, opt, {live_step(opt, 0), live_step(opt, 1)}, x, y);
    CHECK(saved_step(opt, 0) == static_cast<double>(steps + 1));
  }
  return r;
}

void compiled_matches_eager(Device dev, jit::Mode mode, int steps, const char* what) {
  INFO(what);
  const Trained eager = train(dev, false, jit::Mode::Default, steps);
  const Trained fast = train(dev, true, mode, steps);
  REQUIRE(fast.losses.size() == eager.losses.size());
  for (size_t s = 0; s < eager.losses.size(); ++s) {
    INFO("step " << s + 1);
    CHECK(std::fabs(fast.losses[s] - eager.losses[s]) <= 1e-6 * std::fabs(eager.losses[s]));
  }
  for (size_t i = 0; i < eager.params.size(); ++i) {
    INFO("parameter " << i);
    REQUIRE(fast.params[i].size() == eager.params[i].size());
    for (size_t k = 0; k < eager.params[i].size(); ++k)
      CHECK(std::fabs(fast.params[i][k] - eager.params[i][k]) <=
            1e-6 * (1 + std::fabs(eager.params[i][k])));
  }
  CHECK(fast.stats.replays >= steps - 4);
  CHECK(fast.stats.graph_breaks == 0);
  CHECK(fast.stats.eager_calls == 0);
}

}  // namespace

TEST_CASE("sgd_update counts the step after every read of it (cpu)", "[optim]") {
  check_first_step_everywhere(Device::cpu());
}

TEST_CASE("SGD counts each group step once, inside the update (cpu)", "[optim]") {
  optimizer_counts(Device::cpu());
}

TEST_CASE("jit: a compiled SGD step counts the step in sgd_update (cpu)", "[optim][jit]") {
  compiled_matches_eager(Device::cpu(), jit::Mode::Default, 8, "cpu");
}

TEST_CASE("sgd_update counts the step after every read of it (cuda)", "[optim][cuda]") {
  EMBER_REQUIRE_CUDA();
  const Device dev = Device::cuda(0);
  check_first_step_everywhere(dev);
}

TEST_CASE("cuda sgd_update: no block of a large launch sees the counted step", "[optim][cuda]") {
  EMBER_REQUIRE_CUDA();
  const Device dev = Device::cuda(0);
  // 4M floats: the grid is capped at 8 blocks per SM, hundreds of blocks that run in any
  // order. With dampening 0.5 a block that saw the new step would write 0.5 g, not g.
  const int64_t n = int64_t{1} << 22;
  const Tensor hyper = test::make({0.5, 0.9, 0.5, 0.0}, {4}, kFloat32, dev);
  const Tensor step = test::make({0.0}, {}, kFloat32, dev);
  const Tensor p = zeros({n}, TensorOptions(kFloat32).device(dev));
  const Tensor g = full({n}, 2.0, TensorOptions(kFloat32).device(dev));
  const Tensor buf = full({n}, 5.0, TensorOptions(kFloat32).device(dev));
  sgd_update_call(hyper, step, {p}, {g}, {buf}, true);
  CHECK(read_step(step) == 1.0);
  const std::vector<float> b = buf.cpu().to_vector<float>();
  size_t bad = 0;
  for (float v : b) bad += v != 2.0f;
  CHECK(bad == 0);
  // Launch after launch the ticket is back at 0: each counts exactly once.
  for (int k = 2; k <= 20; ++k) sgd_update_call(hyper, step, {p}, {g}, {buf}, true);
  CHECK(read_step(step) == 20.0);
  // Without the flag nothing is counted, and the ticket is left alone for the next count.
  sgd_update_call(hyper, step, {p}, {g}, {buf}, false);
  sgd_update_call(hyper, step, {p}, {g}, {buf}, true);
  CHECK(read_step(step) == 21.0);
}

TEST_CASE("cuda sgd_update: split launches and empty tensors count once", "[optim][cuda]") {
  EMBER_REQUIRE_CUDA();
  const Device dev = Device::cuda(0);
  const Tensor hyper = test::make({0.5, 0.9, 0.5, 0.0}, {4}, kFloat32, dev);
  // 150 tensors: three launches (64 per launch); all of them must read step 0.
  {
    const Tensor step = test::make({0.0}, {}, kFloat32, dev);
    std::vector<Tensor> ps, gs, bs;
    for (int i = 0; i < 150; ++i) {
      ps.push_back(zeros({i % 7 + 1}, TensorOptions(kFloat32).device(dev)));
      gs.push_back(full({i % 7 + 1}, 1.0 + i, TensorOptions(kFloat32).device(dev)));
      bs.push_back(full({i % 7 + 1}, -3.0, TensorOptions(kFloat32).device(dev)));
    }
    sgd_update_call(hyper, step, ps, gs, bs, true);
    CHECK(read_step(step) == 1.0);
    for (int i = 0; i < 150; ++i) {
      INFO("tensor " << i);
      CHECK(test::read(bs[i]) == Vec(static_cast<size_t>(i % 7 + 1), 1.0 + i));
    }
    sgd_update_call(hyper, step, ps, gs, bs, true);
    CHECK(read_step(step) == 2.0);
  }
  // 70 tensors whose last launch holds only empty ones, and a call of only empty tensors: no
  // element to update, still one count.
  {
    const Tensor step = test::make({4.0}, {}, kFloat32, dev);
    std::vector<Tensor> ps, gs;
    for (int i = 0; i < 70; ++i) {
      const int64_t len = i < 64 ? 3 : 0;
      ps.push_back(zeros({len}, TensorOptions(kFloat32).device(dev)));
      gs.push_back(full({len}, 1.0, TensorOptions(kFloat32).device(dev)));
    }
    sgd_update_call(hyper, step, ps, gs, {}, true);
    CHECK(read_step(step) == 5.0);
    CHECK(test::read(ps[0]) == Vec(3, -0.5));
    const std::vector<Tensor> empty_p = {zeros({0}, TensorOptions(kFloat32).device(dev))};
    const std::vector<Tensor> empty_g = {zeros({0}, TensorOptions(kFloat32).device(dev))};
    sgd_update_call(hyper, step, empty_p, empty_g, {}, true);
    CHECK(read_step(step) == 6.0);
  }
}

TEST_CASE("SGD counts each group step once, inside the update (cuda)", "[optim][cuda]") {
  EMBER_REQUIRE_CUDA();
  optimizer_counts(Device::cuda(0));
}

TEST_CASE("SGD on two devices counts each device's step once", "[optim][cuda]") {
  EMBER_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0), cpu = Device::cpu();
  // Slot 0 (whose counter steps() and state_dict read) is the first parameter's device: try
  // both orders. The second device's parameter has no gradient at step 2, so its counter is
  // counted by the separate increment that step. Values against PyTorch's rule in float64.
  for (bool gpu_first : {true, false}) {
    INFO((gpu_first ? "cuda parameter first" : "cpu parameter first"));
    const Device d0 = gpu_first ? gpu : cpu, d1 = gpu_first ? cpu : gpu;
    std::vector<Tensor> ps = {param({1.0, -2.0, 0.5}, kFloat64, d0),
                              param({3.0, 0.25}, kFloat64, d1)};
    optim::SGD opt(ps, optim::SGDOptions(0.1).momentum(0.9).dampening(0.5));
    test::RefSGD ref;
    ref.lr = f32(0.1);
    ref.momentum = f32(0.9);
    ref.dampening = f32(0.5);
    std::vector<Vec> rp = {{1.0, -2.0, 0.5}, {3.0, 0.25}};
    for (int s = 0; s < 5; ++s) {
      std::vector<std::optional<Vec>> grads(2);
      grads[0] = Vec{0.5 + s, -1.0, 0.25 * s};
      ps[0].set_grad(test::make(*grads[0], {3}, kFloat64, d0));
      if (s == 2) {
        ps[1].set_grad(Tensor());
      } else {
        grads[1] = Vec{1.0 - s, 2.0};
        ps[1].set_grad(test::make(*grads[1], {2}, kFloat64, d1));
      }
      const OpCount c = count_ops([&] { opt.step(); }, live_step(opt, 0));
      ref.step(rp, grads);
      INFO("step " << s + 1);
      CHECK(c.step_writes == 1);
      CHECK(c.other_writes_to_step == 0);
      // The other device's counter: counted by its update, or by an increment at step 3.
      CHECK(c.counting_updates == (s == 2 ? 1 : 2));
      CHECK(c.inplace_adds == (s == 2 ? 1 : 0));
      CHECK(saved_step(opt, 0) == static_cast<double>(s + 1));
      for (size_t i = 0; i < 2; ++i) {
        const Vec got = test::read(ps[i]);
        for (size_t k = 0; k < got.size(); ++k)
          CHECK(std::fabs(got[k] - rp[i][k]) <= 1e-6 * (1 + std::fabs(rp[i][k])));
      }
    }
  }
}

TEST_CASE("jit: a compiled SGD step counts the step in sgd_update (cuda)", "[optim][jit][cuda]") {
  EMBER_REQUIRE_CUDA();
  compiled_matches_eager(Device::cuda(0), jit::Mode::Default, 10, "cuda Default");
  compiled_matches_eager(Device::cuda(0), jit::Mode::ReduceOverhead, 12, "cuda ReduceOverhead");
  // The counter must advance in the graph replays themselves, not only in the traced calls.
  const Trained fast = train(Device::cuda(0), true, jit::Mode::ReduceOverhead, 12);
  CHECK(fast.stats.graph_replays >= 6);
}
