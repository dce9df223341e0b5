#include "core/caching_allocator.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <vector>

#include "core/error.h"

namespace ember {
namespace {

std::string human_bytes(int64_t n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(n);
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  if (u == 0)
    std::snprintf(buf, sizeof buf, "%lld B", static_cast<long long>(n));
  else
    std::snprintf(buf, sizeof buf, "%.2f %s", v, units[u]);
  return buf;
}

size_t round_up(size_t n, size_t multiple) { return (n + multiple - 1) / multiple * multiple; }

}  // namespace

CachingAllocator::CachingAllocator(RawBackend& backend, std::string name)
    : backend_(backend), name_(std::move(name)) {}

CachingAllocator::~CachingAllocator() {
  std::lock_guard<std::mutex> g(mu_);
  release_free_segments();
  // Blocks of segments that still have live blocks: free the bookkeeping, keep the memory.
  std::vector<Block*> rest(small_free_.begin(), small_free_.end());
  rest.insert(rest.end(), large_free_.begin(), large_free_.end());
  for (auto& [p, b] : live_) rest.push_back(b);
  for (Block* b : rest) delete b;
}

size_t CachingAllocator::round_size(size_t nbytes) {
  return std::max(kRound, round_up(nbytes, kRound));
}

void* CachingAllocator::allocate(size_t nbytes) {
  std::lock_guard<std::mutex> g(mu_);
  ++stats_.num_allocs;
  // Sizes this large cannot be rounded without overflow and no device has them anyway.
  if (nbytes > std::numeric_limits<size_t>::max() / 4) throw_oom(nbytes, nbytes);
  const size_t size = round_size(nbytes);
  const bool small = size <= kSmallLimit;
  Block* b = take_free_block(small, size);
  if (!b) b = new_segment(small, size, nbytes);
  split(b, size);
  b->allocated = true;
  live_.emplace(b->ptr, b);
  stats_.allocated += static_cast<int64_t>(b->size);
  stats_.peak_allocated = std::max(stats_.peak_allocated, stats_.allocated);
  return b->ptr;
}

CachingAllocator::Block* CachingAllocator::take_free_block(bool small, size_t size) {
  FreeSet& free = pool(small);
  Block key;
  key.size = size;
  auto it = free.lower_bound(&key);  // smallest block >= size (ties: lowest address)
  if (it == free.end()) return nullptr;
  Block* b = *it;
  free.erase(it);
  return b;
}

CachingAllocator::Block* CachingAllocator::new_segment(bool small, size_t size, size_t request) {
  // Mid-size blocks share one 20 MiB segment, so a run of them costs one backend call and the
  // segment's tail serves the next ones; a bigger block's own segment adds under 2 MiB of
  // reserved memory.
  const size_t own = small ? kSmallSegment : round_up(size, kLargeSegmentRound);
  const size_t shared = !small && size < kSharedLimit ? kSharedSegment : own;
  size_t seg = shared;
  void* p = backend_.raw_alloc(seg);
  if (!p) {
    // Cached blocks may be exactly what the backend lacks: give them back and retry once.
    release_free_segments();
    p = backend_.raw_alloc(seg);
  }
  if (!p && own < shared) {
    // A nearly full device may lack 20 MiB but still hold the block itself.
    seg = own;
    p = backend_.raw_alloc(seg);
  }
  if (!p) throw_oom(request, size);
  ++stats_.num_device_mallocs;
  stats_.reserved += static_cast<int64_t>(seg);
  Block* b = new Block;
  b->ptr = static_cast<char*>(p);
  b->size = seg;
  b->small = small;
  return b;
}

void CachingAllocator::split(Block* b, size_t size) {
  // All sizes are multiples of kRound, so any small remainder is a usable small block. A large
  // remainder of 1 MiB or less could serve no large request (they are all over 1 MiB) and would
  // only sit between live blocks, so it stays with this block.
  const size_t rest_size = b->size - size;
  if (rest_size == 0 || (!b->small && rest_size <= kSmallLimit)) return;
  Block* rest = new Block;
  rest->ptr = b->ptr + size;
  rest->size = rest_size;
  rest->small = b->small;
  rest->prev = b;
  rest->next = b->next;
  if (b->next) b->next->prev = rest;
  b->next = rest;
  b->size = size;
  pool(b->small).insert(rest);
}

void CachingAllocator::deallocate(void* p, size_t /*nbytes*/) {
  if (!p) return;
  std::lock_guard<std::mutex> g(mu_);
  auto it = live_.find(p);
  EMBER_CHECK(it != live_.end(), "CachingAllocator(", name_, "): deallocate of pointer ", p,
              " that this allocator did not hand out (or already freed)");
  Block* b = it->second;
  live_.erase(it);
  stats_.allocated -= static_cast<int64_t>(b->size);
  b->allocated = false;
  FreeSet& free = pool(b->small);
  // Merge with free neighbours so the segment can become whole again.
  if (Block* prev = b->prev; prev && !prev->allocated) {
    free.erase(prev);
    prev->size += b->size;
    prev->next = b->next;
    if (b->next) b->next->prev = prev;
    delete b;
    b = prev;
  }
  if (Block* next = b->next; next && !next->allocated) {
    free.erase(next);
    b->size += next->size;
    b->next = next->next;
    if (next->next) next->next->prev = b;
    delete next;
  }
  free.insert(b);
}

size_t CachingAllocator::release_free_segments() {
  size_t released = 0;
  for (FreeSet* free : {&small_free_, &large_free_}) {
    for (auto it = free->begin(); it != free->end();) {
      Block* b = *it;
      if (b->prev || b->next) {
        ++it;
        continue;
      }
      backend_.raw_free(b->ptr);
      stats_.reserved -= static_cast<int64_t>(b->size);
      released += b->size;
      it = free->erase(it);
      delete b;
    }
  }
  return released;
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> g(mu_);
  release_free_segments();
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> g(mu_);
  return stats_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> g(mu_);
  stats_.peak_allocated = stats_.allocated;
}

void CachingAllocator::throw_oom(size_t request, size_t rounded) const {
  EMBER_FAIL(name_, ": out of memory: tried to allocate ",
             human_bytes(static_cast<int64_t>(request)), " (", request, " bytes, block of ",
             rounded, " bytes) after freeing the allocator's cache and retrying; allocated ",
             human_bytes(stats_.allocated), ", reserved ", human_bytes(stats_.reserved),
             ", peak allocated ", human_bytes(stats_.peak_allocated), ", ", stats_.num_allocs,
             " allocations, ", stats_.num_device_mallocs, " device mallocs");
}

}  // namespace ember
