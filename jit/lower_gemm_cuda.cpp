// CUDA lowerings of two fused group kinds (jit/lower.h):
//  - GemmEpilogue: mm + add(bias broadcast over rows) [+ relu] as one cuBLASLt matmul with the
//    BIAS / RELU_BIAS epilogue (kernels/cuda/gemm_epilogue.h). The bias is added to the fp32
//    product once and rounded once, as eager's add of the stored product does; only the GEMM's
//    summation order may differ (another cuBLASLt algorithm), and ReLU is Ember's where cuBLASLt
//    has no algorithm for the epilogue (the fallback: plain GEMM, then add_bias_rows).
//  - CrossEntropy: the forward and backward pair as one kernel (kernels/cuda/cross_entropy_fused.h)
//    that computes exactly what the eager pair computes.
// The analysis is host code compiled in every build; the lowerings exist only with CUDA.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <initializer_list>
#include <string_view>

#include "jit/log.h"
#include "jit/lower.h"
#include "kernels/blas_layout.h"
#if defined(EMBER_WITH_CUDA)
#include "kernels/cuda/cross_entropy_fused.h"
#include "kernels/cuda/gemm_epilogue.h"
#include "kernels/cuda/small_gemm.h"
#endif

namespace ember::jit {
namespace {

std::atomic<bool> g_gemm_autotune{false};

// What a lowerable GEMM group reads and writes.
struct GemmMatch {
  ValueId a = kNoValue, b = kNoValue, bias = kNoValue, out = kNoValue;
  int64_t m = 0, n = 0, k = 0;
  bool relu = false;
};

struct CeMatch {
  ValueId logits = kNoValue, target = kNoValue, grad = kNoValue;
  ValueId loss = kNoValue, dlogits = kNoValue;
  Attrs attrs;
};

// Concatenation (GCC 12 warns falsely on chains of string + literal under -O3).
std::string join(std::initializer_list<std::string_view> parts) {
  std::string s;
  for (std::string_view p : parts) s.append(p);
  return s;
}

bool fail(std::string* why, std::string msg) {
  if (why) *why = std::move(msg);
  return false;
}

// A GEMM operand needs a unit stride along one dim (the same rule as the eager matmul's, minus
// the staging copy it may make).
bool gemm_operand(const Value& v) {
  if (v.shape.size() != 2) return false;
  return kernels::blas_readable(v.shape[0], v.shape[1], v.strides[0], v.strides[1]);
}

// Row-major dense (strides of size-1 dims do not matter).
bool dense(const Value& v) {
  const Strides want = contiguous_strides(v.shape);
  for (int d = 0; d < v.shape.size(); ++d)
    if (v.shape[d] != 1 && v.strides[d] != want[d]) return false;
  return true;
}

bool match_gemm(const Graph& g, const Group& grp, GemmMatch& out, std::string* why) {
  if (grp.kind != GroupKind::GemmEpilogue) return fail(why, "not a GEMM-epilogue group");
  if (grp.nodes.empty() || grp.nodes.size() > 3)
    return fail(why, "the epilogue is not add [+ relu]");
  const Node& mm = g.nodes[grp.nodes[0]];
  if (mm.op != OpId::mm || mm.inplace || mm.inputs.size() != 2 || mm.out == kNoValue)
    return fail(why, "the group does not start with an out-of-place mm");
  if (grp.nodes.size() == 1) {
    // A lone GEMM (the executor wraps standalone mm nodes): no epilogue, so MaxAutotune can
    // still choose its algorithm.
    const Value& va = g.values[mm.inputs[0]];
    const Value& vb = g.values[mm.inputs[1]];
    const Value& vp = g.values[mm.out];
    for (const Value* v : {&va, &vb, &vp}) {
      if (v->dtype != kFloat32) return fail(why, "not float32");
      if (!v->device.is_cuda() || v->device != vp.device)
        return fail(why, "not all on the product's GPU");
    }
    if (!gemm_operand(va) || !gemm_operand(vb))
      return fail(why, "an operand has no unit stride (the eager matmul would copy it)");
    if (!dense(vp)) return fail(why, "the result is not a dense [M, N] matrix");
    out.a = mm.inputs[0];
    out.b = mm.inputs[1];
    out.bias = kNoValue;
    out.out = mm.out;
    out.m = va.shape[0];
    out.k = va.shape[1];
    out.n = vb.shape[1];
    out.relu = false;
    if (out.m == 0 || out.n == 0 || out.k == 0) return fail(why, "an empty product");
    return true;
  }
  const Node& add = g.nodes[grp.nodes[1]];
  if (add.op != OpId::add || add.inplace || add.inputs.size() != 2 || add.out == kNoValue)
    return fail(why, "the epilogue does not start with an out-of-place add");
  const bool first = add.inputs[0] == mm.out, second = add.inputs[1] == mm.out;
  if (first == second) return fail(why, "the add does not read the product exactly once");
  const Node* relu = nullptr;
  if (grp.nodes.size() == 3) {
    relu = &g.nodes[grp.nodes[2]];
    if (relu->op != OpId::relu || relu->inplace || relu->inputs.size() != 1 ||
        relu->inputs[0] != add.out || relu->out == kNoValue)
      return fail(why, "the epilogue's last op is not relu of the biased product");
  }
  const ValueId last = relu ? relu->out : add.out;
  if (grp.outputs != std::vector<ValueId>{last})
    return fail(why, "an intermediate of the epilogue is needed outside the group");

  const Value& va = g.values[mm.inputs[0]];
  const Value& vb = g.values[mm.inputs[1]];
  const Value& vp = g.values[mm.out];
  const ValueId bias = first ? add.inputs[1] : add.inputs[0];
  const Value& vbias = g.values[bias];
  const Value& vo = g.values[last];
  for (const Value* v : {&va, &vb, &vp, &vbias, &vo}) {
    if (v->dtype != kFloat32) return fail(why, "not float32");
    if (!v->device.is_cuda() || v->device != vp.device)
      return fail(why, "not all on the product's GPU");
  }
  if (!gemm_operand(va) || !gemm_operand(vb))
    return fail(why, "an operand has no unit stride (the eager matmul would copy it)");
  const int64_t M = va.shape[0], K = va.shape[1], N = vb.shape[1];
  if (M == 0 || N == 0 || K == 0) return fail(why, "an empty product");
  // The bias: one value per output column, contiguous, read-only broadcast over rows.
  const bool vec = vbias.shape == Shape{N} || vbias.shape == Shape{1, N};
  if (!vec) return fail(why, join({"the added tensor ", vbias.shape.str(), " is not a row bias"}));
  if (N > 1 && vbias.strides[vbias.shape.size() - 1] != 1)
    return fail(why, "the bias is not contiguous");
  if (g.values[add.out].shape != vp.shape || vo.shape != vp.shape || !dense(vo))
    return fail(why, "the result is not a dense [M, N] matrix");
  out.a = mm.inputs[0];
  out.b = mm.inputs[1];
  out.bias = bias;
  out.out = last;
  out.m = M;
  out.n = N;
  out.k = K;
  out.relu = relu != nullptr;
  return true;
}

bool match_ce(const Graph& g, const Group& grp, CeMatch& out, std::string* why) {
  if (grp.kind != GroupKind::CrossEntropy) return fail(why, "not a cross-entropy group");
  if (grp.nodes.size() != 2) return fail(why, "not a forward + backward pair");
  const Node& f = g.nodes[grp.nodes[0]];
  const Node& b = g.nodes[grp.nodes[1]];
  if (f.op != OpId::cross_entropy || b.op != OpId::cross_entropy_backward || f.inplace ||
      b.inplace || f.inputs.size() != 2 || b.inputs.size() != 3 || f.out == kNoValue ||
      b.out == kNoValue)
    return fail(why, "not cross_entropy then cross_entropy_backward");
  if (b.inputs[1] != f.inputs[0] || b.inputs[2] != f.inputs[1] ||
      b.attrs.ignore_index != f.attrs.ignore_index ||
      b.attrs.label_smoothing != f.attrs.label_smoothing || b.attrs.reduction != f.attrs.reduction)
    return fail(why, "the backward is over other logits, targets or loss attributes");
  const Value& x = g.values[f.inputs[0]];
  const Value& t = g.values[f.inputs[1]];
  const Value& gr = g.values[b.inputs[0]];
  const Value& l = g.values[f.out];
  const Value& dx = g.values[b.out];
  if (!is_floating(x.dtype) || gr.dtype != x.dtype || l.dtype != x.dtype || dx.dtype != x.dtype ||
      t.dtype != kInt64)
    return fail(why, "dtypes do not fit");
  for (const Value* v : {&x, &t, &gr, &l, &dx})
    if (!v->device.is_cuda() || v->device != x.device) return fail(why, "not all on one GPU");
  const bool reduced = f.attrs.reduction != LossReduction::None;
  if (x.shape.size() != 2 || t.shape != Shape{x.shape[0]} ||
      (reduced ? l.shape != Shape{} || gr.shape != Shape{} : l.shape != t.shape) ||
      dx.shape != x.shape || (gr.shape.size() != 0 && gr.shape != t.shape))
    return fail(why, "shapes do not fit");
  if (x.shape[1] == 0) return fail(why, "no classes");
  if (!dense(x) || !dense(t) || !dense(l) || !dense(dx))
    return fail(why, "logits, target or results are not contiguous");
  out.logits = f.inputs[0];
  out.target = f.inputs[1];
  out.grad = b.inputs[0];
  out.loss = f.out;
  out.dlogits = b.out;
  out.attrs = f.attrs;
  return true;
}

#if defined(EMBER_WITH_CUDA)
namespace kc = kernels::cuda;

std::string shape_pair(const Graph& g, ValueId a, ValueId b) {
  return join({g.values[a].shape.str(), "x", g.values[b].shape.str()});
}

// One GEMM group. A small problem (kc::small_gemm_kind: K <= 16, or N <= 16 with A's rows
// contiguous, e.g. the MLP's [B,512]x[512,10] + bias, or float32 with M N K <= 2^25, e.g. its
// batch-64 first layer) runs the handwritten kernel with the bias and relu fused, in one launch
// and no cuBLASLt overhead; nothing to autotune there. The eager
// mm runs the very same kernel for these shapes, and the fused epilogue rounds like eager's add
// then relu (one rounding for the bias, NaN through relu), so a small lowered GEMM equals eager
// mm + add (+ relu) bit for bit. Other problems: one cuBLASLt call with the epilogue.
class LoweredGemm final : public LoweredGroup {
 public:
  LoweredGemm(const LoweringContext& ctx, const GemmMatch& m)
      : slots_(&ctx.slots),
        m_(m),
        device_(ctx.graph.values[m.out].device.index),
        autotune_(gemm_autotune()) {
    const Graph& g = ctx.graph;
    a_ = matrix(g.values[m.a]);
    b_ = matrix(g.values[m.b]);
    const Value& o = g.values[m.out];
    ld_d_ = m.m == 1 ? m.n : o.strides[0];
    epilogue_ = m.bias == kNoValue ? kc::GemmEpilogue::None
                : m.relu           ? kc::GemmEpilogue::ReluBias
                                   : kc::GemmEpilogue::Bias;
    // Decided once: the operands' shapes and strides are fixed by the graph.
    small_ = kc::small_gemm_kind(kFloat32, a_, b_);
    const bool small = small_ != kc::SmallGemmKind::None;
    what_ = join({small ? kc::small_gemm_name(small_) : "cuBLASLt", small ? " kernel" : "", " mm ",
                  shape_pair(g, m.a, m.b), " + ", kc::gemm_epilogue_name(epilogue_)});
    if (log_enabled(Log::code)) log(Log::code, join({"gemm lowering: ", what_}));
  }

  void run() override {
    kc::GemmCall c = call();
    if (small_ != kc::SmallGemmKind::None) {
      kc::small_gemm(c);
      return;
    }
    if (!started_) start(c);
    // A problem (operand alignments included) without an epilogue algorithm: plain GEMM, then
    // the bias kernel. Decided per call; a plan without algorithms is cached like any other.
    if (kc::try_gemm_epilogue(c)) return;
    if (!fallback_) {
      fallback_ = true;
      log(Log::code,
          join({"gemm lowering: ", what_, ": no cuBLASLt algorithm, GEMM + bias kernel"}));
    }
    c.epilogue = kc::GemmEpilogue::None;
    kc::gemm_epilogue(c);
    if (m_.bias != kNoValue)
      kc::add_bias_rows(device_, kFloat32, c.d, m_.m, m_.n, ld_d_, c.bias, m_.relu);
  }

  int32_t kernels() const override {
    if (small_ == kc::SmallGemmKind::Thin) return 2;  // partial products, then their sum
    if (small_ != kc::SmallGemmKind::None) return 1;
    return fallback_ && m_.bias != kNoValue ? 2 : 1;
  }

  std::string describe() const override {
    std::string s = what_;
    if (fallback_) s += " (fallback: GEMM, then a bias kernel)";
    if (tune_.tuned) {
      char buf[64];
      std::snprintf(buf, sizeof buf, " [autotuned: #%d of %d, %.1f us]", tune_.algorithm,
                    tune_.candidates, tune_.microseconds);
      s += buf;
    }
    return s;
  }

  const GemmAutotuneInfo& tune() const { return tune_; }

 private:
  static kc::GemmMatrix matrix(const Value& v) {
    kc::GemmMatrix x;
    x.rows = v.shape[0];
    x.cols = v.shape[1];
    x.row_stride = v.strides[0];
    x.col_stride = v.strides[1];
    return x;
  }

  kc::GemmCall call() const {
    const auto& s = *slots_;
    kc::GemmCall c;
    c.device = device_;
    c.dtype = kFloat32;
    c.a = a_;
    c.a.ptr = s[m_.a]->data();
    c.b = b_;
    c.b.ptr = s[m_.b]->data();
    c.d = s[m_.out]->data();
    c.ld_d = ld_d_;
    c.epilogue = epilogue_;
    c.bias = m_.bias == kNoValue ? nullptr : s[m_.bias]->data();
    return c;
  }

  // MaxAutotune, at the first replay (never while a CUDA graph is being captured: timing needs
  // synchronization).
  void start(const kc::GemmCall& c) {
    if (!autotune_) {
      started_ = true;
      return;
    }
    if (kc::stream_capturing(device_)) return;  // at the next replay
    started_ = true;
    // Nothing to time without an epilogue algorithm (autotune_gemm then returns index -1).
    const kc::GemmAutotuneResult r = kc::autotune_gemm(c);
    if (r.index < 0) return;
    tune_.tuned = true;
    tune_.algorithm = r.index;
    tune_.microseconds = r.microseconds;
    tune_.candidates = static_cast<int32_t>(r.times.size());
    tune_.algo = r.describe;
    if (log_enabled(Log::autotune)) {
      char buf[96];
      std::snprintf(buf, sizeof buf, ": picked #%d of %zu, %.2f us (", r.index, r.times.size(),
                    static_cast<double>(r.microseconds));
      std::string msg = "gemm ";
      msg.append(what_).append(buf).append(r.describe).append(")");
      if (r.cached) {
        msg.append(" (cached from an earlier call site)");
      } else if (r.from_store) {
        msg.append(" (timed by an earlier process: from the disk cache)");
      } else {
        msg.append("; candidates (us):");
        for (float t : r.times) {
          std::snprintf(buf, sizeof buf, " %.2f", static_cast<double>(t));
          msg.append(buf);
        }
      }
      log(Log::autotune, msg);
    }
  }

  const std::vector<std::shared_ptr<TensorImpl>>* slots_;
  GemmMatch m_;
  int device_ = 0;
  bool autotune_ = false;
  kc::GemmMatrix a_, b_;
  int64_t ld_d_ = 0;
  kc::GemmEpilogue epilogue_ = kc::GemmEpilogue::Bias;
  kc::SmallGemmKind small_ = kc::SmallGemmKind::None;
  std::string what_;
  bool started_ = false, fallback_ = false;
  GemmAutotuneInfo tune_;
};

class LoweredCrossEntropy final : public LoweredGroup {
 public:
  LoweredCrossEntropy(const LoweringContext& ctx, const CeMatch& m) : slots_(&ctx.slots), m_(m) {
    const Graph& g = ctx.graph;
    const Value& x = g.values[m.logits];
    const Value& gr = g.values[m.grad];
    device_ = x.device.index;
    dtype_ = x.dtype;
    n_ = x.shape[0];
    c_ = x.shape[1];
    grad_stride_ = gr.shape.size() == 0 ? 0 : gr.strides[0];
    const char* red = m.attrs.reduction == LossReduction::Mean  ? " (mean)"
                      : m.attrs.reduction == LossReduction::Sum ? " (sum)"
                                                                : "";
    what_ = join({"fused cross_entropy forward+backward ", x.shape.str(), red});
    if (log_enabled(Log::code)) log(Log::code, join({"cross-entropy lowering: ", what_}));
  }

  void run() override {
    const auto& s = *slots_;
    kc::CrossEntropyFusedCall c;
    c.device = device_;
    c.dtype = dtype_;
    c.logits = s[m_.logits]->data();
    c.target = reinterpret_cast<const int64_t*>(s[m_.target]->data());
    c.grad = s[m_.grad]->data();
    c.grad_stride = grad_stride_;
    c.loss = s[m_.loss]->data();
    c.dlogits = s[m_.dlogits]->data();
    c.n = n_;
    c.c = c_;
    c.ignore_index = m_.attrs.ignore_index;
    c.label_smoothing = m_.attrs.label_smoothing;
    c.reduction = m_.attrs.reduction;
    kc::cross_entropy_fused(c);
  }

  int32_t kernels() const override {
    if (m_.attrs.reduction == LossReduction::None) return 1;
    return kc::cross_entropy_reduced_kernels(n_, c_, m_.attrs.reduction == LossReduction::Mean,
                                             device_);
  }
  std::string describe() const override { return what_; }

 private:
  const std::vector<std::shared_ptr<TensorImpl>>* slots_;
  CeMatch m_;
  int device_ = 0;
  DType dtype_ = kFloat32;
  int64_t n_ = 0, c_ = 0, grad_stride_ = 0;
  std::string what_;
};
#endif  // EMBER_WITH_CUDA

}  // namespace

std::optional<std::string> gemm_group_epilogue(const Graph& g, const Group& group,
                                               std::string* why) {
  GemmMatch m;
  if (!match_gemm(g, group, m, why)) return std::nullopt;
  if (m.bias == kNoValue) return std::string("NONE");
  return std::string(m.relu ? "RELU_BIAS" : "BIAS");
}

bool cross_entropy_group_fusable(const Graph& g, const Group& group, std::string* why) {
  CeMatch m;
  return match_ce(g, group, m, why);
}

void set_gemm_autotune(bool on) { g_gemm_autotune.store(on, std::memory_order_relaxed); }
bool gemm_autotune() { return g_gemm_autotune.load(std::memory_order_relaxed); }

#if defined(EMBER_WITH_CUDA)

std::optional<GroupStorage> gemm_lowering_storage(const Graph& g, const Group& group) {
  GemmMatch m;
  if (!match_gemm(g, group, m, nullptr)) return std::nullopt;
  return GroupStorage::None;
}

std::unique_ptr<LoweredGroup> lower_gemm_cuda(const LoweringContext& ctx) {
  GemmMatch m;
  if (!match_gemm(ctx.graph, ctx.group, m, nullptr)) return nullptr;
  return std::make_unique<LoweredGemm>(ctx, m);
}

std::optional<GroupStorage> cross_entropy_lowering_storage(const Graph& g, const Group& group) {
  CeMatch m;
  if (!match_ce(g, group, m, nullptr)) return std::nullopt;
  return GroupStorage::Materialize;
}

std::unique_ptr<LoweredGroup> lower_cross_entropy_cuda(const LoweringContext& ctx) {
  CeMatch m;
  if (!match_ce(ctx.graph, ctx.group, m, nullptr)) return nullptr;
  return std::make_unique<LoweredCrossEntropy>(ctx, m);
}

std::optional<GemmAutotuneInfo> gemm_autotune_info(const LoweredGroup& lowered) {
  if (const auto* g = dynamic_cast<const LoweredGemm*>(&lowered)) return g->tune();
  return std::nullopt;
}

#else  // CPU-only build: no lowerings; groups run op by op (or chunked on the CPU).

std::optional<GroupStorage> gemm_lowering_storage(const Graph&, const Group&) {
  return std::nullopt;
}
std::unique_ptr<LoweredGroup> lower_gemm_cuda(const LoweringContext&) { return nullptr; }
std::optional<GroupStorage> cross_entropy_lowering_storage(const Graph&, const Group&) {
  return std::nullopt;
}
std::unique_ptr<LoweredGroup> lower_cross_entropy_cuda(const LoweringContext&) { return nullptr; }
std::optional<GemmAutotuneInfo> gemm_autotune_info(const LoweredGroup&) { return std::nullopt; }

#endif

}  // namespace ember::jit
