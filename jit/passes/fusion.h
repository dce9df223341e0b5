#pragma once
// The fusion pass's working state (jit/passes/fuse.cpp), shared with the rewrite rules that
// seed or reshape its candidates (jit/passes/fusion_rules.cpp). Internal to jit/passes.
#include <algorithm>
#include <vector>

#include "jit/graph.h"

namespace ember::jit::fusion {

template <class V, class T>
bool contains(const V& v, const T& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

bool is_pointwise_node(const Node& n);

struct Candidate {
  GroupKind kind = GroupKind::Pointwise;
  std::vector<int32_t> nodes;  // ascending
  Shape shape;                 // output shape of the pointwise members
  Device device;
  bool closed = false;  // a reduction ends its group
};

class Fuser {
 public:
  explicit Fuser(Graph& g) : g_(g) {}
  void run();

 private:
  // ---- growth (fuse.cpp): candidates in node order, asked to the lowering at the end ----
  bool epilogue_capable(ValueId out) const;
  int32_t open(GroupKind kind, int32_t node);
  void add(int32_t ci, int32_t node);
  int32_t cand_of_value(ValueId v) const;
  bool can_add(int32_t ci, int32_t i) const;
  bool can_merge(int32_t ci, int32_t cj) const;
  void merge(int32_t ci, int32_t cj);
  bool fits(const Candidate& c, const Value& out) const;
  void place_view(int32_t i);
  void place_pointwise(int32_t i);
  void place_reduction(int32_t i);
  bool connected(const Candidate& c) const;
  bool ends_in_reduction(const Candidate& c) const;
  void dissolve(Candidate& c);
  Group group_of(int32_t ci) const;
  Group settle(int32_t ci);
  void finish();

  // ---- rewrite rules (fusion_rules.cpp): patterns the generic growth would not find ----
  // The softmax-cross-entropy forward and its backward as one CrossEntropy candidate (the loss
  // reduction between them moved out of the way first).
  void sink_loss_consumers();
  void pair_cross_entropy();
  void merge_cat_producers(int32_t i);
  void absorb_cat(int32_t ci, int32_t i);
  // The tail a contraction's GEMM call does not fold, as a Pointwise candidate of its own (or
  // -1), so that a pointwise chain reading it can take it (else merge() gives it back).
  int32_t detach_gemm_tail(int32_t cj);
  // A sum of a product alone, over leading dims, as a Reduction candidate of its own.
  bool lone_column_sum(const Node& n) const;
  // Pointwise candidates of a reduction's shape that read what it reads join it.
  void merge_reduction_siblings();
  // Small-K products computed inside the reduction kernel that reads them.
  void absorb_small_k_products();
  bool product_inside_reduction(int32_t ci, Group& out);
  // Casts of state, inputs and constants on a GPU moved up to the first of them, so that the
  // casts a step makes of its weights (autocast) sit together; then casts no group took, run
  // as one multi-tensor launch per legal cluster (GroupKind::Casts).
  void hoist_casts_of_leaves();
  void gather_casts();

  Graph& g_;
  std::vector<std::vector<ValueId>> writes_;  // per node: the roots it writes
  std::vector<int32_t> member_;               // per node: its candidate, or -1
  std::vector<Candidate> cands_;
  std::vector<char> returned_;
  std::vector<std::vector<int32_t>> root_readers_;  // per root: nodes reading its memory
};

}  // namespace ember::jit::fusion
