// The CUDA runtime layer: availability, device checks, the device error flag, host/device copies
// and the caching allocator on a real device (reuse, stats, empty_cache, out of memory).
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "core/cuda_runtime.h"
#include "core/factory.h"
#include "core/ops.h"
#include "kernels/cuda/tickets.h"
#include "kernels/cuda/timeline.h"
#include "test_util.h"

using Catch::Matchers::Contains;
using Catch::Matchers::Equals;

namespace ember {
namespace {

const Device kGpu = Device::cuda(0);
constexpr int64_t MiB = 1 << 20;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "<no ember::Error thrown>";
}

std::vector<float> floats_of(const Tensor& t) {
  const Tensor h = t.cpu().contiguous();
  const float* p = h.data_ptr<float>();
  return {p, p + h.numel()};
}

}  // namespace

// Runs everywhere: on a machine without a GPU (CI) this checks CUDA reports itself unavailable
// instead of failing, and that using it anyway is an ember::Error, not a crash.
TEST_CASE("cuda availability is reported without throwing", "[cuda_runtime]") {
  bool available = false;
  int count = -1;
  REQUIRE_NOTHROW(available = cuda::is_available());
  REQUIRE_NOTHROW(count = cuda::device_count());
  CHECK(available == (count > 0));
  // A device index past the last one is an error naming it, with or without a GPU.
  const std::string msg = error_of([&] { cuda::synchronize(count); });
  CHECK_THAT(msg, Contains("cuda::synchronize"));
  CHECK_THAT(msg, Contains("CUDA"));
  CHECK_THROWS_AS(cuda::synchronize(-1), Error);
  if (!available) {
    CHECK_THROWS_AS(cuda::memory_stats(0), Error);
    CHECK_THROWS_AS(zeros({3}, TensorOptions(kGpu)), Error);
    CHECK_THROWS_AS(ones({3}).to(kGpu), Error);
  } else {
    CHECK_THAT(msg, Contains("cuda:" + std::to_string(count)));
  }
}

TEST_CASE("cuda device error flag: reported at the next sync, exactly once, first error wins",
          "[cuda][cuda_runtime]") {
  EMBER_REQUIRE_CUDA();
  cuda::synchronize(0);
  const Tensor logits = zeros({3, 10}, TensorOptions(kGpu));
  const Tensor bad_target =
      from_vector(std::vector<int64_t>{1, 12, 3}, {3}, TensorOptions(kInt64).device(kGpu));
  const Tensor x = zeros({2, 5}, TensorOptions(kGpu));
  const Tensor bad_index =
      from_vector(std::vector<int64_t>{0, 9, 1, 2}, {2, 2}, TensorOptions(kInt64).device(kGpu));

  // The launch returns normally; synchronize reports, naming op, value, limit and device.
  Tensor r;
  REQUIRE_NOTHROW(r = cross_entropy_per_sample(logits, bad_target));
  CHECK_THAT(
      error_of([] { cuda::synchronize(0); }),
      Equals("cross_entropy: target 12 is out of range for 10 classes (detected on cuda:0)"));
  CHECK_NOTHROW(cuda::synchronize(0));  // the flag was cleared

  // Two bad kernels before one sync: the first one's error is the one reported.
  REQUIRE_NOTHROW(gather(x, 1, bad_index));
  REQUIRE_NOTHROW(cross_entropy_per_sample(logits, bad_target));
  const std::string first = error_of([] { cuda::synchronize(0); });
  CHECK_THAT(first, Contains("gather: index 9 is out of range"));
  CHECK_THAT(first, Contains("(detected on cuda:0)"));
  CHECK_NOTHROW(cuda::synchronize(0));

  // A device-to-host copy is a sync too: reading the result reports the error.
  r = cross_entropy_per_sample(logits, bad_target);
  CHECK_THAT(error_of([&] { r.cpu(); }), Contains("target 12 is out of range for 10 classes"));
  r = cross_entropy_per_sample(logits, bad_target);
  CHECK_THAT(error_of([&] { (void)r.sum().item<float>(); }), Contains("cross_entropy: target 12"));

  // The context survived: later work runs and gives right answers (log(10) per sample).
  const Tensor good =
      from_vector(std::vector<int64_t>{1, 9, 3}, {3}, TensorOptions(kInt64).device(kGpu));
  for (float v : floats_of(cross_entropy_per_sample(logits, good)))
    CHECK(v == Approx(2.302585093).epsilon(1e-6));
}

TEST_CASE("cuda copies: host to device to host, ordered after queued work",
          "[cuda][cuda_runtime]") {
  EMBER_REQUIRE_CUDA();
  std::vector<float> host(1000003);
  for (size_t i = 0; i < host.size(); ++i) host[i] = static_cast<float>(i % 977) - 300.5f;
  const Tensor g = from_vector(host, {static_cast<int64_t>(host.size())}, TensorOptions(kGpu));
  // Queue work behind the upload, then read back: the copy must wait for it.
  const Tensor doubled = add(g, g);
  const Tensor copy = g.clone();
  const std::vector<float> back = floats_of(g), twice = floats_of(doubled),
                           cloned = floats_of(copy);
  REQUIRE(back.size() == host.size());
  size_t mismatches = 0;
  for (size_t i = 0; i < host.size(); ++i)
    mismatches += back[i] != host[i] || twice[i] != 2 * host[i] || cloned[i] != host[i];
  CHECK(mismatches == 0);
  // Zero-byte copies are no-ops, not errors.
  CHECK_NOTHROW(zeros({0}, TensorOptions(kGpu)).cpu());
  CHECK_NOTHROW(cuda::synchronize(0));
}

TEST_CASE("cuda caching allocator reuses freed blocks without cudaMalloc", "[cuda][cuda_runtime]") {
  EMBER_REQUIRE_CUDA();
  cuda::synchronize(0);
  void* first = nullptr;
  {
    const Tensor a = empty({1000, 1000}, TensorOptions(kGpu));  // 4 MB: a large block
    first = a.raw_data();
  }
  const cuda::AllocatorStats s1 = cuda::memory_stats(0);
  for (int i = 0; i < 50; ++i) {
    const Tensor b = empty({1000, 1000}, TensorOptions(kGpu));
    CHECK(b.raw_data() == first);
  }
  // Small tensors of the same size class share one cached block too.
  void* small = nullptr;
  {
    const Tensor a = empty({100}, TensorOptions(kGpu));
    small = a.raw_data();
  }
  const cuda::AllocatorStats s2 = cuda::memory_stats(0);
  for (int i = 0; i < 50; ++i) {
    const Tensor b = empty({120}, TensorOptions(kGpu));  // 480 B and 400 B: both 512 B blocks
    CHECK(b.raw_data() == small);
  }
  const cuda::AllocatorStats s3 = cuda::memory_stats(0);
  CHECK(s3.num_device_mallocs == s2.num_device_mallocs);
  CHECK(s2.num_device_mallocs <= s1.num_device_mallocs + 1);  // at most one small segment
  CHECK(s3.num_allocs == s2.num_allocs + 50);
  CHECK(s3.allocated == s1.allocated);
  // Blocks handed out are aligned for 16-byte vector loads.
  CHECK(reinterpret_cast<uintptr_t>(first) % 256 == 0);
  CHECK(reinterpret_cast<uintptr_t>(small) % 512 == 0);
}

TEST_CASE("cuda memory stats: allocated, peak, reserved and empty_cache", "[cuda][cuda_runtime]") {
  EMBER_REQUIRE_CUDA();
  cuda::synchronize(0);
  cuda::empty_cache();
  const cuda::AllocatorStats base = cuda::memory_stats(0);
  // Larger than everything reserved so far, so no cached block can serve it: a new segment.
  // A multiple of 2 MiB, the large size class, so the block is exactly this big.
  const int64_t bytes = (base.reserved / (2 * MiB) + 32) * 2 * MiB;
  {
    const Tensor t = empty({bytes / 4}, TensorOptions(kGpu));
    const cuda::AllocatorStats live = cuda::memory_stats(0);
    CHECK(live.allocated - base.allocated == bytes);
    CHECK(live.reserved - base.reserved == bytes);
    CHECK(live.peak_allocated >= live.allocated);
    CHECK(live.num_device_mallocs == base.num_device_mallocs + 1);
    CHECK(live.num_allocs == base.num_allocs + 1);
  }
  const cuda::AllocatorStats freed = cuda::memory_stats(0);
  CHECK(freed.allocated == base.allocated);
  CHECK(freed.reserved == base.reserved + bytes);  // cached, not returned
  CHECK(freed.peak_allocated >= base.allocated + bytes);
  cuda::reset_peak_memory_stats(0);
  CHECK(cuda::memory_stats(0).peak_allocated == freed.allocated);
  cuda::empty_cache();
  const cuda::AllocatorStats emptied = cuda::memory_stats(0);
  CHECK(emptied.reserved == base.reserved);
  CHECK(emptied.allocated == base.allocated);
}

TEST_CASE("cuda tickets: zeroed, distinct ranges, reused once released, no tensor memory",
          "[cuda][cuda_runtime]") {
  EMBER_REQUIRE_CUDA();
  namespace kc = kernels::cuda;
  auto zeroed = [](const unsigned* p, int64_t n) {
    std::vector<unsigned> h(static_cast<size_t>(n), 1u);
    cuda::copy_device_to_host(h.data(), p, h.size() * sizeof(unsigned), 0);
    for (unsigned v : h)
      if (v != 0u) return false;
    return true;
  };
  const int64_t allocated = cuda::memory_stats(0).allocated;
  unsigned* a = kc::acquire_tickets(0, 100);
  unsigned* b = kc::acquire_tickets(0, 5000);  // past one chunk
  unsigned* c = kc::acquire_tickets(0, 7);
  CHECK(zeroed(a, 100));
  CHECK(zeroed(b, 5000));
  CHECK(zeroed(c, 7));
  // No two ranges overlap.
  auto apart = [](const unsigned* p, int64_t n, const unsigned* q, int64_t m) {
    return p + n <= q || q + m <= p;
  };
  CHECK(apart(a, 100, b, 5000));
  CHECK(apart(a, 100, c, 7));
  CHECK(apart(b, 5000, c, 7));
  CHECK(cuda::memory_stats(0).allocated == allocated);  // outside the caching allocator
  kc::release_tickets(0, a, 100);
  unsigned* again = kc::acquire_tickets(0, 60);
  CHECK(zeroed(again, 60));
  kc::release_tickets(0, again, 60);
  kc::release_tickets(0, b, 5000);
  kc::release_tickets(0, c, 7);
  CHECK_THROWS_WITH(kc::acquire_tickets(0, 0), Contains("count must be positive"));
}

TEST_CASE("cuda timeline: marks time the device, the hold lets the queued work run back to back",
          "[cuda][cuda_runtime]") {
  EMBER_REQUIRE_CUDA();
  cuda::synchronize(0);
  // Marks 0 and 1 bracket a 5 ms hold; 2 follows 64 MiB of fill work queued behind it; 3 comes
  // right after 2 with nothing between.
  Tensor t = empty({16 << 20}, TensorOptions(kGpu));
  t.fill_(0.0);  // loads the fill kernel now, not while the hold runs
  cuda::synchronize(0);
  cuda::Timeline tl(0, 4);
  tl.mark(0);
  tl.hold(5.0);
  tl.mark(1);
  t.fill_(1.0);
  tl.mark(2);
  tl.mark(3);
  const std::vector<double> us = tl.elapsed_us();
  REQUIRE(us.size() == 4);
  INFO("us: " << us[1] << " " << us[2] << " " << us[3] << "; held through: " << tl.held_through());
  CHECK(us[0] == 0.0);
  CHECK(us[1] >= 4900.0);  // the hold spins on the device's nanosecond timer
  CHECK(us[1] < 50000.0);
  // 64 MiB written at a few TB/s is tens of microseconds, never milliseconds: the fill ran
  // right after the hold, not after some host gap.
  CHECK(us[2] > 0.0);
  CHECK(us[2] < 2000.0);
  CHECK(us[3] < 50.0);
  CHECK(tl.held_through());
  CHECK(t.sum().item<float>() == static_cast<float>(16 << 20));  // integers to 2^24 are exact
  CHECK_THAT(error_of([&] { tl.mark(4); }), Contains("Timeline::mark"));
}

TEST_CASE("cuda out of memory: an ember::Error with the allocator's figures, device still usable",
          "[cuda][cuda_runtime]") {
  EMBER_REQUIRE_CUDA();
  cuda::synchronize(0);
  const cuda::AllocatorStats before = cuda::memory_stats(0);
  // 2^45 floats = 128 TiB: more than any GPU has, even after freeing the cache.
  const std::string msg = error_of([] { empty({int64_t{1} << 45}, TensorOptions(kGpu)); });
  CHECK_THAT(msg, Contains("cuda:0"));
  CHECK_THAT(msg, Contains("out of memory"));
  CHECK_THAT(msg, Contains(std::to_string(int64_t{1} << 47) + " bytes"));
  CHECK_THAT(msg, Contains("reserved"));
  CHECK_THAT(msg, Contains("allocated"));
  const cuda::AllocatorStats after = cuda::memory_stats(0);
  CHECK(after.allocated == before.allocated);
  // The failed cudaMalloc left no sticky error: allocation and kernels still work.
  const Tensor t = ones({1 << 20}, TensorOptions(kGpu));
  CHECK(sum(t).item<float>() == float(1 << 20));
  CHECK_NOTHROW(cuda::synchronize(0));
}

}  // namespace ember
