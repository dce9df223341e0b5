#pragma once
// A device-agnostic caching allocator. Memory comes from a RawBackend (cudaMalloc for CUDA, a
// fake with a byte budget in tests) in segments; freed blocks are kept and reused, split and
// merged within their segment. Ember runs all work of a device on one stream, so a freed block
// may be handed to the next request at once: later work on that stream is ordered after every
// earlier use.
//
// Size classes: every request rounds up to a multiple of 512 B (at least 512 B), so rounding
// adds at most 511 B. Blocks up to 1 MiB are "small" and are carved out
// of 2 MiB segments; larger ones are "large". When no cached large block fits, a large block of
// under 10 MiB gets a new 20 MiB segment, which later mid-size blocks share; a bigger one gets a
// segment of its size rounded up to 2 MiB. The two pools never lend to each other, so small
// tensors cannot fragment the large segments. Reuse is best fit: the smallest cached block that
// holds the request. The rest of a small block is split off as a new free block; the rest of a
// large block only when it is over 1 MiB (a smaller piece could serve no large request, so it
// stays with the block and counts as allocated). Freed blocks merge with free neighbours.
//
// Out of memory: when the backend refuses, every fully free segment is returned to it and the
// segment is asked for once more; a shared 20 MiB segment that is still refused falls back to
// one of the block's own size rounded to 2 MiB, so a nearly full device still serves mid-size
// requests. If that fails too, ember::Error reports the request and the figures.
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>

#include "core/allocator.h"
#include "core/cuda_runtime.h"

namespace ember {

// Where memory really comes from.
struct RawBackend {
  virtual ~RawBackend() = default;
  virtual void* raw_alloc(size_t nbytes) = 0;  // nullptr when out of memory
  virtual void raw_free(void* p) = 0;
};

using AllocatorStats = cuda::AllocatorStats;

class CachingAllocator final : public Allocator {
 public:
  static constexpr size_t kRound = 512;                     // every block size is a multiple
  static constexpr size_t kSmallLimit = size_t{1} << 20;    // blocks up to this are small
  static constexpr size_t kSmallSegment = size_t{2} << 20;  // small blocks come from these
  // Large blocks under kSharedLimit come from kSharedSegment-byte segments; larger ones get a
  // segment of their size rounded up to kLargeSegmentRound.
  static constexpr size_t kSharedLimit = size_t{10} << 20;
  static constexpr size_t kSharedSegment = size_t{20} << 20;
  static constexpr size_t kLargeSegmentRound = size_t{2} << 20;

  // `backend` is not owned and must outlive the allocator. `name` ("cuda:0") appears in errors.
  CachingAllocator(RawBackend& backend, std::string name);
  // Returns the cached segments. Segments that still hold live blocks are not freed (their
  // memory is still in use), so destroy an allocator only after everything it handed out.
  ~CachingAllocator() override;
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  void* allocate(size_t nbytes) override;
  void deallocate(void* p, size_t nbytes) override;

  // Returns every fully free segment to the backend.
  void empty_cache();
  // `allocated` and `peak_allocated` count the block sizes handed out (the rounded request plus
  // any unsplit remainder of a large block); `reserved` counts the segments held.
  AllocatorStats stats() const;
  void reset_peak();  // peak_allocated := allocated

  // The rounded size of a request of `nbytes` (a multiple of kRound). The block handed out is
  // this big, or up to 1 MiB bigger for a large block whose remainder is not split off.
  static size_t round_size(size_t nbytes);

 private:
  struct Block {
    char* ptr = nullptr;
    size_t size = 0;
    bool small = false;
    bool allocated = false;
    Block* prev = nullptr;  // neighbours inside the same segment; both null: a whole segment
    Block* next = nullptr;
  };
  struct BySize {
    bool operator()(const Block* a, const Block* b) const {
      return a->size != b->size ? a->size < b->size : a->ptr < b->ptr;
    }
  };
  using FreeSet = std::set<Block*, BySize>;

  FreeSet& pool(bool small) { return small ? small_free_ : large_free_; }
  Block* take_free_block(bool small, size_t size);
  Block* new_segment(bool small, size_t size, size_t request);
  void split(Block* b, size_t size);
  size_t release_free_segments();  // returns the bytes given back
  [[noreturn]] void throw_oom(size_t request, size_t rounded) const;

  RawBackend& backend_;
  std::string name_;
  mutable std::mutex mu_;
  FreeSet small_free_, large_free_;
  std::unordered_map<void*, Block*> live_;
  AllocatorStats stats_;
};

}  // namespace ember
