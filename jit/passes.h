#pragma once
// The passes over a traced Graph, one per file under jit/passes/. Each rewrites the graph in
// place and keeps its meaning: the same external effects (writes to state and inputs, .grad
// assignments) and the same outputs, in the same order where memory aliases.
#include <cstdint>
#include <string>
#include <vector>

#include "jit/graph.h"

namespace ember::jit {

// Removes nodes whose result nobody needs: not read by a live node, not an output, not a grad
// effect, and not writing memory that outlives the replay (state, inputs, outputs).
void eliminate_dead_code(Graph& g);

// Merges identical pure nodes (same op, attrs and inputs, no write to an input's memory between
// them); later uses read the first. Random ops, in-place ops and updates are never merged.
void eliminate_common_subexpressions(Graph& g);

// Evaluates pure nodes whose inputs are all constants (small ones, on the host or the device)
// at compile time and makes their results constants: e.g. a host-data tensor moved to the GPU,
// or arithmetic on wrapped numbers.
void fold_constants(Graph& g);

// A 0-dim device constant whose every reader takes a 0-dim host tensor in its place with the
// same result (pointwise ops, a reduced loss's gradient: core's meta functions say) becomes a
// host constant, read by value: an executable holds no device block for a folded seed or
// scalar, where eager makes and frees one during the step. Leaves the device constant unread.
void host_scalar_constants(Graph& g);

// Lets go of the memory of constants nothing reads any more (what folding consumed: a folded
// chain's inputs and intermediates, a wrapped number folded into a cast). Their values keep
// their metadata; an executable would otherwise hold them for its whole life.
void release_unused_constants(Graph& g);

// Products mm(A_i, B) with one right operand B, none of whose left operands depends on another's
// result (a cell loop's input projections), become one mm(cat(A_i), B) whose row blocks replace
// them, at the first one's position: one GEMM over all the rows instead of one per step.
void batch_products(Graph& g);

// A sum of slice gradients (each zeros with one gradient copied into a slice, the slices
// disjoint along one dim) becomes one cat of the gradients, with zeros for uncovered ranges: the
// backward of a tensor read in parts (gates, time steps) writes each part once instead of
// filling, copying and adding whole-size tensors per part.
void assemble_slice_sums(Graph& g);

// A sum of products sum_i A_i B_i (adds over mm results, or over their transposes, each read
// once) becomes one mm(cat(A_i, 1), cat(B_i, 0)): a weight used at every step of a loop gets
// its gradient from one GEMM over all the steps instead of a GEMM and an addition per step.
// Rounds differently from the per-term sum (same value to float precision).
void sum_products(Graph& g);

// A pointwise result read only through disjoint slices along one dim, each slice read only by
// pointwise nodes, is computed per slice (op(x, y)[s] == op(x[s], y[s])): the slices' readers
// then compute it in their own kernel (an LSTM's gate pre-activations, cut into four gates).
void split_sliced_pointwise(Graph& g);

// Canonical forms the executor prefers: view ops that change nothing are dropped (their uses
// read the input); a contiguous() copy feeding only matmuls, of a value nobody writes later, is
// dropped (GEMMs read transposed operands through their layout flags); a same-dtype cast of a
// value that is dead afterwards and never written aliases its source instead of copying; so does
// one that only becomes a parameter's gradient, when the source's memory is exactly the copy's
// and no other gradient or output holds it (the parameter then holds the source's memory).
void canonicalize(Graph& g);

// Groups nodes the executor runs as one unit (Graph::groups, Node::group): pointwise chains of
// one shape, reductions consuming them, bias/activation epilogues of matmuls, and the
// cross-entropy forward+backward pair. See GroupKind.
void fuse(Graph& g);

// Where every stored value lives during a replay.
struct MemoryPlan {
  struct Arena {
    Device device;
    int64_t bytes = 0;
    // The most bytes placed in it that are live at one node: no layout can be smaller, so
    // bytes - live_bound is what the placement lost to holes.
    int64_t live_bound = 0;
  };
  std::vector<Arena> arenas;  // one per device the graph computes on
  // Per value id: the arena and byte offset of the storage it owns, or -1 when it owns none
  // here (views, inputs, state, constants, outputs and group-internal values that never exist).
  std::vector<int32_t> arena_of;
  std::vector<int64_t> offset_of;
  // Per value id: true when a replay allocates it fresh (roots of returned outputs, so a caller
  // never sees a later call overwrite what it holds).
  std::vector<bool> fresh;
  // Per group: the arena and byte offset of the scratch its runner asked for (plan_memory's
  // `workspace`), or -1 when it asked for none. It is the group's only while the group runs, so
  // it takes bytes that are dead at that point rather than memory of its own for the replay.
  std::vector<int32_t> workspace_arena;
  std::vector<int64_t> workspace_offset;
  std::vector<int64_t> workspace_bytes;  // as asked (before rounding)
  // Per value id: for a fresh root that no one reads after the replay (a returned loss, not a
  // gradient left on a parameter), the arena and byte offset of the static buffer a CUDA graph
  // writes it to before copying it out (plan_memory's `graph_statics`); -1 otherwise. It is
  // placed like a stored value, live from its producer to its last use: dead bytes then, not
  // memory of its own beside the arena (which the copy each call returns would double).
  std::vector<int32_t> static_arena_of;
  std::vector<int64_t> static_offset_of;
  int64_t total_bytes() const;
};
// How the executor runs a group decides which of its values need memory.
enum class GroupStorage : uint8_t {
  Materialize,  // op by op: every value stored
  Tail,         // a GEMM whose product is stored, then a chunked/fused pointwise tail
  None,         // one fused unit: values that stay inside the group are never stored
};
// Liveness over the node order -> offsets, reusing the space of dead values (first fit, 256-byte
// aligned). `storage[i]` says how group i runs; `workspace[i]` (if given) is how many bytes of
// scratch group i needs while it runs, placed in the arena of the group's device.
MemoryPlan plan_memory(const Graph& g, const std::vector<GroupStorage>& storage,
                       const std::vector<int64_t>& workspace = {}, bool graph_statics = false);
// The executor's defaults: `materialize_group_internals` stores everything (groups run as
// separate kernels); otherwise pointwise and reduction groups keep their internals out of
// memory, a GEMM epilogue stores its product only, cross-entropy pairs store everything.
MemoryPlan plan_memory(const Graph& g, bool materialize_group_internals);
std::vector<GroupStorage> default_group_storage(const Graph& g, bool materialize);

// Counts for logs and explain().
struct PassReport {
  std::string pass;
  int32_t nodes_before = 0, nodes_after = 0;
};

// Runs every pass in order (dce, cse, fold, batch_products, slice_sums, sum_products,
// canonicalize, dce, release_constants, fuse) and reports each.
std::vector<PassReport> optimize(Graph& g);

}  // namespace ember::jit
