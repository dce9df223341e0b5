#include "autograd/node.h"

#include <atomic>

#include "autograd/formulas.h"
#include "autograd/grad_mode.h"
#include "core/dispatch.h"
#include "core/ops.h"
#include "core/trace_hooks.h"

namespace ember::autograd {

uint64_t next_sequence_nr() {
  static std::atomic<uint64_t> counter{0};
  return counter.fetch_add(1, std::memory_order_relaxed);
}

namespace {
Tensor alias_without_grad(const Tensor& t) {
  auto impl = std::make_shared<TensorImpl>(*t.impl());
  impl->autograd.reset();
  return Tensor(std::move(impl));
}
}  // namespace

SavedTensor::SavedTensor(const Tensor& t, bool written_by_this_op)
    : data_(alias_without_grad(t)),
      // An in-place op already bumped the version of what it wrote: the value saved is the
      // pre-op one, which is gone, so record the version it had before.
      version_(t.version() - (written_by_this_op ? 1 : 0)) {}

Tensor SavedTensor::unpack(const char* op) const {
  EMBER_CHECK(data_.defined(), op,
              ": a tensor saved for backward was freed; backward through the graph a second time "
              "needs retain_graph=true on the first call");
  EMBER_CHECK(data_.version() == version_, op,
              ": a tensor needed for its gradient was modified by an in-place operation (version ",
              data_.version(), ", saved at version ", version_, ")");
  return data_;
}

std::vector<Tensor> OpNode::apply(Tensor grad_out) {
  EMBER_CHECK(!released, name(),
              ": backward through the graph a second time (or after its saved tensors were "
              "freed); pass retain_graph=true to the first backward");
  return backward_formula(*this, grad_out);
}

std::string OpNode::name() const { return std::string(op_name(op)) + "Backward"; }

void OpNode::release_saved() {
  for (SavedTensor& s : saved_inputs) s.reset();
  saved_output.reset();
  released = true;
}

std::vector<Tensor> AccumulateGrad::apply(Tensor g) {
  std::shared_ptr<TensorImpl> impl = leaf.lock();
  if (!impl) return {};  // the leaf is gone: nobody can read its grad
  Tensor t(impl);
  AutogradMeta& m = meta(t);
  NoGradGuard no_grad;
  if (g.dtype() != t.dtype()) g = g.to(t.dtype());
  // What the slot holds decides between the two paths below: a tracer records it.
  if (const TraceHooks* h = trace_hooks(); h && h->on_grad_read) h->on_grad_read(t, m.grad);
  if (!m.grad.defined()) {
    // Keep the incoming buffer when this is its only handle and nothing else shares its memory;
    // otherwise own a copy, so a later in-place update of .grad cannot write into another tensor.
    const bool sole = g.impl_ptr().use_count() == 1 && g.impl()->storage.use_count() == 1 &&
                      g.is_contiguous() && g.storage_offset() == 0;
    m.grad = sole ? alias_without_grad(g) : g.clone();
    if (const TraceHooks* h = trace_hooks(); h && h->on_grad_set) h->on_grad_set(t, m.grad);
  } else {
    m.grad.add_(g);
  }
  // By index: a hook may register another (which then first runs on the next backward).
  const size_t hooks = m.post_accumulate_grad_hooks.size();
  for (size_t i = 0; i < hooks; ++i)
    if (m.post_accumulate_grad_hooks[i]) m.post_accumulate_grad_hooks[i](t);
  return {};
}

AutogradMeta& meta(const Tensor& t) {
  if (!t.impl()->autograd) t.impl()->autograd = std::make_shared<AutogradMeta>();
  return *t.impl()->autograd;
}

Edge gradient_edge(const Tensor& t) {
  AutogradMeta* m = t.impl()->autograd.get();
  if (!m || !m->requires_grad) return {};
  if (m->grad_fn) return {m->grad_fn};
  std::shared_ptr<Node> acc = m->grad_accumulator.lock();
  if (!acc) {
    auto a = std::make_shared<AccumulateGrad>();
    a->leaf = t.impl_ptr();
    a->sequence_nr = next_sequence_nr();
    m->grad_accumulator = a;
    acc = std::move(a);
  }
  return {acc};
}

}  // namespace ember::autograd
