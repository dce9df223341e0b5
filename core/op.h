#pragma once
// OpId, the per-op info generated from core/ops.def, and the typed attributes ops take.
#include <cstdint>
#include <string_view>

#include "core/device.h"
#include "core/dtype.h"
#include "core/scalar.h"
#include "core/shape.h"

namespace ember {

enum class OpKind : uint8_t {
  Nullary,
  Unary,
  Binary,
  Ternary,
  Reduce,
  Matmul,
  Softmax,
  Loss,
  Index,
  Cat,
  View,
  Factory,
  Random,
  Transfer,
  MultiTensor
};
enum class OutRule : uint8_t { Same, IntToFloat, ToBool, ToInt64, Index, Cast };

enum class OpId : uint16_t {
#define EMBER_OP(name, kind, dtypes, rule) name,
#include "core/ops.def"
#undef EMBER_OP
};

inline constexpr int kNumOps = 0
#define EMBER_OP(name, kind, dtypes, rule) +1
#include "core/ops.def"
#undef EMBER_OP
    ;
// Adding or removing an op means touching its kernels and tests too: update this on purpose.
static_assert(kNumOps == 55, "op table changed: update kernels, backward formulas and tests");

struct OpInfo {
  std::string_view name;
  OpKind kind;
  DTypeSet dtypes;
  OutRule rule;
};

inline constexpr OpInfo kOpInfo[] = {
#define EMBER_OP(name, kind, dtypes, rule) {#name, OpKind::kind, dtypes, OutRule::rule},
#include "core/ops.def"
#undef EMBER_OP
};

constexpr const OpInfo& op_info(OpId op) { return kOpInfo[static_cast<int>(op)]; }
constexpr std::string_view op_name(OpId op) { return op_info(op).name; }
constexpr bool is_pointwise(OpKind k) {
  return k == OpKind::Nullary || k == OpKind::Unary || k == OpKind::Binary || k == OpKind::Ternary;
}

// Attributes of one op call. Each field says which ops read it; an op ignores the rest.
// A plain struct (not a bag of untyped slots) so the tracer can hash and compare it cheaply.
// How cross_entropy reduces its per-sample losses (nn's Reduction, at the op level).
enum class LossReduction : uint8_t { None, Mean, Sum };

struct Attrs {
  Shape shape;      // view, expand, factories, random: target shape
  Dims dims;        // reductions: dims to reduce (empty = all); permute: the order
  int64_t dim = 0;  // softmax, log_softmax, gather, index_select, cat, slice
  int64_t start = 0, end = 0, step = 1;                   // slice
  bool keepdim = false;                                   // reductions
  bool has_lo = false, has_hi = false;                    // clamp
  bool approximate_tanh = false;                          // gelu
  Scalar lo, hi;                                          // clamp bounds; randint [lo, hi)
  Scalar value;                                           // fill
  double range_start = 0, range_end = 0, range_step = 1;  // arange
  DType dtype = kFloat32;                                 // cast, factories, random
  Device device;                                          // factories, random, to_device
  int64_t ignore_index = -100;                            // cross_entropy(_backward)
  double label_smoothing = 0;                             // cross_entropy(_backward)
  LossReduction reduction = LossReduction::None;          // cross_entropy(_backward)
  int64_t num_classes = -1;                               // one_hot
  uint64_t seed = 0, offset = 0;  // random: the Philox key and first counter
  // random on CUDA, for replays captured in a CUDA graph: the device address of {seed, base};
  // when set the kernel reads the key there and draws from counter base + offset.
  const uint64_t* rng_state = nullptr;
  // sgd_update: inputs are [hyper, step, params..., grads..., (momentum buffers...)]
  int64_t num_tensors = 0;  // number of parameters
  bool nesterov = false, maximize = false, momentum_buffers = false;
  // sgd_update: after the update, step += 1 (every read of step in the update sees the old
  // value). Saves the optimizer a separate increment kernel per step.
  bool increment_step = false;
};

}  // namespace ember
