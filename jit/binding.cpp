#include "jit/binding.h"

#include <algorithm>

#include "core/allocator.h"

namespace ember::jit {
namespace {

std::shared_ptr<TensorImpl> impl_for(const Value& v) {
  auto impl = std::make_shared<TensorImpl>();
  impl->sizes = v.shape;
  impl->strides = v.strides;
  impl->offset = v.offset;
  impl->dtype = v.dtype;
  impl->device = v.device;
  return impl;
}

}  // namespace

void Binding::build(Graph& g, const MemoryPlan& plan, std::shared_ptr<ArenaPool> pool) {
  g_ = &g;
  plan_ = &plan;
  const size_t nv = g.values.size();
  slots.assign(nv, nullptr);
  // Empty storages for now, shared by the slots that live in them: allocate_arenas() gives them
  // memory at the first replay.
  pool_ = std::move(pool);
  for (size_t k = 0; k < plan.arenas.size(); ++k) {
    const MemoryPlan::Arena& a = plan.arenas[k];
    arenas_.push_back(
        pool_ ? pool_->storage(k, a.device)
              : std::make_shared<Storage>(size_t{0}, a.device, allocator_for(a.device)));
    arena_bytes_.push_back(static_cast<size_t>(std::max<int64_t>(a.bytes, 1)));
  }
  input_members.assign(g.inputs.size(), {});
  std::vector<int32_t> fresh_index(nv, -1);
  // Roots first: passes can leave a name aliasing a root made after it (constant folding
  // points a replaced value at its constant).
  for (size_t i = 0; i < nv; ++i) {
    const auto id = static_cast<ValueId>(i);
    const Value& v = g.values[i];
    if (v.root != id) continue;
    switch (v.kind) {
      case ValueKind::State:
        slots[i] = g.state[v.slot].impl_ptr();
        break;
      case ValueKind::Constant:
        slots[i] = g.constants[v.slot].impl_ptr();
        break;
      case ValueKind::Input:
        slots[i] = impl_for(v);
        break;
      case ValueKind::Node: {
        slots[i] = impl_for(v);
        if (plan.arena_of[i] >= 0) {
          slots[i]->storage = arenas_[plan.arena_of[i]];
          slots[i]->offset = plan.offset_of[i] / element_size(v.dtype);
        } else if (plan.fresh[i]) {
          fresh_index[i] = static_cast<int32_t>(fresh_roots.size());
          fresh_roots.push_back(id);
          fresh_members.push_back({id});
        }
        break;
      }
    }
  }
  for (size_t i = 0; i < nv; ++i) {
    const auto id = static_cast<ValueId>(i);
    const Value& v = g.values[i];
    if (v.root == id) continue;
    // A view or in-place version: the root's memory, at the same distance from the root's
    // first element as in the trace.
    const Value& r = g.values[v.root];
    slots[i] = impl_for(v);
    slots[i]->storage = slots[v.root]->storage;
    slots[i]->offset = slots[v.root]->offset + (v.offset - r.offset);
    if (fresh_index[v.root] >= 0) fresh_members[fresh_index[v.root]].push_back(id);
  }
  // Arguments: the values following each argument's memory.
  for (size_t a = 0; a < g.inputs.size(); ++a) {
    const ValueId root = g.inputs[a];
    if (g.values[root].slot != static_cast<int32_t>(a)) continue;  // an aliased argument
    for (size_t i = 0; i < nv; ++i)
      if (g.values[i].root == root) input_members[a].push_back(static_cast<ValueId>(i));
  }
  for (const GradEffect& e : g.grad_effects) {
    if (e.value == kNoValue || plan.fresh[g.values[e.value].root]) {
      grad_tensors_.emplace_back();  // cleared, or rebuilt per replay
    } else {
      grad_tensors_.push_back(Tensor(slots[e.value]).detach());
    }
  }
  for (const Tensor& s : g.state) {
    state_storage_.push_back(s.impl()->storage.get());
    state_requires_grad_.push_back(s.requires_grad());
  }
  std::vector<bool> bump(nv, false);
  std::vector<ValueId> roots;
  for (const Node& n : g.nodes) {
    g.writes(n, roots);
    for (ValueId r : roots)
      if (g.values[r].kind == ValueKind::State || g.values[r].kind == ValueKind::Input)
        bump[r] = true;
  }
  for (size_t i = 0; i < nv; ++i)
    if (bump[i]) written_external.push_back(static_cast<ValueId>(i));
}

bool Binding::prepare_arenas() {
  if (!arenas_allocated_) {
    allocate_arenas();
    return false;
  }
  if (!pool_ || pool_->generation() == seen_generation_) return false;
  // Another executable of the function moved the shared arenas: make sure they still hold
  // this plan.
  for (size_t k = 0; k < arenas_.size(); ++k)
    pool_->reserve(k, plan_->arenas[k].device, arena_bytes_[k]);
  seen_generation_ = pool_->generation();
  return true;
}

// The arenas' memory, taken at the first replay rather than when the executable was built: the
// build happens inside the last traced call, whose eager gradients the caller holds until the
// next call replaces them, and arena + those gradients would be a peak above eager's.
void Binding::allocate_arenas() {
  drop_replaced_grads();
  for (size_t k = 0; k < arenas_.size(); ++k) {
    if (pool_) {
      pool_->reserve(k, plan_->arenas[k].device, arena_bytes_[k]);
      continue;
    }
    Storage& s = *arenas_[k];
    s.data = s.allocator->allocate(arena_bytes_[k]);
    s.nbytes = arena_bytes_[k];
  }
  if (pool_) seen_generation_ = pool_->generation();
  arenas_allocated_ = true;
}

void Binding::bind_args(std::span<const Tensor> args) {
  const Graph& g = *g_;
  for (size_t a = 0; a < input_members.size(); ++a) {
    if (input_members[a].empty()) continue;
    const TensorImpl& arg = *args[a].impl();
    const Value& root = g.values[g.inputs[a]];
    const int64_t shift = arg.offset - root.offset;
    for (ValueId v : input_members[a]) {
      TensorImpl& s = *slots[v];
      s.storage = arg.storage;
      s.offset = g.values[v].offset + shift;
    }
  }
}

void Binding::make_fresh() {
  if (!fresh_roots.empty()) drop_replaced_grads();
  for (size_t f = 0; f < fresh_roots.size(); ++f) {
    const Value& r = g_->values[fresh_roots[f]];
    StoragePtr st = make_empty(r.shape, r.dtype, r.device).impl()->storage;
    for (ValueId v : fresh_members[f]) slots[v]->storage = st;
  }
}

std::string Binding::stale_reason() const {
  const Graph& g = *g_;
  for (size_t i = 0; i < g.state.size(); ++i) {
    const TensorImpl& t = *g.state[i].impl();
    if (t.storage.get() != state_storage_[i])
      return "state " + std::to_string(i) + " (shape " + t.sizes.str() +
             ") now lives in other memory (moved or reallocated)";
    if (g.state[i].requires_grad() != state_requires_grad_[i])
      return "state " + std::to_string(i) + " (shape " + t.sizes.str() + ") changed requires_grad";
  }
  return {};
}

void Binding::apply_effects() {
  Graph& g = *g_;
  for (ValueId r : written_external) ++slots[r]->storage->version;
  for (size_t i = 0; i < g.grad_effects.size(); ++i) {
    const GradEffect& e = g.grad_effects[i];
    Tensor& param = g.state[e.state];
    if (e.value == kNoValue) {
      param.set_grad(Tensor());
    } else if (grad_tensors_[i].defined()) {
      param.set_grad(grad_tensors_[i]);
    } else {
      param.set_grad(Tensor(slots[e.value]).detach());
    }
  }
}

// Gradients this replay replaces wholesale (every grad effect sets the parameter's gradient,
// and a gradient the graph reads is state, never dropped here) are let go before the replay
// allocates: otherwise the last call's gradients and this call's new ones are alive together,
// a peak eager never has (its zero_grad frees them before backward). Nobody can observe the
// gap: apply_effects() sets every one of them before the call returns.
void Binding::drop_replaced_grads() {
  Graph& g = *g_;
  for (const GradEffect& e : g.grad_effects) {
    Tensor& param = g.state[e.state];
    const Tensor old = param.grad();
    if (!old.defined() || old.impl()->storage == nullptr) continue;
    const Storage* st = old.impl()->storage.get();
    bool ours = std::find(state_storage_.begin(), state_storage_.end(), st) != state_storage_.end();
    for (const StoragePtr& a : arenas_) ours = ours || a.get() == st;
    if (!ours) param.set_grad(Tensor());
  }
}

// A replay that throws (a kernel met bad input, e.g. an out-of-range target on the CPU) has
// applied none of its effects, but its kernels may already have written over arena memory that a
// parameter's gradient from the last call still points at. Such a gradient is dropped, as the
// step's zero_grad would have left it, rather than left holding another value's bytes; and the
// call's arguments and returned memory are let go as after a replay that finishes.
void Binding::abandon_replay() {
  Graph& g = *g_;
  for (const GradEffect& e : g.grad_effects) {
    Tensor& param = g.state[e.state];
    const Tensor old = param.grad();
    if (!old.defined() || old.impl()->storage == nullptr) continue;
    const Storage* st = old.impl()->storage.get();
    for (const StoragePtr& a : arenas_)
      if (a.get() == st) {
        param.set_grad(Tensor());
        break;
      }
  }
  release_call_memory();
}

// Holding a call's arguments and returned memory in the slots would keep a whole batch alive
// into the next call (where the caller has already made the next one).
void Binding::release_call_memory() {
  for (const std::vector<ValueId>& members : input_members)
    for (ValueId v : members) slots[v]->storage.reset();
  for (const std::vector<ValueId>& members : fresh_members)
    for (ValueId v : members) slots[v]->storage.reset();
}

}  // namespace ember::jit
