#pragma once
/// \file
/// The signature of a compiled call: what of its arguments a cached executable depends on, and
/// the one check that a later call has the same, which also explains a miss.
///
/// Checking and explaining are one function so that a message can never name a property the
/// check ignored. What is guarded, per tensor argument: its sizes (with dynamic dims, only its
/// rank and the static dims), its strides (with dynamic dims: that it is contiguous, since
/// layouts are re-derived per size), dtype, device, requires_grad and which arguments are the
/// same tensor; besides, the plain arguments' values, grad mode and the autocast state. What is
/// not: where the argument lives, storage offset included. Every kernel reads its operands
/// through their data pointers at run time and checks alignment itself where it vectorizes, and
/// a CUDA graph is looked up by its arguments' addresses; so a slice of a larger tensor (a
/// batch of a data set) is an ordinary argument. Everything declared here is internal
/// (`ember::jit::detail`); jit/compile.h describes the rules for users.
#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace ember::jit::detail {

// Plain (non-tensor) arguments as bytes the signature compares, with where each one ends and
// its position among all the call's arguments (for messages).
struct PlainKey {
  static constexpr size_t kMaxArgs = 16;
  std::array<char, 240> bytes{};
  size_t size = 0;
  std::array<uint8_t, kMaxArgs> ends{};      // per plain argument: its end in `bytes`
  std::array<uint8_t, kMaxArgs> position{};  // per plain argument: its index in the call
  uint8_t count = 0;
  void add(const void* p, size_t n);
  void end_arg(size_t call_position);  // the bytes added since the last end are one argument
  bool operator==(const PlainKey& o) const;
};

struct ArgSig {
  Shape sizes;
  Strides strides;
  DType dtype = kFloat32;
  Device device;
  bool requires_grad = false;
  int32_t alias = -1;  // index of an earlier argument that is the same tensor
};

struct Signature {
  std::vector<ArgSig> args;
  PlainKey plain;
  bool grad_mode = true;
  uint32_t autocast = 0;  // core/autocast.h's autocast_key() when traced
  // Per argument, the dims allowed to vary (bit d = dim d); `symbolic` when any is.
  std::vector<uint16_t> sym;
  bool symbolic = false;

  static Signature of(std::span<const Tensor> tensors, const PlainKey& plain, bool grad_mode);
};

// A gradient the traced function read when the call began (jit/graph.h, GradInput): whether the
// parameter had one and, when its contents were read (`bound`: it is passed to the executable
// as an extra argument), its layout. Checked at every call after the arguments.
struct GradGuard {
  Tensor param;
  int32_t state = -1;  // the parameter's state index, for messages
  bool defined = false;
  bool bound = false;
  Shape sizes;
  Strides strides;
  DType dtype = kFloat32;
  Device device;
};

// Whether every parameter's .grad fits its guard; `why` as for fits().
bool grads_fit(std::span<const GradGuard> guards, std::string* why = nullptr);

// Index of an earlier argument that is the same tensor as argument i, or -1.
int32_t alias_of(std::span<const Tensor> t, size_t i);

// Whether a call with these arguments fits `s`. When it does not and `why` is given, `why` says
// which argument and property differ, old -> new ("input 0 dim 0: 128 -> 56"). Allocates
// nothing when `why` is null (the lookup of every call).
bool fits(const Signature& s, std::span<const Tensor> t, const PlainKey& plain, bool grad_mode,
          std::string* why = nullptr);

}  // namespace ember::jit::detail
