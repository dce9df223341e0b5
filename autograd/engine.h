#pragma once
/// \file
/// The reverse-mode backward engine (`ember::autograd::backward`).
#include <functional>
#include <vector>

#include "core/tensor.h"

namespace ember::autograd {

/// Backpropagates from several roots at once, like `torch.autograd.backward`.
///
/// Runs every node reachable from `roots` once, in dependency order (the most recently created
/// ready node first, so runs are deterministic), summing gradients that meet at a node, and
/// accumulates (adds) the result into `.grad()` of each leaf reached; a leaf's `.grad()` starts
/// undefined and is not reset between calls (zero it, e.g. with `Optimizer::zero_grad`).
/// Backward runs with grad mode and autocast off, so the gradients themselves carry no graph
/// (no double backward).
/// \param roots tensors to differentiate; each must require grad.
/// \param grads one gradient per root, with the root's shape and device (cast to its dtype); an
///   undefined gradient means ones and is allowed only for a one-element root.
/// \param retain_graph keep the saved tensors so the graph can be backpropagated again;
///   without it they are freed, and a second backward through the same nodes throws.
/// \throws ember::Error when the sizes of `roots` and `grads` differ, a root is undefined or
///   does not require grad, a gradient does not match its root, or a saved tensor was freed or
///   modified in place since it was saved.
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads,
              bool retain_graph = false);

/// Calls `hook(leaf)` after every backward that accumulates into `leaf`'s .grad(), once the
/// gradient is in the slot (like `Tensor.register_post_accumulate_grad_hook`): the moment a
/// data-parallel wrapper can start communicating that gradient. Returns a handle for
/// remove_post_accumulate_grad_hook.
/// \throws ember::Error when `leaf` does not require grad or is not a leaf.
size_t register_post_accumulate_grad_hook(const Tensor& leaf,
                                          std::function<void(const Tensor&)> hook);
/// Removes the hook `handle` of `leaf` (nothing when it is gone already).
void remove_post_accumulate_grad_hook(const Tensor& leaf, size_t handle);

/// Runs `callback` once, when the backward now running has finished every node (like
/// `Variable._execution_engine.queue_callback`): where a data-parallel wrapper waits for its
/// last buckets. Callbacks run in the order they were queued, and may queue more.
/// \throws ember::Error outside a backward.
void queue_callback(std::function<void()> callback);

}  // namespace ember::autograd
