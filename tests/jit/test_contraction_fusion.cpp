// Fusion asks the device's lowering before it commits a group (jit/lower.h, lowering_accepts):
// a product takes any pointwise tail (and a closing reduction) that the GPU lowering runs as one
// GEMM call plus one generated kernel; what a lowering refuses is taken apart, never run worse
// than its members. The host-side cases build graphs by hand and need no GPU; the [cuda] case
// trains a GELU network compiled and eagerly and compares them.
#include <ember/ember.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "graph_builders.h"
#include "jit/graph.h"
#include "jit/lower.h"
#include "jit/passes.h"
#include "jit/tracer.h"
#include "test_util.h"

using namespace ember;
using namespace ember::jit;
using graph_test::write_inplace;

namespace {

void on_gpu(Graph& g) {
  for (Value& v : g.values) v.device = Device::cuda(0);
}

std::vector<const Group*> groups_of(const Graph& g, GroupKind kind) {
  std::vector<const Group*> r;
  for (const Group& grp : g.groups)
    if (grp.kind == kind) r.push_back(&grp);
  return r;
}

bool has(const std::vector<ValueId>& v, ValueId x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// x [M,K] input, W [K,N] and b [N] state: h = mm(x, W) + b, y = gelu(h).
struct GeluLayer {
  Graph g;
  ValueId p = kNoValue, h = kNoValue, y = kNoValue;
};
GeluLayer gelu_layer(int64_t m, int64_t k, int64_t n, DType dt = kFloat32) {
  GeluLayer l;
  const ValueId x = l.g.add_input(randn({m, k}).to(dt), 0);
  const ValueId w = l.g.add_state(randn({k, n}).to(dt));
  const ValueId b = l.g.add_state(randn({n}).to(dt));
  l.p = l.g.append(OpId::mm, {x, w});
  l.h = l.g.append(OpId::add, {l.p, b});
  l.y = l.g.append(OpId::gelu, {l.h});
  return l;
}

}  // namespace

TEST_CASE("fusion: a product takes a pointwise tail the GPU lowering runs after its GEMM",
          "[jit]") {
  SECTION("the biased product feeds only the activation: the GEMM writes it to a buffer") {
    GeluLayer l = gelu_layer(8, 40, 6);
    l.g.outputs = {l.y};
    on_gpu(l.g);
    fuse(l.g);
    REQUIRE(l.g.groups.size() == 1);
    const Group& grp = l.g.groups[0];
    CHECK(grp.kind == GroupKind::GemmEpilogue);
    CHECK(grp.nodes.size() == 3);
    std::string why;
    const auto epi = gemm_group_epilogue(l.g, grp, &why);
    INFO(why);
    REQUIRE(epi);
    CHECK(*epi == "BIAS");  // the bias in the GEMM call, gelu in the generated tail kernel
    CHECK(grp.stored == std::vector<ValueId>{l.h});
    CHECK(grp.outputs == std::vector<ValueId>{l.y});
  }
  SECTION("the biased product is needed later (a backward reads it): written where it lives") {
    GeluLayer l = gelu_layer(8, 40, 6);
    l.g.outputs = {l.y, l.h};
    on_gpu(l.g);
    fuse(l.g);
    REQUIRE(l.g.groups.size() == 1);
    const Group& grp = l.g.groups[0];
    CHECK(grp.kind == GroupKind::GemmEpilogue);
    CHECK(grp.stored.empty());
    CHECK(has(grp.outputs, l.h));
    CHECK(has(grp.outputs, l.y));
  }
  SECTION("no epilogue fits (the product is squared first): the GEMM, then the whole tail") {
    Graph g;
    const ValueId x = g.add_input(randn({8, 40}), 0);
    const ValueId w = g.add_state(randn({40, 6}));
    const ValueId b = g.add_state(randn({6}));
    const ValueId p = g.append(OpId::mm, {x, w});
    const ValueId q = g.append(OpId::mul, {p, p});
    g.outputs = {g.append(OpId::add, {q, b})};
    on_gpu(g);
    fuse(g);
    REQUIRE(g.groups.size() == 1);
    CHECK(g.groups[0].kind == GroupKind::GemmEpilogue);
    CHECK(g.groups[0].nodes.size() == 3);
    const auto epi = gemm_group_epilogue(g, g.groups[0]);
    REQUIRE(epi);
    CHECK(*epi == "NONE");
    CHECK(g.groups[0].stored == std::vector<ValueId>{p});
  }
  SECTION("a backward-shaped tail closes with the bias gradient's reduction") {
    // dy = mm(g, W); dh = dy * h'; db = sum(dh, 0): one GEMM, then one reduction kernel.
    Graph g;
    const ValueId gr = g.add_input(randn({32, 40}), 0);
    const ValueId w = g.add_state(randn({40, 24}));
    const ValueId d = g.add_input(randn({32, 24}), 1);
    const ValueId dy = g.append(OpId::mm, {gr, w});
    const ValueId dh = g.append(OpId::mul, {dy, d});
    Attrs red;
    red.dims = {0};
    const ValueId db = g.append(OpId::sum, {dh}, red);
    g.outputs = {dh, db};
    on_gpu(g);
    fuse(g);
    REQUIRE(g.groups.size() == 1);
    const Group& grp = g.groups[0];
    CHECK(grp.kind == GroupKind::GemmEpilogue);
    CHECK(grp.nodes.size() == 3);
    CHECK(grp.stored == std::vector<ValueId>{dy});
    CHECK(has(grp.outputs, dh));
    CHECK(has(grp.outputs, db));
  }
  SECTION("the product's result is also read outside: it becomes an output of the group") {
    GeluLayer l = gelu_layer(8, 40, 6);
    Attrs red;
    red.dims = {1};
    const ValueId s = l.g.append(OpId::amax, {l.p}, red);
    l.g.outputs = {l.y, s};
    on_gpu(l.g);
    fuse(l.g);
    const auto gemms = groups_of(l.g, GroupKind::GemmEpilogue);
    REQUIRE(gemms.size() == 1);
    CHECK(has(gemms[0]->outputs, l.p));
    CHECK(*gemm_group_epilogue(l.g, *gemms[0]) == "NONE");  // the bias cannot fold: p is needed
  }
}

TEST_CASE("fusion: a pointwise chain reading a product's unfolded tail takes the tail", "[jit]") {
  // dh = r + mm(d, W) (not a row bias: no GEMM epilogue folds it); u = dh * q; then a chain
  // c = q * q, e = u * (c - q). Without the rule: the GEMM, the tail's kernel, the chain's kernel.
  // With a write of r between the tail and the chain, moving the tail there would read the new r.
  const bool write_between = GENERATE(false, true);
  Graph g;
  const ValueId d = g.add_input(randn({8, 40}), 0);
  const ValueId w = g.add_state(randn({40, 6}));
  const ValueId r = g.add_input(randn({8, 6}), 1);
  const ValueId q = g.add_input(randn({8, 6}), 2);
  const ValueId one = g.add_constant(ones({}));
  const ValueId p = g.append(OpId::mm, {d, w});
  const ValueId dh = g.append(OpId::add, {r, p});
  const ValueId u = g.append(OpId::mul, {dh, q});
  if (write_between) write_inplace(g, OpId::add, {r, one}, r);  // r += 1
  const ValueId c = g.append(OpId::mul, {q, q});
  const ValueId diff = g.append(OpId::sub, {c, q});
  const ValueId e = g.append(OpId::mul, {u, diff});
  g.outputs = {e};
  on_gpu(g);
  fuse(g);
  INFO("write between: " << write_between);
  const std::vector<const Group*> gemm = groups_of(g, GroupKind::GemmEpilogue);
  const std::vector<const Group*> chain = groups_of(g, GroupKind::Pointwise);
  REQUIRE(chain.size() == 1);
  if (!write_between) {
    // The product runs as itself; one kernel computes the tail and the chain from it.
    CHECK(gemm.empty());
    CHECK(chain[0]->nodes.size() == 5);
    CHECK(has(chain[0]->inputs, p));
    CHECK(chain[0]->outputs == std::vector<ValueId>{e});
  } else {
    REQUIRE(gemm.size() == 1);
    CHECK(gemm[0]->nodes.size() == 3);  // mm, add, mul: the tail stayed
    CHECK(has(gemm[0]->outputs, u));
    CHECK(chain[0]->nodes.size() == 3);
    CHECK(has(chain[0]->inputs, u));
  }
}

TEST_CASE("fusion: a Linear over three dims takes its tail through the view", "[jit]") {
  // linear(x [2,5,40]) traces as mm over the 10 rows, then a view back to [2,5,6].
  auto build = [](bool relu_on) {
    Graph g;
    const ValueId x = g.add_input(randn({2, 5, 40}), 0);
    const ValueId w = g.add_state(randn({40, 6}));
    const ValueId b = g.add_state(randn({6}));
    Attrs rows, back;
    rows.shape = {10, 40};
    back.shape = {2, 5, 6};
    const ValueId xr = g.append(OpId::view, {x}, rows);
    const ValueId p = g.append(OpId::mm, {xr, w});
    const ValueId v = g.append(OpId::view, {p}, back);
    const ValueId h = g.append(OpId::add, {v, b});
    g.outputs = {relu_on ? g.append(OpId::relu, {h}) : g.append(OpId::exp, {h})};
    return g;
  };
  SECTION("on the GPU the bias and relu fold into the GEMM call") {
    Graph g = build(true);
    on_gpu(g);
    fuse(g);
    REQUIRE(g.groups.size() == 1);
    CHECK(g.groups[0].kind == GroupKind::GemmEpilogue);
    CHECK(g.groups[0].nodes.size() == 4);  // mm, view, add, relu
    std::string why;
    const auto epi = gemm_group_epilogue(g, g.groups[0], &why);
    INFO(why);
    REQUIRE(epi);
    CHECK(*epi == "RELU_BIAS");
    CHECK(g.groups[0].stored.empty());  // the GEMM writes the returned result itself
  }
  SECTION("the bias folds, another activation runs in the tail kernel") {
    Graph g = build(false);
    on_gpu(g);
    fuse(g);
    REQUIRE(g.groups.size() == 1);
    CHECK(*gemm_group_epilogue(g, g.groups[0]) == "BIAS");
    CHECK(g.groups[0].stored.size() == 1);
  }
  SECTION("on the CPU the tail is a chunked pointwise group after the product") {
    Graph g = build(true);
    fuse(g);
    CHECK(groups_of(g, GroupKind::GemmEpilogue).empty());
    const auto pw = groups_of(g, GroupKind::Pointwise);
    REQUIRE(pw.size() == 1);
    CHECK(pw[0]->nodes.size() == 2);
  }
}

TEST_CASE("fusion: what the lowering refuses is taken apart", "[jit]") {
  SECTION("a float64 product has no GEMM lowering: the tail alone is a pointwise group") {
    GeluLayer l = gelu_layer(8, 40, 6, kFloat64);
    l.g.outputs = {l.y};
    on_gpu(l.g);
    fuse(l.g);
    CHECK(groups_of(l.g, GroupKind::GemmEpilogue).empty());
    const auto pw = groups_of(l.g, GroupKind::Pointwise);
    REQUIRE(pw.size() == 1);
    CHECK(pw[0]->nodes.size() == 2);  // add, gelu
    CHECK(l.g.nodes[l.g.values[l.p].producer].group == -1);
    // And what was formed is what the lowering accepts.
    for (const Group& grp : l.g.groups) {
      std::string why;
      CHECK(lowering_accepts(l.g, grp, nullptr, &why));
    }
  }
  SECTION("a batched product has no GEMM lowering either") {
    Graph g;
    const ValueId a = g.add_input(randn({3, 8, 40}), 0);
    const ValueId b = g.add_state(randn({3, 40, 6}));
    const ValueId p = g.append(OpId::bmm, {a, b});
    const ValueId r = g.append(OpId::relu, {p});
    g.outputs = {g.append(OpId::exp, {r})};
    on_gpu(g);
    fuse(g);
    CHECK(groups_of(g, GroupKind::GemmEpilogue).empty());
    const auto pw = groups_of(g, GroupKind::Pointwise);
    REQUIRE(pw.size() == 1);
    CHECK(pw[0]->nodes.size() == 2);
  }
  SECTION("on the CPU the cross-entropy pair is no group (it has no fused kernel there)") {
    Graph g;
    const ValueId x = g.add_input(randn({6, 4}), 0);
    const ValueId t = g.add_input(randint(0, 4, {6}), 1);
    const ValueId gr = g.add_input(randn({6}), 2);
    const ValueId l = g.append(OpId::cross_entropy, {x, t});
    const ValueId dx = g.append(OpId::cross_entropy_backward, {gr, x, t});
    g.outputs = {l, dx};
    Graph gpu = g;
    fuse(g);
    CHECK(groups_of(g, GroupKind::CrossEntropy).empty());
    on_gpu(gpu);
    fuse(gpu);
    CHECK(groups_of(gpu, GroupKind::CrossEntropy).size() == 1);
  }
  SECTION("on the CPU a product with its tail still groups (the tail runs chunked)") {
    GeluLayer l = gelu_layer(8, 40, 6);
    l.g.outputs = {l.y};
    fuse(l.g);
    const auto gemms = groups_of(l.g, GroupKind::GemmEpilogue);
    REQUIRE(gemms.size() == 1);
    CHECK(gemms[0]->nodes.size() == 3);
  }
}

#if defined(EMBER_WITH_CUDA)

TEST_CASE("fusion: a step's independent casts on a GPU run as one multi-tensor group", "[jit]") {
  auto cast_to = [](Graph& g, ValueId v, DType t) {
    Attrs a;
    a.dtype = t;
    return g.append(OpId::cast, {v}, a);
  };
  auto position = [](const Graph& g, ValueId v) { return g.values[v].producer; };
  // Every node's inputs are made before it (or are leaves).
  auto check_order = [](const Graph& g) {
    for (size_t k = 0; k < g.nodes.size(); ++k)
      for (ValueId in : g.nodes[k].inputs) CHECK(g.values[in].producer < static_cast<int32_t>(k));
  };
  auto shape_of = [](Shape sh) {
    Attrs a;
    a.shape = std::move(sh);
    return a;
  };
  SECTION("autocast's weight casts, made where each layer first uses them, come together") {
    Graph g;
    const ValueId x = g.add_input(randn({5, 4}), 0);
    const ValueId w1 = g.add_state(randn({4, 8})), b1 = g.add_state(randn({8}));
    const ValueId w2 = g.add_state(randn({8, 3})), b2 = g.add_state(randn({3}));
    const ValueId xb = cast_to(g, x, kBFloat16);
    const ValueId w1b = cast_to(g, w1, kBFloat16), b1b = cast_to(g, b1, kBFloat16);
    const ValueId h =
        g.append(OpId::relu, {g.append(OpId::add, {g.append(OpId::mm, {xb, w1b}), b1b})});
    const ValueId w2b = cast_to(g, w2, kBFloat16), b2b = cast_to(g, b2, kBFloat16);
    const ValueId y = g.append(OpId::add, {g.append(OpId::mm, {h, w2b}), b2b});
    g.outputs = {y};
    Graph cpu = g;
    on_gpu(g);
    fuse(g);
    check_order(g);
    const auto casts = groups_of(g, GroupKind::Casts);
    REQUIRE(casts.size() == 1);
    CHECK(casts[0]->nodes.size() == 5);
    for (ValueId c : {xb, w1b, b1b, w2b, b2b}) CHECK(has(casts[0]->outputs, c));
    // Moved up before the first product, which reads them.
    for (ValueId c : {w2b, b2b}) CHECK(position(g, c) < g.values[h].producer);
    // The products and their tails still group as before.
    CHECK(groups_of(g, GroupKind::GemmEpilogue).size() == 2);
    // On the CPU the casts stay where they were, one by one.
    fuse(cpu);
    CHECK(groups_of(cpu, GroupKind::Casts).empty());
    CHECK(position(cpu, w2b) > cpu.values[h].producer);
  }
  SECTION("a cast of a view made after the first cast stays after the view") {
    Graph g;
    const ValueId x = g.add_input(randn({5, 4}), 0);
    const ValueId w = g.add_state(randn({4, 8}));
    const ValueId xb = cast_to(g, x, kBFloat16);
    const ValueId y = g.append(OpId::exp, {xb});
    const ValueId wv = g.append(OpId::view, {w}, shape_of({32}));  // dense, root a leaf
    const ValueId wb = cast_to(g, wv, kBFloat16);
    g.outputs = {y, wb};
    on_gpu(g);
    fuse(g);
    check_order(g);
    CHECK(position(g, wb) > position(g, wv));
    CHECK(position(g, wb) > position(g, y));  // not moved: the view comes after the first cast
  }
  SECTION("gradient casts of computed values join while nothing between reads their results") {
    Graph g;
    const ValueId a = g.add_input(randn({6, 4}).to(kBFloat16), 0);
    const ValueId b = g.add_input(randn({6, 5}).to(kBFloat16), 1);
    // Column sums (bias gradients): a reduction closes its group, so a cast of its result
    // is alone.
    Attrs rows;
    rows.dims = {0};
    auto colsum = [&](ValueId v) { return g.append(OpId::sum, {g.append(OpId::exp, {v})}, rows); };
    const ValueId ca = cast_to(g, colsum(a), kFloat32);
    const ValueId cb = cast_to(g, colsum(b), kFloat32);
    // Reads cb's result before the next cast: that cast starts a group of its own.
    const ValueId s = g.append(OpId::mm, {g.append(OpId::view, {cb}, shape_of({1, 5})),
                                          g.append(OpId::view, {cb}, shape_of({5, 1}))});
    const ValueId cc = cast_to(g, colsum(g.append(OpId::add, {a, a})), kFloat32);
    const ValueId cd = cast_to(g, colsum(b), kFloat16);
    g.outputs = {ca, s, cc, cd};
    on_gpu(g);
    fuse(g);
    const auto casts = groups_of(g, GroupKind::Casts);
    REQUIRE(casts.size() == 2);
    CHECK(casts[0]->nodes.size() == 2);  // ca, cb
    CHECK(has(casts[0]->outputs, ca));
    CHECK(has(casts[0]->outputs, cb));
    CHECK(casts[1]->nodes.size() == 2);  // cc, cd
    CHECK(has(casts[1]->outputs, cc));
    CHECK(has(casts[1]->outputs, cd));
  }
  SECTION("a cast of a strided view, or of integers, stays alone") {
    Graph g;
    const ValueId w = g.add_state(randn({4, 8}));
    const ValueId v = g.add_state(randn({8}));
    const ValueId i = g.add_input(randint(0, 5, {7}), 0);
    Attrs t;
    t.dims = {1, 0};
    const ValueId wt = cast_to(g, g.append(OpId::permute, {w}, t), kBFloat16);
    const ValueId vb = cast_to(g, v, kBFloat16);
    const ValueId ib = cast_to(g, i, kFloat32);
    g.outputs = {wt, vb, ib};
    on_gpu(g);
    fuse(g);
    CHECK(groups_of(g, GroupKind::Casts).empty());
  }
}

namespace {

struct Trained {
  std::vector<float> losses;
  std::vector<Tensor> params;
};

// Linear -> GELU -> Linear -> GELU -> Linear, cross entropy, SGD with momentum; `steps` steps on
// fixed batches, compiled in `mode` or eager.
Trained train_gelu_net(bool compiled, jit::Mode mode, std::vector<std::string>* lowerings) {
  const Device dev = Device::cuda(0);
  manual_seed(7);
  nn::Sequential net(nn::Linear(40, 96), nn::GELU(), nn::Linear(96, 80), nn::GELU(),
                     nn::Linear(80, 10));
  net->to(dev);
  optim::SGD opt(net->parameters(), optim::SGDOptions(0.05).momentum(0.9));
  nn::CrossEntropyLoss loss_fn;
  auto step = [&](const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss = loss_fn(net->forward(x), y);
    loss.backward();
    opt.step();
    return loss;
  };
  std::vector<Tensor> xs, ys;
  for (int i = 0; i < 6; ++i) {
    xs.push_back(randn({48, 40}, dev));
    ys.push_back(randint(0, 10, {48}, dev));
  }
  Trained r;
  if (!compiled) {
    for (size_t i = 0; i < xs.size(); ++i) r.losses.push_back(step(xs[i], ys[i]).item<float>());
  } else {
    auto f = jit::compile(step, {.mode = mode, .fullgraph = true});
    for (size_t i = 0; i < xs.size(); ++i) r.losses.push_back(f(xs[i], ys[i]).item<float>());
  }
  for (const Tensor& p : net->parameters()) r.params.push_back(p.to(Device::cpu()));
  // (explain runs one more step eagerly: after the parameters were taken)
  if (compiled && lowerings) *lowerings = jit::explain(step, xs[0], ys[0]).lowerings;
  return r;
}

}  // namespace

TEST_CASE("fusion: a compiled GELU network runs every product with its tail fused as eager does",
          "[jit][cuda]") {
  EMBER_REQUIRE_CUDA();
  set_allow_tf32(false);
  const Trained eager = train_gelu_net(false, jit::Mode::Default, nullptr);
  for (jit::Mode mode : {jit::Mode::Default, jit::Mode::ReduceOverhead}) {
    std::vector<std::string> lowerings;
    const Trained got = train_gelu_net(true, mode, &lowerings);
    std::string all;
    for (const std::string& l : lowerings) all += l + "\n";
    INFO("lowerings:\n" << all);
    // These shapes run on the handwritten small-GEMM kernels in eager and compiled runs alike,
    // and the tails compute eager's functors in eager's compute types: the same bits.
    CHECK(got.losses == eager.losses);
    REQUIRE(got.params.size() == eager.params.size());
    for (size_t i = 0; i < got.params.size(); ++i) CHECK(equal(got.params[i], eager.params[i]));
    CHECK(all.find("member by member") == std::string::npos);
    // The two hidden layers' forward products each carry their bias and a generated gelu kernel.
    int gelu_tails = 0;
    for (const std::string& l : lowerings)
      gelu_tails += l.find("+ BIAS, then nvrtc pointwise kernel: gelu") != std::string::npos;
    CHECK(gelu_tails == 2);
  }
}

TEST_CASE("fusion: a compiled Linear over three dims runs as one GEMM call, like eager",
          "[jit][cuda]") {
  EMBER_REQUIRE_CUDA();
  set_allow_tf32(false);
  const Device dev = Device::cuda(0);
  manual_seed(11);
  const Tensor w = randn({24, 40}, dev), b = randn({24}, dev);
  auto f = [&](const Tensor& x) { return relu(linear(x, w, b)); };
  auto compiled = jit::compile(f, {.fullgraph = true});
  for (int i = 0; i < 3; ++i) {
    const Tensor x = randn({3, 7, 40}, dev);
    const Tensor want = f(x), got = compiled(x);
    REQUIRE(got.sizes() == want.sizes());
    CHECK(equal(got, want));  // the handwritten kernel eager mm runs too, bias and relu fused
  }
  const jit::Explanation e = jit::explain(f, randn({3, 7, 40}, dev));
  std::string all;
  for (const std::string& l : e.lowerings) all += l + "\n";
  INFO(all);
  CHECK(e.lowerings.size() == 1);
  CHECK(all.find("RELU_BIAS") != std::string::npos);
  CHECK(e.kernels_per_replay == 1);
}

namespace {

// A model the benchmark does not have, built from the newer activations: Linear -> SiLU ->
// LayerNorm -> Linear -> Mish -> Linear, cross entropy, momentum SGD. Nothing in jit/ names
// these ops; the fusion it gets comes from their kinds alone.
std::vector<float> train_silu_norm_net(bool compiled, jit::Explanation* explanation) {
  const Device dev = Device::cuda(0);
  manual_seed(5);
  nn::Sequential net(nn::Linear(40, 96), nn::SiLU(), nn::LayerNorm(96), nn::Linear(96, 64),
                     nn::Mish(), nn::Linear(64, 10));
  net->to(dev);
  optim::SGD opt(net->parameters(), optim::SGDOptions(0.05).momentum(0.9));
  nn::CrossEntropyLoss loss_fn;
  auto step = [&](const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss = loss_fn(net->forward(x), y);
    loss.backward();
    opt.step();
    return loss;
  };
  std::vector<float> losses;
  auto f = jit::compile(step, {.mode = jit::Mode::ReduceOverhead, .fullgraph = true});
  for (int i = 0; i < 5; ++i) {
    const Tensor x = randn({64, 40}, dev), y = randint(0, 10, {64}, dev);
    losses.push_back((compiled ? f(x, y) : step(x, y)).item<float>());
  }
  if (explanation)
    *explanation = jit::explain(step, randn({64, 40}, dev), randint(0, 10, {64}, dev));
  return losses;
}

}  // namespace

TEST_CASE("fusion: a SiLU / LayerNorm / Mish network gets the same fusion as the GELU one",
          "[jit][cuda]") {
  EMBER_REQUIRE_CUDA();
  set_allow_tf32(false);
  const std::vector<float> eager = train_silu_norm_net(false, nullptr);
  jit::Explanation e;
  const std::vector<float> got = train_silu_norm_net(true, &e);
  std::string all;
  for (const std::string& l : e.lowerings) all += l + "\n";
  INFO("lowerings:\n" << all);
  // LayerNorm's row means fused into generated reductions sum in another order than eager's.
  REQUIRE(got.size() == eager.size());
  for (size_t i = 0; i < got.size(); ++i)
    CHECK(std::abs(got[i] - eager[i]) <= 1e-5f * std::abs(eager[i]) + 1e-6f);
  CHECK(all.find("member by member") == std::string::npos);
  // Each forward product carries its bias in the GEMM call; the activations run in the tails.
  int biased = 0, silu_tail = 0, mish_tail = 0;
  for (const std::string& l : e.lowerings) {
    biased += l.find("+ BIAS") != std::string::npos;
    silu_tail +=
        l.find("+ BIAS, then nvrtc") != std::string::npos && l.find("silu") != std::string::npos;
    mish_tail +=
        l.find("+ BIAS, then nvrtc") != std::string::npos && l.find("mish") != std::string::npos;
  }
  CHECK(biased == 3);
  CHECK(silu_tail == 1);
  CHECK(mish_tail == 1);
}

#endif  // EMBER_WITH_CUDA

// A recurrent layer's traced training step (loss: the sum of squares of its outputs), optimized
// and fused as on a GPU (the graph's devices set to cuda:0; fusion only asks the host-side
// analysis of the lowering).
template <class Layer>
Graph recurrent_step_on_gpu(Layer& layer, const Tensor& x) {
  Tracer tracer(true);
  tracer.add_input(x, 0);
  Tensor out = std::get<0>(layer->forward(x));
  Tensor loss = sum(out * out);
  loss.backward();
  tracer.finish({loss});
  REQUIRE(!tracer.broken());
  Graph g = std::move(tracer.graph());
  on_gpu(g);
  optimize(g);
  return g;
}

// An LSTM's traced training step, fused as on a GPU: per time step the forward
// is the recurrent GEMM with its bias and one gate kernel, the backward one gate-gradient kernel
// that takes the hidden-state gradient's tail and stores the four gate gradients in place of
// their cat, and the recurrent product alone. No tail kernel after a GEMM, no cat of the gates.
TEST_CASE("fusion: an LSTM step on a GPU runs four kernels per time step", "[jit]") {
  manual_seed(21);
  const int64_t T = 5, B = 3, I = 4, H = 8;
  nn::LSTM lstm(nn::LSTMOptions(I, H));
  const Tensor x = randn({T, B, I});
  Graph g = recurrent_step_on_gpu(lstm, x);
  INFO(g.str());
  int tails = 0, gate_kernels = 0, cats_in_groups = 0, lone_gate_cats = 0;
  for (const Group& grp : g.groups) {
    if (grp.kind == GroupKind::GemmEpilogue && gemm_tail_group(g, grp)) ++tails;
    if (grp.kind != GroupKind::Pointwise) continue;
    if (g.values[g.nodes[static_cast<size_t>(grp.nodes.front())].out].shape == Shape{B, H})
      ++gate_kernels;
    cats_in_groups += g.nodes[static_cast<size_t>(grp.nodes.back())].op == OpId::cat;
  }
  for (const Node& n : g.nodes)
    if (n.op == OpId::cat && n.group < 0 && g.values[n.out].shape == Shape{B, 4 * H})
      ++lone_gate_cats;
  CHECK(tails == 0);
  CHECK(lone_gate_cats == 0);
  CHECK(cats_in_groups >= T - 1);    // the first step's gradient may have no cat to store into
  CHECK(gate_kernels <= 2 * T + 1);  // forward and backward gate kernels, per step
}

TEST_CASE("fusion: a GRU step on a GPU has no GEMM tail kernel and no lone gate cat", "[jit]") {
  // Each backward step joins the gate gradients twice: for the input projection's weight (the
  // candidate state's part as it is) and for the hidden state's (that part times the reset gate).
  manual_seed(22);
  const int64_t T = 5, B = 3, I = 4, H = 8;
  nn::GRU gru(nn::GRUOptions(I, H));
  const Tensor x = randn({T, B, I});
  Graph g = recurrent_step_on_gpu(gru, x);
  INFO(g.str());
  int tails = 0, cats_in_groups = 0, lone_gate_cats = 0;
  for (const Group& grp : g.groups) {
    if (grp.kind == GroupKind::GemmEpilogue && gemm_tail_group(g, grp)) ++tails;
    if (grp.kind != GroupKind::Pointwise) continue;
    for (int32_t m : grp.nodes) cats_in_groups += g.nodes[static_cast<size_t>(m)].op == OpId::cat;
  }
  for (const Node& n : g.nodes)
    if (n.op == OpId::cat && n.group < 0 && g.values[n.out].shape == Shape{B, 3 * H})
      ++lone_gate_cats;
  CHECK(tails == 0);
  CHECK(lone_gate_cats == 0);
  CHECK(cats_in_groups >= 2 * (T - 1));
}
