// Launchers of index.cuh (gather, index_select, one_hot, scatter_add).
#include <algorithm>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/index.cuh"
#include "kernels/cuda/launch_util.h"

namespace ember::kernels::cuda {
namespace {

constexpr int kThreads = 256;

// Size and contiguous stride of dim d, reading a 0-dim tensor as one element.
int64_t size_or_1(const Tensor& t, int d) { return t.dim() == 0 ? 1 : t.size(d); }

void run_gather(const KernelCall& call, int device, cudaStream_t s) {
  const Tensor& in = call.inputs[0];
  const Tensor& index = call.inputs[1];
  const Tensor& out = call.out;
  const int nd = std::max(in.dim(), 1);
  dev::GatherShape g{};
  g.ndim = nd;
  g.dim = nd - 1 - static_cast<int>(call.attrs.dim);
  g.dim_size = size_or_1(in, static_cast<int>(call.attrs.dim));
  int64_t stride = 1;
  for (int d = nd - 1; d >= 0; --d) {  // innermost first
    g.size[nd - 1 - d] = size_or_1(index, d);
    g.in_stride[nd - 1 - d] = stride;
    stride *= size_or_1(in, d);
  }
  const int64_t n = out.numel();
  visit_word(in.element_size(), [&](auto tag) {
    using W = typename decltype(tag)::type;
    dev::gather_kernel<W><<<grid_stride_blocks(n, kThreads, device), kThreads, 0, s>>>(
        static_cast<const W*>(in.raw_data()), static_cast<const int64_t*>(index.raw_data()),
        static_cast<W*>(out.raw_data()), n, g, device_error_flag(device));
    check_launch("gather");
  });
}

void run_index_select(const KernelCall& call, int device, cudaStream_t s) {
  const Tensor& in = call.inputs[0];
  const Tensor& index = call.inputs[1];
  const Tensor& out = call.out;
  const int dim = static_cast<int>(call.attrs.dim);
  int64_t inner = 1;
  for (int d = dim + 1; d < in.dim(); ++d) inner *= in.size(d);
  const int64_t in_dim = size_or_1(in, dim);
  const int64_t n_index = index.numel();
  // A 0-dim input yields one element: it needs exactly one index.
  EMBER_CHECK(in.dim() > 0 || n_index == 1, "index_select: a 0-dim input needs one index, got ",
              n_index);
  // Rows of `inner` elements move in the widest word their size and addresses allow.
  const int64_t es = in.element_size();
  const int64_t w = widest_word(es, reinterpret_cast<uintptr_t>(in.raw_data()) |
                                        reinterpret_cast<uintptr_t>(out.raw_data()) |
                                        static_cast<uint64_t>(inner * es));
  const int64_t inner_w = inner * es / w;
  const int64_t n = out.numel() / inner * inner_w;
  visit_word(w, [&](auto tag) {
    using W = typename decltype(tag)::type;
    dev::index_select_kernel<W><<<grid_stride_blocks(n, kThreads, device), kThreads, 0, s>>>(
        static_cast<const W*>(in.raw_data()), static_cast<const int64_t*>(index.raw_data()),
        static_cast<W*>(out.raw_data()), n, n_index, in_dim, inner_w, device_error_flag(device));
    check_launch("index_select");
  });
}

void run_one_hot(const KernelCall& call, int device, cudaStream_t s) {
  const Tensor& in = call.inputs[0];
  const Tensor& out = call.out;
  EMBER_CHECK(in.dtype() == kInt64, "one_hot: CUDA kernel needs int64 input, got ",
              dtype_name(in.dtype()));
  const int64_t n = out.numel();
  dev::one_hot_kernel<<<grid_stride_blocks(n, kThreads, device), kThreads, 0, s>>>(
      static_cast<const int64_t*>(in.raw_data()), static_cast<int64_t*>(out.raw_data()), n,
      call.attrs.num_classes, device_error_flag(device));
  check_launch("one_hot");
}

// Zero-fills the output, then adds the source into it: two nodes on the stream, both fine inside
// a CUDA graph capture.
void run_scatter_add(const KernelCall& call, int device, cudaStream_t s) {
  const Tensor& src = call.inputs[0];
  const Tensor& index = call.inputs[1];
  const Tensor& out = call.out;
  EMBER_CHECK(src.is_contiguous() && out.is_contiguous(),
              "scatter_add: CUDA kernel needs a contiguous source and output");
  EMBER_CHECK(index.sizes() == src.sizes(), "scatter_add: index ", index.sizes(),
              " must have the source's shape ", src.sizes());
  EMBER_CHECK(index.dtype() == kInt64, "scatter_add: CUDA kernel needs an int64 index, got ",
              dtype_name(index.dtype()));
  // All-zero bits are 0 in every numeric dtype.
  EMBER_CUDA_CHECK(cudaMemsetAsync(out.raw_data(), 0, static_cast<size_t>(out.nbytes()), s));
  const int64_t n = src.numel();
  if (n == 0) return;
  const int nd = std::max(src.dim(), 1);
  dev::ScatterShape g{};
  g.ndim = nd;
  g.dim = nd - 1 - static_cast<int>(call.attrs.dim);
  g.dim_size = size_or_1(out, static_cast<int>(call.attrs.dim));
  int64_t stride = 1;
  for (int d = nd - 1; d >= 0; --d) {  // innermost first
    g.size[nd - 1 - d] = size_or_1(src, d);
    g.out_stride[nd - 1 - d] = stride;
    g.index_stride[nd - 1 - d] = index.dim() == 0 ? 0 : index.stride(d);
    stride *= size_or_1(out, d);
  }
  visit_numeric_dtype(src.dtype(), "scatter_add", [&](auto tag) {
    using T = typename decltype(tag)::type;
    dev::scatter_add_kernel<T><<<grid_stride_blocks(n, kThreads, device), kThreads, 0, s>>>(
        static_cast<const T*>(src.raw_data()), static_cast<const int64_t*>(index.raw_data()),
        static_cast<T*>(out.raw_data()), n, g, device_error_flag(device));
    check_launch("scatter_add");
  });
}

}  // namespace

void index(const KernelCall& call) {
  const int device = call.out.device().index;
  cudaStream_t s = stream(device);
  switch (call.op) {
    case OpId::gather:
      return run_gather(call, device, s);
    case OpId::index_select:
      return run_index_select(call, device, s);
    case OpId::one_hot:
      return run_one_hot(call, device, s);
    case OpId::scatter_add:
      return run_scatter_add(call, device, s);
    default:
      EMBER_FAIL(op_name(call.op), ": not an index op");
  }
}

}  // namespace ember::kernels::cuda
