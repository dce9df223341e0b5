#pragma once
// CUDA source for a fused pointwise group: one kernel that reads each external input once
// (with its own broadcast/strided indexing over the group's shape, or as 16-byte vectors),
// composes the members' functors in registers in the eager kernels' compute types, and writes
// only the group's outputs. Shapes and strides are constants in the source. The source includes
// kernels/cuda/fused_pointwise.cuh and is compiled by NVRTC (kernels/cuda/nvrtc.h).
//
// Host-only: generating (and inspecting) the source needs no GPU and no CUDA toolkit.
#include <cstdint>
#include <string>
#include <vector>

#include "jit/graph.h"

namespace ember::jit {

// Bumped when the generated code changes meaning: part of the kernel cache key.
inline constexpr int kPointwiseCodegenVersion = 1;

// One operand of the kernel's argument block. Pointer operands come first (outputs, then
// inputs), then the inline scalars: 0-dim host tensors whose value travels inside the
// arguments as the low bytes of a 64-bit word, like the eager kernels' inline scalars.
struct FusedOperand {
  ValueId value = kNoValue;
  bool output = false;
  bool scalar = false;
  int32_t slot = 0;       // index of its 64-bit word in the argument block
  int64_t elem_size = 0;  // bytes per element
  int64_t vec_align = 0;  // bytes its address must be aligned to for the vector kernel (0: any)
  // An output written into part of its value (one piece of a cat the group ends with): its
  // elements start this many elements past the value's own start.
  int64_t elem_offset = 0;
};

struct FusedPointwiseKernel {
  static constexpr const char* kElementKernel = "ember_fused_elem";
  static constexpr const char* kVectorKernel = "ember_fused_vec";

  std::string source;
  std::string summary;  // "add, relu over [64, 512] (2 in, 1 out, vec 4)"
  // The `body` device function alone (also inside `source`): the members over registers, taking
  // the non-output operands by value in operand order, then the outputs by reference. The
  // reduction generator (jit/reduction_codegen.h) builds its kernels around it.
  std::string body;
  std::vector<FusedOperand> operands;
  int32_t words = 0;  // 64-bit words in the argument block
  int64_t numel = 0;
  // Elements per thread of the vector kernel (kVectorKernel); 0 when the source has none. The
  // vector kernel may only run when every operand's address meets its vec_align.
  int32_t vec = 0;
};

// Whether the generator handles `group`: a Pointwise group whose members are out-of-place
// unary/binary/ternary ops on one CUDA device, in dtype combinations the eager kernels accept,
// reading values on that device or 0-dim host tensors, optionally ended by cats of member
// results of the group's shape (each piece is then stored straight into its place in each cat's
// result, and the cats cost no kernel). On false, `why` (if given) says why.
bool pointwise_codegen_supports(const Graph& g, const Group& group, std::string* why = nullptr);

// The kernel for a supported group (throws ember::Error otherwise).
FusedPointwiseKernel generate_pointwise_kernel(const Graph& g, const Group& group);

// The device storage type generated code names for a dtype ("float", "__half", "int64_t", ...);
// shared with the reduction generator.
const char* cuda_storage_type(DType t);

}  // namespace ember::jit
