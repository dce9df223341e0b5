#pragma once
// OpId, the per-op info and the typed attributes ops take, all generated from core/ops.yaml
// by tools/gen_ops.py (see there for what a row holds).
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
  MultiTensor,
  Conv,
  Pool,
  Attention
};
enum class OutRule : uint8_t { Same, IntToFloat, ToBool, ToInt64, Index, Cast };

}  // namespace ember

// OpId and kNumOps.
#include "core/generated/op_ids.h"

namespace ember {

// What an op does with its floating inputs under autocast (core/autocast.h): the `autocast`
// key of its row.
enum class AutocastPolicy : uint8_t { None, Lower, Fp32, Promote };

// When a backward formula reads a tensor: the save rules of core/ops.yaml.
enum class SaveWhen : uint8_t { Never, Always, IfNeed0, IfNeed1, IfNeed2 };

struct OpInfo {
  std::string_view name;
  OpKind kind;
  DTypeSet dtypes;
  OutRule rule;
  int8_t arity;  // -1: any number of inputs
  bool differentiable;
  SaveWhen save[4];  // inputs 0, 1, 2, then the output
  // Ops whose gradient is a generated pointwise row: (g, x) or (g, y) -> dx, dispatched as is.
  bool has_grad_op;
  OpId grad_op;
  AutocastPolicy autocast;
};

}  // namespace ember

// kOpInfo, indexed by OpId.
#include "core/generated/op_info.h"

namespace ember {

constexpr const OpInfo& op_info(OpId op) { return kOpInfo[static_cast<int>(op)]; }
constexpr std::string_view op_name(OpId op) { return op_info(op).name; }
constexpr bool is_pointwise(OpKind k) {
  return k == OpKind::Nullary || k == OpKind::Unary || k == OpKind::Binary || k == OpKind::Ternary;
}

}  // namespace ember

// Attrs: the typed attributes ops take, with equality, bytes and printing.
#include "core/generated/attrs.h"
