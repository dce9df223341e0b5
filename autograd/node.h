#pragma once
/// \file
/// The backward graph: nodes with edges to the nodes of their inputs, and the per-tensor
/// autograd state that core's TensorImpl carries.
///
/// Users meet these types through `Tensor::grad_fn()` (like PyTorch's `tensor.grad_fn`); most
/// code never needs more. Writing a custom Node and wiring it with gradient_edge and meta is
/// possible but low-level.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/op.h"
#include "core/tensor.h"

namespace ember {
namespace autograd {

struct Node;

/// Where a gradient goes: the node `fn` that receives it (every node has one input slot).
struct Edge {
  std::shared_ptr<Node> fn;  ///< the receiving node; null when no gradient flows
  /// Whether the edge leads to a node.
  bool valid() const { return fn != nullptr; }
};

/// A tensor saved for backward: an alias without autograd state (so an op saving its own output
/// makes no reference cycle) plus the storage version at save time. Unpacking after an in-place
/// write to it is an error rather than a wrong gradient.
class SavedTensor {
 public:
  /// An empty slot (nothing saved).
  SavedTensor() = default;
  /// Saves an alias of `t` and its version; `written_by_this_op` says the recording op wrote
  /// `t` in place (its version was already bumped), so the version before that write is kept.
  SavedTensor(const Tensor& t, bool written_by_this_op);
  /// Whether a tensor is held (false when empty or after reset).
  bool defined() const { return data_.defined(); }
  /// The saved tensor.
  /// \param op the name used in the error message.
  /// \throws ember::Error when it was freed (a second backward without `retain_graph`) or
  ///   modified in place since it was saved.
  Tensor unpack(const char* op) const;
  /// Frees the saved tensor.
  void reset() { data_ = Tensor(); }

 private:
  Tensor data_;
  uint32_t version_ = 0;
};

/// Shape, dtype and device of one forward input: enough to reduce broadcast gradients and cast
/// them back without keeping the input alive.
struct InputMeta {
  Shape shape;             ///< the input's shape
  DType dtype = kFloat32;  ///< the input's dtype
  Device device;           ///< the input's device
  /// A 2-D transposed view (unit row stride, columns apart): a product's gradient for it is
  /// computed in that layout, so it reaches a weight read as weight.t() without a copy.
  bool column_major = false;
};

/// A node of the backward graph, like PyTorch's `torch.autograd.graph.Node`.
///
/// One node is created per recorded op (an OpNode) and one per leaf that requires grad (an
/// AccumulateGrad); a tensor's `grad_fn()` is the node that produced it.
struct Node {
  virtual ~Node() = default;
  /// Gradients for each forward input (undefined where none is needed), from the gradient of
  /// this node's output. The engine moves its buffer in, so a sink may keep it without a copy.
  virtual std::vector<Tensor> apply(Tensor grad_out) = 0;
  /// The node's name, e.g. `"mulBackward"` or `"AccumulateGrad"`.
  virtual std::string name() const = 0;
  /// Frees the tensors saved for backward (after a backward without `retain_graph`).
  virtual void release_saved() {}

  std::vector<Edge> next;    ///< one per forward input; invalid where no gradient flows
  uint64_t sequence_nr = 0;  ///< creation order: later nodes run first
};

/// The node of one recorded op of the table; its gradient comes from the op's backward formula.
struct OpNode final : Node {
  OpId op{};                              ///< the forward op
  Attrs attrs;                            ///< the forward op's attributes
  std::vector<InputMeta> inputs;          ///< shape, dtype and device of each forward input
  std::vector<SavedTensor> saved_inputs;  ///< defined only where the formula needs them
  SavedTensor saved_output;               ///< the forward output, where the formula needs it
  bool released = false;                  ///< saved tensors were freed by release_saved

  /// Runs the op's backward formula.
  /// \throws ember::Error after release_saved (a second backward without `retain_graph`).
  std::vector<Tensor> apply(Tensor grad_out) override;
  /// The op's name followed by `Backward`, e.g. `"mulBackward"`.
  std::string name() const override;
  /// Frees the saved inputs and output and marks the node released.
  void release_saved() override;
  /// Whether forward input `i` needs a gradient (its edge is valid).
  bool needs_input_grad(size_t i) const { return i < next.size() && next[i].valid(); }
};

/// The sink for a leaf: adds the incoming gradient into leaf.grad().
///
/// The first gradient becomes `.grad()` (cast to the leaf's dtype, copied unless the buffer is
/// not shared); later ones are added in place, so gradients accumulate across backward calls.
struct AccumulateGrad final : Node {
  std::weak_ptr<TensorImpl> leaf;  ///< the leaf; nothing is accumulated once it is gone
  /// Accumulates `grad_out` into the leaf's `.grad()`; returns no gradients.
  std::vector<Tensor> apply(Tensor grad_out) override;
  /// Returns `"AccumulateGrad"`.
  std::string name() const override { return "AccumulateGrad"; }
};

/// The next value of the global node counter, for Node::sequence_nr (thread-safe).
uint64_t next_sequence_nr();

/// Installs autograd's observers into core's dispatch (idempotent; done when a tensor first
/// requires grad).
void install();

}  // namespace autograd

/// The autograd state of one tensor, created on first need and held by its TensorImpl.
struct AutogradMeta {
  bool requires_grad = false;                      ///< set by `requires_grad_()` or by recording
  Tensor grad;                                     ///< the accumulated gradient (`.grad()`)
  std::shared_ptr<autograd::Node> grad_fn;         ///< the producing node; null for a leaf
  std::weak_ptr<autograd::Node> grad_accumulator;  ///< shared by every use of a leaf
  bool is_view = false;                            ///< recorded output of a view op
  /// For a recorded view: its base. A later recorded in-place write to the base gives it a new
  /// grad_fn, and the view's history is stale (using the view then throws ember::Error).
  std::weak_ptr<TensorImpl> view_base;
  /// For a recorded view: the base's grad_fn when the view was taken.
  std::weak_ptr<autograd::Node> view_base_grad_fn;
  /// For a leaf: called with the leaf after each backward accumulated into its .grad()
  /// (autograd::register_post_accumulate_grad_hook), in registration order; null once removed.
  std::vector<std::function<void(const Tensor&)>> post_accumulate_grad_hooks;
};

namespace autograd {
/// The edge a gradient of `t` flows into: its grad_fn, or its leaf accumulator (created on first
/// use and shared by every use of the leaf); invalid when `t` does not require grad.
Edge gradient_edge(const Tensor& t);
/// The autograd state of `t`, created if missing.
AutogradMeta& meta(const Tensor& t);
}  // namespace autograd

}  // namespace ember
