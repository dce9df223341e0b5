// Launchers of cat.cuh: batches the contiguous inputs into as few launches as possible, moving
// them in the widest word (up to 16 bytes) that every run, offset and address allows, and
// gives each strided input a launch of its own.
#include <algorithm>
#include <cstdint>

#include "kernels/cuda/cat.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/launch_util.h"
#include "kernels/cuda/runtime.h"

namespace ember::kernels::cuda {
namespace {

constexpr int kThreads = 256;

uint64_t address_bits(const void* p) { return reinterpret_cast<uintptr_t>(p); }

void launch_contiguous(const KernelCall& call, int64_t inner, int64_t es, int device,
                       cudaStream_t s) {
  const Tensor& out = call.out;
  const int64_t dim = call.attrs.dim;
  const int64_t out_row = out.size(dim) * inner * es;  // bytes
  uint64_t bits = address_bits(out.raw_data()) | static_cast<uint64_t>(out_row);
  int64_t offset = 0;
  for (const Tensor& t : call.inputs) {
    const int64_t size = t.size(dim);
    if (t.numel() > 0 && t.is_contiguous())
      bits |= address_bits(t.raw_data()) | static_cast<uint64_t>(size * inner * es) |
              static_cast<uint64_t>(offset * inner * es);
    offset += size;
  }
  const int64_t w = widest_word(es, bits);
  visit_word(w, [&](auto tag) {
    using W = typename decltype(tag)::type;
    dev::CatBatch batch{};
    int pending = 0;
    int64_t pending_max = 0;
    auto flush = [&] {
      if (pending == 0) return;
      const dim3 grid(grid_stride_blocks(pending_max, kThreads, device),
                      static_cast<unsigned>(pending));
      // 32-bit positions when every piece (and the grid's stride past its end) fits.
      if (pending_max + int64_t{grid.x} * kThreads < (int64_t{1} << 32)) {
        dev::cat_contiguous_kernel<W, uint32_t>
            <<<grid, kThreads, 0, s>>>(batch, static_cast<W*>(out.raw_data()), out_row / w);
      } else {
        dev::cat_contiguous_kernel<W, int64_t>
            <<<grid, kThreads, 0, s>>>(batch, static_cast<W*>(out.raw_data()), out_row / w);
      }
      check_launch("cat");
      pending = 0;
      pending_max = 0;
    };
    int64_t off = 0;
    for (const Tensor& t : call.inputs) {
      const int64_t size = t.size(dim);
      if (t.numel() > 0 && t.is_contiguous()) {
        const dev::CatPiece piece{t.raw_data(), size * inner * es / w, off * inner * es / w,
                                  t.numel() * es / w};
        batch.piece[pending++] = piece;
        pending_max = std::max(pending_max, piece.numel);
        if (pending == dev::kCatBatch) flush();
      }
      off += size;
    }
    flush();
  });
}

void launch_strided(const KernelCall& call, int64_t inner, int64_t es, int device, cudaStream_t s) {
  const Tensor& out = call.out;
  const int64_t dim = call.attrs.dim;
  const int64_t out_row = out.size(dim) * inner;
  visit_word(es, [&](auto tag) {
    using W = typename decltype(tag)::type;
    int64_t offset = 0;
    for (const Tensor& t : call.inputs) {
      const int64_t size = t.size(dim);
      const dev::CatPiece piece{t.raw_data(), size * inner, offset * inner, t.numel()};
      offset += size;
      if (t.numel() == 0 || t.is_contiguous()) continue;
      dev::CatStrided in{};
      for (int d = t.dim() - 1; d >= 0; --d) {
        if (t.size(d) == 1) continue;
        in.size[in.ndim] = t.size(d);
        in.stride[in.ndim] = t.stride(d);
        ++in.ndim;
      }
      dev::cat_strided_kernel<W>
          <<<grid_stride_blocks(piece.numel, kThreads, device), kThreads, 0, s>>>(
              static_cast<const W*>(t.raw_data()), in, piece, static_cast<W*>(out.raw_data()),
              out_row);
      check_launch("cat");
    }
  });
}

}  // namespace

void cat(const KernelCall& call) {
  const Tensor& out = call.out;
  const int device = out.device().index;
  cudaStream_t s = stream(device);
  int64_t inner = 1;
  for (int d = static_cast<int>(call.attrs.dim) + 1; d < out.dim(); ++d) inner *= out.size(d);
  const int64_t es = out.element_size();
  bool any_contiguous = false, any_strided = false;
  for (const Tensor& t : call.inputs) {
    if (t.numel() == 0) continue;
    (t.is_contiguous() ? any_contiguous : any_strided) = true;
  }
  // The two kinds of input write disjoint parts of the output, in any order.
  if (any_contiguous) launch_contiguous(call, inner, es, device, s);
  if (any_strided) launch_strided(call, inner, es, device, s);
}

}  // namespace ember::kernels::cuda
