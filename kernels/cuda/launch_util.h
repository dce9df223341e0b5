#pragma once
// Host helpers for the CUDA launchers of reduce, matmul, softmax, cross_entropy, index and cat:
// DType -> device storage type dispatch restricted to the dtypes an op accepts (so each kernel
// is instantiated only for those), launch-shape arithmetic and scratch memory. Streams, SM
// counts, launch checks and the error flag come from kernels/cuda/runtime.h.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "core/allocator.h"
#include "core/dtype.h"
#include "core/error.h"
#include "kernels/cuda/runtime.h"

namespace ember::kernels::cuda {

template <class T>
struct DevTag {
  using type = T;
};

// Calls f(DevTag<T>{}) with T the device storage type of `t`, for floating dtypes only.
template <class F>
void visit_float_dtype(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::Float32:
      f(DevTag<float>{});
      return;
    case DType::Float64:
      f(DevTag<double>{});
      return;
    case DType::Float16:
      f(DevTag<__half>{});
      return;
    case DType::BFloat16:
      f(DevTag<__nv_bfloat16>{});
      return;
    default:
      EMBER_FAIL(op, ": CUDA kernel does not support dtype ", dtype_name(t));
  }
}
// Floating and integer dtypes (not bool).
template <class F>
void visit_numeric_dtype(DType t, const char* op, F&& f) {
  switch (t) {
    case DType::Int32:
      f(DevTag<int32_t>{});
      return;
    case DType::Int64:
      f(DevTag<int64_t>{});
      return;
    default:
      visit_float_dtype(t, op, f);
  }
}
// Every dtype.
template <class F>
void visit_any_dtype(DType t, const char* op, F&& f) {
  if (t == DType::Bool) {
    f(DevTag<bool>{});
    return;
  }
  visit_numeric_dtype(t, op, f);
}
// Data movement only depends on the width: calls f(DevTag<W>{}) with W an unsigned word of
// `bytes` bytes (1, 2, 4, 8 or 16).
template <class F>
void visit_word(int64_t bytes, F&& f) {
  switch (bytes) {
    case 1:
      f(DevTag<uint8_t>{});
      return;
    case 2:
      f(DevTag<uint16_t>{});
      return;
    case 4:
      f(DevTag<uint32_t>{});
      return;
    case 8:
      f(DevTag<uint64_t>{});
      return;
    default:
      f(DevTag<uint4>{});
      return;
  }
}
// The widest word (at most 16 bytes, at least `min_bytes`) that divides every byte count and
// address OR-ed into `bits`: copies move in words of that size.
constexpr int64_t widest_word(int64_t min_bytes, uint64_t bits) {
  int64_t w = 16;
  while (w > min_bytes && bits % static_cast<uint64_t>(w) != 0) w >>= 1;
  return w;
}

constexpr int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }
// Smallest power of two >= v (v >= 1).
constexpr int64_t pow2_ceil(int64_t v) {
  int64_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

// Blocks for a grid-stride loop over n elements: enough to fill the GPU a few times over.
inline unsigned grid_stride_blocks(int64_t n, int threads, int device) {
  const int64_t want = ceil_div(n, threads), cap = 8 * int64_t{sm_count(device)};
  return static_cast<unsigned>(want < 1 ? 1 : want < cap ? want : cap);
}

// Temporary device memory from the caching allocator, returned when the scope ends. Safe to
// hand back while kernels on the device's stream still use it: the allocator reuses blocks in
// stream order (every kernel of a device runs on its one Ember stream).
class Scratch {
 public:
  Scratch(size_t nbytes, int device) : nbytes_(nbytes), device_(device) {
    if (nbytes_) data_ = cuda_allocator(device_)->allocate(nbytes_);
  }
  ~Scratch() {
    if (data_) cuda_allocator(device_)->deallocate(data_, nbytes_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  void* get() const { return data_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  int device_ = 0;
};

}  // namespace ember::kernels::cuda
