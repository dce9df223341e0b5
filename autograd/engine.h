#pragma once
#include <vector>

#include "core/tensor.h"

namespace ember::autograd {

// Backpropagates from `roots` with the given output gradients (an undefined gradient means
// ones, allowed for one-element roots), accumulating into the .grad of the leaves reached.
// Without retain_graph the saved tensors of every node run are freed.
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
              bool retain_graph = false);

}  // namespace ember::autograd
