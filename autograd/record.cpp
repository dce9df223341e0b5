// Recording: core's dispatch calls these after each op (and before each in-place write) once
// autograd is installed. An op whose inputs need gradients gets an OpNode as its grad_fn.
#include <mutex>
#include <string>

#include "autograd/formulas.h"
#include "autograd/grad_mode.h"
#include "autograd/node.h"
#include "core/dispatch.h"

namespace ember::autograd {
namespace {

// The in-place method a refusal names: the one the user called. copy_ writes through the cast
// op, so its errors would otherwise say "cast_".
std::string inplace_name(OpId op) {
  return op == OpId::cast ? std::string("copy_") : std::string(op_name(op)) + "_";
}

bool requires_grad(const Tensor& t) {
  const AutogradMeta* m = t.impl()->autograd.get();
  return m && m->requires_grad;
}

// The pre-write value of a tensor an in-place op overwrites but whose backward needs it (e.g.
// c.mul_(y) needs the old c for y's gradient): check_inplace copies it before the kernel runs
// and record() saves the copy.
thread_local Tensor t_presaved;

// Refuses, before any data changes, in-place writes that would make gradients wrong, and keeps
// the pre-write value when the formula needs it.
void check_inplace(OpId op, std::span<const Tensor> inputs, const Tensor& out) {
  t_presaved = Tensor();
  if (!GradMode::is_enabled()) return;
  bool any = false;
  std::vector<bool> need(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) any |= (need[i] = requires_grad(inputs[i]));
  const AutogradMeta* m = out.impl()->autograd.get();
  if (m && m->requires_grad) {
    EMBER_CHECK(m->grad_fn != nullptr, inplace_name(op),
                ": a leaf tensor that requires grad cannot be modified in place while grad "
                "mode is on (wrap the update in NoGradGuard)");
    EMBER_CHECK(!m->is_view, inplace_name(op),
                ": in-place writes to a view of a tensor that requires grad are not supported; "
                "write to a copy (clone) instead");
  }
  if (!any || !is_differentiable(op)) return;
  EMBER_CHECK(!out.impl()->is_view || (m && m->requires_grad), inplace_name(op),
              ": writing a value that requires grad into a view is not supported (the base "
              "tensor would not see the gradient); build the result out of place instead");
  const SavePlan plan = save_plan(op, need);
  for (size_t i = 0; i < inputs.size() && i < 3; ++i) {
    if (plan.input[i] && inputs[i].is_same(out)) {
      NoGradGuard no_grad;
      t_presaved = out.clone();
    }
  }
}

// A recorded view whose base got a new history (a recorded in-place write) since the view was
// taken would backpropagate into the old history: refuse it.
void check_view_fresh(OpId op, const Tensor& t) {
  const AutogradMeta* m = t.impl()->autograd.get();
  if (!m || !m->is_view) return;
  const std::shared_ptr<TensorImpl> base = m->view_base.lock();
  if (!base || !base->autograd) return;
  EMBER_CHECK(base->autograd->grad_fn == m->view_base_grad_fn.lock(), op_name(op),
              ": one of its inputs is a view whose base was modified in place after the view "
              "was taken; take the view again after the in-place operation");
}

void record(OpId op, std::span<const Tensor> inputs, const Attrs& attrs, const Tensor& out,
            bool inplace) {
  if (!GradMode::is_enabled() || !out.defined()) return;
  std::vector<bool> need(inputs.size());
  bool any = false;
  for (size_t i = 0; i < inputs.size(); ++i) any |= (need[i] = requires_grad(inputs[i]));
  const bool differentiable = any && is_differentiable(op) && is_floating(out.dtype());
  if (!differentiable) {
    // An in-place write of a value that no longer depends on anything differentiable cuts the
    // tensor's history: its old grad_fn would describe the overwritten value.
    if (inplace && out.impl()->autograd) {
      AutogradMeta& m = meta(out);
      m.grad_fn.reset();
      m.requires_grad = false;
    }
    return;
  }
  auto node = std::make_shared<OpNode>();
  node->op = op;
  node->attrs = attrs;
  node->sequence_nr = next_sequence_nr();
  node->inputs.reserve(inputs.size());
  node->next.reserve(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (need[i]) check_view_fresh(op, inputs[i]);
    const Tensor& t = inputs[i];
    const bool column_major = t.dim() == 2 && t.size(0) > 1 && t.size(1) > 1 && t.stride(0) == 1 &&
                              t.stride(1) >= t.size(0);
    node->inputs.push_back({t.sizes(), t.dtype(), t.device(), column_major});
    node->next.push_back(need[i] ? gradient_edge(inputs[i]) : Edge{});
  }
  const SavePlan plan = save_plan(op, need);
  node->saved_inputs.resize(inputs.size());
  for (size_t i = 0; i < inputs.size() && i < 3; ++i) {
    if (!plan.input[i]) continue;
    if (inplace && inputs[i].is_same(out)) {
      // The value before the write, copied by check_inplace.
      node->saved_inputs[i] =
          t_presaved.defined() ? SavedTensor(t_presaved, false) : SavedTensor(inputs[i], true);
    } else {
      node->saved_inputs[i] = SavedTensor(inputs[i], false);
    }
  }
  t_presaved = Tensor();
  if (plan.output) node->saved_output = SavedTensor(out, false);
  AutogradMeta& m = meta(out);
  m.requires_grad = true;
  m.grad_fn = std::move(node);
  if (op_info(op).kind == OpKind::View) {
    m.is_view = true;
    m.view_base = inputs[0].impl_ptr();
    if (inputs[0].impl()->autograd) m.view_base_grad_fn = inputs[0].impl()->autograd->grad_fn;
  }
}

}  // namespace

void install() {
  static std::once_flag once;
  std::call_once(once, [] {
    set_autograd_observer(&record);
    set_autograd_inplace_check(&check_inplace);
  });
}

}  // namespace ember::autograd
