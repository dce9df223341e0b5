// The JIT's graph passes on graphs built by hand: what each pass removes, merges, folds,
// rewrites and groups, and what it must leave alone (writes to state and inputs, random ops,
// merges across in-place writes, copies a kernel needs, interleaved writes). The memory plan is
// checked by brute force against liveness computed here from the graph.
#include <algorithm>
#include <string>
#include <vector>

#include "core/factory.h"
#include "graph_builders.h"
#include "jit/binding.h"
#include "jit/capture_branches.h"
#include "jit/passes.h"
#include "jit/steps.h"
#include "test_util.h"

using namespace ember;
using namespace ember::jit;
using namespace ember::jit::graph_test;

namespace {

Attrs shape_attrs(const Shape& s) {
  Attrs a;
  a.shape = s;
  return a;
}
Attrs dims_attrs(const Dims& d) {
  Attrs a;
  a.dims = d;
  return a;
}
Attrs dim_attrs(int64_t d) {
  Attrs a;
  a.dim = d;
  return a;
}

ValueId random_node(Graph& g, OpId op, const Shape& shape, uint64_t seed, uint64_t offset) {
  Attrs a;
  a.shape = shape;
  a.seed = seed;
  a.offset = offset;
  return g.append(op, {}, a);
}

int count_op(const Graph& g, OpId op) {
  return static_cast<int>(
      std::count_if(g.nodes.begin(), g.nodes.end(), [&](const Node& n) { return n.op == op; }));
}

const Node& producer(const Graph& g, ValueId v) {
  REQUIRE(g.values[v].producer >= 0);
  return g.nodes[g.values[v].producer];
}

std::vector<float> constant_data(const Graph& g, ValueId v) {
  REQUIRE(g.values[v].kind == ValueKind::Constant);
  return g.constants[g.values[v].slot].contiguous().to_vector<float>();
}

// Producers consistent with the node list (erase/reorder must reindex).
void check_producers(const Graph& g) {
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (g.nodes[i].out != kNoValue) CHECK(g.values[g.nodes[i].out].producer == (int32_t)i);
}

// The ops of a group's members, in order.
std::vector<OpId> group_ops(const Graph& g, const Group& grp) {
  std::vector<OpId> ops;
  for (int32_t m : grp.nodes) ops.push_back(g.nodes[m].op);
  return ops;
}

const Group* group_with(const Graph& g, GroupKind kind, OpId op) {
  for (const Group& grp : g.groups)
    if (grp.kind == kind)
      for (int32_t m : grp.nodes)
        if (g.nodes[m].op == op) return &grp;
  return nullptr;
}

template <class V, class T>
bool has(const V& v, const T& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// The seed MLP's training step as the tracer records it (before any pass): forward with two
// linear layers and ReLU, mean cross-entropy, its backward, .grad effects.
struct Mlp {
  Graph g;
  ValueId x, y, W1, b1, W2, b2;
  ValueId W1t, h, h2, a, W2t, o, o2, ce, loss;
  ValueId one, gd, ge, gc, dO, db2, dOt, dW2, dA, mask, dH, db1, dHt, dW1;

  Mlp() {
    x = g.add_input(zeros({8, 16}), 0);
    y = g.add_input(zeros({8}, kInt64), 1);
    W1 = g.add_state(zeros({32, 16}));
    b1 = g.add_state(zeros({32}));
    W2 = g.add_state(zeros({4, 32}));
    b2 = g.add_state(zeros({4}));
    Attrs t;
    t.dims = {1, 0};
    W1t = g.append(OpId::permute, {W1}, t);
    h = g.append(OpId::mm, {x, W1t});
    h2 = g.append(OpId::add, {h, b1});
    a = g.append(OpId::relu, {h2});
    W2t = g.append(OpId::permute, {W2}, t);
    o = g.append(OpId::mm, {a, W2t});
    o2 = g.append(OpId::add, {o, b2});
    ce = g.append(OpId::cross_entropy, {o2, y});
    loss = g.append(OpId::mean, {ce}, dims_attrs({0}));
    // backward
    one = fill_node(g, {}, 1.0);
    const ValueId n8 = g.add_constant(wrap_scalar(8.0, kFloat32));
    gd = g.append(OpId::div, {one, n8});
    ge = g.append(OpId::expand, {gd}, shape_attrs({8}));
    gc = g.append(OpId::cast, {ge});  // contiguous(): the loss kernel needs it
    dO = g.append(OpId::cross_entropy_backward, {gc, o2, y});
    db2 = g.append(OpId::sum, {dO}, dims_attrs({0}));
    dOt = g.append(OpId::permute, {dO}, t);
    dW2 = g.append(OpId::mm, {dOt, a});
    dA = g.append(OpId::mm, {dO, W2});
    const ValueId zero = g.add_constant(wrap_scalar(0.0, kFloat32));
    mask = g.append(OpId::gt, {a, zero});
    dH = g.append(OpId::where, {mask, dA, zero});
    db1 = g.append(OpId::sum, {dH}, dims_attrs({0}));
    dHt = g.append(OpId::permute, {dH}, t);
    dW1 = g.append(OpId::mm, {dHt, x});
    g.grad_effects = {{g.values[W1].slot, dW1},
                      {g.values[b1].slot, db1},
                      {g.values[W2].slot, dW2},
                      {g.values[b2].slot, db2}};
    g.outputs = {loss};
  }
};

// Brute force: every stored value is an owned root with an aligned range inside its arena, no
// two values live at the same time overlap, outputs are fresh, and every owned root that must
// exist has storage. Liveness is recomputed here from the definitions (producer to the last
// node touching the root's memory, group members counting at their group's last member).
// Checks the plan against the graph (storage where needed, no two buffers live together share
// bytes) and returns a lower bound of any plan's arena bytes: the most bytes of stored buffers
// live at one position (each rounded up to the planner's 256-byte alignment).
int64_t check_plan(const Graph& g, const MemoryPlan& p, bool materialize) {
  const size_t nv = g.values.size(), nn = g.nodes.size();
  REQUIRE(p.arena_of.size() == nv);
  REQUIRE(p.offset_of.size() == nv);
  REQUIRE(p.fresh.size() == nv);
  auto pos = [&](size_t i) -> int64_t {
    const int32_t gi = g.nodes[i].group;
    return gi >= 0 ? g.groups[gi].nodes.back() : static_cast<int64_t>(i);
  };
  auto owned = [&](size_t v) {
    const Value& x = g.values[v];
    if (x.kind != ValueKind::Node || x.root != (ValueId)v || x.producer < 0) return false;
    const Node& n = g.nodes[x.producer];
    return !n.inplace && op_info(n.op).kind != OpKind::View;
  };
  std::vector<int64_t> lo(nv, -1), hi(nv, -1);
  for (size_t v = 0; v < nv; ++v)
    if (owned(v)) lo[v] = hi[v] = g.values[v].producer;
  std::vector<ValueId> w;
  for (size_t i = 0; i < nn; ++i) {
    std::vector<ValueId> touched;
    for (ValueId in : g.nodes[i].inputs) touched.push_back(g.values[in].root);
    g.writes(g.nodes[i], w);
    touched.insert(touched.end(), w.begin(), w.end());
    if (g.nodes[i].out != kNoValue) touched.push_back(g.values[g.nodes[i].out].root);
    for (ValueId r : touched)
      if (lo[r] >= 0) hi[r] = std::max(hi[r], pos(i));
  }
  for (const GradEffect& e : g.grad_effects)
    if (e.value != kNoValue && lo[g.values[e.value].root] >= 0)
      hi[g.values[e.value].root] = static_cast<int64_t>(nn);
  std::vector<char> internal(nv, 0);
  // Only pointwise chains (after a GEMM or feeding a reduction) keep values out of memory; a
  // GEMM's product and the cross-entropy pair are whole-tensor kernels.
  for (const Group& grp : g.groups) {
    if (grp.kind == GroupKind::CrossEntropy) continue;
    const size_t first = grp.kind == GroupKind::GemmEpilogue ? 1 : 0;  // the GEMM stores
    for (size_t i = first; i < grp.nodes.size(); ++i)
      if (!has(grp.outputs, g.nodes[grp.nodes[i]].out)) internal[g.nodes[grp.nodes[i]].out] = 1;
  }
  std::vector<char> out_root(nv, 0);
  for (ValueId o : g.outputs) out_root[g.values[o].root] = 1;

  auto bytes = [&](size_t v) { return g.values[v].numel() * element_size(g.values[v].dtype); };
  for (size_t v = 0; v < nv; ++v) {
    if (out_root[v] && owned(v)) {
      CHECK(p.fresh[v]);
      CHECK(p.arena_of[v] == -1);
    }
    if (p.arena_of[v] < 0) {
      // Only fresh outputs and (unless materialized) group internals go without storage.
      if (owned(v)) CHECK((out_root[v] || (internal[v] && !materialize)));
      continue;
    }
    INFO("value %" << v);
    CHECK(owned(v));
    CHECK_FALSE(p.fresh[v]);
    if (!materialize) CHECK_FALSE(internal[v]);
    REQUIRE(p.arena_of[v] < (int32_t)p.arenas.size());
    CHECK(p.arenas[p.arena_of[v]].device == g.values[v].device);
    CHECK(p.offset_of[v] % 256 == 0);
    CHECK(p.offset_of[v] + bytes(v) <= p.arenas[p.arena_of[v]].bytes);
  }
  for (size_t u = 0; u < nv; ++u)
    for (size_t v = u + 1; v < nv; ++v) {
      if (p.arena_of[u] < 0 || p.arena_of[u] != p.arena_of[v]) continue;
      const bool live_together = lo[u] <= hi[v] && lo[v] <= hi[u];
      const bool disjoint = p.offset_of[u] + bytes(u) <= p.offset_of[v] ||
                            p.offset_of[v] + bytes(v) <= p.offset_of[u];
      INFO("values %" << u << " [" << lo[u] << "," << hi[u] << "] and %" << v << " [" << lo[v]
                      << "," << hi[v] << "]");
      if (live_together) CHECK(disjoint);
    }
  int64_t sum = 0;
  for (const auto& a : p.arenas) sum += a.bytes;
  CHECK(p.total_bytes() == sum);
  int64_t bound = 0;
  for (int64_t t = 0; t <= static_cast<int64_t>(nn); ++t) {
    int64_t live = 0;
    for (size_t v = 0; v < nv; ++v)
      if (p.arena_of[v] >= 0 && lo[v] <= t && t <= hi[v]) live += (bytes(v) + 255) / 256 * 256;
    bound = std::max(bound, live);
  }
  CHECK(p.total_bytes() >= bound);
  return bound;
}

}  // namespace

TEST_CASE("jit dce removes dead pure chains and keeps writes to state and inputs", "[jit]") {
  Graph g;
  const ValueId x = g.add_input(zeros({4, 8}), 0);
  const ValueId s = g.add_state(zeros({4, 8}));
  const ValueId a = g.append(OpId::exp, {x});
  const ValueId dead1 = g.append(OpId::neg, {a});
  g.append(OpId::relu, {dead1});                     // dead chain
  const ValueId tmp = g.append(OpId::sigmoid, {x});  // written in place, never read: dead
  write_inplace(g, OpId::add, {tmp, x}, tmp);
  g.append(OpId::view, {x}, shape_attrs({32}));  // unused view: dead
  write_inplace(g, OpId::add, {s, a}, s);        // state += a: an effect, keeps exp alive
  const ValueId t = g.append(OpId::neg, {x});
  const ValueId t2 = write_inplace(g, OpId::mul, {t, x}, t);
  const ValueId y = g.append(OpId::tanh, {t2});
  // x.view(32).fill_(0): a write to the input through a view (fill_ reads nothing)
  const ValueId xv = g.append(OpId::view, {x}, shape_attrs({32}));
  Attrs zero;
  zero.value = 0.0;
  write_inplace(g, OpId::fill, {}, xv, zero);
  g.outputs = {y};
  REQUIRE(g.nodes.size() == 12);

  eliminate_dead_code(g);
  check_producers(g);
  CHECK(count_op(g, OpId::relu) == 0);
  CHECK(count_op(g, OpId::sigmoid) == 0);
  CHECK(count_op(g, OpId::view) == 0);
  CHECK(count_op(g, OpId::exp) == 1);
  CHECK(count_op(g, OpId::neg) == 1);  // only the one feeding the output through mul_
  CHECK(count_op(g, OpId::fill) == 1);
  CHECK(count_op(g, OpId::mul) == 1);
  CHECK(count_op(g, OpId::tanh) == 1);
  int state_writes = 0;
  for (const Node& n : g.nodes)
    if (n.inplace && n.op == OpId::add) {
      ++state_writes;
      CHECK(g.values[n.out].root == s);
    }
  CHECK(state_writes == 1);
  CHECK(g.nodes.size() == 6);

  // A second run changes nothing (the sweep reached the fixpoint).
  eliminate_dead_code(g);
  CHECK(g.nodes.size() == 6);
}

TEST_CASE("jit dce keeps the producer of memory a live view reads", "[jit]") {
  Graph g;
  const ValueId x = g.add_input(zeros({4, 8}), 0);
  const ValueId e = g.append(OpId::exp, {x});
  const ValueId ev = g.append(OpId::view, {e}, shape_attrs({32}));
  write_inplace(g, OpId::add, {ev, ev}, ev);    // doubles e through the view
  const ValueId r = g.append(OpId::relu, {e});  // reads e (the old name) after the write
  g.append(OpId::neg, {r});                     // dead
  g.outputs = {r};
  eliminate_dead_code(g);
  CHECK(g.nodes.size() == 4);
  CHECK(count_op(g, OpId::neg) == 0);
  CHECK(count_op(g, OpId::add) == 1);
}

TEST_CASE("jit cse merges duplicates but not across writes, random ops or fills", "[jit]") {
  Graph g;
  const ValueId x = g.add_input(zeros({4, 8}), 0);
  const ValueId W = g.add_state(zeros({8, 4}));
  const ValueId a1 = g.append(OpId::exp, {x});
  const ValueId a2 = g.append(OpId::exp, {x});
  const ValueId b = g.append(OpId::add, {a1, a2});
  Attrs t;
  t.dims = {1, 0};
  const ValueId wt1 = g.append(OpId::permute, {W}, t);
  const ValueId wt2 = g.append(OpId::permute, {W}, t);
  const ValueId wsum = g.append(OpId::add, {wt1, wt2});
  // A view read before and after a write to the input's memory: two different values.
  const ValueId v = g.append(OpId::view, {x}, shape_attrs({32}));
  const ValueId n1 = g.append(OpId::neg, {v});
  write_inplace(g, OpId::add, {x, x}, x);
  const ValueId n2 = g.append(OpId::neg, {v});
  const ValueId nn = g.append(OpId::add, {n1, n2});
  // Random draws with equal attributes are still two draws; fills are buffers.
  const ValueId r1 = random_node(g, OpId::rand, {4, 8}, 7, 0);
  const ValueId r2 = random_node(g, OpId::rand, {4, 8}, 7, 0);
  const ValueId rr = g.append(OpId::add, {r1, r2});
  const ValueId z1 = fill_node(g, {4, 8}, 0.0);
  const ValueId z2 = fill_node(g, {4, 8}, 0.0);
  const ValueId zz = g.append(OpId::add, {z1, z2});
  // Different attributes; a duplicate of s1 through the merged exp.
  const ValueId s1 = g.append(OpId::sum, {a1}, dims_attrs({0}));
  const ValueId s2 = g.append(OpId::sum, {a1}, dims_attrs({1}));
  const ValueId s3 = g.append(OpId::sum, {a2}, dims_attrs({0}));
  const ValueId ss = g.append(OpId::add, {s1, s3});
  // A result written in place later cannot stand for a twin.
  const ValueId c1 = g.append(OpId::abs, {x});
  const ValueId c1w = write_inplace(g, OpId::add, {c1, c1}, c1);
  const ValueId c2 = g.append(OpId::abs, {x});
  const ValueId cc = g.append(OpId::add, {c1w, c2});
  g.outputs = {b, wsum, nn, rr, zz, s2, ss, cc};

  eliminate_common_subexpressions(g);
  check_producers(g);
  CHECK(count_op(g, OpId::exp) == 1);
  CHECK(producer(g, b).inputs == std::vector<ValueId>{a1, a1});
  CHECK(count_op(g, OpId::permute) == 1);
  CHECK(producer(g, wsum).inputs == std::vector<ValueId>{wt1, wt1});
  CHECK(count_op(g, OpId::neg) == 2);
  CHECK(count_op(g, OpId::rand) == 2);
  CHECK(count_op(g, OpId::fill) == 2);
  CHECK(count_op(g, OpId::sum) == 2);
  CHECK(producer(g, ss).inputs == std::vector<ValueId>{s1, s1});
  CHECK(count_op(g, OpId::abs) == 2);
}

TEST_CASE("jit cse keeps two returned tensors apart", "[jit]") {
  Graph g;
  const ValueId x = g.add_input(zeros({3}), 0);
  const ValueId a = g.append(OpId::exp, {x});
  const ValueId b = g.append(OpId::exp, {x});
  g.outputs = {a, b};
  eliminate_common_subexpressions(g);
  CHECK(count_op(g, OpId::exp) == 2);
}

TEST_CASE("jit fold evaluates constant arithmetic", "[jit]") {
  Graph g;
  const ValueId c1 = g.add_constant(from_vector<float>({1, 2, 3}, {3}));
  const ValueId c2 = g.add_constant(from_vector<float>({10, 20, 30}, {3}));
  const ValueId two = g.add_constant(wrap_scalar(2.0, kFloat32));
  const ValueId x = g.add_input(zeros({3}), 0);
  const ValueId s = g.append(OpId::add, {c1, c2});
  const ValueId m = g.append(OpId::mul, {s, two});
  const ValueId n = g.append(OpId::neg, {m});
  const ValueId y = g.append(OpId::mul, {n, x});
  // A view of a constant folds to a constant with the view's shape.
  const ValueId x13 = g.add_input(zeros({1, 3}), 1);
  const ValueId cv = g.append(OpId::view, {c1}, shape_attrs({1, 3}));
  const ValueId y2 = g.append(OpId::add, {cv, x13});
  // Wrapped numbers combine into an ordinary 0-dim constant.
  const ValueId three = g.add_constant(wrap_scalar(3.0, kFloat32));
  const ValueId six = g.append(OpId::mul, {two, three});
  const ValueId y3 = g.append(OpId::mul, {x, six});
  // Not folded: random input, a returned result, a large result.
  const ValueId r = random_node(g, OpId::rand, {3}, 1, 0);
  const ValueId rc = g.append(OpId::add, {r, c1});
  const ValueId ret = g.append(OpId::sub, {c2, c1});
  const ValueId big = g.add_constant(zeros({70000}));
  const ValueId nb = g.append(OpId::neg, {big});
  const ValueId xb = g.add_input(zeros({70000}), 2);
  const ValueId yb = g.append(OpId::add, {nb, xb});
  g.outputs = {y, y2, y3, rc, ret, yb};

  fold_constants(g);
  check_producers(g);
  // Only the nodes over non-constant data remain (and the kept ones).
  CHECK(count_op(g, OpId::neg) == 1);  // the big one
  CHECK(count_op(g, OpId::view) == 0);
  CHECK(count_op(g, OpId::sub) == 1);
  CHECK(count_op(g, OpId::rand) == 1);
  CHECK(g.nodes.size() == 8);  // mul y, add y2, mul y3, rand, add rc, sub, neg big, add yb

  const Node& ny = producer(g, y);
  REQUIRE(ny.inputs.size() == 2);
  CHECK(ny.inputs[1] == x);
  // -((1 + 10) * 2), ...
  CHECK(constant_data(g, ny.inputs[0]) == std::vector<float>{-22, -44, -66});
  CHECK_FALSE(g.constants[g.values[ny.inputs[0]].slot].impl()->wrapped_number);

  const Node& ny2 = producer(g, y2);
  CHECK(g.values[ny2.inputs[0]].shape == Shape{1, 3});
  CHECK(constant_data(g, ny2.inputs[0]) == std::vector<float>{1, 2, 3});

  const Node& ny3 = producer(g, y3);
  const Value& sixv = g.values[ny3.inputs[1]];
  REQUIRE(sixv.kind == ValueKind::Constant);
  CHECK(sixv.shape.empty());
  CHECK(constant_data(g, ny3.inputs[1]) == std::vector<float>{6});
  CHECK_FALSE(g.constants[sixv.slot].impl()->wrapped_number);
  // The wrapped inputs themselves are untouched.
  CHECK(g.constants[g.values[two].slot].impl()->wrapped_number);
  CHECK(producer(g, rc).inputs[1] == c1);
}

TEST_CASE("jit release_unused_constants frees what folding consumed, keeps what is read", "[jit]") {
  // A causal mask built from positions, as a composed attention builds it: arange, sub, gt all
  // fold, leaving their inputs and intermediates unread.
  Graph g;
  const ValueId pos = g.add_constant(from_vector<int64_t>({0, 1, 2, 3}, {4}));
  const ValueId zero = g.add_constant(wrap_scalar(0, kInt64));
  Attrs row, col;
  row.shape = Shape{1, 4};
  col.shape = Shape{4, 1};
  const ValueId rel = g.append(OpId::sub, {g.append(OpId::view, {pos}, row),
                                           g.append(OpId::view, {pos}, col)});  // [4, 4] int64
  const ValueId mask = g.append(OpId::gt, {rel, zero});
  const ValueId x = g.add_input(zeros({4, 4}), 0);
  const ValueId fill = g.add_constant(wrap_scalar(-1.0, kFloat32));
  const ValueId y = g.append(OpId::where, {mask, fill, x});
  g.outputs = {y};
  fold_constants(g);
  eliminate_dead_code(g);
  release_unused_constants(g);
  REQUIRE(g.nodes.size() == 1);
  const Node& w = producer(g, y);
  const ValueId folded_mask = w.inputs[0];
  REQUIRE(g.values[folded_mask].kind == ValueKind::Constant);
  // Read: the folded mask (its values intact) and the wrapped number the where still takes.
  // mask[i][j] = pos[j] - pos[i] > 0.
  CHECK(g.constants[g.values[folded_mask].slot].to(kFloat32).contiguous().to_vector<float>() ==
        std::vector<float>{0, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0, 1, 0, 0, 0, 0});
  CHECK(w.inputs[1] == fill);
  CHECK(g.constants[g.values[fill].slot].impl()->storage);
  // Consumed by folding: the positions, the zero and the [4, 4] difference keep their layout,
  // no memory.
  CHECK_FALSE(g.constants[g.values[zero].slot].impl()->storage);
  const Tensor& p = g.constants[g.values[pos].slot];
  CHECK(p.sizes() == Shape{4});
  CHECK(p.dtype() == kInt64);
  CHECK_FALSE(p.impl()->storage);
  bool rel_released = false;
  for (const Tensor& c : g.constants)
    if (c.sizes() == Shape{4, 4} && c.dtype() == kInt64) rel_released = !c.impl()->storage;
  CHECK(rel_released);
}

TEST_CASE(
    "jit host_scalar_constants moves a 0-dim device constant to the host when its readers take it "
    "by value",
    "[jit][cuda]") {
  EMBER_REQUIRE_CUDA();
  const Device gpu = Device::cuda(0);
  const auto dev = TensorOptions(kFloat32).device(gpu);
  Graph g;
  const ValueId x = g.add_input(zeros({4}, dev), 0);
  // Read by a pointwise op: becomes a host constant.
  const ValueId two = g.add_constant(full({}, 2.5, dev));
  const ValueId y = g.append(OpId::mul, {x, two});
  // A cross entropy's seed: the reduced backward takes a host gradient too.
  const ValueId logits = g.add_input(zeros({4, 3}, dev), 1);
  const ValueId target = g.add_input(zeros({4}, TensorOptions(kInt64).device(gpu)), 2);
  const ValueId seed = g.add_constant(full({}, 1.0, dev));
  Attrs mean;
  mean.reduction = LossReduction::Mean;
  const ValueId dx = g.append(OpId::cross_entropy_backward, {seed, logits, target}, mean);
  // Stay on the device: one read through a view, one read by an op whose result would move to
  // the host with it (its only other input is itself), one returned.
  const ValueId viewed = g.add_constant(full({}, 3.0, dev));
  Attrs to4;
  to4.shape = Shape{4};
  const ValueId e = g.append(OpId::add, {x, g.append(OpId::expand, {viewed}, to4)});
  const ValueId summed = g.add_constant(full({}, 4.0, dev));
  const ValueId s = g.append(OpId::mul, {summed, summed});
  const ValueId returned = g.add_constant(full({}, 5.0, dev));
  const ValueId r = g.append(OpId::mul, {x, returned});
  g.outputs = {y, dx, e, s, r, returned};

  host_scalar_constants(g);
  release_unused_constants(g);
  check_producers(g);
  auto input_of = [&](ValueId out, size_t i) { return g.values[producer(g, out).inputs[i]]; };
  const Value& h = input_of(y, 1);
  REQUIRE(h.kind == ValueKind::Constant);
  CHECK(h.device.is_cpu());
  CHECK(constant_data(g, producer(g, y).inputs[1]) == std::vector<float>{2.5f});
  CHECK(input_of(dx, 0).device.is_cpu());
  CHECK(constant_data(g, producer(g, dx).inputs[0]) == std::vector<float>{1.0f});
  // The device copies nothing reads any more hold no memory.
  CHECK_FALSE(g.constants[g.values[two].slot].impl()->storage);
  CHECK_FALSE(g.constants[g.values[seed].slot].impl()->storage);
  for (ValueId kept : {viewed, summed, returned}) {
    INFO("constant %" << kept);
    CHECK(g.values[kept].device == gpu);
    CHECK(g.constants[g.values[kept].slot].impl()->storage);
  }
  CHECK(producer(g, s).inputs[0] == summed);
  CHECK(producer(g, r).inputs[1] == returned);
}

TEST_CASE("jit fold leaves constants that the trace writes", "[jit]") {
  Graph g;
  const ValueId c = g.add_constant(from_vector<float>({1, 2}, {2}));
  const ValueId x = g.add_input(zeros({2}), 0);
  const ValueId n = g.append(OpId::neg, {c});
  write_inplace(g, OpId::add, {c, x}, c);  // the "constant" is mutated by the function
  const ValueId y = g.append(OpId::mul, {n, x});
  g.outputs = {y};
  fold_constants(g);
  CHECK(count_op(g, OpId::neg) == 1);
}

TEST_CASE("jit canonicalize drops identity views and removable copies", "[jit]") {
  Graph g;
  const ValueId x = g.add_input(zeros({4, 8}), 0);
  const ValueId W = g.add_state(zeros({4, 5}));
  const ValueId v = g.append(OpId::view, {x}, shape_attrs({4, 8}));  // identity
  Attrs id_perm, tr;
  id_perm.dims = {0, 1};
  tr.dims = {1, 0};
  const ValueId p = g.append(OpId::permute, {x}, id_perm);  // identity
  const ValueId t = g.append(OpId::exp, {v});
  const ValueId q = g.append(OpId::relu, {p});
  // clone of a dense temporary feeding a pointwise op: dropped
  const ValueId c = g.append(OpId::cast, {t});
  const ValueId r = g.append(OpId::neg, {c});
  // contiguous() of a transpose feeding a GEMM: dropped (the GEMM reads the transpose)
  const ValueId e = g.append(OpId::exp, {x});
  const ValueId et = g.append(OpId::permute, {e}, tr);  // [8, 4]
  const ValueId c2 = g.append(OpId::cast, {et});
  const ValueId m = g.append(OpId::mm, {c2, W});
  // contiguous() of the transpose feeding softmax (needs contiguous input): kept
  const ValueId c3 = g.append(OpId::cast, {et});
  const ValueId sm = g.append(OpId::softmax, {c3}, dim_attrs(1));
  // clone of an input: kept; clone returned to the caller: kept
  const ValueId c4 = g.append(OpId::cast, {x});
  const ValueId r4 = g.append(OpId::neg, {c4});
  const ValueId c5 = g.append(OpId::cast, {t});
  // clone of a temporary written afterwards: kept (the copy holds the old values)
  const ValueId u = g.append(OpId::sigmoid, {x});
  const ValueId c6 = g.append(OpId::cast, {u});
  write_inplace(g, OpId::add, {u, u}, u);
  const ValueId r6 = g.append(OpId::add, {c6, u});
  // view(view(e)) reads e directly
  const ValueId va = g.append(OpId::view, {e}, shape_attrs({32}));
  const ValueId vb = g.append(OpId::view, {va}, shape_attrs({2, 16}));
  const ValueId rb = g.append(OpId::neg, {vb});
  // permute(permute(e)) back to e's layout reads e; a 3-D pair composes into one permute of x3
  const ValueId pp = g.append(OpId::permute, {et}, tr);
  const ValueId rpp = g.append(OpId::neg, {pp});
  const ValueId x3 = g.add_input(zeros({2, 3, 4}), 1);
  Attrs p102, p021;
  p102.dims = {1, 0, 2};
  p021.dims = {0, 2, 1};
  const ValueId a3 = g.append(OpId::permute, {x3}, p102);  // [3, 2, 4]
  const ValueId b3 = g.append(OpId::permute, {a3}, p021);  // [3, 4, 2]
  const ValueId r3 = g.append(OpId::neg, {b3});
  g.outputs = {q, r, m, sm, r4, c5, r6, rb, rpp, r3};

  canonicalize(g);
  eliminate_dead_code(g);
  check_producers(g);
  CHECK(producer(g, t).inputs[0] == x);
  CHECK(producer(g, q).inputs[0] == x);
  CHECK(producer(g, r).inputs[0] == t);
  CHECK(producer(g, m).inputs[0] == et);
  CHECK(producer(g, sm).inputs[0] == c3);
  CHECK(producer(g, r4).inputs[0] == c4);
  CHECK(producer(g, r6).inputs[0] == c6);
  CHECK(g.outputs[5] == c5);
  CHECK(count_op(g, OpId::cast) == 4);  // c3, c4, c5, c6
  CHECK(producer(g, rb).inputs[0] == vb);
  CHECK(producer(g, vb).inputs[0] == e);
  CHECK(count_op(g, OpId::view) == 1);
  CHECK(producer(g, rpp).inputs[0] == e);
  CHECK(producer(g, r3).inputs[0] == b3);
  CHECK(producer(g, b3).inputs[0] == x3);
  CHECK(producer(g, b3).attrs.dims == Dims{1, 2, 0});
  CHECK(g.values[b3].shape == Shape{3, 4, 2});
  CHECK(count_op(g, OpId::permute) == 2);  // et, b3
}

TEST_CASE("jit split_sliced_pointwise computes a pointwise result read in slices per slice",
          "[jit]") {
  // s = x + b (b broadcast over rows), read as two column slices by sigmoid and tanh: the
  // gates of a recurrent step. Each slice becomes its own add of x's and b's slices.
  enum class Variant { Split, WholeRead, Overlap, NotPointwise };
  const Variant v =
      GENERATE(Variant::Split, Variant::WholeRead, Variant::Overlap, Variant::NotPointwise);
  Graph g;
  const ValueId x = g.add_input(randn({4, 8}), 0);
  const ValueId b = g.add_state(randn({8}));
  const ValueId w = g.add_state(randn({4, 3}));
  const ValueId s = g.append(OpId::add, {x, b});
  auto slice = [&](ValueId of, int64_t start, int64_t end) {
    Attrs a;
    a.dim = 1;
    a.start = start;
    a.end = end;
    a.step = 1;
    return g.append(OpId::slice, {of}, a);
  };
  const bool overlap = v == Variant::Overlap;
  const ValueId s0 = slice(s, 0, 4);
  const ValueId s1 = slice(s, overlap ? 2 : 4, overlap ? 6 : 8);
  const ValueId t0 = g.append(OpId::sigmoid, {s0});
  const ValueId t1 =
      v == Variant::NotPointwise ? g.append(OpId::mm, {s1, w}) : g.append(OpId::tanh, {s1});
  g.outputs = {t0, t1};
  if (v == Variant::WholeRead) g.outputs.push_back(g.append(OpId::exp, {s}));
  split_sliced_pointwise(g);
  eliminate_dead_code(g);
  check_producers(g);
  INFO("variant " << static_cast<int>(v));
  int whole = 0, parts = 0;
  for (const Node& n : g.nodes) {
    if (n.op != OpId::add) continue;
    whole += g.values[n.out].shape == Shape{4, 8};
    parts += g.values[n.out].shape == Shape{4, 4};
  }
  if (v != Variant::Split) {
    CHECK(whole == 1);
    CHECK(parts == 0);
    return;
  }
  CHECK(whole == 0);
  CHECK(parts == 2);
  for (ValueId t : {t0, t1}) {
    const Node& add = producer(g, producer(g, t).inputs[0]);
    REQUIRE(add.op == OpId::add);
    const Node& xs = producer(g, add.inputs[0]);
    const Node& bs = producer(g, add.inputs[1]);
    CHECK(xs.op == OpId::slice);
    CHECK(xs.inputs[0] == x);
    CHECK(xs.attrs.dim == 1);
    CHECK(bs.op == OpId::slice);
    CHECK(bs.inputs[0] == b);
    CHECK(bs.attrs.dim == 0);  // b's own dim
    CHECK(bs.attrs.start == (t == t0 ? 0 : 4));
  }
}

TEST_CASE("jit canonicalize lets a parameter hold an intermediate instead of its copy", "[jit]") {
  // Autograd copies a gradient that is a view (a BatchNorm bias's sum over N, H, W viewed as
  // [C]) or that other nodes read; the copy is needed only where the memory is not the copy's
  // exact bytes, is written later, or is already held by another gradient or an output.
  Graph g;
  const ValueId x = g.add_input(zeros({2, 4, 3, 3}), 0);
  std::vector<ValueId> params;
  for (int i = 0; i < 6; ++i) params.push_back(g.add_state(zeros({4})));
  Attrs keep = dims_attrs({0, 2, 3});
  keep.keepdim = true;
  const ValueId s = g.append(OpId::sum, {g.append(OpId::exp, {x})}, keep);  // [1, 4, 1, 1]
  const ValueId sv = g.append(OpId::view, {s}, shape_attrs({4}));
  const ValueId c1 = g.append(OpId::cast, {sv});  // elided: the parameter holds s
  const ValueId c2 = g.append(OpId::cast, {sv});  // kept: s is the first gradient's now
  const ValueId read = g.append(OpId::neg, {s});  // s read after the copies: fine
  // a copy of part of a buffer: kept (the gradient would pin, and expose, the rest)
  const ValueId wide = g.append(OpId::exp, {g.append(OpId::view, {x}, shape_attrs({72}))});
  Attrs part;
  part.dim = 0;
  part.start = 0;
  part.end = 4;
  const ValueId c3 = g.append(OpId::cast, {g.append(OpId::slice, {wide}, part)});
  // a copy of an intermediate written afterwards: kept
  const ValueId t = g.append(OpId::exp, {sv});
  const ValueId c4 = g.append(OpId::cast, {t});
  write_inplace(g, OpId::add, {t, t}, t);
  // a copy of an intermediate that is also returned: kept
  const ValueId u = g.append(OpId::sigmoid, {sv});
  const ValueId c5 = g.append(OpId::cast, {u});
  // a copy of a parameter: kept (its memory is the caller's)
  const ValueId c6 = g.append(OpId::cast, {params[5]});
  g.outputs = {read, t, u};
  const std::vector<ValueId> grads = {c1, c2, c3, c4, c5, c6};
  for (int i = 0; i < 6; ++i) g.grad_effects.push_back({g.values[params[i]].slot, grads[i]});

  canonicalize(g);
  eliminate_dead_code(g);
  check_producers(g);
  CHECK(g.grad_effects[0].value == sv);
  for (int i = 1; i < 6; ++i) CHECK(g.grad_effects[i].value == grads[i]);
  CHECK(count_op(g, OpId::cast) == 5);
}

TEST_CASE("jit fuse groups the MLP step", "[jit]") {
  Mlp net;
  Graph& g = net.g;
  fuse(g);
  check_producers(g);
  INFO(g.str());
  REQUIRE(g.groups.size() == 3);  // the cross-entropy pair has no fused CPU kernel: no group

  const Group* l1 = group_with(g, GroupKind::GemmEpilogue, OpId::relu);
  REQUIRE(l1);
  CHECK(group_ops(g, *l1) == std::vector<OpId>{OpId::mm, OpId::add, OpId::relu});
  CHECK(l1->inputs == std::vector<ValueId>{net.x, net.W1t, net.b1});
  CHECK(l1->outputs == std::vector<ValueId>{net.a});  // h and h2 never stored

  const Group* l2 = nullptr;
  for (const Group& grp : g.groups)
    if (grp.kind == GroupKind::GemmEpilogue && &grp != l1) l2 = &grp;
  REQUIRE(l2);
  CHECK(group_ops(g, *l2) == std::vector<OpId>{OpId::mm, OpId::add});
  CHECK(l2->nodes.front() == g.values[net.o].producer);
  CHECK(l2->outputs == std::vector<ValueId>{net.o2});

  CHECK_FALSE(group_with(g, GroupKind::CrossEntropy, OpId::cross_entropy));
  CHECK(g.nodes[g.values[net.ce].producer].group == -1);
  CHECK(g.nodes[g.values[net.dO].producer].group == -1);
  // The loss reduction moved behind the backward, so nothing runs before the group reading
  // the per-sample losses.
  CHECK(g.values[net.loss].producer > g.values[net.dO].producer);

  const Group* red = group_with(g, GroupKind::Reduction, OpId::sum);
  REQUIRE(red);
  CHECK(group_ops(g, *red) == std::vector<OpId>{OpId::gt, OpId::where, OpId::sum});
  CHECK(red->outputs == std::vector<ValueId>{net.dH, net.db1});
  CHECK(has(red->inputs, net.dA));
  CHECK(has(red->inputs, net.a));

  // Membership is mirrored on the nodes, and only there.
  int grouped = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (g.nodes[i].group >= 0) {
      ++grouped;
      CHECK(has(g.groups[g.nodes[i].group].nodes, (int32_t)i));
    }
  CHECK(grouped == 8);
  CHECK(g.nodes[g.values[net.dA].producer].group == -1);
  CHECK(g.nodes[g.values[net.db2].producer].group == -1);

  // Dumps name the ops and the groups.
  const std::string s = g.str();
  CHECK(s.find("mm(") != std::string::npos);
  CHECK(s.find("relu(") != std::string::npos);
  CHECK(s.find("cross_entropy_backward(") != std::string::npos);
  CHECK(s.find("[group 0]") != std::string::npos);
  const std::string d = g.dot();
  CHECK(d.find("digraph") != std::string::npos);
  CHECK(d.find("cluster_2") != std::string::npos);
  CHECK(d.find("cluster_3") == std::string::npos);
  CHECK(d.find("gemm_epilogue") != std::string::npos);
  CHECK(d.find("cross_entropy") != std::string::npos);
  CHECK(d.find("relu") != std::string::npos);
}

TEST_CASE("jit fuse refuses groups across interleaved writes and early readers", "[jit]") {
  SECTION("an in-place write of a member's input between members") {
    Graph g;
    const ValueId x = g.add_input(zeros({4, 8}), 0);
    const ValueId s = g.add_state(zeros({4, 8}));
    const ValueId t1 = g.append(OpId::exp, {s});
    write_inplace(g, OpId::add, {s, x}, s);
    const ValueId t2 = g.append(OpId::neg, {t1});
    g.outputs = {t2};
    fuse(g);
    CHECK(g.groups.empty());
    for (const Node& n : g.nodes) CHECK(n.group == -1);
  }
  SECTION("the same without the write fuses") {
    Graph g;
    const ValueId x = g.add_input(zeros({4, 8}), 0);
    const ValueId s = g.add_state(zeros({4, 8}));
    const ValueId t1 = g.append(OpId::exp, {s});
    const ValueId other = g.append(OpId::add, {s, x});
    const ValueId t2 = g.append(OpId::neg, {t1});
    g.outputs = {t2, other};
    fuse(g);
    REQUIRE(g.groups.size() == 1);
    CHECK(group_ops(g, g.groups[0]) == std::vector<OpId>{OpId::exp, OpId::neg});
    CHECK(g.groups[0].inputs == std::vector<ValueId>{s});
    CHECK(g.groups[0].outputs == std::vector<ValueId>{t2});
  }
  SECTION("a non-member reading a member's output between members") {
    Graph g;
    const ValueId x = g.add_input(zeros({4, 8}), 0);
    const ValueId t1 = g.append(OpId::exp, {x});
    const ValueId sm = g.append(OpId::softmax, {t1}, dim_attrs(1));
    const ValueId t2 = g.append(OpId::neg, {t1});
    g.outputs = {sm, t2};
    fuse(g);
    CHECK(g.groups.empty());
  }
}

TEST_CASE("jit fuse joins the pointwise chains a node combines", "[jit]") {
  SECTION("two chains and the node adding them: one group") {
    Graph g;
    const ValueId x = g.add_input(zeros({4, 8}), 0);
    const ValueId y = g.add_input(zeros({4, 8}), 1);
    const ValueId a = g.append(OpId::neg, {g.append(OpId::exp, {x})});
    const ValueId b = g.append(OpId::tanh, {g.append(OpId::sigmoid, {y})});
    const ValueId c = g.append(OpId::add, {a, b});
    g.outputs = {c};
    fuse(g);
    REQUIRE(g.groups.size() == 1);
    CHECK(group_ops(g, g.groups[0]) ==
          std::vector<OpId>{OpId::exp, OpId::neg, OpId::sigmoid, OpId::tanh, OpId::add});
    CHECK(g.groups[0].inputs == std::vector<ValueId>{x, y});
    CHECK(g.groups[0].outputs == std::vector<ValueId>{c});
  }
  SECTION("a chain that must run before a write stays apart") {
    Graph g;
    const ValueId x = g.add_input(zeros({4, 8}), 0);
    const ValueId y = g.add_input(zeros({4, 8}), 1);
    const ValueId s = g.add_state(zeros({4, 8}));
    const ValueId a = g.append(OpId::neg, {g.append(OpId::exp, {s})});
    write_inplace(g, OpId::add, {s, x}, s);  // exp must read s before this
    const ValueId b = g.append(OpId::tanh, {g.append(OpId::sigmoid, {y})});
    const ValueId c = g.append(OpId::add, {a, b});
    g.outputs = {c};
    fuse(g);
    REQUIRE(g.groups.size() == 2);
    CHECK(group_ops(g, g.groups[0]) == std::vector<OpId>{OpId::exp, OpId::neg});
    CHECK(group_ops(g, g.groups[1]) == std::vector<OpId>{OpId::sigmoid, OpId::tanh, OpId::add});
  }
}

TEST_CASE("jit fuse keeps pointwise groups to one shape", "[jit]") {
  Graph g;
  const ValueId x = g.add_input(zeros({4, 1}), 0);
  const ValueId z = g.add_input(zeros({1, 5}), 1);
  const ValueId e = g.append(OpId::exp, {x});     // [4, 1]
  const ValueId s = g.append(OpId::add, {e, z});  // [4, 5]: another shape
  const ValueId m = g.append(OpId::mul, {s, s});
  const ValueId y = g.append(OpId::sigmoid, {m});
  g.outputs = {y};
  fuse(g);
  REQUIRE(g.groups.size() == 1);
  const Group& grp = g.groups[0];
  CHECK(grp.kind == GroupKind::Pointwise);
  CHECK(group_ops(g, grp) == std::vector<OpId>{OpId::add, OpId::mul, OpId::sigmoid});
  CHECK(grp.inputs == std::vector<ValueId>{e, z});
  CHECK(grp.outputs == std::vector<ValueId>{y});
  CHECK(g.nodes[g.values[e].producer].group == -1);
}

TEST_CASE("jit plan_memory reuses dead buffers without overlap", "[jit]") {
  Graph g;
  const ValueId x = g.add_input(zeros({64, 64}), 0);
  const ValueId acc0 = fill_node(g, {64, 64}, 0.0);
  ValueId acc = acc0;
  ValueId t = x;
  const int steps = 20;
  for (int i = 0; i < steps; ++i) {
    t = g.append(i % 2 ? OpId::exp : OpId::tanh, {t});
    acc = write_inplace(g, OpId::add, {acc, t}, acc0);
  }
  const ValueId y = g.append(OpId::neg, {acc});
  g.outputs = {y};

  const MemoryPlan p = plan_memory(g, false);
  check_plan(g, p, false);
  REQUIRE(p.arenas.size() == 1);
  CHECK(p.arenas[0].device == Device::cpu());
  const int64_t one = 64 * 64 * 4;
  // 20 temporaries and the accumulator are stored; at most 3 are live at once.
  CHECK(p.total_bytes() < (steps + 1) * one);
  CHECK(p.total_bytes() <= 3 * one);
  CHECK(p.arena_of[acc0] >= 0);
  CHECK(p.arena_of[acc] == -1);  // an in-place name owns nothing
  CHECK(p.fresh[y]);
  CHECK(p.arena_of[y] == -1);
  CHECK(p.arena_of[x] == -1);
}

TEST_CASE("jit plan_memory leaves no hole a later, larger buffer cannot use", "[jit]") {
  // A (256 bytes) dies under B (512), born after A; C (512) is born after A died. Placed in order
  // of definition, C cannot use A's 256-byte hole and goes above B: 1280 bytes. Largest first,
  // A sits above B, where C goes once A is dead: 1024 bytes, the most ever live at once.
  Graph g;
  const ValueId xa = g.add_input(zeros({1, 64}), 0);
  const ValueId xb = g.add_input(zeros({2, 64}), 1);
  const ValueId a = g.append(OpId::exp, {xa});
  const ValueId b = g.append(OpId::exp, {xb});
  const ValueId a_out = g.append(OpId::neg, {a});  // A's last use
  const ValueId c = g.append(OpId::tanh, {b});
  const ValueId d = g.append(OpId::add, {b, c});
  g.outputs = {a_out, d};
  const MemoryPlan p = plan_memory(g, false);
  const int64_t bound = check_plan(g, p, false);
  CHECK(bound == 1024);
  CHECK(p.total_bytes() == 1024);
  CHECK(p.arena_of[a] >= 0);
  CHECK(p.arena_of[c] >= 0);
}

TEST_CASE("jit plan_memory on the fused MLP step", "[jit]") {
  Mlp net;
  Graph& g = net.g;
  fuse(g);
  REQUIRE(g.groups.size() == 3);
  for (bool materialize : {false, true}) {
    INFO("materialize " << materialize);
    const MemoryPlan p = plan_memory(g, materialize);
    const int64_t bound = check_plan(g, p, materialize);
    INFO("arena " << p.total_bytes() << " bytes, at most " << bound << " live at once");
    CHECK(p.total_bytes() == bound);  // no byte the step never needs at once
    // A GEMM writes its whole product even when an epilogue group consumes it; the epilogue's
    // own intermediates (h + b before relu) exist only when groups run op by op.
    CHECK(p.arena_of[net.h] >= 0);
    CHECK((p.arena_of[net.h2] >= 0) == materialize);
    CHECK(p.arena_of[net.a] >= 0);
    // The relu-backward mask never leaves its reduction group unless groups run op by op.
    CHECK((p.arena_of[net.mask] >= 0) == materialize);
    // .grad values live to the end of the replay; the returned loss is fresh.
    CHECK(p.arena_of[net.dW1] >= 0);
    CHECK(p.fresh[net.loss]);
    CHECK(p.arena_of[net.loss] == -1);
    CHECK(p.arena_of[net.W1] == -1);
    CHECK(p.arena_of[net.W1t] == -1);
  }
}

TEST_CASE("jit plan_memory places a group's workspace in bytes dead while the group runs",
          "[jit]") {
  Mlp net;
  Graph& g = net.g;
  fuse(g);
  const MemoryPlan base = plan_memory(g, false);
  const std::vector<GroupStorage> storage = default_group_storage(g, false);
  // The last node each root's memory is touched at (a group's members at the group's last one).
  auto pos = [&](size_t i) -> int64_t {
    const int32_t gi = g.nodes[i].group;
    return gi >= 0 ? g.groups[gi].nodes.back() : static_cast<int64_t>(i);
  };
  std::vector<int64_t> last(g.values.size(), -1);
  for (size_t i = 0; i < g.nodes.size(); ++i)
    for (ValueId in : g.nodes[i].inputs)
      last[g.values[in].root] = std::max(last[g.values[in].root], pos(i));
  for (const GradEffect& e : g.grad_effects)
    if (e.value != kNoValue) last[g.values[e.value].root] = static_cast<int64_t>(g.nodes.size());

  for (size_t gi = 0; gi < g.groups.size(); ++gi) {
    for (int64_t ws : {int64_t{256}, int64_t{1} << 20}) {
      INFO("group " << gi << " (" << group_kind_name(g.groups[gi].kind) << "), workspace " << ws);
      std::vector<int64_t> workspace(g.groups.size(), 0);
      workspace[gi] = ws;
      const MemoryPlan p = plan_memory(g, storage, workspace);
      REQUIRE(p.workspace_arena.size() == g.groups.size());
      REQUIRE(p.workspace_arena[gi] == 0);
      const int64_t at = g.groups[gi].nodes.back();
      const int64_t w0 = p.workspace_offset[gi], w1 = w0 + ws;
      CHECK(w1 <= p.total_bytes());
      // Values keep their places: the workspace only takes bytes around them.
      CHECK(p.arena_of == base.arena_of);
      // No stored value that exists while the group runs shares a byte with the workspace.
      for (size_t v = 0; v < g.values.size(); ++v) {
        if (p.arena_of[v] < 0) continue;
        const int64_t born = g.values[v].producer;
        if (born > at || last[v] < at) continue;
        const int64_t v0 = p.offset_of[v];
        const int64_t v1 = v0 + g.values[v].numel() * element_size(g.values[v].dtype);
        INFO("value %" << v << " at [" << v0 << ", " << v1 << "), workspace [" << w0 << ", " << w1
                       << ")");
        CHECK((v1 <= w0 || w1 <= v0));
      }
      // A workspace costs the arena at most its own size.
      CHECK(p.total_bytes() <= base.total_bytes() + ws);
      for (size_t other = 0; other < g.groups.size(); ++other)
        if (other != gi) CHECK(p.workspace_arena[other] == -1);
    }
  }
}

TEST_CASE("jit plan_memory puts a CUDA graph's returned loss in bytes dead while it lives",
          "[jit]") {
  Mlp net;
  Graph& g = net.g;
  fuse(g);
  const std::vector<GroupStorage> storage = default_group_storage(g, false);
  const MemoryPlan base = plan_memory(g, storage);
  const MemoryPlan p = plan_memory(g, storage, {}, /*graph_statics=*/true);
  check_plan(g, p, false);
  for (size_t v = 0; v < g.values.size(); ++v) CHECK(base.static_arena_of[v] == -1);
  // The loss is still fresh per plain replay; a graph writes it at its static place.
  CHECK(p.fresh[net.loss]);
  CHECK(p.arena_of[net.loss] == -1);
  REQUIRE(p.static_arena_of[net.loss] == 0);
  // Gradients are read after the replay (they stay on the parameters): no static place here.
  for (ValueId grad : {net.dW1, net.db1, net.dW2, net.db2}) CHECK(p.static_arena_of[grad] == -1);
  // Liveness from the definitions, as check_plan's: producer to the last node touching it.
  auto pos = [&](size_t i) -> int64_t {
    const int32_t gi = g.nodes[i].group;
    return gi >= 0 ? g.groups[gi].nodes.back() : static_cast<int64_t>(i);
  };
  std::vector<int64_t> last(g.values.size(), -1);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const ValueId out = g.nodes[i].out;
    if (out != kNoValue) last[g.values[out].root] = std::max(last[g.values[out].root], pos(i));
    for (ValueId in : g.nodes[i].inputs)
      last[g.values[in].root] = std::max(last[g.values[in].root], pos(i));
  }
  for (const GradEffect& e : g.grad_effects)
    if (e.value != kNoValue) last[g.values[e.value].root] = static_cast<int64_t>(g.nodes.size());
  const int64_t born = g.values[net.loss].producer, dies = last[net.loss];
  const int64_t l0 = p.static_offset_of[net.loss], l1 = l0 + 4;
  CHECK(l1 <= p.total_bytes());
  for (size_t v = 0; v < g.values.size(); ++v) {
    if (p.arena_of[v] < 0) continue;
    if (g.values[v].producer > dies || last[v] < born) continue;
    const int64_t v0 = p.offset_of[v];
    const int64_t v1 = v0 + g.values[v].numel() * element_size(g.values[v].dtype);
    INFO("value %" << v << " at [" << v0 << ", " << v1 << "), loss [" << l0 << ", " << l1 << ")");
    CHECK((v1 <= l0 || l1 <= v0));
  }
  // Live only around the loss's own kernel, it costs this step's arena nothing.
  CHECK(p.total_bytes() == base.total_bytes());
}

TEST_CASE("jit plan_branches: a step writing bytes a beside copy reads joins its branch first",
          "[jit]") {
  // The returned loss's static bytes in the arena (graph_statics) are copied out beside the
  // later steps; each later step that writes any of them must wait for that copy.
  Mlp net;
  Graph& g = net.g;
  fuse(g);
  const std::vector<GroupStorage> storage = default_group_storage(g, true);
  const MemoryPlan plan = plan_memory(g, storage, {}, /*graph_statics=*/true);
  Binding bind;
  bind.build(g, plan, nullptr);
  bind.prepare_arenas();
  StepList steps;
  steps.build(g, plan, bind, storage, false);
  REQUIRE(plan.static_arena_of[net.loss] == 0);
  const int64_t l0 = plan.static_offset_of[net.loss], l1 = l0 + 4;
  const auto* arena = static_cast<const char*>(bind.arena(0)->data);
  const int32_t after = steps.node_done()[static_cast<size_t>(g.values[net.loss].producer)];
  const BranchPlan alone = plan_branches(g, steps, bind.slots);
  const BranchPlan p = plan_branches(g, steps, bind.slots, {{after, arena + l0, 4}});
  // Brute force from the memory plan: the steps after the loss's that store into its bytes.
  std::vector<char> want(steps.size(), 0);
  std::vector<ValueId> roots;
  for (size_t ni = 0; ni < g.nodes.size(); ++ni) {
    const int32_t si = steps.node_step()[ni];
    if (si <= after) continue;
    roots.clear();
    g.writes(g.nodes[ni], roots);
    if (g.nodes[ni].out != kNoValue) roots.push_back(g.values[g.nodes[ni].out].root);
    for (ValueId r : roots) {
      if (plan.arena_of[r] != 0) continue;
      const int64_t v0 = plan.offset_of[r];
      const int64_t v1 = v0 + g.values[r].numel() * element_size(g.values[r].dtype);
      if (v0 < l1 && l0 < v1) want[static_cast<size_t>(si)] = 1;
    }
  }
  CHECK(std::find(want.begin(), want.end(), 1) != want.end());  // the bytes are reused
  CHECK(p.join_early == want);
  CHECK(std::find(alone.join_early.begin(), alone.join_early.end(), 1) == alone.join_early.end());
}

TEST_CASE("jit optimize runs the pipeline and reports each pass", "[jit]") {
  Mlp net;
  Graph& g = net.g;
  // Leftovers a tracer produces: a dead computation and a duplicate transpose.
  g.append(OpId::exp, {net.x});
  Attrs t;
  t.dims = {1, 0};
  const ValueId W2t_again = g.append(OpId::permute, {net.W2}, t);
  const ValueId extra = g.append(OpId::neg, {W2t_again});
  g.outputs.push_back(extra);
  const auto before = static_cast<int32_t>(g.nodes.size());

  const std::vector<PassReport> r = optimize(g);
  REQUIRE(r.size() == 14);
  const char* names[] = {"dce",
                         "cse",
                         "fold",
                         "canonicalize",
                         "dce",
                         "batch_products",
                         "slice_sums",
                         "sum_products",
                         "canonicalize",
                         "slice_pointwise",
                         "dce",
                         "host_scalars",
                         "release_constants",
                         "fuse"};
  for (size_t i = 0; i < r.size(); ++i) {
    CHECK(r[i].pass == names[i]);
    CHECK(r[i].nodes_after <= r[i].nodes_before);
    if (i > 0) CHECK(r[i].nodes_before == r[i - 1].nodes_after);
  }
  CHECK(r[0].nodes_before == before);
  CHECK(r[0].nodes_after == before - 1);             // the dead exp
  CHECK(r[1].nodes_after == r[1].nodes_before - 1);  // the duplicate permute
  CHECK(r.back().nodes_after == g.live_node_count());
  check_producers(g);
  CHECK(count_op(g, OpId::permute) == 4);  // W1t, W2t, dOt, dHt
  CHECK(g.groups.size() == 3);             // two GEMM epilogues, the relu-backward reduction
  check_plan(g, plan_memory(g, false), false);
}
