// The pieces of data parallelism that one process can check: the rendezvous stores (their
// clients on threads), DistributedSampler against the partition written out by hand, the
// autograd hooks DDP stands on, and a gloo group of one rank (init, the errors, the op inside
// jit::compile, DDP leaving a lone rank's gradients as they were). Across processes:
// tests/multiprocess.
#include <ember/ember.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <set>
#include <thread>

#include "core/collective.h"
#include "core/dispatch.h"
#include "distributed/store.h"
#include "test_util.h"

using namespace ember;
namespace dist = ember::distributed;
using std::chrono::milliseconds;

namespace {

std::vector<char> bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string str(const std::vector<char>& v) { return {v.begin(), v.end()}; }

void exercise_store(const std::function<std::unique_ptr<dist::Store>(bool server)>& make) {
  std::unique_ptr<dist::Store> server = make(true);
  std::vector<std::thread> clients;
  std::vector<std::string> got(3);
  std::vector<int64_t> sums(3);
  for (int k = 0; k < 3; ++k)
    clients.emplace_back([&, k] {
      std::unique_ptr<dist::Store> s = make(false);
      s->set("rank" + std::to_string(k), bytes("hello from " + std::to_string(k)));
      sums[k] = s->add("counter", 10 + k);
      got[k] = str(s->get("rank" + std::to_string((k + 1) % 3)));  // waits for a neighbour
    });
  for (auto& t : clients) t.join();
  for (int k = 0; k < 3; ++k) CHECK(got[k] == "hello from " + std::to_string((k + 1) % 3));
  // Every increment landed once, in some order.
  std::vector<int64_t> sorted = sums;
  std::sort(sorted.begin(), sorted.end());
  CHECK(sorted.back() == 33);
  CHECK(std::set<int64_t>(sums.begin(), sums.end()).size() == 3);
  CHECK(server->add("counter", 0) == 33);
  server->set("k", bytes(""));
  CHECK(server->get("k").empty());  // an empty value is a value
  server->wait({"k", "rank0"});
  // A key nobody sets: an error after the timeout, not a hang.
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(server->get("never"), Catch::Matchers::Contains("'never' was not set within"));
  CHECK(std::chrono::steady_clock::now() - start >= milliseconds(250));
}

int free_port() {
  // Bind-and-release is racy in principle; the range keeps clear of common services.
  static int next =
      30000 + static_cast<int>(std::chrono::steady_clock::now().time_since_epoch().count() % 20000);
  return next++;
}

}  // namespace

TEST_CASE("distributed: the TCP store serves set, get, add and wait to several clients",
          "[distributed]") {
  const int port = free_port();
  exercise_store([port](bool server) {
    return dist::make_tcp_store("127.0.0.1", port, server, milliseconds(300));
  });
}

TEST_CASE("distributed: the file store serves set, get, add and wait to several clients",
          "[distributed]") {
  test::TempDir dir("ember_store");
  exercise_store(
      [&](bool) { return dist::make_file_store(dir.path().string(), milliseconds(300)); });
}

TEST_CASE("distributed: a TCP store client gives up when no server comes", "[distributed]") {
  const auto start = std::chrono::steady_clock::now();
  CHECK_THROWS_WITH(dist::make_tcp_store("127.0.0.1", free_port(), false, milliseconds(200)),
                    Catch::Matchers::Contains("no store at 127.0.0.1:"));
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
  CHECK_THROWS_WITH(dist::make_tcp_store("127.0.0.1", 70000, false, milliseconds(200)),
                    Catch::Matchers::Contains("MASTER_PORT must be in 1..65535"));
}

TEST_CASE("distributed: DistributedSampler splits an epoch across ranks like PyTorch's",
          "[distributed][data]") {
  // 10 samples over 3 ranks without shuffling: padded to 12 by repeating 0 and 1, rank r takes
  // positions r, r + 3, ... (torch.utils.data.distributed.DistributedSampler).
  const std::vector<std::vector<int64_t>> want = {{0, 3, 6, 9}, {1, 4, 7, 0}, {2, 5, 8, 1}};
  for (int r = 0; r < 3; ++r) {
    data::DistributedSampler s({.num_replicas = 3, .rank = r, .shuffle = false});
    CHECK(s.indices(10) == want[r]);
    CHECK(s.length(10) == 4);
    data::DistributedSampler d({.num_replicas = 3, .rank = r, .shuffle = false, .drop_last = true});
    CHECK(d.indices(10) == std::vector<int64_t>{r, r + 3, r + 6});
  }
  // Shuffled: the ranks' shares are disjoint and cover the set; set_epoch changes the order
  // and a fixed (seed, epoch) fixes it.
  std::set<int64_t> seen;
  std::vector<int64_t> first;
  for (int r = 0; r < 4; ++r) {
    data::DistributedSampler s({.num_replicas = 4, .rank = r, .seed = 9});
    s.set_epoch(2);
    const auto idx = s.indices(20);
    CHECK(idx.size() == 5);
    seen.insert(idx.begin(), idx.end());
    if (r == 0) first = idx;
  }
  CHECK(seen.size() == 20);
  data::DistributedSampler again({.num_replicas = 4, .rank = 0, .seed = 9});
  again.set_epoch(2);
  CHECK(again.indices(20) == first);
  again.set_epoch(3);
  CHECK(again.indices(20) != first);
  CHECK_THROWS_WITH(data::DistributedSampler({.num_replicas = 2, .rank = 2}),
                    Catch::Matchers::Contains("rank 2 is not one of 2 replicas"));
}

TEST_CASE("distributed: a DataLoader with a DistributedSampler yields this rank's share",
          "[distributed][data]") {
  auto ds = std::make_shared<data::TensorDataset>(std::vector<Tensor>{arange(0, 10, 1, kInt64)});
  auto sampler = std::make_shared<data::DistributedSampler>(
      data::DistributedSamplerOptions{.num_replicas = 2, .rank = 1, .shuffle = false});
  data::DataLoader loader(ds, {.batch_size = 2, .prefetch = false, .sampler = sampler});
  CHECK(loader.size() == 3);
  std::vector<int64_t> got;
  for (auto& batch : loader)
    for (int64_t v : batch[0].to_vector<int64_t>()) got.push_back(v);
  CHECK(got == std::vector<int64_t>{1, 3, 5, 7, 9});
  CHECK_THROWS_WITH(data::DataLoader(ds, {.shuffle = true, .sampler = sampler}),
                    Catch::Matchers::Contains("either shuffle or a sampler"));
}

TEST_CASE(
    "autograd: post-accumulate-grad hooks see the gradient in the slot, and callbacks run last",
    "[autograd]") {
  Tensor w = full({3}, 2.0).requires_grad_();
  Tensor v = full({2}, 1.0).requires_grad_();
  std::vector<std::string> order;
  std::vector<double> seen;
  const size_t hw = autograd::register_post_accumulate_grad_hook(w, [&](const Tensor& leaf) {
    order.push_back("w");
    seen.push_back(leaf.grad().to_vector<float>()[0]);
    autograd::queue_callback([&] { order.push_back("callback"); });
  });
  autograd::register_post_accumulate_grad_hook(v, [&](const Tensor&) { order.push_back("v"); });
  ((w * 3.0).sum() + (v * w.narrow(0, 0, 2)).sum()).backward();
  // dL/dw = 3 + [v, v, 0] = [4, 4, 3]: the hook ran after accumulation.
  CHECK(seen == std::vector<double>{4.0});
  REQUIRE(order.size() == 3);
  CHECK(order.back() == "callback");
  (w * 1.0).sum().backward();  // accumulates: 4 + 1
  CHECK(seen.back() == 5.0);
  autograd::remove_post_accumulate_grad_hook(w, hw);
  (w * 1.0).sum().backward();
  CHECK(seen.size() == 2);
  CHECK_THROWS_WITH(autograd::queue_callback([] {}),
                    Catch::Matchers::Contains("no backward is running"));
  CHECK_THROWS_WITH(autograd::register_post_accumulate_grad_hook(w * 2.0, [](const Tensor&) {}),
                    Catch::Matchers::Contains("must be a leaf"));
}

TEST_CASE("distributed: a gloo group of one rank, its errors, and its all_reduce compiled",
          "[distributed]") {
  if (!dist::is_available(dist::Backend::Gloo)) {
    std::cout << "EMBER_SKIP: built without gloo" << std::endl;
    return;
  }
  test::TempDir dir("ember_pg");
  const std::string init = "file://" + dir.path().string();
  CHECK_FALSE(dist::is_initialized());
  CHECK(dist::get_world_size() == 1);
  CHECK_THROWS_WITH(dist::all_reduce(ones({2})), Catch::Matchers::Contains("no process group"));
  CHECK_THROWS_WITH(dist::init_process_group({.rank = 1, .world_size = 1, .init = init}),
                    Catch::Matchers::Contains("rank 1 is outside a world of size 1"));
  CHECK_THROWS_WITH(dist::init_process_group({.rank = 0, .world_size = 1, .init = "tcp://x"}),
                    Catch::Matchers::Contains("init must be"));
  if (!std::getenv("RANK"))
    CHECK_THROWS_WITH(dist::init_process_group({}), Catch::Matchers::Contains("RANK is not set"));
  if (!dist::is_available(dist::Backend::Nccl))
    CHECK_THROWS_WITH(
        dist::init_process_group(
            {.backend = dist::Backend::Nccl, .rank = 0, .world_size = 1, .init = init}),
        Catch::Matchers::Contains("has no nccl backend"));

  auto g = dist::init_process_group({.rank = 0, .world_size = 1, .init = init});
  CHECK(dist::is_initialized());
  CHECK(g->describe() == "gloo rank 0 of 1");
  CHECK_THROWS_WITH(dist::init_process_group({.rank = 0, .world_size = 1, .init = init}),
                    Catch::Matchers::Contains("a default group exists already"));
  Tensor t = arange(0, 4, 1, kFloat32);
  dist::all_reduce(t, ReduceOp::Avg);
  CHECK(t.to_vector<float>() == std::vector<float>{0, 1, 2, 3});
  CHECK_THROWS_WITH(dist::all_reduce(ones({2}, kBool)), Catch::Matchers::Contains("all_reduce"));

  // Compiled: a node of the graph, replayed.
  auto f = jit::compile([](const Tensor& x) {
    Tensor y = x + 1.0;
    dist::all_reduce(y, ReduceOp::Sum);
    return y * 2.0;
  });
  for (int i = 0; i < 4; ++i) CHECK(f(full({3}, i)).to_vector<float>()[0] == 2.0f * (i + 1));
  CHECK(f.stats().replays == 2);
  CHECK(f.last_graph().find("all_reduce") != std::string::npos);
  // The collectives outside the op table end the trace instead of being skipped by replays.
  auto b = jit::compile([](const Tensor& x) {
    Tensor y = x * 3.0;
    dist::broadcast(y, 0);
    return y;
  });
  for (int i = 0; i < 3; ++i) CHECK(b(full({2}, 1.0)).to_vector<float>()[0] == 3.0f);
  CHECK(b.stats().replays == 0);
  CHECK(b.stats().graph_breaks >= 1);

  // DDP on one rank: the gradients are the rank's own.
  manual_seed(4);
  nn::Sequential net(nn::Linear(4, 3), nn::ReLU(), nn::Linear(3, 2));
  nn::parallel::DistributedDataParallel ddp(net);
  const Tensor x = randn({5, 4});
  const auto loss = [&] {
    const Tensor o = net(x);
    return (o * o).sum();
  };
  loss().backward();
  std::vector<Tensor> with_ddp;
  for (const Tensor& p : net->parameters()) with_ddp.push_back(p.grad().clone());
  net->zero_grad();
  {
    auto guard = ddp.no_sync();
    loss().backward();
  }
  const auto params = net->parameters();
  for (size_t i = 0; i < params.size(); ++i)
    CHECK(params[i].grad().to_vector<float>() == with_ddp[i].to_vector<float>());

  dist::destroy_process_group();
  CHECK_FALSE(dist::is_initialized());
  // A compiled step naming the destroyed group fails loudly rather than skipping the reduce.
  CHECK_THROWS_WITH(f(full({3}, 1.0)), Catch::Matchers::Contains("no process group with id"));
}

TEST_CASE(
    "distributed: an nccl group of one rank, its all_reduce compiled and captured in a CUDA graph",
    "[distributed][cuda]") {
  EMBER_REQUIRE_CUDA();
  REQUIRE(dist::is_available(dist::Backend::Nccl));  // a CUDA build finds the toolkit's NCCL
  test::TempDir dir("ember_nccl");
  auto g = dist::init_process_group({.backend = dist::Backend::Nccl,
                                     .rank = 0,
                                     .world_size = 1,
                                     .init = "file://" + dir.path().string()});
  const Device dev = Device::cuda(0);
  CHECK(g->device() == dev);
  Tensor t = arange(0, 6, 1, TensorOptions(kFloat32).device(dev));
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max}) dist::all_reduce(t, op);
  CHECK(t.cpu().to_vector<float>() == std::vector<float>{0, 1, 2, 3, 4, 5});
  Tensor gathered = empty({6}, TensorOptions(kFloat32).device(dev));
  dist::all_gather(gathered, t);
  Tensor scattered = empty({6}, TensorOptions(kFloat32).device(dev));
  dist::reduce_scatter(scattered, t * 2.0);
  dist::broadcast(t, 0);
  dist::barrier();
  CHECK(gathered.cpu().to_vector<float>() == t.cpu().to_vector<float>());
  CHECK(scattered.cpu().to_vector<float>() == std::vector<float>{0, 2, 4, 6, 8, 10});
  CHECK_THROWS_WITH(dist::all_reduce(ones({2})), Catch::Matchers::Contains("is on cpu"));

  // A DDP training step, eager and compiled into one CUDA graph: same weights.
  auto run = [&](bool compiled) {
    manual_seed(11);
    nn::Sequential net(nn::Linear(12, 32), nn::ReLU(), nn::Linear(32, 4));
    net->to(dev);
    nn::parallel::DistributedDataParallel ddp(net, {.bucket_cap_mb = 0.001});
    optim::SGD opt(net->parameters(), optim::SGDOptions(0.05).momentum(0.9));
    nn::CrossEntropyLoss crit;
    auto body = [&](const Tensor& x, const Tensor& y) {
      opt.zero_grad();
      Tensor loss = crit(net(x), y);
      loss.backward();
      opt.step();
      return loss;
    };
    auto step = jit::compile(body, {.mode = jit::Mode::ReduceOverhead});
    const Tensor x = randn({16, 12}, dev);
    const Tensor y = randint(0, 4, {16}, dev);
    for (int i = 0; i < 8; ++i) compiled ? step(x, y) : body(x, y);
    if (compiled) {
      INFO(step.last_graph());
      CHECK(step.stats().graph_replays >= 2);
      CHECK(step.stats().eager_calls == 0);
      CHECK(step.last_graph().find("all_reduce") != std::string::npos);
    }
    std::vector<Tensor> out;
    for (const Tensor& p : net->parameters()) out.push_back(p.detach().cpu());
    return out;
  };
  const auto eager = run(false), comp = run(true);
  for (size_t i = 0; i < eager.size(); ++i) {
    const auto a = eager[i].to_vector<float>(), b = comp[i].to_vector<float>();
    for (size_t k = 0; k < a.size(); ++k)
      CHECK(std::abs(a[k] - b[k]) <= 1e-6f * (1 + std::abs(a[k])));
  }
  dist::destroy_process_group();
}

namespace {

// Doubles a float32 tensor in place through its memory, as a backend writes it (an op here
// would be recorded by the tracer as part of the step).
void double_in_place(const Tensor& t) {
  float* p = static_cast<float*>(t.impl()->storage->data) + t.storage_offset();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] *= 2;
}

// Two virtual ranks holding the same tensor, and a log of what happened when: a started
// reduction changes the tensor only when waited for, so a replay that read it before its wait
// would see the old values.
class DeferredTwoRanks final : public Communicator {
 public:
  std::vector<std::string> log;
  void all_reduce(const Tensor& t, ReduceOp) override {
    log.push_back("reduce");
    double_in_place(t);
  }
  std::shared_ptr<CollectiveWork> start_all_reduce(const Tensor& t, ReduceOp) override {
    struct Deferred final : CollectiveWork {
      DeferredTwoRanks* owner;
      Tensor t;
      void wait() override {
        owner->log.push_back("wait");
        double_in_place(t);
      }
    };
    log.push_back("start");
    auto w = std::make_shared<Deferred>();
    w->owner = this;
    w->t = t;
    return w;
  }
  Device device() const override { return Device::cpu(); }
  std::string describe() const override { return "two deferred test ranks"; }
  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::vector<uint64_t> all_gather_words(const std::vector<uint64_t>& mine) override {
    std::vector<uint64_t> all = mine;
    all.insert(all.end(), mine.begin(), mine.end());
    return all;
  }
};

}  // namespace

TEST_CASE("jit: a replayed all_reduce waits just before its result is read, not where it starts",
          "[distributed][jit]") {
  auto comm = std::make_shared<DeferredTwoRanks>();
  const int64_t id = register_communicator(comm);
  auto reduce = [id](const Tensor& t) {
    Attrs a;
    a.group = id;
    dispatch(OpId::all_reduce, {t}, a, &t);
  };
  // Two independent reductions, then work on neither, then their consumers.
  auto f = jit::compile([&](const Tensor& x) {
    Tensor a = x * 3.0, b = x + 1.0;
    reduce(a);
    reduce(b);
    Tensor c = (x * x).sum();
    return a * b + c;
  });
  for (int call = 0; call < 4; ++call) {
    comm->log.clear();
    const Tensor x = full({4}, 1.0 + call);
    const double v = 1.0 + call;
    const std::vector<float> got = f(x).to_vector<float>();
    // (2 * 3x) * (2 * (x + 1)) + 4x^2, with the reduction of two equal ranks doubling.
    for (float g : got) CHECK(g == static_cast<float>(12 * v * (v + 1) + 4 * v * v));
    if (call >= 2) {  // replays: both started before either is waited for
      CHECK(comm->log == std::vector<std::string>{"start", "start", "wait", "wait"});
    } else {  // traced calls run eagerly
      CHECK(comm->log == std::vector<std::string>{"reduce", "reduce"});
    }
  }
  CHECK(f.stats().replays == 2);
  unregister_communicator(id);
}
