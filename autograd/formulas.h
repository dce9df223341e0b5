#pragma once
// The backward formulas: one table (a switch) keyed by OpId, written with public ops so that a
// traced backward is made of ordinary, fusable graph nodes.
#include <vector>

#include "autograd/node.h"

namespace ember::autograd {

// Whether `op` has a gradient at all (comparisons, argmax, random draws... do not).
bool is_differentiable(OpId op);

// Which tensors the formula of `op` reads, given which inputs need a gradient: only these are
// kept alive by the graph.
struct SavePlan {
  bool input[3] = {false, false, false};
  bool output = false;
};
SavePlan save_plan(OpId op, const std::vector<bool>& needs_grad);

// Gradients for each input of node `n` from the gradient of its output (undefined where no
// gradient is needed).
std::vector<Tensor> backward_formula(const OpNode& n, const Tensor& grad);

// Sums a broadcast gradient back to `shape` (the adjoint of broadcasting).
Tensor sum_to(const Tensor& g, const Shape& shape);

}  // namespace ember::autograd
