// Routes a KernelCall to the CUDA kernel of its op kind (kernels/cuda/cuda_kernels.h).
#include "core/collective.h"
#include "core/dispatch.h"
#include "core/error.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/runtime.h"

namespace ember::kernels {

void run_cuda(const KernelCall& call) {
  // Kernels launch on the output's device (multi-tensor updates: their inputs'); handles and
  // streams are per device.
  const Device dev = call.out.defined() ? call.out.device() : call.inputs[0].device();
  cuda::DeviceGuard guard(dev.index);
  switch (op_info(call.op).kind) {
    case OpKind::Nullary:
    case OpKind::Unary:
    case OpKind::Binary:
    case OpKind::Ternary:
      return cuda::pointwise(call);
    case OpKind::Reduce:
      return cuda::reduce(call);
    case OpKind::Matmul:
      return cuda::matmul(call);
    case OpKind::Softmax:
      return cuda::softmax(call);
    case OpKind::Loss:
      return cuda::cross_entropy(call);
    case OpKind::Index:
      return cuda::index(call);
    case OpKind::Cat:
      return cuda::cat(call);
    case OpKind::Factory:
      return cuda::arange(call);
    case OpKind::Random:
      return cuda::random(call);
    case OpKind::MultiTensor:
      return cuda::multi_tensor(call);
    case OpKind::Conv:
      return cuda::conv(call);
    case OpKind::Pool:
      return cuda::pool(call);
    case OpKind::Attention:
      return cuda::attention(call);
    case OpKind::Collective:
      return run_collective(call);
    case OpKind::MultiReduce:
      return cuda::multi_norm(call);
    case OpKind::Norm:
      return cuda::layer_norm(call);
    case OpKind::View:
    case OpKind::Transfer:
      break;
  }
  EMBER_FAIL(op_name(call.op), ": internal error: ops of this kind never reach a CUDA kernel");
}

}  // namespace ember::kernels
