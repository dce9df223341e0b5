// The autograd methods of Tensor (declared in core/tensor.h).
#include "autograd/engine.h"
#include "autograd/node.h"
#include "core/trace_hooks.h"

namespace ember {

bool Tensor::requires_grad() const {
  const AutogradMeta* m = checked("requires_grad").autograd.get();
  return m && m->requires_grad;
}

Tensor& Tensor::requires_grad_(bool on) {
  EMBER_CHECK(defined(), "requires_grad_: undefined tensor");
  AutogradMeta* m = impl()->autograd.get();
  if (!on) {
    EMBER_CHECK(!m || !m->grad_fn,
                "requires_grad_: only leaf tensors can stop requiring grad; "
                "use detach() for a non-leaf");
    if (m) m->requires_grad = false;
    return *this;
  }
  EMBER_CHECK(is_floating(dtype()),
              "requires_grad_: only floating-point tensors can require "
              "gradients, got ",
              dtype_name(dtype()));
  autograd::install();
  autograd::meta(*this).requires_grad = true;
  return *this;
}

bool Tensor::is_leaf() const {
  const AutogradMeta* m = checked("is_leaf").autograd.get();
  return !m || !m->grad_fn;
}

Tensor Tensor::grad() const {
  const AutogradMeta* m = checked("grad").autograd.get();
  Tensor g = m ? m->grad : Tensor();
  if (const TraceHooks* h = trace_hooks(); h && h->on_grad_read) h->on_grad_read(*this, g);
  return g;
}

void Tensor::set_grad(const Tensor& g) {
  EMBER_CHECK(defined(), "set_grad: undefined tensor");
  if (g.defined()) {
    EMBER_CHECK(g.sizes() == sizes() && g.dtype() == dtype() && g.device() == device(),
                "set_grad: gradient ", dtype_name(g.dtype()), " ", g.sizes(), " on ",
                g.device().str(), " does not match the tensor (", dtype_name(dtype()), " ", sizes(),
                " on ", device().str(), ")");
  } else if (!impl()->autograd) {
    return;
  }
  autograd::meta(*this).grad = g;
  if (const TraceHooks* h = trace_hooks(); h && h->on_grad_set) h->on_grad_set(*this, g);
}

std::shared_ptr<autograd::Node> Tensor::grad_fn() const {
  const AutogradMeta* m = checked("grad_fn").autograd.get();
  return m ? m->grad_fn : nullptr;
}

void Tensor::backward(const Tensor& gradient, bool retain_graph) const {
  autograd::backward({*this}, {gradient}, retain_graph);
}

Tensor Tensor::detach() const {
  EMBER_CHECK(defined(), "detach: undefined tensor");
  auto impl2 = std::make_shared<TensorImpl>(*impl());
  impl2->autograd.reset();
  return Tensor(std::move(impl2));
}

}  // namespace ember
