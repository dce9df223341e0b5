// The CPU intra-op pool (core/parallel.h) and what rests on it: parallel_for's contract, the
// thread-count API, and training results that are the same bits on 1, 2 and 3 threads (each
// output keeps one reduction order whatever the thread count), eager and compiled. The host
// caching allocator: a steady-state step asks the C library for no new memory.
#include <ember/ember.h>
#include <catch2/catch.hpp>

#include <sys/resource.h>

#include <atomic>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "test_util.h"

using namespace ember;

namespace {

// Restores the pool's size when a test ends (also when it fails).
struct ThreadsGuard {
  int saved = get_num_threads();
  ~ThreadsGuard() { set_num_threads(saved); }
};

bool same_bits(const Tensor& a, const Tensor& b) {
  const Tensor x = a.contiguous(), y = b.contiguous();
  return x.sizes() == y.sizes() && x.dtype() == y.dtype() &&
         std::memcmp(x.raw_data(), y.raw_data(), static_cast<size_t>(x.nbytes())) == 0;
}

struct Trained {
  std::vector<float> losses;
  std::vector<Tensor> params;
};

// 784 -> 256 -> ReLU -> 10 at batch 256: large enough that every GEMM is cut into slabs, the
// pointwise loops, column sums, draws and the momentum update split, and the compiled step's
// chunked groups run on several lanes.
Trained train_mlp(int threads, bool compiled, int steps) {
  set_num_threads(threads);
  manual_seed(7);
  nn::Sequential net(nn::Linear(784, 256), nn::ReLU(), nn::Linear(256, 10));
  optim::SGD opt(net->parameters(), optim::SGDOptions(0.05).momentum(0.9));
  nn::CrossEntropyLoss crit;
  auto body = [&](const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss = crit(net(x), y);
    loss.backward();
    opt.step();
    return loss;
  };
  auto fn = jit::compile(body);
  Trained r;
  for (int i = 0; i < steps; ++i) {
    const Tensor x = randn({256, 784});
    const Tensor y = randint(0, 10, {256});
    r.losses.push_back((compiled ? fn(x, y) : body(x, y)).item<float>());
  }
  for (const Tensor& p : net->parameters()) r.params.push_back(p.detach().clone());
  return r;
}

}  // namespace

TEST_CASE("parallel_for covers every index once, in ranges of at least the grain", "[parallel]") {
  ThreadsGuard guard;
  for (int threads : {1, 2, 3, 5}) {
    set_num_threads(threads);
    for (int64_t n : {int64_t{0}, int64_t{1}, int64_t{7}, int64_t{100}, int64_t{1001}}) {
      for (int64_t grain : {int64_t{1}, int64_t{3}, int64_t{64}}) {
        INFO(threads << " threads, n " << n << ", grain " << grain);
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        std::atomic<int> short_ranges{0}, ranges{0};
        parallel_for(n, grain, [&](int64_t b, int64_t e) {
          ranges.fetch_add(1);
          if (e - b < grain && !(b == 0 && e == n)) short_ranges.fetch_add(1);
          for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)].fetch_add(1);
        });
        int wrong = 0;
        for (auto& h : hits) wrong += h.load() != 1;
        CHECK(wrong == 0);
        CHECK(short_ranges.load() == 0);
        CHECK(ranges.load() <= std::max(1, threads));
      }
    }
  }
}

TEST_CASE("parallel_for nests inline and rethrows a body's exception", "[parallel]") {
  ThreadsGuard guard;
  set_num_threads(3);
  std::atomic<int> inner_inline{0}, outer{0};
  parallel_for(6, 1, [&](int64_t b, int64_t e) {
    outer.fetch_add(1);
    CHECK(in_parallel_region());
    parallel_for(1000, 1, [&](int64_t ib, int64_t ie) {
      if (ib == 0 && ie == 1000) inner_inline.fetch_add(1);
    });
  });
  CHECK(outer.load() >= 1);
  CHECK(inner_inline.load() == outer.load());  // every nested loop ran whole, on its caller
  CHECK_FALSE(in_parallel_region());

  CHECK_THROWS_WITH(parallel_for(300, 1,
                                 [](int64_t b, int64_t) {
                                   if (b > 0) throw std::runtime_error("range past 0 failed");
                                 }),
                    "range past 0 failed");
  // The pool still works afterwards.
  std::atomic<int64_t> sum{0};
  parallel_for(300, 1, [&](int64_t b, int64_t e) { sum.fetch_add(e - b); });
  CHECK(sum.load() == 300);
}

TEST_CASE("set_num_threads rejects a count below one and names it", "[parallel]") {
  ThreadsGuard guard;
  CHECK_THROWS_WITH(set_num_threads(0), Catch::Contains("set_num_threads") && Catch::Contains("0"));
  CHECK_THROWS_WITH(set_num_threads(-3), Catch::Contains("-3"));
  set_num_threads(2);
  CHECK(get_num_threads() == 2);
}

TEST_CASE("CPU training gives the same bits on 1, 2 and 3 threads, eager and compiled",
          "[parallel][jit]") {
  ThreadsGuard guard;
  for (bool compiled : {false, true}) {
    INFO((compiled ? "compiled" : "eager"));
    const Trained one = train_mlp(1, compiled, 3);
    for (int threads : {2, 3}) {
      INFO(threads << " threads");
      const Trained many = train_mlp(threads, compiled, 3);
      CHECK(many.losses == one.losses);
      REQUIRE(many.params.size() == one.params.size());
      for (size_t i = 0; i < one.params.size(); ++i) {
        INFO("parameter " << i);
        CHECK(same_bits(many.params[i], one.params[i]));
      }
    }
  }
}

TEST_CASE("the large ops give the same bits on 1 and 3 threads", "[parallel]") {
  ThreadsGuard guard;
  manual_seed(3);
  const Tensor a = randn({300, 500}), b = randn({500, 200}), c = randn({200, 300});
  auto run = [&] {
    std::vector<Tensor> r;
    r.push_back(mm(a, b));          // slabs of columns
    r.push_back(mm(c.t(), b.t()));  // transposed operands, slabs of rows
    r.push_back(mm(b.t(), a.t()));  // [200, 300]
    r.push_back(sum(a, {0}));       // column sums (outer order)
    r.push_back(sum(a, {1}));       // row sums (inner order)
    r.push_back(logsumexp(a, {1}));
    r.push_back(relu(a) * 2 + b.sum());  // pointwise with a broadcast scalar
    r.push_back(where(gt(a, zeros({})), a, zeros({})));
    r.push_back(randn({100003}));  // draws split at any index, an odd tail
    r.push_back(softmax(a, 1));      // rows split over the pool
    r.push_back(log_softmax(a, 1));
    r.push_back(softmax(a, 0));      // dim not last: tiles of rows split over the pool
    r.push_back(log_softmax(a, 0));
    return r;
  };
  set_num_threads(1);
  manual_seed(11);
  const std::vector<Tensor> one = run();
  set_num_threads(3);
  manual_seed(11);
  const std::vector<Tensor> three = run();
  for (size_t i = 0; i < one.size(); ++i) {
    INFO("result " << i);
    CHECK(same_bits(one[i], three[i]));
  }
}

TEST_CASE("a steady-state CPU training step takes no new memory from the C library",
          "[parallel][memory]") {
  if (!cpu::caches_memory()) {  // AddressSanitizer builds: plain malloc, nothing counted
    CHECK(cpu::memory_stats().num_allocs == 0);
    return;
  }
  ThreadsGuard guard;
  set_num_threads(2);
  manual_seed(5);
  nn::Sequential net(nn::Linear(784, 512), nn::ReLU(), nn::Linear(512, 10));
  optim::SGD opt(net->parameters(), optim::SGDOptions(0.01).momentum(0.9));
  nn::CrossEntropyLoss crit;
  auto step = [&] {
    const Tensor x = randn({1024, 784});
    const Tensor y = randint(0, 10, {1024});
    opt.zero_grad();
    Tensor loss = crit(net(x), y);
    loss.backward();
    opt.step();
    return loss.item<float>();
  };
  for (int i = 0; i < 3; ++i) step();
  const auto before = cpu::memory_stats();
  rusage r0{};
  getrusage(RUSAGE_SELF, &r0);
  for (int i = 0; i < 5; ++i) step();
  rusage r1{};
  getrusage(RUSAGE_SELF, &r1);
  const auto after = cpu::memory_stats();
  CHECK(after.num_device_mallocs == before.num_device_mallocs);
  CHECK(after.reserved == before.reserved);
  CHECK(after.num_allocs > before.num_allocs);  // the steps did allocate, from the cache
  // Each step's temporaries are megabytes (~1000 pages of [1024, 512] floats and the batch):
  // fresh memory would fault in thousands of pages over five steps.
  const long faults = r1.ru_minflt - r0.ru_minflt;
  INFO(faults << " minor page faults over five steps");
  CHECK(faults < 200);
}
