#pragma once
// CUDA source for a fused Reduction group: pointwise members followed by one sum / mean / amax /
// amin of a member's result, as ONE kernel. Each thread computes the members at the elements it
// reduces (the member expressions are the pointwise generator's `body`, so each member's value
// is bit for bit what eager computes), writes the members' results that are group outputs, and
// folds the reduced member's value into an accumulator of the eager reduction's type (float for
// float and the 16-bit floats, double for double, int64 for integer and bool sums, the type
// itself for integer amax/amin). Intermediates never touch memory.
//
// The driver is kernels/cuda/fused_reduce.cuh, which documents the (fixed, run-to-run
// deterministic) order of combination: per-lane sequential folds, a combine per block and, for
// long reductions split over several blocks, per-block partials combined by the last block to
// finish (an atomic ticket), in the same launch. The cut comes from the eager planner
// (kernels/reduce_grid.h) and each step follows the eager kernels' order, so column and row
// sums equal eager's bit for bit (for contiguous rows when walked in row-major order, which the
// codegen checks: vec_). Integer sums and amax/amin are exact either way.
//
// Host-only: generating (and inspecting) the source needs no GPU and no CUDA toolkit.
#include <cstdint>
#include <string>
#include <vector>

#include "jit/graph.h"
#include "jit/pointwise_codegen.h"

namespace ember::jit {

// Bumped when the generated code changes meaning: part of the kernel cache key.
inline constexpr int kReductionCodegenVersion = 4;

// A group may hold products D = A B (mm, K <= this) of values from outside it whose result only
// the group reads: each element is computed where it is used, as the eager SmallK kernels
// compute it (kernels/cuda/small_gemm.h, kSmallGemmMaxK), and never stored.
inline constexpr int64_t kReductionMaxProductK = 16;

// Why node `n` is not a product such a group can hold, or empty: an out-of-place float32 or
// float64 mm of matrices [M,K] x [K,N] with 1 <= K <= kReductionMaxProductK, non-negative
// strides, all on one CUDA device. (The fusion pass asks before it moves a product into a
// group; the generator asks again, with the group's own conditions.)
std::string small_k_product_problem(const Graph& g, const Node& n);

struct FusedReductionKernel {
  static constexpr const char* kKernel = "ember_fused_reduce";
  static constexpr int kMaxThreads = 256;  // per block (fused::kThreads)

  std::string source;
  std::string summary;  // "gt, where, sum over [64, 512] -> [1, 512] (columns, 16 x 1 blocks)"
  // Pointer operands (outputs first: the reduction's result at slot 0, then the members'
  // results the group returns; then inputs), then inline scalars (0-dim host tensors), as in
  // FusedPointwiseKernel (vec_align is always 0).
  std::vector<FusedOperand> operands;
  int32_t words = 0;         // 64-bit words in the argument block: operands, partial, tickets
  int32_t partial_word = 0;  // the word holding the partials' address (words - 2)
  int32_t ticket_word = 0;   // the word holding the tickets' address (words - 1)

  int64_t num_out = 0;             // reduced results
  int64_t count = 0;               // elements folded into each
  bool columns = false;            // a kept dim is innermost (see fused_reduce.cuh)
  int32_t tile_x = 0, tile_y = 0;  // kBX x kBY threads per block (the launch's block size)
  int64_t blocks_x = 0;            // blocks along the outputs
  int64_t splits = 1;              // blocks along the reduction (partials when > 1)
  int64_t chunk = 0;               // reduced positions per split
  // Scratch the launcher allocates once: partial states (splits * num_out of them) and one
  // 32-bit ticket per blocks_x, zeroed once (the kernel leaves them at zero). Both 0 without
  // splitting.
  int64_t partial_bytes = 0;
  int64_t ticket_count = 0;
  int64_t grid() const { return blocks_x * splits; }
  int32_t block() const { return tile_x * tile_y; }
};

// Whether the generator handles `group`: a Reduction group whose last member is sum, mean, amax
// or amin (out of place, dtypes as the eager CUDA reduction accepts them) of an earlier member's
// result, whose other members form a group the pointwise generator handles (after leading small-K
// products, see kReductionMaxProductK), and whose result is a group output. On false, `why` (if
// given) says why.
bool reduction_codegen_supports(const Graph& g, const Group& group, std::string* why = nullptr);

// The kernel for a supported group (throws ember::Error otherwise). `sm_count` sizes the split
// of long reductions (the device's multiprocessors; 132 on an H100/H200).
FusedReductionKernel generate_reduction_kernel(const Graph& g, const Group& group,
                                               int sm_count = 132);

}  // namespace ember::jit
