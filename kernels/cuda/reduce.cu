// Launchers of the reductions in reduce.cuh: plan the (kept, reduced) dim groups of a strided
// input, pick the rows or the columns kernel by which dim is innermost in memory, split long
// reductions over several blocks when there are too few outputs to fill the GPU.
#include <algorithm>
#include <type_traits>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/launch_util.h"
#include "kernels/cuda/reduce.cuh"
#include "kernels/cuda/runtime.h"
#include "kernels/reduce_grid.h"

namespace ember::kernels::cuda {
namespace {

using dev::DimGroup;
using dev::ReduceShape;

struct Dim {
  int64_t size, stride;
};

// Fills `g` (innermost first) from dims listed outermost first, dropping size-1 dims and merging
// neighbours that form one strided run.
void build_group(const Dim* dims, int n, DimGroup& g) {
  Dim merged[kMaxDims];
  int m = 0;
  for (int i = 0; i < n; ++i) {
    if (dims[i].size == 1) continue;
    if (m > 0 && merged[m - 1].stride == dims[i].stride * dims[i].size) {
      merged[m - 1].size *= dims[i].size;
      merged[m - 1].stride = dims[i].stride;
    } else {
      merged[m++] = dims[i];
    }
  }
  g = {};
  g.n = m;
  for (int i = 0; i < m; ++i) {
    g.size[i] = merged[m - 1 - i].size;
    g.stride[i] = merged[m - 1 - i].stride;
  }
}

struct Plan {
  ReduceShape sh{};
  bool columns = false;
  dim3 block, grid;
  int64_t splits = 1;
};

// `ordered`: walk the reduced dims in row-major order (argmax's index depends on it); otherwise
// they are sorted by stride so consecutive threads read neighbouring memory.
Plan make_plan(const Tensor& x, const Dims& dims, bool ordered, int device) {
  Plan p;
  Dim keep[kMaxDims], red[kMaxDims];
  int nk = 0, nr = 0;
  int64_t num_out = 1, count = 1;
  int64_t min_stride = INT64_MAX;
  bool min_is_kept = false;
  for (int d = 0; d < x.dim(); ++d) {
    const bool reduced = std::find(dims.begin(), dims.end(), d) != dims.end();
    const Dim dim{x.size(d), x.stride(d)};
    if (reduced) {
      red[nr++] = dim;
      count *= dim.size;
    } else {
      keep[nk++] = dim;
      num_out *= dim.size;
    }
    if (dim.size > 1 && dim.stride < min_stride) {
      min_stride = dim.stride;
      min_is_kept = !reduced;
    }
  }
  if (!ordered)
    std::stable_sort(red, red + nr, [](const Dim& a, const Dim& b) { return a.stride > b.stride; });
  build_group(keep, nk, p.sh.keep);
  build_group(red, nr, p.sh.red);
  p.sh.num_out = num_out;
  p.sh.count = count;
  p.columns = min_is_kept && num_out > 1;

  // The cut is the fused reductions' too (kernels/reduce_grid.h), so a sum the JIT fuses into
  // its producer equals this one bit for bit.
  const ReduceTile t = plan_reduce_tile(p.columns, num_out, count, sm_count(device));
  p.block = dim3(static_cast<unsigned>(t.bx), static_cast<unsigned>(t.by));
  p.sh.chunk = t.chunk;
  p.splits = t.splits;
  p.grid = dim3(static_cast<unsigned>(t.blocks_x), static_cast<unsigned>(t.splits));
  return p;
}

template <class Op, class Acc, class T, class Out>
void run(const Plan& p, const Tensor& x, const Tensor& out, const Op& op, const char* name) {
  const int device = x.device().index;
  cudaStream_t s = stream(device);
  const T* in = static_cast<const T*>(x.raw_data());
  Out* o = static_cast<Out*>(out.raw_data());
  using State = typename Op::State;
  const size_t partial_bytes = p.splits > 1 ? sizeof(State) * p.splits * p.sh.num_out : 0;
  Scratch scratch(partial_bytes, device);
  State* partial = static_cast<State*>(scratch.get());
  if (p.columns) {
    dev::reduce_columns_kernel<Op, Acc, T, Out>
        <<<p.grid, p.block, 0, s>>>(in, p.sh, op, o, partial);
  } else {
    dev::reduce_rows_kernel<Op, Acc, T, Out><<<p.grid, p.block, 0, s>>>(in, p.sh, op, o, partial);
  }
  check_launch(name);
  if (partial) {
    const dim3 grid(p.grid.x);
    if (p.columns)
      dev::reduce_partials_kernel<true, Op, Out>
          <<<grid, p.block, 0, s>>>(partial, p.splits, p.sh.num_out, p.sh.count, op, o);
    else
      dev::reduce_partials_kernel<false, Op, Out>
          <<<grid, p.block, 0, s>>>(partial, p.splits, p.sh.num_out, p.sh.count, op, o);
    check_launch(name);
  }
}

// float for float and the 16-bit floats, double for double, the type itself for integers.
template <class T>
using acc_t =
    std::conditional_t<std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>, float, T>;
template <class T>
constexpr bool kIsIntegral = std::is_integral_v<T>;  // includes bool

}  // namespace

void reduce(const KernelCall& call) {
  const Tensor& x = call.inputs[0];
  const Tensor& out = call.out;
  const char* name = op_name(call.op).data();
  const Plan p = make_plan(x, call.attrs.dims, call.op == OpId::argmax, x.device().index);
  if (p.sh.num_out == 0) return;
  switch (call.op) {
    case OpId::sum:
    case OpId::mean:
      visit_any_dtype(x.dtype(), name, [&](auto tag) {
        using T = typename decltype(tag)::type;
        if constexpr (kIsIntegral<T>) {  // ints and bools sum into int64
          EMBER_CHECK(call.op == OpId::sum, name, ": CUDA kernel needs a floating input");
          run<dev::SumOp<int64_t>, int64_t, T, int64_t>(p, x, out, {}, name);
        } else {
          dev::SumOp<acc_t<T>> op;
          op.mean = call.op == OpId::mean;
          run<decltype(op), acc_t<T>, T, T>(p, x, out, op, name);
        }
      });
      return;
    case OpId::amax:
    case OpId::amin:
      visit_numeric_dtype(x.dtype(), name, [&](auto tag) {
        using T = typename decltype(tag)::type;
        dev::MinMaxOp<acc_t<T>> op;
        op.is_min = call.op == OpId::amin;
        run<decltype(op), acc_t<T>, T, T>(p, x, out, op, name);
      });
      return;
    case OpId::argmax:
      visit_numeric_dtype(x.dtype(), name, [&](auto tag) {
        using T = typename decltype(tag)::type;
        run<dev::ArgMaxOp<acc_t<T>>, acc_t<T>, T, int64_t>(p, x, out, {}, name);
      });
      return;
    case OpId::logsumexp:
      visit_float_dtype(x.dtype(), name, [&](auto tag) {
        using T = typename decltype(tag)::type;
        run<dev::LseOp<acc_t<T>>, acc_t<T>, T, T>(p, x, out, {}, name);
      });
      return;
    default:
      EMBER_FAIL(name, ": not a reduction");
  }
}

}  // namespace ember::kernels::cuda
