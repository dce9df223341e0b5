// GEMM epilogues, the fused cross entropy and their JIT lowerings (jit/lower_gemm_cuda.cpp),
// never against the code under test: every GEMM result against a float64 product computed here
// with plain loops (ref_mm; the eager mm is no reference, since for small shapes it runs the very
// handwritten kernels the lowering runs), the cross entropy against the eager ops
// (cross_entropy(_backward), a separate kernel pair) and a float64 loss, on fresh random inputs:
//  - every cuBLASLt epilogue (none, BIAS, RELU_BIAS, RELU_AUX_BIAS, DRELU_BGRAD, BGRAD of either
//    operand) over odd sizes and transposed operands; the plain-GEMM + bias-kernel fallback;
//  - the fused cross-entropy kernel against the eager forward and backward: ignore_index, label
//    smoothing, a scalar (stride 0) incoming gradient, every row width the launcher picks, and a
//    bad target raising ember::Error at the next synchronize;
//  - the lowerings built from hand-made graphs (after the fusion pass), with and without
//    autotuning, and which kernel each shape runs; the host-side matching (on the CPU too);
//  - a whole MLP step under jit::compile on CUDA with the lowerings wired in, 20 steps, and the
//    kernel and epilogue each Linear layer was lowered to.
//
// Tolerances. An fp32 GEMM element is a K-term sum whose order the kernel picks (split-K, tiles,
// cuBLASLt's choice); against the exact (float64) value its error is a few roundings of the
// partial sums, each at most 2^-24 (6e-8) of the running |sum|, growing like sqrt(K) for random
// data and at worst like K: we allow 1e-5 of sum_k |a_ik b_kj| (plus 1e-5 relative), which is
// over sqrt(K) * 6e-8 by a wide margin for every K here (at most 784: 1.7e-6) and covers the
// one rounding of the bias add and of relu's input. The fused cross
// entropy repeats the eager kernels' arithmetic in the same order with the same launch shape, so
// it is expected bit for bit; the check allows 1 ulp in case the compiler contracts an
// expression differently in the other kernel.
#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "core/dispatch.h"
#include "core/factory.h"
#include "core/generator.h"
#include "core/ops.h"
#include "jit/compile.h"
#include "jit/log.h"
#include "jit/lower.h"
#include "jit/passes.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/module.h"
#include "optim/sgd.h"
#include "test_util.h"
#if defined(EMBER_WITH_CUDA)
#include "kernels/cuda/cross_entropy_fused.h"
#include "kernels/cuda/gemm_epilogue.h"
#endif

using namespace ember;
using namespace ember::jit;

namespace {

#if defined(EMBER_WITH_CUDA)
// ---- comparisons (CUDA tests only) ----------------------------------------------------------

std::vector<double> host(const Tensor& t) {
  return t.detach().cpu().to(kFloat64).contiguous().to_vector<double>();
}

// |a - e| <= rtol |e| + atol[i] everywhere; reports the worst element.
void check_close(const std::vector<double>& a, const std::vector<double>& e, double rtol,
                 const std::vector<double>& atol, const std::string& what) {
  INFO(what);
  REQUIRE(a.size() == e.size());
  size_t bad = 0, worst = 0;
  double worst_ratio = -1;
  for (size_t i = 0; i < a.size(); ++i) {
    const double err = std::abs(a[i] - e[i]), tol = rtol * std::abs(e[i]) + atol[i];
    const double ratio = std::isnan(err) ? INFINITY : err / tol;
    if (!(err <= tol)) ++bad;
    if (ratio > worst_ratio) worst_ratio = ratio, worst = i;
  }
  if (bad == 0) return;
  FAIL_CHECK(what << ": " << bad << " of " << a.size() << " out of tolerance; worst at " << worst
                  << ": got " << a[worst] << ", expected " << e[worst] << " (atol " << atol[worst]
                  << ")");
}

// 1e-5 of sum_k |a_mk b_kn| per element of A[M,K] B[K,N] (float64, on the host).
std::vector<double> gemm_atol(const Tensor& a, const Tensor& b) {
  const std::vector<double> ha = host(a), hb = host(b);
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  std::vector<double> tol(M * N, 0.0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) {
      const double x = std::abs(ha[m * K + k]);
      for (int64_t n = 0; n < N; ++n) tol[m * N + n] += x * std::abs(hb[k * N + n]);
    }
  for (double& t : tol) t = 1e-5 * t + 1e-30;
  return tol;
}

// The float64 product A[M,K] B[K,N] of the operands' exact float32 values, plain loops on the
// host: shares no code with cuBLASLt, the handwritten kernels or the eager mm.
std::vector<double> ref_mm(const Tensor& a, const Tensor& b) {
  const std::vector<double> ha = host(a), hb = host(b);
  const int64_t M = a.size(0), K = a.size(1), N = b.size(1);
  std::vector<double> d(M * N, 0.0);
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) {
      const double x = ha[m * K + k];
      for (int64_t n = 0; n < N; ++n) d[m * N + n] += x * hb[k * N + n];
    }
  return d;
}

// relu?(P + bias) for a row-major [M, N] float64 product P and a [N] bias, in float64.
std::vector<double> ref_bias(std::vector<double> p, const Tensor& bias, bool relu) {
  const std::vector<double> hb = host(bias);
  const size_t N = hb.size();
  for (size_t i = 0; i < p.size(); ++i) {
    p[i] += hb[i % N];
    if (relu) p[i] = p[i] > 0 ? p[i] : 0.0;
  }
  return p;
}

// Sums of a row-major [R, C] float64 matrix over rows (dim 0: length C) or columns (dim 1: R).
std::vector<double> ref_sum(const std::vector<double>& x, int64_t R, int64_t C, int dim) {
  std::vector<double> s(dim == 0 ? C : R, 0.0);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) s[dim == 0 ? c : r] += x[r * C + c];
  return s;
}

// 1e-5 of sum |x| along `dim` of a 2-D tensor (a bias-gradient's error bound).
std::vector<double> sum_atol(const Tensor& x, int dim) {
  const std::vector<double> h = host(x);
  const int64_t R = x.size(0), C = x.size(1);
  std::vector<double> tol(dim == 0 ? C : R, 0.0);
  for (int64_t r = 0; r < R; ++r)
    for (int64_t c = 0; c < C; ++c) tol[dim == 0 ? c : r] += std::abs(h[r * C + c]);
  for (double& t : tol) t = 1e-5 * t + 1e-30;
  return tol;
}

// A [rows, cols] operand, stored row-major or as the transposed view of a [cols, rows] tensor.
Tensor operand(int64_t rows, int64_t cols, bool transposed, Device dev) {
  return transposed ? randn({cols, rows}, dev).t() : randn({rows, cols}, dev);
}

#endif  // EMBER_WITH_CUDA

// ---- graphs built by hand -------------------------------------------------------------------

struct Linear {
  Graph g;
  ValueId x = kNoValue, w = kNoValue, b = kNoValue, out = kNoValue;
};

// x [M,K] (input 0, or its transposed view when x_t), W [N,K], b [N] (state):
// relu?(mm(x, W^T) + b), returned; then the fusion pass.
Linear linear_graph(const Tensor& x, const Tensor& w, const Tensor& b, bool relu,
                    bool bias_first = false) {
  Linear l;
  Graph& g = l.g;
  l.x = g.add_input(x, 0);
  l.w = g.add_state(w);
  l.b = g.add_state(b);
  Attrs perm;
  perm.dims = {1, 0};
  const ValueId wt = g.append(OpId::permute, {l.w}, perm);
  const ValueId p = g.append(OpId::mm, {l.x, wt});
  const ValueId h = bias_first ? g.append(OpId::add, {l.b, p}) : g.append(OpId::add, {p, l.b});
  l.out = relu ? g.append(OpId::relu, {h}) : h;
  g.outputs = {l.out};
  fuse(g);
  return l;
}

const Group* find_group(const Graph& g, GroupKind kind) {
  for (const Group& grp : g.groups)
    if (grp.kind == kind) return &grp;
  return nullptr;
}

#if defined(EMBER_WITH_CUDA)
// Slots as the executor makes them: arguments, state and constants by identity, views on their
// root's memory, and memory only for the values the plan stores (group internals get none, so a
// lowering touching one would fail).
std::vector<std::shared_ptr<TensorImpl>> make_slots(const Graph& g, const MemoryPlan& plan,
                                                    const std::vector<Tensor>& args) {
  std::vector<std::shared_ptr<TensorImpl>> s(g.values.size());
  for (size_t i = 0; i < g.values.size(); ++i) {
    const Value& v = g.values[i];
    auto impl = std::make_shared<TensorImpl>();
    impl->sizes = v.shape;
    impl->strides = v.strides;
    impl->offset = v.offset;
    impl->dtype = v.dtype;
    impl->device = v.device;
    if (v.root != static_cast<ValueId>(i)) {
      const Value& r = g.values[v.root];
      impl->storage = s[v.root]->storage;
      impl->offset = s[v.root]->offset + (v.offset - r.offset);
    } else if (v.kind == ValueKind::Input) {
      impl = args[v.slot].impl_ptr();
    } else if (v.kind == ValueKind::State) {
      impl = g.state[v.slot].impl_ptr();
    } else if (v.kind == ValueKind::Constant) {
      impl = g.constants[v.slot].impl_ptr();
    } else if (plan.arena_of[i] >= 0 || plan.fresh[i]) {
      impl->storage = make_empty(v.shape, v.dtype, v.device).impl()->storage;
      impl->offset = 0;
    }
    s[i] = impl;
  }
  return s;
}

#endif  // EMBER_WITH_CUDA

}  // namespace

// ---- host-side matching (runs everywhere) ---------------------------------------------------

TEST_CASE("gemm lowering: matches mm + bias [+ relu] groups and nothing else", "[jit]") {
  // Built from CPU tensors, then marked as CUDA values: the matcher reads only the graph.
  auto on_gpu = [](Graph& g) {
    for (Value& v : g.values) v.device = Device::cuda(0);
  };
  const Tensor x = randn({8, 5}), w = randn({6, 5}), b = randn({6});
  {
    Linear l = linear_graph(x, w, b, true);
    on_gpu(l.g);
    const Group* grp = find_group(l.g, GroupKind::GemmEpilogue);
    REQUIRE(grp);
    std::string why;
    const auto epi = gemm_group_epilogue(l.g, *grp, &why);
    INFO(why);
    REQUIRE(epi);
    CHECK(*epi == "RELU_BIAS");
  }
  {
    Linear l = linear_graph(x, w, b, false, /*bias_first=*/true);
    on_gpu(l.g);
    const Group* grp = find_group(l.g, GroupKind::GemmEpilogue);
    REQUIRE(grp);
    const auto epi = gemm_group_epilogue(l.g, *grp);
    REQUIRE(epi);
    CHECK(*epi == "BIAS");
  }
  {
    // A transposed input is a layout flag, still one GEMM.
    Linear l = linear_graph(randn({5, 8}).t(), w, b, true);
    on_gpu(l.g);
    const Group* grp = find_group(l.g, GroupKind::GemmEpilogue);
    REQUIRE(grp);
    const auto epi = gemm_group_epilogue(l.g, *grp);
    REQUIRE(epi);
    CHECK(*epi == "RELU_BIAS");
  }
  {
    // Not on the GPU: no lowering.
    Linear l = linear_graph(x, w, b, true);
    const Group* grp = find_group(l.g, GroupKind::GemmEpilogue);
    REQUIRE(grp);
    std::string why;
    CHECK_FALSE(gemm_group_epilogue(l.g, *grp, &why));
    CHECK(why.find("GPU") != std::string::npos);
  }
  {
    // float64 is not lowered (the lowering is float32 only).
    Linear l = linear_graph(x.to(kFloat64), w.to(kFloat64), b.to(kFloat64), true);
    on_gpu(l.g);
    const Group* grp = find_group(l.g, GroupKind::GemmEpilogue);
    REQUIRE(grp);
    std::string why;
    CHECK_FALSE(gemm_group_epilogue(l.g, *grp, &why));
    CHECK(why.find("float32") != std::string::npos);
  }
  {
    // A full [M,N] addend is no bias.
    Graph g;
    const ValueId vx = g.add_input(x, 0);
    const ValueId vw = g.add_state(randn({5, 6}));
    const ValueId vr = g.add_state(randn({8, 6}));
    const ValueId p = g.append(OpId::mm, {vx, vw});
    const ValueId h = g.append(OpId::add, {p, vr});
    g.outputs = {g.append(OpId::relu, {h})};
    fuse(g);
    on_gpu(g);
    // A full [M,N] addend is no bias: the GEMM has no epilogue, the add and relu run in the
    // tail's generated kernel.
    const Group* grp = find_group(g, GroupKind::GemmEpilogue);
    REQUIRE(grp);
    std::string why;
    const auto epi = gemm_group_epilogue(g, *grp, &why);
    INFO(why);
    REQUIRE(epi);
    CHECK(*epi == "NONE");
  }
  {
    // mm + mul + add: not an epilogue cuBLASLt has; all of it is the tail's.
    Graph g;
    const ValueId vx = g.add_input(x, 0);
    const ValueId vw = g.add_state(randn({5, 6}));
    const ValueId vb = g.add_state(b);
    const ValueId p = g.append(OpId::mm, {vx, vw});
    const ValueId q = g.append(OpId::mul, {p, p});
    g.outputs = {g.append(OpId::add, {q, vb})};
    fuse(g);
    on_gpu(g);
    const Group* grp = find_group(g, GroupKind::GemmEpilogue);
    REQUIRE(grp);
    const auto epi = gemm_group_epilogue(g, *grp);
    REQUIRE(epi);
    CHECK(*epi == "NONE");
  }
  {
    // The biased sum is needed outside the group: the GEMM writes it with the bias, relu is the
    // tail's.
    Graph g;
    const ValueId vx = g.add_input(x, 0);
    const ValueId vw = g.add_state(randn({5, 6}));
    const ValueId vb = g.add_state(b);
    const ValueId p = g.append(OpId::mm, {vx, vw});
    const ValueId h = g.append(OpId::add, {p, vb});
    const ValueId a = g.append(OpId::relu, {h});
    g.outputs = {a, h};
    fuse(g);
    on_gpu(g);
    const Group* grp = find_group(g, GroupKind::GemmEpilogue);
    REQUIRE(grp);
    const auto epi = gemm_group_epilogue(g, *grp);
    REQUIRE(epi);
    CHECK(*epi == "BIAS");
    CHECK(grp->outputs.size() == 2);
  }
  // Without CUDA in the build, nothing is lowered at all.
#if !defined(EMBER_WITH_CUDA)
  Linear l = linear_graph(x, w, b, true);
  on_gpu(l.g);
  CHECK_FALSE(gemm_lowering_storage(l.g, *find_group(l.g, GroupKind::GemmEpilogue)));
#endif
}

TEST_CASE("cross-entropy lowering: matches the forward + backward pair", "[jit]") {
  Graph g;
  const Tensor logits = randn({6, 4}), target = randint(0, 4, {6});
  const ValueId x = g.add_input(logits, 0);
  const ValueId t = g.add_input(target, 1);
  const ValueId gr = g.add_input(randn({6}), 2);
  Attrs a;
  a.label_smoothing = 0.1;
  const ValueId l = g.append(OpId::cross_entropy, {x, t}, a);
  const ValueId dx = g.append(OpId::cross_entropy_backward, {gr, x, t}, a);
  g.outputs = {l, dx};
  for (Value& v : g.values) v.device = Device::cuda(0);  // (the CPU has no fused pair)
  fuse(g);
  const Group* grp = find_group(g, GroupKind::CrossEntropy);
  REQUIRE(grp);
  std::string why;
  INFO(why);
  CHECK(cross_entropy_group_fusable(g, *grp, &why));
  // Different loss attributes never pair (the fusion pass refuses them; so does the matcher).
  Group fake = *grp;
  g.nodes[fake.nodes[1]].attrs.label_smoothing = 0.2;
  CHECK_FALSE(cross_entropy_group_fusable(g, fake, &why));
}

#if defined(EMBER_WITH_CUDA)
namespace kc = ember::kernels::cuda;

namespace {

kc::GemmMatrix matrix_of(const Tensor& t) {
  kc::GemmMatrix m;
  m.ptr = t.raw_data();
  m.rows = t.size(0);
  m.cols = t.size(1);
  m.row_stride = t.stride(0);
  m.col_stride = t.stride(1);
  return m;
}

kc::GemmCall call_of(const Tensor& a, const Tensor& b, const Tensor& d, kc::GemmEpilogue e) {
  kc::GemmCall c;
  c.device = d.device().index;
  c.dtype = d.dtype();
  c.a = matrix_of(a);
  c.b = matrix_of(b);
  c.d = d.raw_data();
  c.ld_d = d.stride(0);
  c.epilogue = e;
  return c;
}

// A mask buffer of relu_mask_bytes(M, N) bytes (int32 words: 16-byte multiples per row).
Tensor mask_buffer(int64_t m, int64_t n, Device dev) {
  return zeros({kc::relu_mask_bytes(m, n) / 4}, TensorOptions(kInt32).device(dev));
}

struct Shape3 {
  int64_t m, k, n;
};
const Shape3 kShapes[] = {{64, 784, 512}, {64, 512, 10}, {7, 13, 5},   {1, 9, 4},
                          {5, 1, 3},      {6, 11, 1},    {33, 65, 129}};

// Runs the epilogue when cuBLASLt has it; false (and checks that the call throws instead of
// crashing) when it has none for this layout.
bool run_or_unsupported(const kc::GemmCall& c, std::vector<std::string>& unsupported,
                        const std::string& what) {
  if (!kc::top_algorithms(c, 1).empty()) {
    kc::gemm_epilogue(c);
    return true;
  }
  unsupported.push_back(what);
  CHECK_THROWS_AS(kc::gemm_epilogue(c), Error);
  CHECK_FALSE(kc::try_gemm_epilogue(c));
  return false;
}

std::string case_name(const char* epi, const Shape3& s, bool ta, bool tb) {
  return std::string(epi) + " M=" + std::to_string(s.m) + " K=" + std::to_string(s.k) +
         " N=" + std::to_string(s.n) + (ta ? " A^T" : "") + (tb ? " B^T" : "");
}

}  // namespace

TEST_CASE("gemm_epilogue: none, BIAS, RELU_BIAS match eager mm + add + relu", "[jit][cuda]") {
  EMBER_REQUIRE_CUDA();
  set_allow_tf32(false);
  const Device dev = Device::cuda(0);
  manual_seed(11);
  std::vector<std::string> unsupported;
  for (const Shape3& s : kShapes)
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        const Tensor a = operand(s.m, s.k, ta, dev), b = operand(s.k, s.n, tb, dev);
        const Tensor bias = randn({s.n}, dev);
        const std::vector<double> prod = ref_mm(a, b), biased = ref_bias(prod, bias, false),
                                  act = ref_bias(prod, bias, true);
        const std::vector<double> atol = gemm_atol(a, b);
        const struct {
          kc::GemmEpilogue e;
          const std::vector<double>* expect;
        } cases[] = {{kc::GemmEpilogue::None, &prod},
                     {kc::GemmEpilogue::Bias, &biased},
                     {kc::GemmEpilogue::ReluBias, &act}};
        for (const auto& cs : cases) {
          const std::string what = case_name(kc::gemm_epilogue_name(cs.e), s, ta, tb);
          Tensor d = full({s.m, s.n}, std::nan(""), dev);  // every element must be written
          kc::GemmCall c = call_of(a, b, d, cs.e);
          c.bias = bias.raw_data();
          if (!run_or_unsupported(c, unsupported, what)) continue;
          check_close(host(d), *cs.expect, 1e-5, atol, what);
        }
      }
  // The lowering relies on these: float32 BIAS and RELU_BIAS must exist for every layout.
  INFO("unsupported: " << unsupported.size());
  for (const std::string& u : unsupported) FAIL_CHECK("cuBLASLt has no algorithm for " << u);
}

TEST_CASE("gemm_epilogue: RELU_AUX_BIAS then DRELU_BGRAD, as in an MLP's forward and backward",
          "[jit][cuda]") {
  EMBER_REQUIRE_CUDA();
  set_allow_tf32(false);
  const Device dev = Device::cuda(0);
  manual_seed(12);
  std::vector<std::string> unsupported;
  bool mlp_layout_ran = false;
  // h = relu(x W1^T + b1) [M,H]; dH = dlogits [M,O] x W2 [O,H], masked; db1 = column sums.
  const struct {
    int64_t m, in, hidden, out;
  } shapes[] = {{64, 784, 512, 10}, {7, 13, 33, 5}, {1, 4, 129, 3}, {50, 20, 128, 1}};
  for (const auto& s : shapes)
    for (bool tb : {true, false}) {
      const Tensor x = randn({s.m, s.in}, dev);
      const Tensor w1 = operand(s.in, s.hidden, tb, dev);
      const Tensor b1 = randn({s.hidden}, dev);
      Tensor h = full({s.m, s.hidden}, std::nan(""), dev);
      Tensor mask = mask_buffer(s.m, s.hidden, dev);
      kc::GemmCall fwd = call_of(x, w1, h, kc::GemmEpilogue::ReluAuxBias);
      fwd.bias = b1.raw_data();
      fwd.aux = mask.raw_data();
      const Shape3 fs{s.m, s.in, s.hidden};
      if (!run_or_unsupported(fwd, unsupported, case_name("RELU_AUX_BIAS", fs, false, tb)))
        continue;
      const std::vector<double> hh = host(h);
      check_close(hh, ref_bias(ref_mm(x, w1), b1, true), 1e-5, gemm_atol(x, w1),
                  case_name("RELU_AUX_BIAS", fs, false, tb));
      // The mask's bit layout is cuBLASLt's own (nothing in Ember decodes it); what Ember needs
      // of it is that DRELU_BGRAD, reading it, keeps exactly the entries where h > 0. That is
      // checked below: an all-set, all-clear or misplaced mask fails the dH comparison.
      // Backward through the mask the forward wrote.
      const Tensor dlogits = randn({s.m, s.out}, dev);
      const Tensor w2 = randn({s.out, s.hidden}, dev);
      Tensor dh = full({s.m, s.hidden}, std::nan(""), dev);
      Tensor db1 = full({s.hidden}, std::nan(""), dev);
      kc::GemmCall bwd = call_of(dlogits, w2, dh, kc::GemmEpilogue::DReluBGrad);
      bwd.aux = mask.raw_data();
      bwd.bias_grad = db1.raw_data();
      const Shape3 bs{s.m, s.out, s.hidden};
      if (!run_or_unsupported(bwd, unsupported, case_name("DRELU_BGRAD", bs, false, false)))
        continue;
      // The mask is decided by the h the forward wrote (an h that rounded to 0 is masked).
      std::vector<double> expect = ref_mm(dlogits, w2);
      for (size_t i = 0; i < expect.size(); ++i)
        if (!(hh[i] > 0)) expect[i] = 0.0;
      const std::vector<double> dh_atol = gemm_atol(dlogits, w2);
      check_close(host(dh), expect, 1e-5, dh_atol, case_name("DRELU_BGRAD dH", bs, false, false));
      // db1[n] = sum_m dH[m, n]: the errors of the M summed elements, plus the sum's own
      // roundings (1e-5 of sum |dH|, the same argument as for a GEMM with K = M).
      std::vector<double> db_atol = ref_sum(dh_atol, s.m, s.hidden, 0);
      std::vector<double> abs_expect(expect.size());
      for (size_t i = 0; i < expect.size(); ++i) abs_expect[i] = std::abs(expect[i]);
      const std::vector<double> abs_sum = ref_sum(abs_expect, s.m, s.hidden, 0);
      for (size_t n = 0; n < db_atol.size(); ++n) db_atol[n] += 1e-5 * abs_sum[n];
      check_close(host(db1), ref_sum(expect, s.m, s.hidden, 0), 1e-5, db_atol,
                  case_name("DRELU_BGRAD db", bs, false, false));
      if (&s == &shapes[0] && tb) mlp_layout_ran = true;
    }
  // An unsupported layout must refuse cleanly (run_or_unsupported checks that it throws);
  // which ones cuBLASLt lacks is its business and only reported. The MLP's own layout (its
  // batch-64 shape, W1 as the transposed view of Linear's [H, in] weight) must run.
  for (const std::string& u : unsupported) WARN("cuBLASLt has no float32 algorithm for " << u);
  CHECK(mlp_layout_ran);
}

TEST_CASE("gemm_epilogue: BGRAD of either operand matches eager sums", "[jit][cuda]") {
  EMBER_REQUIRE_CUDA();
  set_allow_tf32(false);
  const Device dev = Device::cuda(0);
  manual_seed(13);
  std::vector<std::string> unsupported;
  int ran_a = 0, ran_b = 0;
  for (const Shape3& s : kShapes)
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (kc::GemmEpilogue e : {kc::GemmEpilogue::BGradA, kc::GemmEpilogue::BGradB}) {
          const std::string what = case_name(kc::gemm_epilogue_name(e), s, ta, tb);
          const Tensor a = operand(s.m, s.k, ta, dev), b = operand(s.k, s.n, tb, dev);
          const bool of_a = e == kc::GemmEpilogue::BGradA;
          Tensor d = full({s.m, s.n}, std::nan(""), dev);
          Tensor bg = full({of_a ? s.m : s.n}, std::nan(""), dev);
          kc::GemmCall c = call_of(a, b, d, e);
          c.bias_grad = bg.raw_data();
          if (!run_or_unsupported(c, unsupported, what)) continue;
          check_close(host(d), ref_mm(a, b), 1e-5, gemm_atol(a, b), what + " D");
          const std::vector<double> expect =
              of_a ? ref_sum(host(a), s.m, s.k, 1) : ref_sum(host(b), s.k, s.n, 0);
          check_close(host(bg), expect, 1e-5, of_a ? sum_atol(a, 1) : sum_atol(b, 0),
                      what + " bias grad");
          ++(of_a ? ran_a : ran_b);
        }
  // As above: an unsupported layout must refuse cleanly and is reported; each of the two
  // epilogues must run for some layout, or it is not tested at all.
  for (const std::string& u : unsupported) WARN("cuBLASLt has no float32 algorithm for " << u);
  INFO("BGRADA ran " << ran_a << " times, BGRADB " << ran_b);
  CHECK(ran_a >= 1);
  CHECK(ran_b >= 1);
}

TEST_CASE("gemm_epilogue: bad calls throw, the bias fallback matches eager", "[jit][cuda]") {
  EMBER_REQUIRE_CUDA();
  const Device dev = Device::cuda(0);
  manual_seed(14);
  const Tensor a = randn({6, 5}, dev), b = randn({5, 7}, dev), bias = randn({7}, dev);
  Tensor d = empty({6, 7}, TensorOptions(dev));
  kc::GemmCall c = call_of(a, b, d, kc::GemmEpilogue::Bias);
  CHECK_THROWS_AS(kc::gemm_epilogue(c), Error);  // no bias pointer
  kc::GemmCall wrong = call_of(a, randn({4, 7}, dev), d, kc::GemmEpilogue::None);
  CHECK_THROWS_AS(kc::gemm_epilogue(wrong), Error);  // K mismatch
  kc::GemmCall aux = call_of(a, b, d, kc::GemmEpilogue::ReluAuxBias);
  aux.bias = bias.raw_data();
  aux.aux = mask_buffer(6, 7, dev).raw_data();
  aux.aux_ld = 100;  // not a multiple of 128
  CHECK_THROWS_AS(kc::gemm_epilogue(aux), Error);
  // The lowering's fallback: plain GEMM, then the bias (and relu) kernel.
  for (bool r : {false, true}) {
    kc::GemmCall plain = call_of(a, b, d, kc::GemmEpilogue::None);
    kc::gemm_epilogue(plain);
    kc::add_bias_rows(0, kFloat32, d.raw_data(), 6, 7, 7, bias.raw_data(), r);
    check_close(host(d), ref_bias(ref_mm(a, b), bias, r), 1e-5, gemm_atol(a, b),
                r ? "fallback relu" : "fallback");
  }
}

TEST_CASE("gemm_epilogue: autotune times the top algorithms and keeps a correct winner",
          "[jit][cuda]") {
  EMBER_REQUIRE_CUDA();
  set_allow_tf32(false);
  const Device dev = Device::cuda(0);
  manual_seed(15);
  const Tensor x = randn({64, 784}, dev), w = randn({512, 784}, dev).t(), b = randn({512}, dev);
  Tensor h = empty({64, 512}, TensorOptions(dev));
  kc::GemmCall c = call_of(x, w, h, kc::GemmEpilogue::ReluBias);
  c.bias = b.raw_data();
  const std::vector<kc::GemmAlgorithm> algos = kc::top_algorithms(c, 8);
  REQUIRE(!algos.empty());
  CHECK(algos.size() <= 8);
  for (const auto& al : algos) CHECK(!al.describe.empty());
  const auto t0 = std::chrono::steady_clock::now();
  const kc::GemmAutotuneResult r = kc::autotune_gemm(c, 8, 5, 100.0);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO("autotune took " << secs << " s; picked " << r.index << " (" << r.describe << ") "
                        << r.microseconds << " us");
  CHECK(secs < 1.0);
  REQUIRE(r.index >= 0);
  CHECK(r.index < static_cast<int>(algos.size()));
  CHECK(r.times.size() == algos.size());
  CHECK(std::isfinite(r.microseconds));
  CHECK(r.microseconds > 0);
  for (float t : r.times) CHECK(t >= r.microseconds);
  const std::vector<double> expect = ref_bias(ref_mm(x, w), b, true);
  check_close(host(h), expect, 1e-5, gemm_atol(x, w), "after autotune");
  // Every candidate gives a correct result, and the default now is the winner.
  for (const auto& al : algos) {
    Tensor d = full({64, 512}, std::nan(""), dev);
    kc::GemmCall ci = c;
    ci.d = d.raw_data();
    kc::gemm_epilogue(ci, al.index);
    check_close(host(d), expect, 1e-5, gemm_atol(x, w), "candidate " + al.describe);
  }
  CHECK_THROWS_AS(kc::gemm_epilogue(c, static_cast<int>(algos.size()) + 8), Error);
  kc::gemm_epilogue(c);
  check_close(host(h), expect, 1e-5, gemm_atol(x, w), "autotuned default");
  // A second tuning of the same problem reuses the first.
  const kc::GemmAutotuneResult again = kc::autotune_gemm(c);
  CHECK(again.cached);
  CHECK(again.index == r.index);
}

// ---- the fused cross entropy ------------------------------------------------------------------

namespace {

// Ulps between two floats of one sign (or both zero).
int64_t ulps(float a, float b) {
  if (a == b) return 0;
  if (std::isnan(a) || std::isnan(b) || (a < 0) != (b < 0)) return INT64_MAX;
  return std::abs(static_cast<int64_t>(std::bit_cast<int32_t>(a)) -
                  static_cast<int64_t>(std::bit_cast<int32_t>(b)));
}

void check_ulps(const Tensor& got, const Tensor& want, const std::string& what) {
  const std::vector<float> g = got.cpu().contiguous().to_vector<float>();
  const std::vector<float> w = want.cpu().contiguous().to_vector<float>();
  REQUIRE(g.size() == w.size());
  int64_t worst = 0, differ = 0;
  size_t at = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    const int64_t u = ulps(g[i], w[i]);
    differ += u != 0;
    if (u > worst) worst = u, at = i;
  }
  INFO(what << ": " << differ << " of " << g.size() << " elements not bitwise equal; worst "
            << worst << " ulp at " << at << " (" << g[at] << " vs " << w[at] << ")");
  CHECK(worst <= 1);
}

struct CeRun {
  Tensor loss, dlogits;
};

CeRun fused_ce(const Tensor& logits, const Tensor& target, const Tensor& grad, int64_t ignore_index,
               double smoothing) {
  CeRun r;
  const int64_t N = logits.size(0), C = logits.size(1);
  r.loss = full({N}, std::nan(""), TensorOptions(logits.device()));
  r.dlogits = full({N, C}, std::nan(""), TensorOptions(logits.device()));
  kc::CrossEntropyFusedCall c;
  c.device = logits.device().index;
  c.dtype = logits.dtype();
  c.logits = logits.raw_data();
  c.target = static_cast<const int64_t*>(target.raw_data());
  c.grad = grad.raw_data();
  c.grad_stride = grad.dim() == 0 ? 0 : grad.stride(0);
  c.loss = r.loss.raw_data();
  c.dlogits = r.dlogits.raw_data();
  c.n = N;
  c.c = C;
  c.ignore_index = ignore_index;
  c.label_smoothing = smoothing;
  kc::cross_entropy_fused(c);
  return r;
}

CeRun eager_ce(const Tensor& logits, const Tensor& target, const Tensor& grad, int64_t ignore_index,
               double smoothing) {
  NoGradGuard ng;
  Attrs a;
  a.ignore_index = ignore_index;
  a.label_smoothing = smoothing;
  CeRun r;
  r.loss = dispatch(OpId::cross_entropy, {logits, target}, a);
  r.dlogits = dispatch(OpId::cross_entropy_backward, {grad, logits, target}, a);
  return r;
}

}  // namespace

TEST_CASE("cross_entropy_fused equals the eager forward and backward", "[jit][cuda]") {
  EMBER_REQUIRE_CUDA();
  const Device dev = Device::cuda(0);
  manual_seed(21);
  // Row widths cover every launch shape: a warp per row, 256 and 1024 threads per row.
  const struct {
    int64_t n, c;
  } shapes[] = {{64, 10}, {7, 1000}, {5, 3001}, {3, 10007}, {1, 1}, {33, 2}};
  for (const auto& s : shapes)
    for (double smoothing : {0.0, 0.1})
      for (int64_t ignore : {int64_t{-100}, int64_t{0}})
        for (bool scalar_grad : {false, true}) {
          const std::string what = "N=" + std::to_string(s.n) + " C=" + std::to_string(s.c) +
                                   " smoothing " + std::to_string(smoothing) + " ignore " +
                                   std::to_string(ignore) + (scalar_grad ? " scalar grad" : "");
          const Tensor logits = randn({s.n, s.c}, dev) * 3.0;
          Tensor target = randint(0, s.c, {s.n}, dev);
          if (s.n > 2) {  // a few rows ignored by value
            std::vector<int64_t> t = target.cpu().to_vector<int64_t>();
            t[1] = ignore;
            t[s.n - 1] = ignore;  // -100 is out of range when another index is ignored
            target = from_vector(t, {s.n}).to(dev);
          }
          // A mean's backward hands the loss pair an expanded scalar (stride 0).
          const Tensor grad = scalar_grad
                                  ? full({}, 1.0 / static_cast<double>(s.n), dev).expand({s.n})
                                  : randn({s.n}, dev);
          const CeRun f = fused_ce(logits, target, grad, ignore, smoothing);
          const CeRun e = eager_ce(logits, target, grad, ignore, smoothing);
          cuda::synchronize(0);
          check_ulps(f.loss, e.loss, what + " loss");
          check_ulps(f.dlogits, e.dlogits, what + " dlogits");
        }
}

TEST_CASE("cross_entropy_fused: a bad target raises ember::Error at the next sync", "[jit][cuda]") {
  EMBER_REQUIRE_CUDA();
  const Device dev = Device::cuda(0);
  const Tensor logits = randn({4, 10}, dev), grad = randn({4}, dev);
  const Tensor target = from_vector(std::vector<int64_t>{1, 12, 3, -100}, {4}).to(dev);
  const CeRun f = fused_ce(logits, target, grad, -100, 0.0);
  CHECK_THROWS_WITH(cuda::synchronize(0), Catch::Contains("out of range") &&
                                              Catch::Contains("12") && Catch::Contains("10"));
  cuda::synchronize(0);  // reported once, then cleared
  // The bad row is zero, like eager's; the others are right.
  const std::vector<float> loss = f.loss.cpu().to_vector<float>();
  const std::vector<float> dx = f.dlogits.cpu().to_vector<float>();
  CHECK(loss[1] == 0.f);
  CHECK(loss[3] == 0.f);
  for (int j = 0; j < 10; ++j) {
    CHECK(dx[10 + j] == 0.f);
    CHECK(dx[30 + j] == 0.f);
  }
  CHECK(loss[0] > 0.f);
  const Tensor good = from_vector(std::vector<int64_t>{1, -5, 3, -100}, {4}).to(dev);
  (void)fused_ce(logits, good, grad, -100, 0.0);
  CHECK_THROWS_WITH(cuda::synchronize(0), Catch::Contains("-5"));
}

namespace {

// The reduced loss (mean or sum) with its gradient, through the fused call and through the eager
// ops, and the float64 reference of both (the CPU kernels compute rows in double).
struct ReducedCe {
  Tensor loss, dlogits;
};

ReducedCe fused_reduced(const Tensor& logits, const Tensor& target, const Tensor& grad,
                        int64_t ignore, double smoothing, LossReduction red) {
  ReducedCe r;
  const int64_t N = logits.size(0), C = logits.size(1);
  r.loss = full({}, 7.0, TensorOptions(logits.device()));  // must be overwritten
  r.dlogits = full({N, C}, std::nan(""), TensorOptions(logits.device()));
  kc::CrossEntropyFusedCall c;
  c.device = logits.device().index;
  c.dtype = logits.dtype();
  c.logits = logits.raw_data();
  c.target = static_cast<const int64_t*>(target.raw_data());
  c.grad = grad.raw_data();
  c.grad_stride = 0;
  c.loss = r.loss.raw_data();
  c.dlogits = r.dlogits.raw_data();
  c.n = N;
  c.c = C;
  c.ignore_index = ignore;
  c.label_smoothing = smoothing;
  c.reduction = red;
  kc::cross_entropy_fused(c);
  return r;
}

ReducedCe eager_reduced(const Tensor& logits, const Tensor& target, const Tensor& grad,
                        int64_t ignore, double smoothing, LossReduction red) {
  NoGradGuard ng;
  Attrs a;
  a.ignore_index = ignore;
  a.label_smoothing = smoothing;
  a.reduction = red;
  ReducedCe r;
  r.loss = dispatch(OpId::cross_entropy, {logits, target}, a);
  r.dlogits = dispatch(OpId::cross_entropy_backward, {grad, logits, target}, a);
  return r;
}

// Per-sample losses in float64, reduced here: the reference written out in the test.
double reference_loss(const Tensor& logits, const Tensor& target, int64_t ignore, double e,
                      LossReduction red) {
  const std::vector<double> x = host(logits.to(kFloat64));
  const std::vector<int64_t> t = target.cpu().to_vector<int64_t>();
  const int64_t N = logits.size(0), C = logits.size(1);
  double total = 0;
  int64_t count = 0;
  for (int64_t i = 0; i < N; ++i) {
    if (t[i] == ignore) continue;
    double m = -INFINITY, s = 0, sum = 0;
    for (int64_t j = 0; j < C; ++j) m = std::max(m, x[i * C + j]);
    for (int64_t j = 0; j < C; ++j) s += std::exp(x[i * C + j] - m), sum += x[i * C + j];
    total += m + std::log(s) - (1 - e) * x[i * C + t[i]] - e / static_cast<double>(C) * sum;
    ++count;
  }
  return red == LossReduction::Mean ? total / static_cast<double>(count) : total;
}

}  // namespace

TEST_CASE("cross_entropy_fused: the mean and sum in one launch equal eager and float64",
          "[jit][cuda]") {
  EMBER_REQUIRE_CUDA();
  const Device dev = Device::cuda(0);
  manual_seed(22);
  // Up to 32 classes a thread per row, wider rows a row group: one block (up to a row per
  // thread, or 4 rows per row group), many blocks (a count kernel first for the mean's
  // gradient), each row width's launch shape, and more rows than the scratch has block slots.
  const struct {
    int64_t n, c;
  } shapes[] = {{64, 10}, {256, 10}, {257, 10}, {8192, 10},  {70000, 3},
                {33, 33}, {129, 33}, {7, 1000}, {300, 3001}, {17, 10007}};
  for (const auto& s : shapes)
    for (LossReduction red : {LossReduction::Mean, LossReduction::Sum})
      for (double smoothing : {0.0, 0.1}) {
        const int64_t ignore = 0;
        const std::string what = "N=" + std::to_string(s.n) + " C=" + std::to_string(s.c) +
                                 (red == LossReduction::Mean ? " mean" : " sum") + " smoothing " +
                                 std::to_string(smoothing);
        INFO(what);
        const Tensor logits = randn({s.n, s.c}, dev) * 3.0;
        const Tensor target = randint(0, s.c, {s.n}, dev);  // class 0 ignored: ~1/C of the rows
        const Tensor grad = full({}, 0.75, dev);
        const ReducedCe f = fused_reduced(logits, target, grad, ignore, smoothing, red);
        const ReducedCe f2 = fused_reduced(logits, target, grad, ignore, smoothing, red);
        const ReducedCe e = eager_reduced(logits, target, grad, ignore, smoothing, red);
        cuda::synchronize(0);
        // The same kernel and launch shape: bitwise equal, and again on a second launch (the
        // ticket was reset by the first).
        CHECK(e.loss.item<float>() == f.loss.item<float>());
        CHECK(f2.loss.item<float>() == f.loss.item<float>());
        check_ulps(f.dlogits, e.dlogits, what + " dlogits");
        // Against float64: the loss, and the gradient from the CPU kernels (double rows).
        const double want = reference_loss(logits, target, ignore, smoothing, red);
        CHECK(std::abs(f.loss.item<float>() - want) <= 1e-5 * std::abs(want) + 1e-6);
        const ReducedCe cpu = eager_reduced(logits.cpu().to(kFloat64), target.cpu(),
                                            grad.cpu().to(kFloat64), ignore, smoothing, red);
        const std::vector<double> gd = host(f.dlogits), gw = host(cpu.dlogits);
        double scale = 0;
        for (double v : gw) scale = std::max(scale, std::abs(v));
        check_close(gd, gw, 1e-4, std::vector<double>(gw.size(), 1e-6 * scale), what + " vs cpu");
      }
  // No rows: the mean is NaN (0 / 0, as in PyTorch), the sum 0; all rows ignored likewise.
  const Tensor none = randn({0, 4}, dev), no_t = zeros({0}, TensorOptions(kInt64).device(dev));
  const Tensor g1 = full({}, 1.0, dev);
  CHECK(std::isnan(fused_reduced(none, no_t, g1, -100, 0, LossReduction::Mean).loss.item<float>()));
  CHECK(fused_reduced(none, no_t, g1, -100, 0, LossReduction::Sum).loss.item<float>() == 0.f);
  const Tensor x = randn({300, 4}, dev), ignored = zeros({300}, TensorOptions(kInt64).device(dev));
  const ReducedCe all = fused_reduced(x, ignored, g1, 0, 0, LossReduction::Mean);
  CHECK(std::isnan(all.loss.item<float>()));
  for (double v : host(all.dlogits)) REQUIRE(v == 0.0);
  // A target out of range is reported at the next synchronize, on one block and on many.
  for (int64_t n : {int64_t{4}, int64_t{5000}}) {
    std::vector<int64_t> t(static_cast<size_t>(n), 1);
    t[2] = 12;
    const Tensor bad = from_vector(t, {n}).to(dev);
    (void)fused_reduced(randn({n, 10}, dev), bad, g1, -100, 0, LossReduction::Mean);
    CHECK_THROWS_WITH(cuda::synchronize(0), Catch::Contains("out of range") &&
                                                Catch::Contains("12") && Catch::Contains("10"));
  }
}

// ---- the lowerings on graphs ----------------------------------------------------------------

namespace {

// Lowers the graph's GEMM group as the executor would and runs it on these arguments.
Tensor run_gemm_lowering(const Linear& l, const std::vector<Tensor>& args,
                         GemmAutotuneInfo* tune = nullptr, std::string* describe = nullptr) {
  const Graph& g = l.g;
  const Group* grp = find_group(g, GroupKind::GemmEpilogue);
  REQUIRE(grp);
  const auto storage = gemm_lowering_storage(g, *grp);
  REQUIRE(storage);
  CHECK(*storage == GroupStorage::None);
  std::vector<GroupStorage> st(g.groups.size(), GroupStorage::Materialize);
  st[grp - g.groups.data()] = *storage;
  const MemoryPlan plan = plan_memory(g, st);
  const auto slots = make_slots(g, plan, args);
  // The product and the biased sum are never stored.
  const Node& mm = g.nodes[grp->nodes[0]];
  CHECK(slots[mm.out]->storage == nullptr);
  std::unique_ptr<LoweredGroup> low = lower_gemm_cuda({g, *grp, slots, plan});
  REQUIRE(low);
  CHECK(low->kernels() == 1);
  low->run();
  low->run();  // a replay rewrites the same values
  if (tune) *tune = *gemm_autotune_info(*low);
  if (describe) *describe = low->describe();
  return Tensor(slots[l.out]);
}

}  // namespace

TEST_CASE("lower_gemm_cuda: a Linear (+ ReLU) group runs as one call like eager", "[jit][cuda]") {
  EMBER_REQUIRE_CUDA();
  set_allow_tf32(false);
  const Device dev = Device::cuda(0);
  manual_seed(31);
  // The kernel each shape must run, by the rules of small_gemm.h written out here: K <= 16
  // small-K; N <= 16 with x's rows contiguous small-N (a transposed x is not); M N K <= 2^25
  // tiled; else cuBLASLt ([256,784]x[784,512] is above the handwritten kernels' sizes).
  const struct {
    int64_t m, k, n;
    const char* kernel;     // x row-major
    const char* kernel_xt;  // x a transposed view
  } shapes[] = {{64, 784, 512, "tiled kernel", "tiled kernel"},
                {256, 784, 512, "cuBLASLt", "cuBLASLt"},
                {64, 512, 10, "small-N kernel", "tiled kernel"},
                {7, 13, 5, "small-K kernel", "small-K kernel"},
                {1, 3, 17, "small-K kernel", "small-K kernel"},
                {129, 1, 33, "small-K kernel", "small-K kernel"}};
  for (const auto& s : shapes)
    for (bool relu_on : {true, false})
      for (bool xt : {false, true}) {
        INFO("M=" << s.m << " K=" << s.k << " N=" << s.n << (relu_on ? " relu" : "")
                  << (xt ? " x transposed" : ""));
        const Tensor x = operand(s.m, s.k, xt, dev);
        const Tensor w = randn({s.n, s.k}, dev), b = randn({s.n}, dev);
        const Linear l = linear_graph(x, w, b, relu_on);
        // A fresh argument at run time (other memory than the trace's): the lowering reads slots.
        const Tensor x2 = operand(s.m, s.k, xt, dev);
        std::string describe;
        const Tensor got = run_gemm_lowering(l, {x2}, nullptr, &describe);
        INFO("lowered as: " << describe);
        CHECK(describe.starts_with(std::string(xt ? s.kernel_xt : s.kernel) + " mm "));
        CHECK(describe.ends_with(relu_on ? " + RELU_BIAS" : " + BIAS"));
        check_close(host(got), ref_bias(ref_mm(x2, w.t()), b, relu_on), 1e-5, gemm_atol(x2, w.t()),
                    "lowered linear");
      }
}

TEST_CASE("lower_gemm_cuda: autotuning picks an algorithm and stays correct", "[jit][cuda]") {
  EMBER_REQUIRE_CUDA();
  set_allow_tf32(false);
  const Device dev = Device::cuda(0);
  manual_seed(32);
  struct Restore {
    ~Restore() { set_gemm_autotune(false); }
  } restore;
  set_gemm_autotune(true);
  // A shape no other test tuned (the winner is cached per problem), above the handwritten
  // Tiled kernel's 2^25 multiply-adds (small_gemm.h), so cuBLASLt runs it.
  const Tensor x = randn({96, 600}, dev), w = randn({640, 600}, dev), b = randn({640}, dev);
  const Linear l = linear_graph(x, w, b, true);
  GemmAutotuneInfo tune;
  std::string describe;
  const auto t0 = std::chrono::steady_clock::now();
  const Tensor got = run_gemm_lowering(l, {x}, &tune, &describe);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO(describe << "; took " << secs << " s");
  CHECK(secs < 1.0);
  REQUIRE(tune.tuned);
  CHECK(tune.algorithm >= 0);
  CHECK(tune.algorithm < tune.candidates);
  CHECK(tune.candidates <= 8);
  CHECK(tune.microseconds > 0);
  CHECK(!tune.algo.empty());
  CHECK(describe.starts_with("cuBLASLt mm "));
  CHECK(describe.find("autotuned") != std::string::npos);
  CHECK(describe.find("fallback") == std::string::npos);
  check_close(host(got), ref_bias(ref_mm(x, w.t()), b, true), 1e-5, gemm_atol(x, w.t()),
              "autotuned lowering");
}

TEST_CASE("lower_cross_entropy_cuda: the fused pair equals eager on a graph", "[jit][cuda]") {
  EMBER_REQUIRE_CUDA();
  const Device dev = Device::cuda(0);
  manual_seed(33);
  Graph g;
  const Tensor logits = randn({64, 10}, dev);
  const Tensor target = randint(0, 10, {64}, dev);
  const ValueId x = g.add_input(logits, 0);
  const ValueId t = g.add_input(target, 1);
  const ValueId gr = g.add_input(randn({64}, dev), 2);
  Attrs a;
  a.label_smoothing = 0.05;
  a.ignore_index = 3;
  const ValueId l = g.append(OpId::cross_entropy, {x, t}, a);
  const ValueId dx = g.append(OpId::cross_entropy_backward, {gr, x, t}, a);
  g.outputs = {l, dx};
  fuse(g);
  const Group* grp = find_group(g, GroupKind::CrossEntropy);
  REQUIRE(grp);
  const auto storage = cross_entropy_lowering_storage(g, *grp);
  REQUIRE(storage);
  std::vector<GroupStorage> st(g.groups.size(), GroupStorage::Materialize);
  const MemoryPlan plan = plan_memory(g, st);
  // Arguments at run time other than the traced ones.
  const Tensor x2 = randn({64, 10}, dev), t2 = randint(0, 10, {64}, dev), g2 = randn({64}, dev);
  const auto slots = make_slots(g, plan, {x2, t2, g2});
  std::unique_ptr<LoweredGroup> low = lower_cross_entropy_cuda({g, *grp, slots, plan});
  REQUIRE(low);
  CHECK(low->kernels() == 1);
  low->run();
  const CeRun e = eager_ce(x2, t2, g2, 3, 0.05);
  check_ulps(Tensor(slots[l]), e.loss, "lowered loss");
  check_ulps(Tensor(slots[dx]), e.dlogits, "lowered dlogits");
}

// ---- a whole training step --------------------------------------------------------------------

namespace {

struct StepNetImpl : nn::Module {
  nn::Linear fc1{nullptr}, fc2{nullptr};
  StepNetImpl(int64_t in, int64_t hidden) {
    fc1 = register_module("fc1", nn::Linear(in, hidden));
    fc2 = register_module("fc2", nn::Linear(hidden, 10));
  }
  Tensor forward(const Tensor& x) { return fc2(relu(fc1(x))); }
};
EMBER_MODULE(StepNet);

std::vector<std::string>& lines() {
  static std::vector<std::string> l;
  return l;
}
void keep_line(std::string_view s) { lines().emplace_back(s); }

struct StepRun {
  std::vector<double> losses;
  std::vector<Tensor> params;
};

// The net's shape: batch x in -> hidden -> 10.
struct NetSize {
  int64_t batch, in, hidden;
};

StepRun train_mlp(bool compiled, Mode mode, const NetSize& size) {
  const Device dev = Device::cuda(0);
  manual_seed(41);
  StepNet net(size.in, size.hidden);
  net->to(dev);
  optim::SGD opt(net->parameters(), optim::SGDOptions(0.05).momentum(0.9));
  nn::CrossEntropyLoss crit;
  auto body = [&](const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss = crit(net(x), y);
    loss.backward();
    opt.step();
    return loss;
  };
  auto step = jit::compile(body, {.mode = mode, .fullgraph = true});
  manual_seed(42);
  StepRun r;
  for (int i = 0; i < 20; ++i) {
    const Tensor x = randn({size.batch, size.in}, dev), y = randint(0, 10, {size.batch}, dev);
    r.losses.push_back((compiled ? step(x, y) : body(x, y)).item<float>());
  }
  for (const Tensor& p : net->parameters()) r.params.push_back(p.detach().clone());
  return r;
}

void compare_steps(const StepRun& c, const StepRun& e, const std::string& what) {
  INFO(what);
  REQUIRE(c.losses.size() == e.losses.size());
  for (size_t i = 0; i < e.losses.size(); ++i) {
    INFO("step " << i + 1 << ": compiled " << c.losses[i] << ", eager " << e.losses[i]);
    CHECK(std::abs(c.losses[i] - e.losses[i]) <= 1e-5 * std::abs(e.losses[i]));
  }
  for (size_t i = 0; i < e.params.size(); ++i) {
    const std::vector<double> ev = host(e.params[i]);
    double scale = 0;
    for (double v : ev) scale = std::max(scale, std::abs(v));
    check_close(host(c.params[i]), ev, 1e-5, std::vector<double>(ev.size(), 1e-5 * scale),
                what + ": parameter " + std::to_string(i));
  }
  CHECK(e.losses.back() != e.losses.front());
}

}  // namespace

TEST_CASE("gemm and cross-entropy lowerings: a compiled MLP step matches eager for 20 steps",
          "[jit][cuda]") {
  EMBER_REQUIRE_CUDA();
  set_allow_tf32(false);
  struct Restore {
    unsigned prev;
    ~Restore() {
      set_log_mask(prev);
      set_log_sink(nullptr);
      set_gemm_autotune(false);
    }
  } restore{set_log_mask(static_cast<unsigned>(Log::code) | static_cast<unsigned>(Log::autotune))};
  set_log_sink(&keep_line);
  // Log lines holding every one of `needles`.
  auto count = [](std::initializer_list<std::string_view> needles) {
    int n = 0;
    for (const std::string& l : lines()) {
      bool all = true;
      for (std::string_view s : needles) all = all && l.find(s) != std::string::npos;
      n += all;
    }
    return n;
  };
  // Small: layer 1's products go to the handwritten Tiled kernel (small_gemm.h), layer 2's to
  // SmallN / SmallK. Wide: layer 1's forward and weight gradient (256 x 400 x 400) to cuBLASLt.
  for (const bool wide : {false, true}) {
    const NetSize size = wide ? NetSize{256, 400, 400} : NetSize{64, 100, 256};
    const StepRun eager = train_mlp(false, Mode::Default, size);
    for (Mode mode : {Mode::Default, Mode::ReduceOverhead, Mode::MaxAutotune}) {
      const char* name = mode == Mode::Default          ? "Default"
                         : mode == Mode::ReduceOverhead ? "ReduceOverhead"
                                                        : "MaxAutotune";
      lines().clear();
      set_gemm_autotune(mode == Mode::MaxAutotune);
      const StepRun compiled = train_mlp(true, mode, size);
      std::string all;
      for (const std::string& l : lines()) all += l + "\n";
      INFO((wide ? "wide" : "small") << " net, " << name << " mode; logs:\n" << all);
      compare_steps(compiled, eager, name);
      // Each layer's forward went to the kernel its shape calls for, with its epilogue fused
      // (small_gemm.h): layer 1 [B,in]x[in,hidden] + bias + relu to the tiled kernel (small
      // net, M N K = 1.6e6) or cuBLASLt (wide, 4.1e7 > 2^25); layer 2 [B,hidden]x[hidden,10]
      // + bias to small-N (N = 10). A trace may be lowered more than once (a step can need two
      // traces), so these count at least one line, never a particular number.
      // (A stream, not "[" + std::to_string(...): GCC 12 -O3 warns (-Wrestrict) on that.)
      std::ostringstream l1s, l2s;
      l1s << "[" << size.batch << ", " << size.in << "]x[" << size.in << ", " << size.hidden
          << "] + RELU_BIAS";
      l2s << "[" << size.batch << ", " << size.hidden << "]x[" << size.hidden << ", 10] + BIAS";
      const std::string l1 = l1s.str(), l2 = l2s.str();
      CHECK(count({wide ? "gemm lowering: cuBLASLt mm " : "gemm lowering: tiled kernel mm ", l1}) >=
            1);
      CHECK(count({"gemm lowering: small-N kernel mm ", l2}) >= 1);
      // Every GEMM of the small net (forward and gradients) is small enough for the
      // handwritten kernels; no lowered GEMM fell back to GEMM + a bias kernel.
      if (!wide) CHECK(count({"gemm lowering: cuBLASLt"}) == 0);
      CHECK(count({"no cuBLASLt algorithm"}) == 0);
      CHECK(count({"cross-entropy lowering"}) >= 1);
      // MaxAutotune times the cuBLASLt GEMMs (the handwritten kernels have nothing to tune):
      // layer 1's forward among them in the wide net.
      if (mode == Mode::MaxAutotune && wide) CHECK(count({"picked #", "cuBLASLt mm ", l1}) >= 1);
      if (!wide) CHECK(count({"picked #"}) == 0);
    }
  }
}

#endif  // EMBER_WITH_CUDA
