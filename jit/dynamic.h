#pragma once
// Symbolic input dims. A C++ function computes sizes on the host (x.size(0) * 784), so the
// tracer cannot see how attributes depend on input dims. Ember learns it from two traces at
// different sizes: an attribute that is k*a in one and k*b in the other, where an input dim went
// from a to b, is k*s for the symbol s of that dim; a wrapped-number constant that scales like
// k/s (a mean's 1/N) likewise. Everything else must be equal. The result is a template that any
// later size instantiates by re-running core's shape inference over the graph.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "jit/graph.h"

namespace ember::jit {

struct SymbolicTemplate {
  struct Dim {
    int32_t arg = 0, dim = 0;
  };
  // Input dims sharing one symbol (they changed together from a to b).
  std::vector<std::vector<Dim>> symbols;
  enum class Field : uint8_t { Shape, Start, End, RangeStart, RangeEnd, Constant };
  struct Patch {
    int32_t node = -1;  // or the constant's slot for Field::Constant
    Field field = Field::Shape;
    int32_t index = 0;  // shape entry
    double k = 0;       // value = k * s, or k / s for a reciprocal constant
    bool reciprocal = false;
    int32_t symbol = 0;
  };
  std::vector<Patch> patches;
  Graph graph;  // the later trace, raw (before the passes)

  std::string describe() const;  // "input 0 dim 0 and input 1 dim 0 as s0"
};

// A template when `b` is `a` traced with some input dims changed (and `allowed(arg, dim)` says
// each such dim may be symbolic); otherwise nullopt with the reason in `why`.
std::optional<SymbolicTemplate> generalize(const Graph& a, const Graph& b,
                                           const std::vector<uint16_t>& allowed_dims,
                                           std::string* why);

// The symbol values `args` give, or false when dims sharing a symbol disagree.
bool symbol_values(const SymbolicTemplate& t, std::span<const Tensor> args,
                   std::vector<int64_t>& values);

// The concrete graph for these arguments (throws ember::Error when a size does not fit).
Graph instantiate(const SymbolicTemplate& t, std::span<const Tensor> args,
                  const std::vector<int64_t>& symbol_values);

}  // namespace ember::jit
