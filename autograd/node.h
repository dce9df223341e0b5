#pragma once
// The backward graph: nodes with edges to the nodes of their inputs, and the per-tensor
// autograd state that core's TensorImpl carries.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/op.h"
#include "core/tensor.h"

namespace ember {
namespace autograd {

struct Node;

// Where a gradient goes: input `input_nr` of `fn` (our nodes have one input slot, 0).
struct Edge {
  std::shared_ptr<Node> fn;
  bool valid() const { return fn != nullptr; }
};

// A tensor saved for backward: an alias without autograd state (so an op saving its own output
// makes no reference cycle) plus the storage version at save time. Unpacking after an in-place
// write to it is an error rather than a wrong gradient.
class SavedTensor {
 public:
  SavedTensor() = default;
  SavedTensor(const Tensor& t, bool written_by_this_op);
  bool defined() const { return data_.defined(); }
  Tensor unpack(const char* op) const;
  void reset() { data_ = Tensor(); }

 private:
  Tensor data_;
  uint32_t version_ = 0;
};

// Shape, dtype and device of one forward input: enough to reduce broadcast gradients and cast
// them back without keeping the input alive.
struct InputMeta {
  Shape shape;
  DType dtype = kFloat32;
  Device device;
};

struct Node {
  virtual ~Node() = default;
  // Gradients for each forward input (undefined where none is needed), from the gradient of
  // this node's output. The engine moves its buffer in, so a sink may keep it without a copy.
  virtual std::vector<Tensor> apply(Tensor grad_out) = 0;
  virtual std::string name() const = 0;
  virtual void release_saved() {}

  std::vector<Edge> next;    // one per forward input; invalid where no gradient flows
  uint64_t sequence_nr = 0;  // creation order: later nodes run first
};

// The node of one recorded op of the table.
struct OpNode final : Node {
  OpId op{};
  Attrs attrs;
  std::vector<InputMeta> inputs;
  std::vector<SavedTensor> saved_inputs;  // defined only where the formula needs them
  SavedTensor saved_output;
  bool released = false;

  std::vector<Tensor> apply(Tensor grad_out) override;
  std::string name() const override;
  void release_saved() override;
  bool needs_input_grad(size_t i) const { return i < next.size() && next[i].valid(); }
};

// The sink for a leaf: adds the incoming gradient into leaf.grad().
struct AccumulateGrad final : Node {
  std::weak_ptr<TensorImpl> leaf;
  std::vector<Tensor> apply(Tensor grad_out) override;
  std::string name() const override { return "AccumulateGrad"; }
};

uint64_t next_sequence_nr();

// Installs autograd's observers into core's dispatch (idempotent; done when a tensor first
// requires grad).
void install();

}  // namespace autograd

struct AutogradMeta {
  bool requires_grad = false;
  Tensor grad;
  std::shared_ptr<autograd::Node> grad_fn;
  std::weak_ptr<autograd::Node> grad_accumulator;  // shared by every use of a leaf
  bool is_view = false;                            // recorded output of a view op
  // For a recorded view: its base and the base's grad_fn when the view was taken. A later
  // recorded in-place write to the base gives it a new grad_fn, and the view's history is stale.
  std::weak_ptr<TensorImpl> view_base;
  std::weak_ptr<autograd::Node> view_base_grad_fn;
};

namespace autograd {
// The edge a gradient of `t` flows into: its grad_fn, or its leaf accumulator; invalid when
// `t` does not require grad.
Edge gradient_edge(const Tensor& t);
AutogradMeta& meta(const Tensor& t);  // creates it if missing
}  // namespace autograd

}  // namespace ember
