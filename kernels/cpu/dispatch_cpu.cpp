#include "core/collective.h"
#include "kernels/cpu/cpu_kernels.h"

namespace ember::kernels {

void run_cpu(const KernelCall& c) {
  switch (op_info(c.op).kind) {
    case OpKind::Nullary:
    case OpKind::Unary:
    case OpKind::Binary:
    case OpKind::Ternary:
      return cpu::pointwise(c);
    case OpKind::Reduce:
      return cpu::reduce(c);
    case OpKind::Matmul:
      return cpu::matmul(c);
    case OpKind::Softmax:
      return cpu::softmax(c);
    case OpKind::Loss:
      return cpu::cross_entropy(c);
    case OpKind::Index:
      return cpu::index(c);
    case OpKind::Cat:
      return cpu::cat(c);
    case OpKind::Factory:
      return cpu::arange(c);
    case OpKind::Random:
      return cpu::random(c);
    case OpKind::MultiTensor:
      return cpu::multi_tensor(c);
    case OpKind::Conv:
      return cpu::conv(c);
    case OpKind::Pool:
      return cpu::pool(c);
    case OpKind::Attention:
      return cpu::attention(c);
    case OpKind::Collective:
      return run_collective(c);
    case OpKind::MultiReduce:
      return cpu::multi_norm(c);
    case OpKind::Norm:
      return cpu::layer_norm(c);
    case OpKind::View:
    case OpKind::Transfer:
      break;
  }
  EMBER_FAIL(op_name(c.op), ": has no CPU kernel");
}

}  // namespace ember::kernels
