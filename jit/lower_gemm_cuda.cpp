// The CUDA lowering of contraction groups (GroupKind::GemmEpilogue, jit/lower.h): an mm and any
// pointwise tail of its product, optionally closed by one reduction. The product runs as one GEMM
// call that folds what a library epilogue computes exactly like the eager kernels (a row bias,
// then relu: kernels/gemm_epilogue_ops.h); the rest of the tail runs as one generated kernel (the
// pointwise or reduction lowering of the tail as a group of its own) reading the GEMM's result.
//
// Which GEMM: a small problem (kc::small_gemm_kind) runs Ember's handwritten kernel with the
// bias and relu fused, which is the kernel eager mm runs for those shapes, so the result equals
// eager mm + add (+ relu) bit for bit; anything else one cuBLASLt call with the epilogue. The
// bias is added to the fp32 product once and rounded once, as eager's add of the stored product
// does; only the GEMM's summation order may differ (another cuBLASLt algorithm). Where cuBLASLt
// has no algorithm for the epilogue: the plain GEMM, then a bias kernel.
// The analysis is host code compiled in every build; the lowering exists only with CUDA.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <initializer_list>
#include <string_view>

#include "jit/log.h"
#include "jit/lower.h"
#include "jit/lower_util.h"
#include "jit/pointwise_codegen.h"
#include "jit/reduction_codegen.h"
#include "kernels/blas_layout.h"
#include "kernels/gemm_epilogue_ops.h"
#if defined(EMBER_WITH_CUDA)
#include "kernels/cuda/gemm_epilogue.h"
#include "kernels/cuda/small_gemm.h"
#endif

namespace ember::jit {
namespace {

using lower_util::dense;
using lower_util::fail;
using lower_util::join;

std::atomic<bool> g_gemm_autotune{false};

enum class Epilogue : uint8_t { None, Bias, ReluBias };

const char* epilogue_name(Epilogue e) {
  switch (e) {
    case Epilogue::None:
      return "NONE";
    case Epilogue::Bias:
      return "BIAS";
    case Epilogue::ReluBias:
      return "RELU_BIAS";
  }
  return "?";
}

// How a contraction group runs: the GEMM (with the epilogue folding the first tail members)
// writing `written`, then the remaining members as `tail`.
struct ContractionPlan {
  ValueId a = kNoValue, b = kNoValue, bias = kNoValue;
  ValueId written = kNoValue;  // what the GEMM call writes: the product or the epilogue's result
  ValueId cur = kNoValue;      // the same as the next member reads it (through a view, maybe)
  int64_t m = 0, n = 0, k = 0;
  Epilogue epilogue = Epilogue::None;
  DType dtype = kFloat32;
  Group tail;  // empty: the GEMM is the whole group
  bool has_tail() const { return !tail.nodes.empty(); }
};

// A GEMM operand needs a unit stride along one dim (the same rule as the eager matmul's, minus
// the staging copy it may make).
bool gemm_operand(const Value& v) {
  if (v.shape.size() != 2) return false;
  return kernels::blas_readable(v.shape[0], v.shape[1], v.strides[0], v.strides[1]);
}

bool contains(const std::vector<ValueId>& v, ValueId x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

// Members of `grp` reading `v`.
int readers_in(const Graph& g, const Group& grp, ValueId v) {
  int c = 0;
  for (int32_t m : grp.nodes)
    for (ValueId in : g.nodes[m].inputs) c += in == v ? 1 : 0;
  return c;
}

// Whether member `i` of `grp` can fold into the GEMM's epilogue after what `p` already folds:
// it must be the only reader of the value the epilogue has produced so far, which nothing
// outside needs (the GEMM call never writes it).
bool folds(const Graph& g, const Group& grp, size_t i, const ContractionPlan& p,
           kernels::EpilogueOp want) {
  if (i >= grp.nodes.size()) return false;
  const Node& n = g.nodes[grp.nodes[i]];
  if (n.inplace || n.out == kNoValue || kernels::epilogue_op_of(n.op) != want) return false;
  // What the GEMM would no longer write (the value so far, and the product under its view).
  for (ValueId skipped : {p.cur, p.written})
    if (contains(grp.outputs, skipped) || readers_in(g, grp, skipped) != 1) return false;
  const ValueId x = p.cur;
  if (g.values[n.out].dtype != g.values[x].dtype || g.values[n.out].shape != g.values[x].shape)
    return false;
  if (want == kernels::EpilogueOp::Relu) return n.inputs.size() == 1 && n.inputs[0] == x;
  if (n.inputs.size() != 2 || (n.inputs[0] == x) == (n.inputs[1] == x)) return false;
  // The bias: one value per output column, contiguous, broadcast over the rows.
  const Value& b = g.values[n.inputs[0] == x ? n.inputs[1] : n.inputs[0]];
  const bool row = !b.shape.empty() && b.shape.back() == p.n && b.numel() == p.n;
  return row && b.dtype == g.values[x].dtype && b.device == g.values[x].device &&
         (p.n == 1 || b.strides[b.shape.size() - 1] == 1);
}

bool plan_contraction(const Graph& g, const Group& grp, ContractionPlan& out, std::string* why) {
  if (grp.kind != GroupKind::GemmEpilogue) return fail(why, "not a contraction group");
  if (grp.nodes.empty()) return fail(why, "an empty group");
  const Node& mm = g.nodes[grp.nodes[0]];
  if (op_info(mm.op).kind != OpKind::Matmul || mm.inplace || mm.inputs.size() != 2 ||
      mm.out == kNoValue)
    return fail(why, "the group does not start with an out-of-place product");
  const Value& va = g.values[mm.inputs[0]];
  const Value& vb = g.values[mm.inputs[1]];
  const Value& vp = g.values[mm.out];
  if (va.shape.size() != 2 || vb.shape.size() != 2)
    return fail(why, "a batched product (the GEMM lowering takes 2-D operands)");
  // float32 (TF32 if allowed), or a 16-bit product on tensor cores with float32 accumulation:
  // what autocast makes of a Linear. The epilogue adds the bias to the float32 accumulator and
  // rounds once, where eager rounds the product and then the sum (at most one unit in the last
  // place apart; PyTorch's addmm rounds once too).
  for (const Value* v : {&va, &vb, &vp}) {
    if (v->dtype != va.dtype) return fail(why, "operands of different dtypes");
    if (v->dtype != kFloat32 && v->dtype != kBFloat16 && v->dtype != kFloat16)
      return fail(why, "not float32, bfloat16 or float16");
    if (!v->device.is_cuda() || v->device != vp.device)
      return fail(why, "not all on the product's GPU");
  }
  if (!gemm_operand(va) || !gemm_operand(vb))
    return fail(why, "an operand has no unit stride (the eager matmul would copy it)");
  ContractionPlan p;
  p.a = mm.inputs[0];
  p.b = mm.inputs[1];
  p.dtype = va.dtype;
  p.m = va.shape[0];
  p.k = va.shape[1];
  p.n = vb.shape[1];
  if (p.m == 0 || p.n == 0 || p.k == 0) return fail(why, "an empty product");
  p.written = p.cur = mm.out;
  size_t next = 1;
  // A Linear over more than two dims: the product seen through a view that splits its rows.
  if (next < grp.nodes.size() && op_info(g.nodes[grp.nodes[next]].op).kind == OpKind::View) {
    const Node& v = g.nodes[grp.nodes[next]];
    if (v.inputs.size() != 1 || v.inputs[0] != mm.out || !keeps_rows(g, mm.out, v.out))
      return fail(why, "a view of the product that does not keep its rows");
    p.cur = v.out;
    ++next;
  }
  if (folds(g, grp, next, p, kernels::EpilogueOp::BiasAdd)) {
    const Node& add = g.nodes[grp.nodes[next]];
    p.bias = add.inputs[0] == p.cur ? add.inputs[1] : add.inputs[0];
    p.written = p.cur = add.out;
    p.epilogue = Epilogue::Bias;
    ++next;
    if (folds(g, grp, next, p, kernels::EpilogueOp::Relu)) {
      p.written = p.cur = g.nodes[grp.nodes[next]].out;
      p.epilogue = Epilogue::ReluBias;
      ++next;
    }
  }
  const Value& vw = g.values[p.written];
  if (vw.numel() != vp.numel() || vw.shape.back() != p.n || !dense(vw))
    return fail(why, "the GEMM's result is not a dense [M, N] matrix");
  if (next < grp.nodes.size()) {
    p.tail = sub_group(g, grp, next);
    std::string reason;
    const bool ok = p.tail.kind == GroupKind::Reduction
                        ? reduction_codegen_supports(g, p.tail, &reason)
                        : pointwise_codegen_supports(g, p.tail, &reason);
    if (!ok) return fail(why, "the tail has no generated kernel: " + reason);
  }
  out = std::move(p);
  return true;
}

#if defined(EMBER_WITH_CUDA)
std::string tail_ops(const Graph& g, const Group& t) {
  std::string s;
  for (int32_t m : t.nodes) {
    if (!s.empty()) s += ", ";
    s += op_name(g.nodes[m].op);
  }
  return s;
}

namespace kc = kernels::cuda;

std::string shape_pair(const Graph& g, ValueId a, ValueId b) {
  return join({g.values[a].shape.str(), "x", g.values[b].shape.str()});
}

class LoweredGemm final : public LoweredGroup {
 public:
  LoweredGemm(const LoweringContext& ctx, ContractionPlan plan)
      : slots_(&ctx.slots),
        p_(std::move(plan)),
        device_(ctx.graph.values[p_.written].device.index),
        autotune_(gemm_autotune()) {
    const Graph& g = ctx.graph;
    a_ = matrix(g.values[p_.a]);
    b_ = matrix(g.values[p_.b]);
    ld_d_ = p_.n;  // dense rows of N, whatever the rank of what it writes
    epilogue_ = p_.epilogue == Epilogue::None   ? kc::GemmEpilogue::None
                : p_.epilogue == Epilogue::Bias ? kc::GemmEpilogue::Bias
                                                : kc::GemmEpilogue::ReluBias;
    // Decided once: the operands' shapes and strides are fixed by the graph.
    small_ = kc::small_gemm_kind(p_.dtype, a_, b_);
    const bool small = small_ != kc::SmallGemmKind::None;
    what_ = join({small ? kc::small_gemm_name(small_) : "cuBLASLt", small ? " kernel" : "", " mm ",
                  shape_pair(g, p_.a, p_.b), " + ", kc::gemm_epilogue_name(epilogue_)});
    if (p_.has_tail()) {
      // p_.tail lives as long as this lowering, which the tail's lowering may refer to.
      const LoweringContext tctx{g, p_.tail, ctx.slots, ctx.plan, ctx.workspace};
      tail_ = p_.tail.kind == GroupKind::Reduction ? lower_reduction_cuda(tctx)
                                                   : lower_pointwise_cuda(tctx);
      EMBER_CHECK(tail_, "gemm lowering: no lowering for the tail ", tail_ops(g, p_.tail),
                  " (internal error)");
      what_ = join({what_, ", then ", tail_->describe()});
    }
    if (log_enabled(Log::code)) log(Log::code, join({"gemm lowering: ", what_}));
  }

  void run() override {
    run_gemm();
    if (tail_) tail_->run();
  }

  std::pair<void*, int64_t> workspace_range() const override {
    return tail_ ? tail_->workspace_range() : std::pair<void*, int64_t>{nullptr, 0};
  }

  int32_t kernels() const override {
    int32_t k = 1;
    if (small_ == kc::SmallGemmKind::Thin) k = 2;  // partial products, then their sum
    if (small_ == kc::SmallGemmKind::None && fallback_ && p_.bias != kNoValue) k = 2;
    return k + (tail_ ? tail_->kernels() : 0);
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

  void run_gemm() {
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
    if (p_.bias != kNoValue)
      kc::add_bias_rows(device_, p_.dtype, c.d, p_.m, p_.n, ld_d_, c.bias,
                        p_.epilogue == Epilogue::ReluBias);
  }

  kc::GemmCall call() const {
    const auto& s = *slots_;
    kc::GemmCall c;
    c.device = device_;
    c.dtype = p_.dtype;
    c.a = a_;
    c.a.ptr = s[p_.a]->data();
    c.b = b_;
    c.b.ptr = s[p_.b]->data();
    c.d = s[p_.written]->data();
    c.ld_d = ld_d_;
    c.epilogue = epilogue_;
    c.bias = p_.bias == kNoValue ? nullptr : s[p_.bias]->data();
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
  ContractionPlan p_;
  int device_ = 0;
  bool autotune_ = false;
  kc::GemmMatrix a_, b_;
  int64_t ld_d_ = 0;
  kc::GemmEpilogue epilogue_ = kc::GemmEpilogue::Bias;
  kc::SmallGemmKind small_ = kc::SmallGemmKind::None;
  std::unique_ptr<LoweredGroup> tail_;
  std::string what_;
  bool started_ = false, fallback_ = false;
  GemmAutotuneInfo tune_;
};
#endif  // EMBER_WITH_CUDA

}  // namespace

std::optional<std::string> gemm_group_epilogue(const Graph& g, const Group& group,
                                               std::string* why) {
  ContractionPlan p;
  if (!plan_contraction(g, group, p, why)) return std::nullopt;
  return std::string(epilogue_name(p.epilogue));
}

bool contraction_group_lowerable(const Graph& g, const Group& group, std::vector<ValueId>* stored,
                                 std::string* why) {
  ContractionPlan p;
  if (!plan_contraction(g, group, p, why)) return false;
  if (stored && !contains(group.outputs, p.written)) stored->push_back(p.written);
  return true;
}

std::optional<Group> gemm_tail_group(const Graph& g, const Group& group) {
  ContractionPlan p;
  if (group.kind != GroupKind::GemmEpilogue || !plan_contraction(g, group, p, nullptr) ||
      !p.has_tail())
    return std::nullopt;
  return p.tail;
}

void set_gemm_autotune(bool on) { g_gemm_autotune.store(on, std::memory_order_relaxed); }
bool gemm_autotune() { return g_gemm_autotune.load(std::memory_order_relaxed); }

#if defined(EMBER_WITH_CUDA)

std::optional<GroupStorage> gemm_lowering_storage(const Graph& g, const Group& group) {
  ContractionPlan p;
  if (!plan_contraction(g, group, p, nullptr)) return std::nullopt;
  // What the GEMM writes is an output or in group.stored; nothing else of the group is stored.
  if (!contains(group.outputs, p.written) && !contains(group.stored, p.written))
    return std::nullopt;
  return GroupStorage::None;
}

int64_t gemm_lowering_workspace(const Graph& g, const Group& group) {
  ContractionPlan p;
  if (!plan_contraction(g, group, p, nullptr) || !p.has_tail()) return 0;
  return p.tail.kind == GroupKind::Reduction ? reduction_lowering_workspace(g, p.tail) : 0;
}

std::unique_ptr<LoweredGroup> lower_gemm_cuda(const LoweringContext& ctx) {
  ContractionPlan p;
  if (!plan_contraction(ctx.graph, ctx.group, p, nullptr)) return nullptr;
  return std::make_unique<LoweredGemm>(ctx, std::move(p));
}

std::optional<GemmAutotuneInfo> gemm_autotune_info(const LoweredGroup& lowered) {
  if (const auto* g = dynamic_cast<const LoweredGemm*>(&lowered)) return g->tune();
  return std::nullopt;
}

#else  // CPU-only build: no lowerings; groups run op by op (or chunked on the CPU).

std::optional<GroupStorage> gemm_lowering_storage(const Graph&, const Group&) {
  return std::nullopt;
}
int64_t gemm_lowering_workspace(const Graph&, const Group&) { return 0; }
std::unique_ptr<LoweredGroup> lower_gemm_cuda(const LoweringContext&) { return nullptr; }
std::optional<GemmAutotuneInfo> gemm_autotune_info(const LoweredGroup&) { return std::nullopt; }

#endif

}  // namespace ember::jit
