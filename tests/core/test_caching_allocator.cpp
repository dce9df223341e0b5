// The caching allocator on the CPU, over a fake backend with a byte budget: size classes,
// reuse, splitting and merging, stats, empty_cache, and out-of-memory handling.
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <thread>
#include <vector>

#include "core/caching_allocator.h"
#include "core/error.h"
#include "test_util.h"

using Catch::Matchers::Contains;
using ember::CachingAllocator;

namespace {

constexpr size_t KiB = 1024, MiB = 1024 * 1024;

// Hands out real host memory (so overlapping blocks would be caught by the data checks) until
// `budget` bytes are out, then refuses like cudaMalloc does.
struct FakeBackend final : ember::RawBackend {
  size_t budget;
  size_t used = 0;
  int allocs = 0, frees = 0, refusals = 0;
  int bad_frees = 0;  // pointers the backend never handed out (checked by the tests)
  std::vector<size_t> alloc_sizes;
  std::map<void*, size_t> live;

  explicit FakeBackend(size_t b = size_t{1} << 40) : budget(b) {}
  ~FakeBackend() override {
    CHECK(bad_frees == 0);
    for (auto& [p, n] : live) std::free(p);
  }
  void* raw_alloc(size_t n) override {
    if (used + n > budget) {
      ++refusals;
      return nullptr;
    }
    void* p = std::aligned_alloc(512, n);
    if (!p) return nullptr;
    used += n;
    ++allocs;
    alloc_sizes.push_back(n);
    live[p] = n;
    return p;
  }
  void raw_free(void* p) override {
    auto it = live.find(p);
    if (it == live.end()) {  // only whole segments the backend handed out may come back
      ++bad_frees;
      return;
    }
    used -= it->second;
    live.erase(it);
    ++frees;
    std::free(p);
  }
};

char* as_bytes(void* p) { return static_cast<char*>(p); }

}  // namespace

TEST_CASE("caching allocator: size classes", "[allocator]") {
  CHECK(CachingAllocator::round_size(0) == 512);
  CHECK(CachingAllocator::round_size(1) == 512);
  CHECK(CachingAllocator::round_size(512) == 512);
  CHECK(CachingAllocator::round_size(513) == 1024);
  CHECK(CachingAllocator::round_size(1000 * KiB) == 1000 * KiB);
  CHECK(CachingAllocator::round_size(MiB) == MiB);
  CHECK(CachingAllocator::round_size(MiB + 1) == 2 * MiB);
  CHECK(CachingAllocator::round_size(2 * MiB) == 2 * MiB);
  CHECK(CachingAllocator::round_size(2 * MiB + 1) == 4 * MiB);
  CHECK(CachingAllocator::round_size(100 * MiB + 3) == 102 * MiB);

  FakeBackend be;
  CachingAllocator a(be, "fake");
  void* s = a.allocate(100);
  // A small request takes a whole 2 MiB segment from the backend and uses 512 B of it.
  REQUIRE(be.alloc_sizes == std::vector<size_t>{2 * MiB});
  CHECK(a.stats().allocated == 512);
  CHECK(a.stats().reserved == static_cast<int64_t>(2 * MiB));
  void* l = a.allocate(3 * MiB);
  REQUIRE(be.alloc_sizes == std::vector<size_t>{2 * MiB, 4 * MiB});
  CHECK(a.stats().allocated == static_cast<int64_t>(512 + 4 * MiB));
  // A large request never borrows from the small segment and vice versa.
  CHECK((as_bytes(l) < as_bytes(s) || as_bytes(l) >= as_bytes(s) + 2 * MiB));
  a.deallocate(s, 100);
  a.deallocate(l, 3 * MiB);
  CHECK(a.stats().allocated == 0);
}

TEST_CASE("caching allocator: freed blocks are reused without new backend calls", "[allocator]") {
  FakeBackend be;
  CachingAllocator a(be, "fake");
  void* p = a.allocate(1000);
  a.deallocate(p, 1000);
  void* q = a.allocate(900);  // same size class (1024 B)
  CHECK(q == p);
  // Small blocks are carved one after another out of the same segment.
  void* r = a.allocate(512);
  CHECK(as_bytes(r) == as_bytes(q) + 1024);
  CHECK(be.allocs == 1);
  CHECK(a.stats().num_device_mallocs == 1);
  CHECK(a.stats().num_allocs == 3);
  a.deallocate(q, 900);
  a.deallocate(r, 512);

  void* big = a.allocate(10 * MiB);
  std::memset(big, 1, 10 * MiB);
  a.deallocate(big, 10 * MiB);
  void* big2 = a.allocate(9 * MiB + 17);  // rounds to the same 10 MiB
  CHECK(big2 == big);
  CHECK(be.allocs == 2);
  a.deallocate(big2, 0);
}

TEST_CASE("caching allocator: best fit, splitting and merging", "[allocator]") {
  FakeBackend be;
  CachingAllocator a(be, "fake");
  void* a4 = a.allocate(4 * MiB);
  void* a8 = a.allocate(8 * MiB);
  void* keep = a.allocate(6 * MiB);
  a.deallocate(a4, 0);
  a.deallocate(a8, 0);
  REQUIRE(be.allocs == 3);

  SECTION("the smallest block that fits is chosen") {
    void* p = a.allocate(3 * MiB);  // 4 MiB class: the 4 MiB block, not the 8 MiB one
    CHECK(p == a4);
    void* q = a.allocate(7 * MiB);
    CHECK(q == a8);
    CHECK(be.allocs == 3);
    a.deallocate(p, 0);
    a.deallocate(q, 0);
  }
  SECTION("a larger block is split and the rest serves later requests") {
    void* p = a.allocate(5 * MiB);  // 6 MiB class: only the 8 MiB block fits
    CHECK(p == a8);
    void* q = a.allocate(2 * MiB);  // best fit is the 2 MiB remainder, not the 4 MiB block
    CHECK(as_bytes(q) == as_bytes(a8) + 6 * MiB);
    CHECK(be.allocs == 3);
    CHECK(a.stats().allocated == static_cast<int64_t>(6 * MiB + 6 * MiB + 2 * MiB));
    // Freed in an order that needs both merge directions, the segment is whole again.
    a.deallocate(q, 0);
    a.deallocate(p, 0);
    void* whole = a.allocate(8 * MiB);
    CHECK(whole == a8);
    CHECK(be.allocs == 3);
    a.deallocate(whole, 0);
  }
  SECTION("three pieces freed middle first merge back into one segment") {
    void* x = a.allocate(2 * MiB);  // from the 4 MiB block: lowest address among equal fits
    void* y = a.allocate(2 * MiB);
    void* z = a.allocate(2 * MiB);
    CHECK(x == a4);
    CHECK(as_bytes(y) == as_bytes(a4) + 2 * MiB);
    CHECK(z == a8);
    a.deallocate(y, 0);
    a.deallocate(x, 0);
    a.deallocate(z, 0);
    a.empty_cache();  // both segments are whole again, so both go back
    CHECK(be.frees == 2);
    CHECK(a.stats().reserved == static_cast<int64_t>(6 * MiB));
  }
  a.deallocate(keep, 0);
}

TEST_CASE("caching allocator: stats and peak", "[allocator]") {
  FakeBackend be;
  CachingAllocator a(be, "fake");
  CHECK(a.stats().allocated == 0);
  CHECK(a.stats().reserved == 0);
  void* p = a.allocate(2 * MiB);
  void* q = a.allocate(4 * MiB);
  void* s = a.allocate(700);  // 1024 B block in a fresh 2 MiB segment
  auto st = a.stats();
  CHECK(st.allocated == static_cast<int64_t>(6 * MiB + 1024));
  CHECK(st.peak_allocated == st.allocated);
  CHECK(st.reserved == static_cast<int64_t>(8 * MiB));
  CHECK(st.num_allocs == 3);
  CHECK(st.num_device_mallocs == 3);
  a.deallocate(q, 0);
  st = a.stats();
  CHECK(st.allocated == static_cast<int64_t>(2 * MiB + 1024));
  CHECK(st.peak_allocated == static_cast<int64_t>(6 * MiB + 1024));
  CHECK(st.reserved == static_cast<int64_t>(8 * MiB));  // the freed block stays cached
  a.reset_peak();
  CHECK(a.stats().peak_allocated == static_cast<int64_t>(2 * MiB + 1024));
  void* r = a.allocate(MiB + 5);  // 2 MiB class, served from the cached 4 MiB block
  CHECK(a.stats().num_device_mallocs == 3);
  CHECK(a.stats().peak_allocated == static_cast<int64_t>(4 * MiB + 1024));
  for (void* x : {p, r, s}) a.deallocate(x, 0);
  CHECK(a.stats().allocated == 0);
  CHECK(a.stats().num_allocs == 4);
}

TEST_CASE("caching allocator: empty_cache returns only fully free segments", "[allocator]") {
  FakeBackend be;
  CachingAllocator a(be, "fake");
  void* s1 = a.allocate(512);
  void* s2 = a.allocate(512);  // same small segment as s1
  void* l = a.allocate(4 * MiB);
  a.deallocate(s2, 0);
  a.deallocate(l, 0);
  a.empty_cache();
  CHECK(be.frees == 1);  // the large segment; the small one still holds s1
  CHECK(be.live.size() == 1);
  CHECK(a.stats().reserved == static_cast<int64_t>(2 * MiB));
  CHECK(a.stats().allocated == 512);
  a.deallocate(s1, 0);
  a.empty_cache();
  CHECK(be.live.empty());
  CHECK(a.stats().reserved == 0);
  // Still usable afterwards.
  void* p = a.allocate(64);
  CHECK(be.allocs == 3);
  a.deallocate(p, 0);
}

TEST_CASE("caching allocator: out of memory frees the cache, retries, then errors", "[allocator]") {
  FakeBackend be(10 * MiB);
  CachingAllocator a(be, "fake:0");
  void* big = a.allocate(6 * MiB);
  void* small = a.allocate(1000);  // a 2 MiB small segment
  a.deallocate(small, 0);          // cached: 8 MiB of 10 reserved now

  // 4 MiB fits no cached block and the backend has only 2 MiB left: the cached small segment
  // is returned, then the retry succeeds.
  void* p = a.allocate(3 * MiB + 5);
  CHECK(be.refusals == 1);
  CHECK(be.frees == 1);
  CHECK(a.stats().reserved == static_cast<int64_t>(10 * MiB));
  CHECK(a.stats().allocated == static_cast<int64_t>(10 * MiB));

  // Nothing cached left to give back: the retry fails too and the error says why.
  const auto before = a.stats();
  REQUIRE_THROWS_AS(a.allocate(MiB + 1), ember::Error);
  CHECK(be.refusals == 3);  // first try and the retry
  try {
    a.allocate(MiB + 1);
  } catch (const ember::Error& e) {
    const std::string msg = e.what();
    CHECK_THAT(msg, Contains("fake:0"));
    CHECK_THAT(msg, Contains("out of memory"));
    CHECK_THAT(msg, Contains("1048577 bytes"));
    CHECK_THAT(msg, Contains("allocated 10.00 MiB"));
    CHECK_THAT(msg, Contains("reserved 10.00 MiB"));
    CHECK_THAT(msg, Contains("peak allocated 10.00 MiB"));
  }
  const auto after = a.stats();
  CHECK(after.allocated == before.allocated);
  CHECK(after.reserved == before.reserved);
  CHECK(after.num_device_mallocs == before.num_device_mallocs);

  // After freeing, the same request works again.
  a.deallocate(p, 0);
  void* q = a.allocate(MiB + 1);  // reuses the freed 4 MiB block
  CHECK(q == p);
  a.deallocate(q, 0);
  a.deallocate(big, 0);

  // A request no size class can hold is an error, not an overflow.
  CHECK_THROWS_AS(a.allocate(SIZE_MAX), ember::Error);
  CHECK_THROWS_AS(a.allocate(SIZE_MAX / 2), ember::Error);
}

TEST_CASE("caching allocator: freeing a pointer it did not hand out is an error", "[allocator]") {
  FakeBackend be;
  CachingAllocator a(be, "fake");
  int x = 0;
  CHECK_THROWS_WITH(a.deallocate(&x, 4), Contains("did not hand out"));
  void* p = a.allocate(16);
  a.deallocate(p, 16);
  CHECK_THROWS_AS(a.deallocate(p, 16), ember::Error);  // double free
  a.deallocate(nullptr, 0);                            // a no-op, like free(nullptr)
}

TEST_CASE("caching allocator: concurrent use from several threads", "[allocator]") {
  FakeBackend be;
  CachingAllocator a(be, "fake");
  std::atomic<int> bad{0};
  const size_t sizes[] = {8, 512, 3000, 70 * KiB, MiB, 3 * MiB};
  auto work = [&](int tid) {
    std::vector<std::pair<void*, size_t>> held;
    for (int i = 0; i < 400; ++i) {
      const size_t n = sizes[(i * 7 + tid) % 6];
      auto* p = static_cast<unsigned char*>(a.allocate(n));
      std::memset(p, tid + 1, n);
      held.emplace_back(p, n);
      if (held.size() > 4) {
        auto [q, m] = held.front();
        held.erase(held.begin());
        // Another thread writing into this block would show up here.
        for (size_t k = 0; k < m; k += 97)
          if (static_cast<unsigned char*>(q)[k] != tid + 1) ++bad;
        a.deallocate(q, m);
      }
    }
    for (auto [q, m] : held) a.deallocate(q, m);
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) threads.emplace_back(work, t);
  for (auto& t : threads) t.join();
  CHECK(bad == 0);
  CHECK(a.stats().allocated == 0);
  CHECK(a.stats().num_allocs == 1600);
  a.empty_cache();
  CHECK(be.live.empty());
  CHECK(a.stats().reserved == 0);
}
