#pragma once
// Where every value of an executable lives during a replay: one tensor per value id (a slot),
// placed in the memory plan's arenas, in the state and constants the trace met, in the
// arguments bound per call, or in fresh memory per call for what the call returns. Also what a
// replay leaves behind on the state: gradients set, version counters bumped.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "jit/arena_pool.h"
#include "jit/graph.h"
#include "jit/passes.h"

namespace ember::jit {

struct Binding {
  // Makes the slots (arenas still without memory: prepare_arenas() gives it at the first call).
  // `g` and `plan` must outlive the binding; `pool` null: arenas of its own.
  void build(Graph& g, const MemoryPlan& plan, std::shared_ptr<ArenaPool> pool);

  // Before each call: the arenas' memory, taken at the first call. True when the shared arenas
  // moved since the last call (another executable grew them): anything holding their old
  // addresses (a captured CUDA graph) must be remade.
  bool prepare_arenas();
  // A plain replay: the arguments' memory (and the views the trace took of them) into the slots.
  void bind_args(std::span<const Tensor> args);
  // A plain replay: memory of its own for every returned root (after the gradients this call
  // replaces are let go, so the old and new ones never coexist).
  void make_fresh();
  // After the steps ran: versions of the state and arguments the replay wrote, and the grads.
  void apply_effects();
  // Gradients the replay replaces wholesale, let go before it allocates (see binding.cpp).
  void drop_replaced_grads();
  // A replay that threw: gradients left pointing at overwritten arena bytes are dropped.
  void abandon_replay();
  // Drops this call's arguments and returned memory from the slots.
  void release_call_memory();
  // Why the executable can no longer run (state moved, requires_grad changed), or empty.
  std::string stale_reason() const;

  Tensor slot_tensor(ValueId v) const { return Tensor(slots[v]); }
  // Arena `k` of the plan (its memory comes at the first call; the object stays).
  const StoragePtr& arena(int32_t k) const { return arenas_[static_cast<size_t>(k)]; }

  std::vector<std::shared_ptr<TensorImpl>> slots;  // per value id
  // Per input argument: the values whose storage follows it (the root and its views).
  std::vector<std::vector<ValueId>> input_members;
  // Roots allocated fresh per replay, and the values sharing each.
  std::vector<ValueId> fresh_roots;
  std::vector<std::vector<ValueId>> fresh_members;
  std::vector<ValueId> written_external;  // state and argument roots whose version a replay bumps

 private:
  void allocate_arenas();

  Graph* g_ = nullptr;
  const MemoryPlan* plan_ = nullptr;
  // The plan's arenas. Their memory is taken at the first replay, not when the executable is
  // built (see allocate_arenas), so arena_bytes_ keeps each one's size until then.
  std::vector<StoragePtr> arenas_;
  std::vector<size_t> arena_bytes_;
  bool arenas_allocated_ = false;
  std::shared_ptr<ArenaPool> pool_;
  uint64_t seen_generation_ = 0;      // the pool's generation when this plan's arenas last fit
  std::vector<Tensor> grad_tensors_;  // per grad effect (undefined: clears the grad)
  std::vector<const Storage*> state_storage_;
  std::vector<bool> state_requires_grad_;
};

}  // namespace ember::jit
