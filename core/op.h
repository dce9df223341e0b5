#pragma once
/// \file
/// The op table's C++ face: OpId, the per-op info (OpInfo, op_info()) and the typed attributes
/// ops take (Attrs).
///
/// All are generated from core/ops.yaml by tools/gen_ops.py (see there for what a row holds).
/// Users reach ops through the functions of core/ops.h; this header matters to code that
/// inspects or dispatches ops by id (autograd, the JIT, tests).
#include <cstdint>
#include <string_view>

#include "core/device.h"
#include "core/dtype.h"
#include "core/scalar.h"
#include "core/shape.h"

namespace ember {

/// The family of an op (the `kind` key of its row): it decides how meta inference validates the
/// op and how the JIT lowers it.
enum class OpKind : uint8_t {
  Nullary,      ///< Pointwise with no tensor input, writing into a given tensor (fill).
  Unary,        ///< Pointwise on one tensor (neg, exp, relu, cast, ...).
  Binary,       ///< Pointwise on two broadcast tensors (add, mul, eq, ...).
  Ternary,      ///< Pointwise on three broadcast tensors (where).
  Reduce,       ///< Reduction over attrs.dims (sum, mean, amax, argmax, logsumexp).
  Matmul,       ///< Matrix product: mm [M, K] x [K, N], bmm [B, M, K] x [B, K, N].
  Softmax,      ///< Row-wise normaliser over attrs.dim (softmax, log_softmax).
  Loss,         ///< Cross entropy and its backward.
  Index,        ///< Indexing by an index tensor (gather, index_select, one_hot, scatter_add).
  Cat,          ///< Concatenation of any number of tensors along attrs.dim.
  View,         ///< A view sharing its input's storage, no kernel (view, permute, slice, expand).
  Factory,      ///< A new tensor from attributes only (arange).
  Random,       ///< Random draws from a Philox (seed, offset) (rand, randn, randint).
  Transfer,     ///< A move between devices (to_device).
  MultiTensor,  ///< An in-place update of many tensors in one launch (optimizer steps).
  Conv,         ///< 2-D convolution and its backward rows.
  Pool,         ///< 2-D max pooling and its backward.
  Attention,    ///< Fused scaled-dot-product attention and its backward rows.
  Collective,   ///< A reduction across processes (all_reduce), through a registered communicator.
  MultiReduce,  ///< One reduction per tensor of a list in one launch, stacked (multi_norm).
  Norm          ///< Normalisation of rows over trailing dims (layer_norm) and its backward.
};
/// How an op's output dtype follows from its (promoted) input dtype: the `rule` key of its row.
enum class OutRule : uint8_t {
  Same,        ///< The input dtype.
  IntToFloat,  ///< The input dtype; integer and bool inputs are first cast to float32 (exp(int)).
  ToBool,      ///< Always bool (comparisons).
  ToInt64,     ///< Floating dtypes kept, integer and bool give int64 (sum, like PyTorch).
  Index,       ///< Always int64 (argmax, one_hot).
  Cast,        ///< attrs.dtype, from one input of any dtype (cast).
  Select       ///< Input 0 is a bool condition; the other inputs' dtype (where).
};

}  // namespace ember

// OpId and kNumOps.
#include "core/generated/op_ids.h"

namespace ember {

/// What an op does with its floating inputs under autocast (core/autocast.h): the `autocast`
/// key of its row.
enum class AutocastPolicy : uint8_t {
  None,    ///< Runs on what it is given.
  Lower,   ///< Floating inputs cast to the region's low dtype (matrix products, conv).
  Fp32,    ///< 16-bit floating inputs cast to float32 (exp, log, softmax, losses, sum).
  Promote  ///< Mixed floating inputs widened to the widest (cat).
};

/// When a backward formula reads a tensor: the save rules of core/ops.yaml. Saving only what
/// the gradients that are needed read keeps activations alive no longer than necessary.
enum class SaveWhen : uint8_t {
  Never,    ///< Not read by backward: not saved.
  Always,   ///< Saved whenever a backward node is recorded.
  IfNeed0,  ///< Saved only when input 0 needs a gradient.
  IfNeed1,  ///< Saved only when input 1 needs a gradient.
  IfNeed2   ///< Saved only when input 2 needs a gradient.
};

/// One row of the op table, as kOpInfo holds it (indexed by OpId; see op_info()).
struct OpInfo {
  std::string_view name;  ///< The row's name ("add", "mm", ...), used in error messages.
  OpKind kind;            ///< The op's family.
  DTypeSet dtypes;        ///< The input dtypes the op accepts (others throw ember::Error).
  OutRule rule;           ///< How the output dtype follows from the input dtype.
  int8_t arity;           ///< The number of tensor inputs; -1: any number of inputs.
  bool differentiable;    ///< False for rows with `diff: false` (no gradient flows through).
  SaveWhen save[4];       ///< What backward saves: inputs 0, 1, 2, then the output.
  /// Whether the gradient is a generated pointwise row: (g, x) or (g, y) -> dx, dispatched as
  /// is.
  bool has_grad_op;
  OpId grad_op;             ///< That gradient row (meaningful when has_grad_op is true).
  AutocastPolicy autocast;  ///< What the op does under autocast.
};

}  // namespace ember

// kOpInfo, indexed by OpId.
#include "core/generated/op_info.h"

namespace ember {

/// The table row of `op`.
constexpr const OpInfo& op_info(OpId op) { return kOpInfo[static_cast<int>(op)]; }
/// The name of `op` ("add", "mm", ...).
constexpr std::string_view op_name(OpId op) { return op_info(op).name; }
/// True for the pointwise kinds (Nullary, Unary, Binary, Ternary): one output element per
/// broadcast input position, which the JIT fuses freely.
constexpr bool is_pointwise(OpKind k) {
  return k == OpKind::Nullary || k == OpKind::Unary || k == OpKind::Binary || k == OpKind::Ternary;
}

}  // namespace ember

// Attrs: the typed attributes ops take, with equality, bytes and printing.
#include "core/generated/attrs.h"
