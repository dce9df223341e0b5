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
  // Every request rounds up to 512 B, small or large.
  CHECK(CachingAllocator::round_size(0) == 512);
  CHECK(CachingAllocator::round_size(1) == 512);
  CHECK(CachingAllocator::round_size(512) == 512);
  CHECK(CachingAllocator::round_size(513) == 1024);
  CHECK(CachingAllocator::round_size(1000 * KiB) == 1000 * KiB);
  CHECK(CachingAllocator::round_size(MiB) == MiB);
  CHECK(CachingAllocator::round_size(MiB + 1) == MiB + 512);
  CHECK(CachingAllocator::round_size(2 * MiB) == 2 * MiB);
  CHECK(CachingAllocator::round_size(2 * MiB + 1) == 2 * MiB + 512);
  CHECK(CachingAllocator::round_size(100 * MiB + 3) == 100 * MiB + 512);

  FakeBackend be;
  CachingAllocator a(be, "fake");
  void* s = a.allocate(100);
  // A small request takes a whole 2 MiB segment from the backend and uses 512 B of it.
  REQUIRE(be.alloc_sizes == std::vector<size_t>{2 * MiB});
  CHECK(a.stats().allocated == 512);
  CHECK(a.stats().reserved == static_cast<int64_t>(2 * MiB));
  void* l = a.allocate(3 * MiB);
  // A mid-size large request gets a 20 MiB segment and uses 3 MiB of it.
  REQUIRE(be.alloc_sizes == std::vector<size_t>{2 * MiB, 20 * MiB});
  CHECK(a.stats().allocated == static_cast<int64_t>(512 + 3 * MiB));
  CHECK(a.stats().reserved == static_cast<int64_t>(22 * MiB));
  // A large request never borrows from the small segment and vice versa.
  CHECK((as_bytes(l) < as_bytes(s) || as_bytes(l) >= as_bytes(s) + 2 * MiB));
  void* s2 = a.allocate(MiB);  // the largest small block: from the small segment, not the 20 MiB
  CHECK(as_bytes(s2) == as_bytes(s) + 512);
  CHECK(be.allocs == 2);
  a.deallocate(s, 100);
  a.deallocate(l, 3 * MiB);
  a.deallocate(s2, MiB);
  CHECK(a.stats().allocated == 0);
}

TEST_CASE("caching allocator: just over 1 MiB counts 1 MiB + 512 B, not 2 MiB", "[allocator]") {
  FakeBackend be;
  CachingAllocator a(be, "fake");
  void* p = a.allocate(MiB + 1);
  CHECK(a.stats().allocated == static_cast<int64_t>(MiB + 512));
  CHECK(a.stats().peak_allocated == static_cast<int64_t>(MiB + 512));
  CHECK(a.stats().reserved == static_cast<int64_t>(20 * MiB));
  CHECK(be.alloc_sizes == std::vector<size_t>{20 * MiB});
  // 6 MiB + 10 KiB + 1 B: the next 512 B, from the same segment.
  void* q = a.allocate(6 * MiB + 10 * KiB + 1);
  CHECK(a.stats().allocated == static_cast<int64_t>(MiB + 512 + 6 * MiB + 10 * KiB + 512));
  CHECK(as_bytes(q) == as_bytes(p) + MiB + 512);
  CHECK(be.allocs == 1);
  a.deallocate(p, 0);
  a.deallocate(q, 0);
  CHECK(a.stats().allocated == 0);
}

TEST_CASE("caching allocator: mid-size blocks share a 20 MiB segment", "[allocator]") {
  FakeBackend be;
  CachingAllocator a(be, "fake");
  const size_t na = 3 * MiB + 100, nb = 3 * MiB - 7;
  auto* pa = static_cast<unsigned char*>(a.allocate(na));
  auto* pb = static_cast<unsigned char*>(a.allocate(nb));
  REQUIRE(be.alloc_sizes == std::vector<size_t>{20 * MiB});
  CHECK(a.stats().allocated == static_cast<int64_t>(3 * MiB + 512 + 3 * MiB));
  CHECK(a.stats().reserved == static_cast<int64_t>(20 * MiB));
  // Both blocks lie inside the one segment and do not overlap.
  const auto seg = static_cast<unsigned char*>(be.live.begin()->first);
  CHECK((pa >= seg && pa + na <= seg + 20 * MiB));
  CHECK((pb >= seg && pb + nb <= seg + 20 * MiB));
  CHECK((pa + na <= pb || pb + nb <= pa));
  std::memset(pa, 0xA1, na);
  std::memset(pb, 0xB2, nb);
  size_t bad = 0;
  for (size_t i = 0; i < na; ++i) bad += pa[i] != 0xA1;
  for (size_t i = 0; i < nb; ++i) bad += pb[i] != 0xB2;
  CHECK(bad == 0);

  // Freed, the two blocks merge with the rest into the whole segment again: a 20 MiB request
  // is served from it without a backend call.
  a.deallocate(pb, nb);
  a.deallocate(pa, na);
  void* whole = a.allocate(20 * MiB);
  CHECK(whole == seg);
  CHECK(be.allocs == 1);
  CHECK(a.stats().allocated == static_cast<int64_t>(20 * MiB));
  a.deallocate(whole, 0);
  a.empty_cache();
  CHECK(be.frees == 1);
  CHECK(be.live.empty());
  CHECK(a.stats().reserved == 0);
}

TEST_CASE("caching allocator: blocks of 10 MiB and more get a segment of their own",
          "[allocator]") {
  FakeBackend be;
  CachingAllocator a(be, "fake");
  void* p12 = a.allocate(12 * MiB);
  CHECK(be.alloc_sizes == std::vector<size_t>{12 * MiB});
  CHECK(a.stats().allocated == static_cast<int64_t>(12 * MiB));
  // 12.5 MiB: a 14 MiB segment; the 1.5 MiB rest is split off, cached, not allocated.
  void* p125 = a.allocate(12 * MiB + 512 * KiB);
  CHECK(be.alloc_sizes == std::vector<size_t>{12 * MiB, 14 * MiB});
  CHECK(a.stats().allocated == static_cast<int64_t>(24 * MiB + 512 * KiB));
  CHECK(a.stats().reserved == static_cast<int64_t>(26 * MiB));
  // The boundary: exactly 10 MiB is not shared, 512 B less is.
  void* p10 = a.allocate(10 * MiB);
  void* p10m = a.allocate(10 * MiB - 512);
  CHECK(be.alloc_sizes == std::vector<size_t>{12 * MiB, 14 * MiB, 10 * MiB, 20 * MiB});
  // The 1.5 MiB rest of the 14 MiB segment serves a request that fits it.
  void* r = a.allocate(MiB + 100);
  CHECK(as_bytes(r) == as_bytes(p125) + 12 * MiB + 512 * KiB);
  CHECK(be.allocs == 4);
  for (void* x : {p12, p125, p10, p10m, r}) a.deallocate(x, 0);
  CHECK(a.stats().allocated == 0);
  a.empty_cache();
  CHECK(be.live.empty());
}

TEST_CASE("caching allocator: a large remainder of 1 MiB or less is not split off", "[allocator]") {
  FakeBackend be;
  CachingAllocator a(be, "fake");
  // 13 MiB in a 14 MiB segment leaves exactly 1 MiB: kept with the block, counted allocated.
  void* x = a.allocate(13 * MiB);
  REQUIRE(be.alloc_sizes == std::vector<size_t>{14 * MiB});
  CHECK(a.stats().allocated == static_cast<int64_t>(14 * MiB));
  a.deallocate(x, 0);
  CHECK(a.stats().allocated == 0);
  // 512 B less leaves 1 MiB + 512 B: split off, and it serves a 1 MiB + 1 B request exactly.
  void* y = a.allocate(13 * MiB - 512);
  CHECK(y == x);
  CHECK(a.stats().allocated == static_cast<int64_t>(13 * MiB - 512));
  void* z = a.allocate(MiB + 1);
  CHECK(as_bytes(z) == as_bytes(y) + 13 * MiB - 512);
  CHECK(a.stats().allocated == static_cast<int64_t>(14 * MiB));
  CHECK(be.allocs == 1);
  a.deallocate(y, 0);
  a.deallocate(z, 0);
  a.empty_cache();  // the whole 14 MiB segment would otherwise be the best fit below
  CHECK(be.frees == 1);

  // Inside a shared segment too: 9.5 MiB leaves 10.5 MiB (split); 9.6 MiB from that leaves
  // 0.9 MiB, which stays with it, so the segment is fully allocated.
  void* u = a.allocate(9 * MiB + 512 * KiB);
  void* v = a.allocate(9 * MiB + 600 * KiB);
  CHECK(be.alloc_sizes == std::vector<size_t>{14 * MiB, 20 * MiB});
  CHECK(as_bytes(v) == as_bytes(u) + 9 * MiB + 512 * KiB);
  CHECK(a.stats().allocated == static_cast<int64_t>(20 * MiB));
  CHECK(a.stats().peak_allocated == static_cast<int64_t>(20 * MiB));
  a.deallocate(v, 0);
  CHECK(a.stats().allocated == static_cast<int64_t>(9 * MiB + 512 * KiB));
  a.deallocate(u, 0);
  a.empty_cache();
  CHECK(be.live.empty());
  CHECK(a.stats().reserved == 0);
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

  void* big = a.allocate(10 * MiB);  // a 10 MiB segment of its own
  std::memset(big, 1, 10 * MiB);
  a.deallocate(big, 10 * MiB);
  void* big2 = a.allocate(9 * MiB + 17);  // fits the cached block; the rest is under 1 MiB
  CHECK(big2 == big);
  CHECK(be.allocs == 2);
  CHECK(a.stats().allocated == static_cast<int64_t>(10 * MiB));
  a.deallocate(big2, 0);
}

TEST_CASE("caching allocator: best fit, splitting and merging", "[allocator]") {
  FakeBackend be;
  CachingAllocator a(be, "fake");
  // 10 MiB and more: each gets a segment of exactly its size.
  void* a12 = a.allocate(12 * MiB);
  void* a16 = a.allocate(16 * MiB);
  void* keep = a.allocate(14 * MiB);
  a.deallocate(a12, 0);
  a.deallocate(a16, 0);
  REQUIRE(be.alloc_sizes == std::vector<size_t>{12 * MiB, 16 * MiB, 14 * MiB});

  SECTION("the smallest block that fits is chosen") {
    void* p = a.allocate(11 * MiB);  // the 12 MiB block, not the 16 MiB one
    CHECK(p == a12);
    void* q = a.allocate(15 * MiB);
    CHECK(q == a16);
    CHECK(be.allocs == 3);
    // Both remainders are 1 MiB: not split, so both count whole.
    CHECK(a.stats().allocated == static_cast<int64_t>(14 * MiB + 12 * MiB + 16 * MiB));
    a.deallocate(p, 0);
    a.deallocate(q, 0);
  }
  SECTION("a larger block is split and the rest serves later requests") {
    void* p = a.allocate(13 * MiB);  // only the 16 MiB block fits
    CHECK(p == a16);
    void* q = a.allocate(2 * MiB);  // best fit is the 3 MiB remainder, not the 12 MiB block
    CHECK(as_bytes(q) == as_bytes(a16) + 13 * MiB);
    CHECK(be.allocs == 3);
    // q's 1 MiB rest stays with it.
    CHECK(a.stats().allocated == static_cast<int64_t>(14 * MiB + 13 * MiB + 3 * MiB));
    // Freed in an order that needs both merge directions, the segment is whole again.
    a.deallocate(q, 0);
    a.deallocate(p, 0);
    void* whole = a.allocate(16 * MiB);
    CHECK(whole == a16);
    CHECK(be.allocs == 3);
    a.deallocate(whole, 0);
  }
  SECTION("three pieces freed middle first merge back into one segment") {
    void* x = a.allocate(4 * MiB);  // from the 12 MiB block
    void* y = a.allocate(4 * MiB);  // from its 8 MiB rest
    void* z = a.allocate(5 * MiB);  // the 4 MiB rest is too small: from the 16 MiB block
    CHECK(x == a12);
    CHECK(as_bytes(y) == as_bytes(a12) + 4 * MiB);
    CHECK(z == a16);
    a.deallocate(y, 0);
    a.deallocate(x, 0);
    a.deallocate(z, 0);
    a.empty_cache();  // both segments are whole again, so both go back
    CHECK(be.frees == 2);
    CHECK(a.stats().reserved == static_cast<int64_t>(14 * MiB));
  }
  a.deallocate(keep, 0);
}

TEST_CASE("caching allocator: stats and peak", "[allocator]") {
  FakeBackend be;
  CachingAllocator a(be, "fake");
  CHECK(a.stats().allocated == 0);
  CHECK(a.stats().reserved == 0);
  void* p = a.allocate(2 * MiB);
  void* q = a.allocate(4 * MiB);  // shares p's 20 MiB segment
  void* s = a.allocate(700);      // 1024 B block in a fresh 2 MiB segment
  auto st = a.stats();
  CHECK(st.allocated == static_cast<int64_t>(6 * MiB + 1024));
  CHECK(st.peak_allocated == st.allocated);
  CHECK(st.reserved == static_cast<int64_t>(22 * MiB));
  CHECK(st.num_allocs == 3);
  CHECK(st.num_device_mallocs == 2);
  a.deallocate(q, 0);
  st = a.stats();
  CHECK(st.allocated == static_cast<int64_t>(2 * MiB + 1024));
  CHECK(st.peak_allocated == static_cast<int64_t>(6 * MiB + 1024));
  CHECK(st.reserved == static_cast<int64_t>(22 * MiB));  // the freed block stays cached
  a.reset_peak();
  CHECK(a.stats().peak_allocated == static_cast<int64_t>(2 * MiB + 1024));
  void* r = a.allocate(MiB + 5);  // 1 MiB + 512 B, from the cached rest of the 20 MiB segment
  CHECK(as_bytes(r) == as_bytes(p) + 2 * MiB);
  CHECK(a.stats().num_device_mallocs == 2);
  CHECK(a.stats().peak_allocated == static_cast<int64_t>(3 * MiB + 512 + 1024));
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
  FakeBackend be(33 * MiB);
  CachingAllocator a(be, "fake:0");
  void* big = a.allocate(12 * MiB);  // a 12 MiB segment
  void* small = a.allocate(1000);    // a 2 MiB small segment
  a.deallocate(small, 0);            // cached: 14 MiB of 33 reserved now

  // 3 MiB fits no cached block and the backend has 19 MiB left, one short of the shared 20 MiB
  // segment: the cached small segment is returned, then the retry succeeds.
  void* p = a.allocate(3 * MiB + 5);
  CHECK(be.refusals == 1);
  CHECK(be.frees == 1);
  CHECK(be.alloc_sizes == std::vector<size_t>{12 * MiB, 2 * MiB, 20 * MiB});
  CHECK(a.stats().reserved == static_cast<int64_t>(32 * MiB));
  CHECK(a.stats().allocated == static_cast<int64_t>(15 * MiB + 512));

  // 18 MiB fits neither the cached 17 MiB rest nor the 1 MiB the backend has, and nothing cached
  // is a whole segment: the retry fails too (no smaller fallback for an 18 MiB segment) and the
  // error says why.
  const auto before = a.stats();
  REQUIRE_THROWS_AS(a.allocate(18 * MiB), ember::Error);
  CHECK(be.refusals == 3);  // first try and the retry
  try {
    a.allocate(18 * MiB);
  } catch (const ember::Error& e) {
    const std::string msg = e.what();
    CHECK_THAT(msg, Contains("fake:0"));
    CHECK_THAT(msg, Contains("out of memory"));
    CHECK_THAT(msg, Contains("18874368 bytes"));
    CHECK_THAT(msg, Contains("allocated 15.00 MiB"));
    CHECK_THAT(msg, Contains("reserved 32.00 MiB"));
    CHECK_THAT(msg, Contains("peak allocated 15.00 MiB"));
  }
  const auto after = a.stats();
  CHECK(after.allocated == before.allocated);
  CHECK(after.reserved == before.reserved);
  CHECK(after.num_device_mallocs == before.num_device_mallocs);

  // After freeing, the same request works again: the 20 MiB segment is whole and serves it.
  a.deallocate(p, 0);
  void* q = a.allocate(18 * MiB);
  CHECK(q == p);
  CHECK(be.allocs == 3);
  a.deallocate(q, 0);
  a.deallocate(big, 0);

  // A request no size class can hold is an error, not an overflow.
  CHECK_THROWS_WITH(a.allocate(SIZE_MAX), Contains("out of memory"));
  CHECK_THROWS_WITH(a.allocate(SIZE_MAX / 2), Contains("out of memory"));
}

TEST_CASE("caching allocator: a nearly full device still serves mid-size requests", "[allocator]") {
  FakeBackend be(3 * MiB);
  CachingAllocator a(be, "fake:1");
  // 20 MiB is refused twice (first try, retry after releasing the empty cache); the fallback
  // asks for the block's own size rounded to 2 MiB.
  void* p = a.allocate(MiB + 512 * KiB);
  REQUIRE(p != nullptr);
  CHECK(be.refusals == 2);
  CHECK(be.alloc_sizes == std::vector<size_t>{2 * MiB});
  CHECK(a.stats().reserved == static_cast<int64_t>(2 * MiB));
  // The 512 KiB rest is too small to split off a large block.
  CHECK(a.stats().allocated == static_cast<int64_t>(2 * MiB));
  std::memset(p, 7, MiB + 512 * KiB);

  // A second one fits nowhere (1 MiB left): 20 MiB twice, then 2 MiB, all refused.
  CHECK_THROWS_WITH(a.allocate(MiB + 512 * KiB), Contains("fake:1: out of memory") &&
                                                     Contains("1572864 bytes") &&
                                                     Contains("reserved 2.00 MiB"));
  CHECK(be.refusals == 5);
  CHECK(be.allocs == 1);
  // Small requests still get their 2 MiB segment only when it fits: not here.
  CHECK_THROWS_WITH(a.allocate(100), Contains("out of memory") && Contains("100 bytes"));

  a.deallocate(p, 0);
  void* q = a.allocate(MiB + 100);  // the cached block, no backend call
  CHECK(q == p);
  CHECK(be.allocs == 1);
  a.deallocate(q, 0);
  // With the cache given back, 3 MiB can be had again as a 2 MiB small segment.
  void* s = a.allocate(100);
  CHECK(be.frees == 1);
  CHECK(be.allocs == 2);
  a.deallocate(s, 0);
}

TEST_CASE("caching allocator: freeing a pointer it did not hand out is an error", "[allocator]") {
  FakeBackend be;
  CachingAllocator a(be, "fake");
  int x = 0;
  CHECK_THROWS_WITH(a.deallocate(&x, 4), Contains("did not hand out"));
  void* p = a.allocate(16);
  a.deallocate(p, 16);
  CHECK_THROWS_WITH(a.deallocate(p, 16), Contains("already freed"));  // double free
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
