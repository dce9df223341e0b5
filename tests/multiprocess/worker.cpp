// One rank of a multi-process test: started by ember-run (or tests/multiprocess/run_failures.py)
// with torchrun's environment, it joins a gloo group and runs one scenario. Each scenario checks
// against a reference computed without communication (the closed form of a collective, or a
// single-process model trained on the ranks' concatenated batches); the process exits 0 when
// every check held and prints what failed otherwise.
#include <ember/ember.h>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <thread>

using namespace ember;
namespace dist = ember::distributed;

namespace {

struct CheckFailed {
  std::string what;
};

#define WCHECK(cond, msg)                                                              \
  do {                                                                                 \
    if (!(cond)) {                                                                     \
      std::ostringstream os_;                                                          \
      os_ << __FILE__ << ":" << __LINE__ << ": " << #cond << ": " << msg; /* NOLINT */ \
      throw CheckFailed{os_.str()};                                                    \
    }                                                                                  \
  } while (0)

int rank() { return dist::get_rank(); }
int world() { return dist::get_world_size(); }

std::vector<double> values(const Tensor& t) {
  return t.to(kFloat64).contiguous().to_vector<double>();
}

// Expects `f` to raise an ember::Error whose message contains `needle`.
void expect_error(const std::function<void()>& f, const std::string& needle) {
  try {
    f();
  } catch (const Error& e) {
    WCHECK(std::string(e.what()).find(needle) != std::string::npos,
           "error '" << e.what() << "' lacks '" << needle << "'");
    return;
  }
  WCHECK(false, "no error (expected one containing '" << needle << "')");
}

// Whether every rank's `t` has the same bits as rank 0's.
bool same_on_every_rank(const Tensor& t) {
  const Tensor flat = t.detach().contiguous().reshape({-1});
  Tensor all = empty({world() * flat.numel()}, flat.dtype());
  dist::all_gather(all, flat);
  const Tensor mine = all.narrow(0, 0, flat.numel()).contiguous();
  for (int r = 1; r < world(); ++r) {
    const Tensor other = all.narrow(0, r * flat.numel(), flat.numel()).contiguous();
    if (std::memcmp(mine.raw_data(), other.raw_data(), static_cast<size_t>(mine.nbytes())) != 0)
      return false;
  }
  return true;
}

// ---- collectives against their closed forms -------------------------------------------------

void collectives() {
  const int r = rank(), w = world();
  const double tri = w * (w + 1) / 2.0;
  for (DType dt : {kFloat32, kFloat64, kInt32, kInt64, kBFloat16}) {
    Tensor t = full({5}, r + 1, dt);
    dist::all_reduce(t, ReduceOp::Sum);
    for (double v : values(t)) WCHECK(v == tri, dtype_name(dt) << " sum " << v);
    Tensor m = full({3}, r * 2 - 1, dt);
    dist::all_reduce(m, ReduceOp::Max);
    for (double v : values(m)) WCHECK(v == 2 * (w - 1) - 1, dtype_name(dt) << " max " << v);
  }
  Tensor avg = arange(0, 6, 1, kFloat64) + static_cast<double>(r);
  dist::all_reduce(avg, ReduceOp::Avg);
  const std::vector<double> a = values(avg);
  for (int i = 0; i < 6; ++i) WCHECK(std::abs(a[i] - (i + (w - 1) / 2.0)) < 1e-12, "avg " << a[i]);

  Tensor b = arange(0, 4, 1, kFloat32) + static_cast<double>(10 * r);
  dist::broadcast(b, w - 1);
  const std::vector<double> bv = values(b);
  for (int i = 0; i < 4; ++i) WCHECK(bv[i] == i + 10 * (w - 1), "broadcast " << bv[i]);

  Tensor g = empty({w * 2, 3}, kInt64);
  dist::all_gather(g, full({2, 3}, r * 7, kInt64));
  const std::vector<double> gv = values(g);
  for (int i = 0; i < w * 6; ++i) WCHECK(gv[i] == (i / 6) * 7, "all_gather " << gv[i]);

  // in[i] = (r + 1) * (i + 1): the sum over ranks is (i + 1) * tri.
  Tensor in = (arange(0, 3 * w, 1, kFloat64) + 1.0) * static_cast<double>(r + 1);
  Tensor out = empty({3}, kFloat64);
  dist::reduce_scatter(out, in, ReduceOp::Sum);
  const std::vector<double> ov = values(out);
  for (int j = 0; j < 3; ++j) WCHECK(ov[j] == (r * 3 + j + 1) * tri, "reduce_scatter " << ov[j]);

  dist::barrier();

  // Refused before anything is sent: every rank refuses alike.
  expect_error([] { dist::all_reduce(full({2}, 1, kInt64), ReduceOp::Avg); },
               "Avg needs a floating");
  expect_error([] { dist::all_reduce(full({4, 4}, 1.0).t(), ReduceOp::Sum); }, "contiguous");
  expect_error([&] { dist::broadcast(full({2}, 1.0), w); }, "is not a rank");

  // The op inside a compiled function: a node of the trace, replayed with the rest of it.
  auto f = jit::compile([](const Tensor& x) {
    Tensor y = x * 2.0;
    dist::all_reduce(y, ReduceOp::Sum);
    return y + 1.0;
  });
  for (int call = 0; call < 4; ++call) {
    const Tensor x = full({8}, r + call, kFloat32);
    const std::vector<double> yv = values(f(x));
    const double expect = 2 * (tri - w + call * w) + 1;  // sum of 2 * (r + call), plus one
    for (double v : yv) WCHECK(v == expect, "compiled all_reduce, call " << call << ": " << v);
  }
  WCHECK(f.stats().replays >= 1 && f.stats().eager_calls == 0,
         "replays " << f.stats().replays << ", eager calls " << f.stats().eager_calls);
  WCHECK(f.last_graph().find("all_reduce") != std::string::npos, f.last_graph());
}

// ---- data parallel against one process on the concatenated batch ---------------------------

constexpr int64_t kPerRank = 8, kIn = 6, kClasses = 3;

nn::Sequential make_net(DType dt) {
  nn::Sequential net(nn::Linear(kIn, 16), nn::Tanh(), nn::Linear(16, 16), nn::ReLU(),
                     nn::Linear(16, kClasses));
  net->to(dt);
  return net;
}

// The batch of `step` for all ranks: rank r's is rows [r * kPerRank, (r + 1) * kPerRank).
std::pair<Tensor, Tensor> global_batch(int step, DType dt) {
  Generator gen(1000 + static_cast<uint64_t>(step));
  Tensor x = randn({kPerRank * world(), kIn}, TensorOptions(kFloat32), &gen).to(dt);
  Tensor y = randint(0, kClasses, {kPerRank * world()}, kInt64, &gen);
  return {x, y};
}

void copy_params(nn::Module& dst, const nn::Module& src) {
  NoGradGuard no_grad;
  const auto d = dst.parameters(), s = src.parameters();
  for (size_t i = 0; i < d.size(); ++i) {
    Tensor p = d[i];
    p.copy_(s[i]);
  }
}

double max_rel_diff(const Tensor& a, const Tensor& b) {
  const std::vector<double> x = values(a), y = values(b);
  double worst = 0, scale = 1e-30;
  for (size_t i = 0; i < x.size(); ++i) {
    worst = std::max(worst, std::abs(x[i] - y[i]));
    scale = std::max(scale, std::abs(y[i]));
  }
  return worst / std::max(scale, 1.0);
}

void gradients(DType dt, double cap_mb, double tol, bool overlap = true) {
  manual_seed(50 +
              static_cast<uint64_t>(rank()));  // each rank starts elsewhere: DDP copies rank 0's
  nn::Sequential net = make_net(dt);
  nn::parallel::DistributedDataParallel ddp(net,
                                            {.bucket_cap_mb = cap_mb, .overlap_backward = overlap});
  for (const Tensor& p : net->parameters())
    WCHECK(same_on_every_rank(p), "broadcast at construction");
  if (cap_mb < 0.001)
    WCHECK(ddp.buckets().size() > 1,
           "a small cap makes several buckets, got " << ddp.buckets().size());
  else
    WCHECK(ddp.buckets().size() == 1, "one bucket fits the model, got " << ddp.buckets().size());
  // The buckets hold every parameter once, last first.
  const auto named = net->named_parameters();
  WCHECK(ddp.buckets().front().front() == named.back().first, ddp.buckets().front().front());

  nn::Sequential ref = make_net(dt);
  copy_params(*ref, *net);
  nn::CrossEntropyLoss crit;
  for (int step = 0; step < 2; ++step) {  // the second backward reuses the reducer's state
    const auto [x, y] = global_batch(step, dt);
    net->zero_grad();
    ref->zero_grad();
    crit(net(x.narrow(0, rank() * kPerRank, kPerRank)), y.narrow(0, rank() * kPerRank, kPerRank))
        .backward();
    crit(ref(x), y).backward();
    const auto p = net->parameters(), q = ref->parameters();
    for (size_t i = 0; i < p.size(); ++i) {
      const double d = max_rel_diff(p[i].grad(), q[i].grad());
      WCHECK(d <= tol, dtype_name(dt) << " cap " << cap_mb << " step " << step << " parameter " << i
                                      << ": relative difference " << d);
      WCHECK(same_on_every_rank(p[i].grad()), "gradient " << i << " differs across ranks");
    }
  }
}

void no_sync() {
  manual_seed(3);
  nn::Sequential net = make_net(kFloat64);
  nn::parallel::DistributedDataParallel ddp(net);
  nn::Sequential ref = make_net(kFloat64);
  copy_params(*ref, *net);
  nn::CrossEntropyLoss crit;
  const auto [x, y] = global_batch(0, kFloat64);
  const int64_t half = kPerRank / 2;
  auto part = [&](int r, int k) {
    return std::pair{x.narrow(0, r * kPerRank + k * half, half),
                     y.narrow(0, r * kPerRank + k * half, half)};
  };
  net->zero_grad();
  {
    auto guard = ddp.no_sync();
    const auto [xa, ya] = part(rank(), 0);
    crit(net(xa), ya).backward();
  }
  // Local only: this rank's first half, not averaged.
  ref->zero_grad();
  {
    const auto [xa, ya] = part(rank(), 0);
    crit(ref(xa), ya).backward();
  }
  auto p = net->parameters(), q = ref->parameters();
  for (size_t i = 0; i < p.size(); ++i)
    WCHECK(max_rel_diff(p[i].grad(), q[i].grad()) < 1e-12, "no_sync communicated, parameter " << i);
  const auto [xb, yb] = part(rank(), 1);
  crit(net(xb), yb).backward();
  // Expected: the ranks' average of (first half + second half) gradients.
  ref->zero_grad();
  for (int r = 0; r < world(); ++r)
    for (int k = 0; k < 2; ++k) {
      const auto [xs, ys] = part(r, k);
      (crit(ref(xs), ys) * (1.0 / world())).backward();
    }
  for (size_t i = 0; i < p.size(); ++i)
    WCHECK(max_rel_diff(p[i].grad(), q[i].grad()) < 1e-12, "accumulated gradient " << i);
}

// N optimizer steps, eager or compiled; returns the final parameters.
std::vector<Tensor> train(bool compiled, int steps, jit::CompileStats* stats, std::string* graph) {
  manual_seed(70 + static_cast<uint64_t>(rank()));
  nn::Sequential net = make_net(kFloat32);
  nn::parallel::DistributedDataParallel ddp(net, {.bucket_cap_mb = 0.0005});
  optim::SGD opt(net->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  nn::CrossEntropyLoss crit;
  auto body = [&](const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss = crit(net(x), y);
    loss.backward();
    opt.step();
    return loss;
  };
  auto step_fn = jit::compile(body);
  for (int s = 0; s < steps; ++s) {
    const auto [x, y] = global_batch(s, kFloat32);
    const Tensor xs = x.narrow(0, rank() * kPerRank, kPerRank).contiguous();
    const Tensor ys = y.narrow(0, rank() * kPerRank, kPerRank).contiguous();
    if (compiled)
      step_fn(xs, ys);
    else
      body(xs, ys);
  }
  if (stats) *stats = step_fn.stats();
  if (graph) *graph = step_fn.last_graph();
  std::vector<Tensor> out;
  for (const Tensor& p : net->parameters()) out.push_back(p.detach().clone());
  return out;
}

void training() {
  const int steps = 6;
  const std::vector<Tensor> eager = train(false, steps, nullptr, nullptr);
  jit::CompileStats stats;
  std::string graph;
  const std::vector<Tensor> comp = train(true, steps, &stats, &graph);
  // Momentum buffers start on the first step: three traces, then replays.
  WCHECK(stats.eager_calls == 0 && stats.graph_breaks == 0 && stats.replays >= steps - 3,
         "replays " << stats.replays << ", eager calls " << stats.eager_calls);
  WCHECK(graph.find("all_reduce") != std::string::npos, "no all_reduce node in\n" << graph);
  // One process on the concatenated batches, from rank 0's initial weights.
  manual_seed(70);
  nn::Sequential ref = make_net(kFloat32);
  optim::SGD opt(ref->parameters(), optim::SGDOptions(0.1).momentum(0.9));
  nn::CrossEntropyLoss crit;
  for (int s = 0; s < steps; ++s) {
    const auto [x, y] = global_batch(s, kFloat32);
    opt.zero_grad();
    crit(ref(x), y).backward();
    opt.step();
  }
  const auto q = ref->parameters();
  for (size_t i = 0; i < eager.size(); ++i) {
    WCHECK(same_on_every_rank(eager[i]), "eager parameter " << i << " differs across ranks");
    WCHECK(same_on_every_rank(comp[i]), "compiled parameter " << i << " differs across ranks");
    const double de = max_rel_diff(eager[i], q[i]), dc = max_rel_diff(comp[i], q[i]);
    WCHECK(de < 1e-5 && dc < 1e-5,
           "parameter " << i << " vs one process: eager " << de << ", compiled " << dc);
    WCHECK(max_rel_diff(comp[i], eager[i]) < 1e-6, "parameter " << i << " compiled vs eager");
  }
}

// ---- mistakes: every rank raises, none hangs -------------------------------------------------

void mismatch() {
  expect_error([] { dist::all_reduce(zeros({4 + rank()}), ReduceOp::Sum); },
               "mismatched collectives");
  expect_error([] { dist::barrier(); }, "unusable after an earlier error");
}

void trace_mismatch() {
  auto f = jit::compile([](const Tensor& x) {
    Tensor y = x * 2.0;
    if (rank() == 1) y = y + 1.0;  // rank-dependent code inside the step
    dist::all_reduce(y, ReduceOp::Sum);
    return y;
  });
  expect_error([&] { f(ones({4})); }, "traced a different step");
}

void graph_break() {
  // Rank 1 reads a value on the host inside the step (a graph break there): every rank must
  // then run the step eagerly, and the results stay right and identical.
  manual_seed(5);
  nn::Sequential net = make_net(kFloat32);
  nn::parallel::DistributedDataParallel ddp(net);
  optim::SGD opt(net->parameters(), optim::SGDOptions(0.1));
  nn::CrossEntropyLoss crit;
  auto f = jit::compile([&](const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss = crit(net(x), y);
    if (rank() == 1) (void)loss.item<float>();
    loss.backward();
    opt.step();
    return loss;
  });
  for (int s = 0; s < 4; ++s) {
    const auto [x, y] = global_batch(s, kFloat32);
    f(x.narrow(0, rank() * kPerRank, kPerRank).contiguous(),
      y.narrow(0, rank() * kPerRank, kPerRank).contiguous());
  }
  WCHECK(f.stats().replays == 0 && f.stats().eager_calls >= 3,
         "replays " << f.stats().replays << ", eager calls " << f.stats().eager_calls);
  for (const Tensor& p : net->parameters()) WCHECK(same_on_every_rank(p), "parameters differ");
}

// A peer that dies while DDP's buckets are in flight on gloo's communication thread: backward
// on the survivor ends in an ember::Error, within the timeout.
void peer_killed_in_backward() {
  manual_seed(2);
  nn::Sequential net = make_net(kFloat32);
  nn::parallel::DistributedDataParallel ddp(net, {.bucket_cap_mb = 0.0005});
  nn::CrossEntropyLoss crit;
  dist::barrier();
  if (rank() == 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ::raise(SIGKILL);
  }
  const auto start = std::chrono::steady_clock::now();
  std::string message;
  try {
    for (int s = 0; s < 1000; ++s) {
      const auto [x, y] = global_batch(s, kFloat32);
      net->zero_grad();
      crit(net(x.narrow(0, 0, kPerRank)), y.narrow(0, 0, kPerRank)).backward();
    }
  } catch (const Error& e) {
    message = e.what();
  }
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now() - start)
                      .count();
  std::cout << "rank 0: backward failed after " << ms << " ms: " << message << std::endl;
  WCHECK(message.find("rank 0 of 2") != std::string::npos, message);
  WCHECK(ms < dist::default_group().timeout().count() + 3000, "took " << ms << " ms");
  // The group stays failed: the next collective says so at once.
  expect_error([] { dist::barrier(); }, "unusable after an earlier error");
}

// NCCL's watchdog, on one GPU: a collective queued behind ~8 s of GPU work cannot finish within
// a 3 s timeout (NCCL's own start-up needs part of a second), as one waiting for a dead peer
// could not; the watchdog must abort the communicator and fail the group, so the next
// collective raises instead of hanging.
void nccl_watchdog() {
  const Device dev = dist::default_group().device();
  const Tensor a = randn({16384, 16384}, dev);
  Tensor c = a;
  for (int i = 0; i < 50; ++i) c = mm(a, a);  // 440 TFLOP queued
  dist::all_reduce(c, ReduceOp::Sum);
  const auto start = std::chrono::steady_clock::now();
  std::string message;
  while (message.empty() && std::chrono::steady_clock::now() - start < std::chrono::seconds(20)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    try {
      dist::all_reduce(ones({4}, dev), ReduceOp::Sum);
    } catch (const Error& e) {
      message = e.what();
    }
  }
  std::cout << "rank 0: " << message << std::endl;
  const std::string within =
      "did not finish within " + std::to_string(dist::default_group().timeout().count()) + " ms";
  WCHECK(message.find(within) != std::string::npos, message);
}

// A peer that is gone or silent: an error within the timeout, not a hang.
void peer_lost(bool killed) {
  // Both ranks are past joining before rank 1 goes (a rank that dies while the other is still
  // connecting fails init_process_group, a different test).
  dist::barrier();
  if (rank() == 1) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (killed) ::raise(SIGKILL);
    std::this_thread::sleep_for(dist::default_group().timeout() * 2);
    return;
  }
  const auto start = std::chrono::steady_clock::now();
  std::string message;
  try {
    for (int i = 0; i < 1000; ++i) dist::all_reduce(ones({16}), ReduceOp::Sum);
  } catch (const Error& e) {
    message = e.what();
  }
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::steady_clock::now() - start)
                      .count();
  std::cout << "rank 0: after " << ms << " ms: " << message << std::endl;
  WCHECK(!message.empty(), "no error");
  WCHECK(message.find("rank 0 of") != std::string::npos, message);
  WCHECK(ms < dist::default_group().timeout().count() + 3000, "took " << ms << " ms");
  if (!killed) {
    WCHECK(message.find("within") != std::string::npos, message);
    WCHECK(ms >= dist::default_group().timeout().count() - 100, "gave up early: " << ms << " ms");
  }
}

}  // namespace

int main(int argc, char** argv) {
  const std::string scenario = argc > 1 ? argv[1] : "";
  const std::map<std::string, std::function<void()>> scenarios = {
      {"collectives", collectives},
      {"gradients",
       [] {
         gradients(kFloat64, 25, 1e-12);
         gradients(kFloat32, 25, 1e-6);
         gradients(kFloat32, 0.0002, 1e-6);
         gradients(kFloat32, 0.0002, 1e-6, false);
       }},
      {"no_sync", no_sync},
      {"training", training},
      {"mismatch", mismatch},
      {"trace_mismatch", trace_mismatch},
      {"graph_break", graph_break},
      {"peer_killed", [] { peer_lost(true); }},
      {"peer_killed_in_backward", peer_killed_in_backward},
      {"nccl_watchdog", nccl_watchdog},
      {"peer_silent", [] { peer_lost(false); }},
  };
  auto it = scenarios.find(scenario);
  if (it == scenarios.end()) {
    std::cerr << "usage: ember_multiprocess_worker SCENARIO (";
    for (const auto& [name, _] : scenarios) std::cerr << " " << name;
    std::cerr << " )\n";
    return 2;
  }
  const char* timeout_env = std::getenv("EMBER_TEST_TIMEOUT_MS");
  const int timeout_ms = timeout_env ? std::atoi(timeout_env) : 60000;
  const bool nccl = scenario.rfind("nccl", 0) == 0;
  if (nccl && !cuda::is_available()) {
    std::cout << "EMBER_SKIP: no CUDA device" << std::endl;
    return 0;
  }
  int me = -1;
  try {
    dist::init_process_group({.backend = nccl ? dist::Backend::Nccl : dist::Backend::Gloo,
                              .timeout = std::chrono::milliseconds(timeout_ms)});
    me = rank();
    it->second();
    dist::destroy_process_group();
  } catch (const CheckFailed& f) {
    std::cerr << "rank " << me << ": " << scenario << ": FAILED: " << f.what << std::endl;
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "rank " << me << ": " << scenario << ": unexpected error: " << e.what()
              << std::endl;
    return 1;
  }
  std::cout << "rank " << me << ": " << scenario << ": ok" << std::endl;
  return 0;
}
