// Code generation for fused Reduction groups (jit/reduction_codegen.h, lower_reduction_cuda.cpp).
//  - Host-only, on any machine: the source generated for hand-built groups (the relu-backward
//    bias gradient, ne + sum to int64, mean over the last dim, amax over dim 0, transposed and
//    odd shapes) has the layout, types and split the group needs; unsupported groups are
//    refused with a reason. CUDA builds: every generated source compiles with NVRTC to an sm_90
//    cubin (NVRTC needs no GPU).
//  - [cuda], on the GPU machine: compiled functions whose Reduction group runs as one generated
//    kernel, against eager and against float64 references written here, over several calls
//    with fresh inputs: pointwise outputs bit for bit, integer sums and amax/amin exactly, float
//    sums within 1e-6 relative of the float64 sum (well-conditioned data), column sums bitwise
//    equal to eager's (the same order) and bitwise the same on every run of the same inputs;
//    also under ReduceOverhead (CUDA-graph replay).
#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "core/factory.h"
#include "core/generator.h"
#include "core/ops.h"
#include "jit/compile.h"
#include "jit/lower.h"
#include "jit/passes.h"
#include "jit/reduction_codegen.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/module.h"
#include "optim/sgd.h"
#include "test_util.h"
#if defined(EMBER_WITH_CUDA)
#include "kernels/cuda/nvrtc.h"
#endif

using namespace ember;
using namespace ember::jit;

namespace {

struct Builder {
  Graph g;
  ValueId input(const Shape& s, DType t = kFloat32) {
    Value v;
    v.kind = ValueKind::Input;
    v.shape = s;
    v.strides = contiguous_strides(s);
    v.dtype = t;
    v.device = Device::cuda(0);
    v.slot = static_cast<int32_t>(g.inputs.size());
    const ValueId id = g.add_value(v);
    g.inputs.push_back(id);
    return id;
  }
  ValueId constant(double x, DType t) { return g.add_constant(wrap_scalar(x, t)); }
  ValueId op(OpId op, std::vector<ValueId> ins, const Attrs& a = {}) {
    return g.append(op, std::move(ins), a);
  }
  ValueId reduce(OpId op, ValueId x, Dims dims, bool keepdim) {
    Attrs a;
    a.dims = dims;
    a.keepdim = keepdim;
    return g.append(op, {x}, a);
  }
  const Group& fused(std::vector<ValueId> outputs) {
    g.outputs = std::move(outputs);
    fuse(g);
    REQUIRE(g.groups.size() == 1);
    return g.groups[0];
  }
  FusedReductionKernel kernel(std::vector<ValueId> outputs) {
    const Group& grp = fused(std::move(outputs));
    REQUIRE(grp.kind == GroupKind::Reduction);
    std::string why;
    const bool ok = reduction_codegen_supports(g, grp, &why);
    INFO(why);
    REQUIRE(ok);
    return generate_reduction_kernel(g, grp, 132);
  }
};

bool has(const std::string& src, const std::string& what) {
  return src.find(what) != std::string::npos;
}
#define CHECK_HAS(src, what) \
  do {                       \
    INFO(src);               \
    CHECK(has(src, what));   \
  } while (0)

#if defined(EMBER_WITH_CUDA)
void check_compiles(const FusedReductionKernel& k) {
  namespace rtc = kernels::cuda::nvrtc;
  INFO(k.source);
  const rtc::Binary b = rtc::compile(k.source, 90, "reduce_test.cu");
  CHECK_FALSE(b.ptx);
  REQUIRE(b.bytes.size() > 4);
  CHECK(b.bytes.compare(0, 4,
                        "\x7f"
                        "ELF") == 0);
}
#else
void check_compiles(const FusedReductionKernel&) {}
#endif

// The relu backward feeding the bias gradient: where(h > 0, g, 0), also returned, and its
// column sum.
FusedReductionKernel relu_backward_bias(int64_t rows, int64_t cols, ValueId* w_out = nullptr) {
  Builder b;
  const ValueId h = b.input({rows, cols});
  const ValueId g = b.input({rows, cols});
  const ValueId mask = b.op(OpId::gt, {h, b.constant(0, kFloat32)});
  const ValueId w = b.op(OpId::where, {mask, g, b.constant(0, kFloat32)});
  const ValueId s = b.reduce(OpId::sum, w, {0}, true);
  if (w_out) *w_out = w;
  return b.kernel({w, s});
}

}  // namespace

// ---- host-only: generated source ------------------------------------------------------------

TEST_CASE("reduction codegen: relu backward + column sum is one kernel writing both outputs",
          "[jit][codegen]") {
  ValueId w = kNoValue;
  const FusedReductionKernel k = relu_backward_bias(64, 512, &w);
  const std::string& s = k.source;
  CHECK(k.columns);
  CHECK(k.num_out == 512);
  CHECK(k.count == 64);
  CHECK(k.splits == 1);  // 64 rows: no split, no scratch
  CHECK(k.partial_bytes == 0);
  CHECK(k.tile_x == 32);
  CHECK(k.tile_y == 8);
  CHECK(k.blocks_x == 16);
  REQUIRE(k.operands.size() == 6);  // sum, where (outputs), h, g, two inline scalars
  CHECK(k.operands[0].output);
  CHECK(k.operands[1].output);
  CHECK(k.operands[1].value == w);
  CHECK_FALSE(k.operands[2].output);
  CHECK(k.operands[4].scalar);
  CHECK(k.operands[5].scalar);
  CHECK(k.words == 8);  // 6 operands, partials, tickets
  CHECK_HAS(s, "#include \"kernels/cuda/fused_reduce.cuh\"");
  CHECK_HAS(s, "typedef float Acc;");
  CHECK_HAS(s, "typedef dev::SumOp<Acc> Op;");
  CHECK_HAS(s, "ew::WhereOp<float, float>");
  CHECK_HAS(s, "fp::store<float>(a.p[1], ");  // the where output, from the same kernel
  CHECK_HAS(s, "fp::reduce_tiles<true, 32, 8, 0, Index>");
  CHECK_HAS(s, "constexpr Index kNumOut = 512u;");
  CHECK_HAS(s, "char* p[4];");  // no pointer for the mask: it stays in registers
  check_compiles(k);
}

TEST_CASE("reduction codegen: long column sums split over blocks, finished by a ticket",
          "[jit][codegen]") {
  const FusedReductionKernel k = relu_backward_bias(8192, 512);
  CHECK(k.columns);
  CHECK(k.blocks_x == 16);
  CHECK(k.splits > 1);
  CHECK(k.splits * k.chunk >= 8192);
  CHECK((k.splits - 1) * k.chunk < 8192);
  CHECK(k.chunk % 8 == 0);
  CHECK(k.partial_bytes == k.splits * 512 * 4);
  CHECK(k.ticket_count == 16);
  CHECK_HAS(k.source, "constexpr unsigned kSplits = " + std::to_string(k.splits) + "u;");
  check_compiles(k);
}

TEST_CASE("reduction codegen: a lone column sum of a product is a group of one, read directly",
          "[jit][codegen]") {
  // The classifier's bias gradient: the sum's input comes from a node no pointwise chain holds.
  Builder b;
  const ValueId a = b.input({8192, 16});
  const ValueId w = b.input({16, 10});
  const ValueId m = b.op(OpId::mm, {a, w});
  const ValueId s = b.reduce(OpId::sum, m, {0}, true);
  const FusedReductionKernel k = b.kernel({s});
  REQUIRE(b.g.groups[0].nodes.size() == 1);
  CHECK(b.g.groups[0].inputs == std::vector<ValueId>{m});
  CHECK(k.columns);
  CHECK(k.num_out == 10);
  CHECK(k.count == 8192);
  CHECK(k.splits > 1);  // finished by the last block, not a second kernel
  CHECK(k.ticket_count == k.blocks_x);
  REQUIRE(k.operands.size() == 2);  // the sum and its input
  CHECK_FALSE(k.operands[1].output);
  CHECK(k.operands[1].value == m);
  CHECK_HAS(k.source, "l.x0 = fp::load<float>(a.p[1], ");
  CHECK_FALSE(has(k.source, "body("));
  CHECK_HAS(k.source, "fp::reduce_tiles<true, ");
  check_compiles(k);
}

TEST_CASE("jit fuse: which lone sums become a group of their own", "[jit][codegen]") {
  // Everything but the case varied: a sum over dim 0 of a CUDA product's [8192, cols] result.
  struct Case {
    const char* what;
    int64_t cols = 10;
    Dims dims{0};
    bool permuted = false, of_input = false, cpu = false;
    bool grouped = false;
  };
  const Case cases[] = {
      {"narrow column sum", 10, {0}, false, false, false, true},
      {"64 columns", 64, {0}, false, false, false, true},
      {"384 columns (its partials in the workspace)", 384, {0}, false, false, false, true},
      {"over the last dim", 10, {1}, false, false, false, false},
      {"over both dims", 10, {0, 1}, false, false, false, false},
      {"of a view", 10, {0}, true, false, false, false},
      {"of an argument", 10, {0}, false, true, false, false},
      {"on the CPU", 10, {0}, false, false, true, false},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    Builder b;
    const ValueId a = b.input({8192, 16});
    ValueId x = c.of_input ? b.input({8192, c.cols}) : b.op(OpId::mm, {a, b.input({16, c.cols})});
    if (c.permuted) {
      Attrs t;
      t.dims = {1, 0};
      x = b.op(OpId::permute, {b.op(OpId::permute, {x}, t)}, t);
    }
    const ValueId s = b.reduce(OpId::sum, x, c.dims, true);
    if (c.cpu)
      for (Value& v : b.g.values) v.device = Device::cpu();
    b.g.outputs = {s};
    fuse(b.g);
    const int32_t group = b.g.nodes[b.g.values[s].producer].group;
    CHECK((group >= 0) == c.grouped);
    if (group >= 0) {
      CHECK(b.g.groups[group].kind == GroupKind::Reduction);
      CHECK(b.g.groups[group].nodes.size() == 1);
    }
  }
}

// A norm's affine backward: dy * gamma (the normalisation's incoming gradient) and
// sum(dy * xhat) over the rows (gamma's gradient) both read dy.
struct NormAffineBackward {
  Builder b;
  ValueId dy, gamma, xhat, dxhat, prod, dgamma;
  explicit NormAffineBackward(int64_t rows, int64_t cols) {
    dy = b.input({rows, cols});
    gamma = b.input({cols});
    xhat = b.input({rows, cols});
    dxhat = b.op(OpId::mul, {dy, gamma});
    prod = b.op(OpId::mul, {dy, xhat});
    dgamma = b.reduce(OpId::sum, prod, {0}, true);
  }
};

TEST_CASE("jit fuse: a pointwise sibling reading the reduction's input joins its group",
          "[jit][codegen]") {
  SECTION("dy * gamma beside sum(dy * xhat): one kernel writing both") {
    NormAffineBackward n(8192, 128);
    const FusedReductionKernel k = n.b.kernel({n.dxhat, n.dgamma});
    const Group& grp = n.b.g.groups[0];
    CHECK(grp.nodes.size() == 3);
    CHECK(std::find(grp.outputs.begin(), grp.outputs.end(), n.dxhat) != grp.outputs.end());
    CHECK(std::find(grp.outputs.begin(), grp.outputs.end(), n.dgamma) != grp.outputs.end());
    check_compiles(k);
  }
  SECTION("not when a node between them reads the sibling's result") {
    // The group runs at its reduction, too late for a reader of the sibling placed before it.
    Builder c;
    const ValueId dy = c.input({64, 32}), gamma = c.input({32}), xhat = c.input({64, 32});
    const ValueId dxhat = c.op(OpId::mul, {dy, gamma});
    const ValueId early = c.op(OpId::mm, {dxhat, c.input({32, 8})});
    const ValueId s = c.reduce(OpId::sum, c.op(OpId::mul, {dy, xhat}), {0}, true);
    c.g.outputs = {early, s};
    fuse(c.g);
    const int32_t sg = c.g.nodes[c.g.values[s].producer].group;
    REQUIRE(sg >= 0);
    CHECK(c.g.nodes[c.g.values[dxhat].producer].group != sg);
  }
  SECTION("not a sibling that reads nothing the reduction reads") {
    Builder c;
    const ValueId dy = c.input({64, 32}), gamma = c.input({32}), xhat = c.input({64, 32});
    const ValueId other = c.input({64, 32});
    const ValueId y = c.op(OpId::mul, {other, gamma});
    const ValueId s = c.reduce(OpId::sum, c.op(OpId::mul, {dy, xhat}), {0}, true);
    c.g.outputs = {y, s};
    fuse(c.g);
    const int32_t sg = c.g.nodes[c.g.values[s].producer].group;
    REQUIRE(sg >= 0);
    CHECK(c.g.nodes[c.g.values[y].producer].group != sg);
  }
}

// The relu backward of a hidden layer under a 10-class one: its incoming gradient is the small-K
// product dO [M,K] x W2 [K,N], which only the relu backward reads.
struct ProductGroup {
  Builder b;
  ValueId h, d_out, w2, prod, w, s;
  ProductGroup(int64_t rows, int64_t k, int64_t cols, bool w2_transposed = false) {
    h = b.input({rows, cols});
    d_out = b.input({rows, k});
    if (w2_transposed) {  // W2 as the transposed view of a [N,K] tensor (Linear's weight layout)
      Attrs t;
      t.dims = {1, 0};
      w2 = b.op(OpId::permute, {b.input({cols, k})}, t);
    } else {
      w2 = b.input({k, cols});
    }
    prod = b.op(OpId::mm, {d_out, w2});
    const ValueId mask = b.op(OpId::gt, {h, b.constant(0, kFloat32)});
    w = b.op(OpId::where, {mask, prod, b.constant(0, kFloat32)});
    s = b.reduce(OpId::sum, w, {0}, true);
  }
};

TEST_CASE(
    "reduction codegen: a small-K product feeding the relu backward is computed in the "
    "kernel, never stored",
    "[jit][codegen]") {
  for (int64_t rows : {64, 8192})
    for (bool transposed : {false, true}) {
      INFO("rows " << rows << (transposed ? ", W2 transposed" : ""));
      ProductGroup pg(rows, 10, 512, transposed);
      const FusedReductionKernel k = pg.b.kernel({pg.w, pg.s});
      const Group& grp = pg.b.g.groups[0];
      REQUIRE(grp.nodes.size() == 4);  // mm, gt, where, sum
      CHECK(pg.b.g.nodes[grp.nodes[0]].op == OpId::mm);
      CHECK(std::find(grp.outputs.begin(), grp.outputs.end(), pg.prod) == grp.outputs.end());
      // Operands: the sum and the where (outputs), h, dO and W2 (the product's operands), two
      // inline scalars; nothing for the product's result.
      REQUIRE(k.operands.size() == 7);
      for (const FusedOperand& o : k.operands) CHECK(o.value != pg.prod);
      CHECK(k.operands[3].value == pg.d_out);
      CHECK(k.operands[4].value == pg.w2);
      CHECK(k.columns);
      CHECK(k.num_out == 512);
      CHECK_HAS(k.source, "fp::small_k_dot<10, float>(a.p[3], ");
      CHECK_HAS(k.source, ", a.p[4], ");
      // Memory planned as one kernel: the product's [rows, 512] result has no buffer.
      const std::optional<GroupStorage> how = cuda_lowering_storage(pg.b.g, grp);
#if defined(EMBER_WITH_CUDA)
      REQUIRE(how.has_value());
      CHECK(*how == GroupStorage::None);
#else
      CHECK_FALSE(how.has_value());
#endif
      check_compiles(k);
    }
}

TEST_CASE("jit fuse: which products join the reduction that reads them", "[jit][codegen]") {
  struct Case {
    const char* what;
    int64_t k = 10;
    bool returned = false, read_outside = false, cpu = false, half = false, written = false;
    bool joined = false;
  };
  const Case cases[] = {
      {"K = 10", 10, false, false, false, false, false, true},
      {"K = 16", 16, false, false, false, false, false, true},
      {"K = 17: eager's SmallK would not compute it", 17, false, false, false, false, false, false},
      {"the product is returned", 10, true, false, false, false, false, false},
      {"the product is read outside the group", 10, false, true, false, false, false, false},
      {"on the CPU", 10, false, false, true, false, false, false},
      {"float16", 10, false, false, false, true, false, false},
      {"W2 written between the product and the group", 10, false, false, false, false, true, false},
  };
  for (const Case& c : cases) {
    INFO(c.what);
    Builder b;
    const DType t = c.half ? kFloat16 : kFloat32;
    const ValueId h = b.input({256, 64}, t);
    const ValueId d_out = b.input({256, c.k}, t);
    const ValueId w2 = b.input({c.k, 64}, t);
    const ValueId prod = b.op(OpId::mm, {d_out, w2});
    std::vector<ValueId> outs;
    if (c.written) {  // w2 *= 2 in place, after the product, before the relu backward
      Value v = b.g.values[w2];
      v.kind = ValueKind::Node;
      v.slot = -1;
      Node n;
      n.op = OpId::mul;
      n.inputs = {w2, b.constant(2, t)};
      n.out = b.g.add_value(v);
      n.inplace = true;
      n.inplace_of = w2;
      b.g.add_node(std::move(n));
    }
    const ValueId mask = b.op(OpId::gt, {h, b.constant(0, t)});
    const ValueId w = b.op(OpId::where, {mask, prod, b.constant(0, t)});
    const ValueId s = b.reduce(OpId::sum, w, {0}, true);
    outs.push_back(s);
    if (c.returned) outs.push_back(prod);
    if (c.read_outside) outs.push_back(b.op(OpId::neg, {prod}));
    if (c.cpu)
      for (Value& v : b.g.values) v.device = Device::cpu();
    b.g.outputs = outs;
    fuse(b.g);
    const int32_t product_group = b.g.nodes[b.g.values[prod].producer].group;
    const int32_t sum_group = b.g.nodes[b.g.values[s].producer].group;
    REQUIRE(sum_group >= 0);
    CHECK(b.g.groups[sum_group].kind == GroupKind::Reduction);
    CHECK((product_group == sum_group) == c.joined);
  }
}

TEST_CASE("reduction codegen: ne + sum to int64 over a vector", "[jit][codegen]") {
  for (int64_t n : {64, 8192, 100003}) {
    INFO(n);
    Builder b;
    const ValueId t = b.input({n}, kInt64);
    const ValueId m = b.op(OpId::ne, {t, b.constant(-100, kInt64)});
    const ValueId s = b.reduce(OpId::sum, m, {0}, false);
    REQUIRE(b.g.values[s].dtype == kInt64);
    const FusedReductionKernel k = b.kernel({s});
    CHECK_FALSE(k.columns);
    CHECK(k.num_out == 1);
    CHECK(k.count == n);
    CHECK_HAS(k.source, "typedef int64_t Acc;");
    CHECK_HAS(k.source, "typedef int64_t Out;");
    CHECK_HAS(k.source, "dev::to_acc<Acc>(fp::keep(");
    if (n > 4096) {
      CHECK(k.tile_x == 256);
      CHECK(k.splits > 1);
      CHECK(k.ticket_count == 1);
      CHECK(k.partial_bytes == k.splits * 8);
    } else {
      CHECK(k.splits == 1);
    }
    check_compiles(k);
  }
}

TEST_CASE("reduction codegen: mean over the last dim with keepdim reduces rows", "[jit][codegen]") {
  Builder b;
  const ValueId x = b.input({64, 512});
  const ValueId y = b.input({64, 512});
  const ValueId m = b.reduce(OpId::mean, b.op(OpId::mul, {b.op(OpId::exp, {x}), y}), {1}, true);
  const FusedReductionKernel k = b.kernel({m});
  CHECK_FALSE(k.columns);
  CHECK(k.num_out == 64);
  CHECK(k.count == 512);
  CHECK(k.tile_x == 32);
  CHECK_HAS(k.source, "op.mean = true;");
  CHECK_HAS(k.source, "fp::reduce_tiles<false, 32, 8, 4, Index>");
  check_compiles(k);
}

TEST_CASE("reduction codegen: amax over dim 0, amin, doubles and halves", "[jit][codegen]") {
  {
    Builder b;
    const ValueId x = b.input({8192, 512});
    const ValueId m = b.reduce(OpId::amax, b.op(OpId::abs, {x}), {0}, false);
    const FusedReductionKernel k = b.kernel({m});
    CHECK(k.columns);
    CHECK(k.splits > 1);
    CHECK_HAS(k.source, "typedef dev::MinMaxOp<Acc> Op;");
    CHECK_FALSE(has(k.source, "op.is_min = true;"));
    check_compiles(k);
  }
  {
    Builder b;
    const ValueId x = b.input({100, 30}, kFloat64);
    const ValueId m = b.reduce(OpId::amin, b.op(OpId::neg, {x}), {1}, false);
    const FusedReductionKernel k = b.kernel({m});
    CHECK_HAS(k.source, "typedef double Acc;");
    CHECK_HAS(k.source, "op.is_min = true;");
    check_compiles(k);
  }
  {
    Builder b;
    const ValueId x = b.input({256, 64}, kFloat16);
    const ValueId m = b.reduce(OpId::sum, b.op(OpId::relu, {x}), {0}, false);
    const FusedReductionKernel k = b.kernel({m});
    CHECK_HAS(k.source, "typedef float Acc;");
    CHECK_HAS(k.source, "typedef __half Out;");
    check_compiles(k);
  }
  {
    Builder b;
    const ValueId x = b.input({40, 50}, kInt32);
    const ValueId m = b.reduce(OpId::amax, b.op(OpId::abs, {x}), {0, 1}, false);
    const FusedReductionKernel k = b.kernel({m});
    CHECK_HAS(k.source, "typedef int32_t Acc;");
    check_compiles(k);
  }
}

TEST_CASE("reduction codegen: odd shapes and 3-d groups compile", "[jit][codegen]") {
  struct Case {
    Shape shape;
    Dims dims;
    bool keepdim;
    int64_t num_out, count;
  };
  for (const Case& c : std::vector<Case>{{{7, 13}, {0}, false, 13, 7},
                                         {{7, 13}, {1}, true, 7, 13},
                                         {{1, 1}, {0}, true, 1, 1},
                                         {{1, 1}, {0, 1}, false, 1, 1},
                                         {{6, 5, 4}, {0, 2}, false, 5, 24},
                                         {{6, 5, 4}, {1}, true, 24, 5}}) {
    INFO(c.shape.str() << " over " << c.dims.str());
    Builder b;
    const ValueId x = b.input(c.shape);
    const ValueId s = b.reduce(OpId::sum, b.op(OpId::sigmoid, {x}), c.dims, c.keepdim);
    const FusedReductionKernel k = b.kernel({s});
    CHECK(k.num_out == c.num_out);
    CHECK(k.count == c.count);
    check_compiles(k);
  }
}

TEST_CASE("reduction codegen: a transposed input is walked along its memory order",
          "[jit][codegen]") {
  Builder b;
  const ValueId a = b.input({512, 64});
  Attrs perm;
  perm.dims = {1, 0};
  const ValueId at = b.op(OpId::permute, {a}, perm);  // [64, 512], strides {1, 64}
  const ValueId c = b.input({64, 512});
  const ValueId s = b.reduce(OpId::sum, b.op(OpId::relu, {b.op(OpId::add, {at, c})}), {0}, false);
  const FusedReductionKernel k = b.kernel({s});
  CHECK(k.num_out == 512);
  CHECK(k.count == 64);
  // The larger input (a, 32768 elements like c; the first wins) is contiguous along the
  // reduced dim: rows, so its reads are coalesced.
  CHECK_FALSE(k.columns);
  // Walked against the row-major order, so not in eager's vector order.
  CHECK_HAS(k.source, "fp::reduce_tiles<false, 32, 8, 0, Index>");
  check_compiles(k);
}

TEST_CASE("reduction codegen: eager's vector order for rows of trailing dims only",
          "[jit][codegen]") {
  struct Case {
    Shape shape;
    Dims dims;
    DType dtype;
    const char* tiles;
  };
  const Case cases[] = {
      {{64, 6, 40}, {1, 2}, kFloat32, "fp::reduce_tiles<false, 32, 8, 4, Index>"},
      {{64, 40}, {1}, kFloat16, "fp::reduce_tiles<false, 32, 8, 8, Index>"},
      {{64, 40}, {1}, kFloat64, "fp::reduce_tiles<false, 32, 8, 2, Index>"},
      {{6, 64, 40}, {0, 2}, kFloat32, "fp::reduce_tiles<false, 32, 8, 0, Index>"},
  };
  for (const Case& c : cases) {
    INFO("shape " << c.shape << ", " << dtype_name(c.dtype));
    Builder b;
    const ValueId x = b.input(c.shape, c.dtype);
    const ValueId s = b.reduce(OpId::sum, b.op(OpId::exp, {x}), c.dims, false);
    const FusedReductionKernel k = b.kernel({s});
    CHECK_FALSE(k.columns);
    CHECK_HAS(k.source, c.tiles);
    check_compiles(k);
  }
}

TEST_CASE("reduction codegen: groups it cannot run are refused with a reason", "[jit][codegen]") {
  {
    Builder b;  // logsumexp: no generated form
    const ValueId x = b.input({64, 64});
    const ValueId y = b.reduce(OpId::logsumexp, b.op(OpId::exp, {x}), {1}, false);
    b.g.outputs = {y};
    fuse(b.g);
    for (const Group& grp : b.g.groups) {
      std::string why;
      CHECK_FALSE(reduction_codegen_supports(b.g, grp, &why));
      CHECK_FALSE(why.empty());
    }
  }
  {
    Builder b;  // a pointwise group is not a reduction group
    const ValueId x = b.input({64, 64});
    const ValueId y = b.op(OpId::exp, {b.op(OpId::neg, {x})});
    const Group& grp = b.fused({y});
    std::string why;
    CHECK_FALSE(reduction_codegen_supports(b.g, grp, &why));
    CHECK(has(why, "not a reduction group"));
  }
  {
    Builder b;  // on the CPU
    Value v;
    v.kind = ValueKind::Input;
    v.shape = {8, 8};
    v.strides = contiguous_strides(v.shape);
    v.device = Device::cpu();
    v.slot = 0;
    const ValueId x = b.g.add_value(v);
    b.g.inputs.push_back(x);
    const ValueId s = b.reduce(OpId::sum, b.op(OpId::exp, {x}), {0}, false);
    const Group& grp = b.fused({s});
    REQUIRE(grp.kind == GroupKind::Reduction);
    std::string why;
    CHECK_FALSE(reduction_codegen_supports(b.g, grp, &why));
    CHECK(has(why, "computes on cpu"));
    CHECK_FALSE(reduction_lowering_storage(b.g, grp).has_value());
  }
}

TEST_CASE("reduction codegen: supported groups need no memory for their internals",
          "[jit][codegen]") {
  Builder b;
  const ValueId x = b.input({64, 64});
  const ValueId s = b.reduce(OpId::sum, b.op(OpId::exp, {b.op(OpId::neg, {x})}), {0}, true);
  const Group& grp = b.fused({s});
  const std::optional<GroupStorage> how = cuda_lowering_storage(b.g, grp);
#if defined(EMBER_WITH_CUDA)
  REQUIRE(how.has_value());
  CHECK(*how == GroupStorage::None);
#else
  CHECK_FALSE(how.has_value());
#endif
}

// ---- on the GPU ------------------------------------------------------------------------------

namespace {

const Device kGpu = Device::cuda(0);

std::vector<double> as_doubles(const Tensor& t) {
  return t.cpu().to(kFloat64).contiguous().to_vector<double>();
}

void check_bitwise_equal(const Tensor& got, const Tensor& want, const std::string& what) {
  INFO(what);
  REQUIRE(got.sizes() == want.sizes());
  REQUIRE(got.dtype() == want.dtype());
  const std::vector<double> g = as_doubles(got), w = as_doubles(want);
  for (size_t i = 0; i < g.size(); ++i)
    if (!(g[i] == w[i] || (std::isnan(g[i]) && std::isnan(w[i])))) {
      FAIL_CHECK("element " << i << ": got " << g[i] << ", want " << w[i]);
      return;
    }
}

// |got - ref| <= tol * sum|terms| per element (ref and scale from float64 math in the test).
void check_close(const Tensor& got, const std::vector<double>& ref,
                 const std::vector<double>& scale, double tol, const std::string& what) {
  INFO(what);
  const std::vector<double> g = as_doubles(got);
  REQUIRE(g.size() == ref.size());
  for (size_t i = 0; i < g.size(); ++i)
    if (std::abs(g[i] - ref[i]) > tol * std::max(scale[i], 1e-30)) {
      FAIL_CHECK("element " << i << ": got " << g[i] << ", float64 " << ref[i] << " (scale "
                            << scale[i] << ")");
      return;
    }
}

// Column sums (over dim 0) of a [rows, cols] float64 matrix, and of its magnitudes.
void column_sums(const std::vector<double>& m, int64_t rows, int64_t cols, std::vector<double>& sum,
                 std::vector<double>& mag) {
  sum.assign(static_cast<size_t>(cols), 0.0);
  mag.assign(static_cast<size_t>(cols), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      sum[c] += m[r * cols + c];
      mag[c] += std::abs(m[r * cols + c]);
    }
}

void check_lowered(const ReductionLoweringStats& before) {
  const ReductionLoweringStats now = reduction_lowering_stats();
  INFO("the reduction group was not lowered to a generated kernel");
  CHECK(now.groups > before.groups);
  CHECK(now.fallbacks == before.fallbacks);
}

}  // namespace

TEST_CASE("reduction codegen: relu-backward bias gradient matches eager and float64",
          "[jit][cuda]") {
  EMBER_REQUIRE_CUDA();
  for (Mode mode : {Mode::Default, Mode::ReduceOverhead})
    for (const Shape& shape : std::vector<Shape>{{64, 512}, {8192, 512}, {7, 13}, {1, 1}}) {
      const std::string what = shape.str() + (mode == Mode::Default ? "" : " (graph replay)");
      INFO(what);
      const ReductionLoweringStats before = reduction_lowering_stats();
      auto fn = [](const Tensor& h, const Tensor& g) {
        const Tensor w = where(gt(h, 0.0), g, 0.0);
        return std::vector<Tensor>{w, sum(w, {0}, true)};
      };
      auto compiled = jit::compile(fn, {.mode = mode, .fullgraph = true, .name = "bias_grad"});
      for (int call = 0; call < 5; ++call) {
        const Tensor h = randn(shape, kGpu);
        // Well-conditioned: positive gradients, so the float64 sum has no cancellation.
        const Tensor g = rand(shape, kGpu) + 0.5;
        const std::vector<Tensor> want = fn(h, g);
        const std::vector<Tensor> got = compiled(h, g);
        REQUIRE(got.size() == 2);
        check_bitwise_equal(got[0], want[0], "where output, call " + std::to_string(call));
        REQUIRE(got[1].sizes() == Shape{1, shape[1]});
        std::vector<double> ref, mag;
        column_sums(as_doubles(want[0]), shape[0], shape[1], ref, mag);
        check_close(got[1], ref, mag, 1e-6, "column sum vs float64");
        check_close(want[1], ref, mag, 1e-6, "eager column sum vs float64 (the reference)");
        // Column sums follow the eager columns kernel's order (same tile, split and finish).
        check_bitwise_equal(got[1], want[1], "column sum vs eager");
        if (call == 4) {  // deterministic: the same inputs give bitwise the same sums
          const std::vector<Tensor> again = compiled(h, g);
          check_bitwise_equal(again[1], got[1], "second run on the same inputs");
        }
      }
      CHECK(compiled.stats().replays >= 2);
      check_lowered(before);
    }
}

TEST_CASE("reduction codegen: a split sum's partial states are the group's workspace",
          "[jit][cuda]") {
  EMBER_REQUIRE_CUDA();
#if defined(EMBER_WITH_CUDA)  // the SM count comes from the CUDA backend
  // The lowering asks for exactly its kernel's partial bytes (sized by this GPU's SMs); the
  // memory plan places them, and a sum too short to split asks for none.
  for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{8192, 384}, {64, 10}}) {
    INFO(rows << " x " << cols);
    Builder b;
    const ValueId x = b.op(OpId::mm, {b.input({rows, 16}), b.input({16, cols})});
    const ValueId s = b.reduce(OpId::sum, x, {0}, true);
    b.g.outputs = {s};
    fuse(b.g);
    const int32_t gi = b.g.nodes[b.g.values[s].producer].group;
    REQUIRE(gi >= 0);
    const Group& grp = b.g.groups[gi];
    const FusedReductionKernel k =
        generate_reduction_kernel(b.g, grp, kernels::cuda::nvrtc::sm_count(0));
    CHECK((k.splits > 1) == (rows == 8192));
    CHECK(cuda_lowering_workspace(b.g, grp) == k.partial_bytes);
    std::vector<GroupStorage> storage(b.g.groups.size(), GroupStorage::None);
    std::vector<int64_t> workspace(b.g.groups.size(), 0);
    workspace[gi] = k.partial_bytes;
    const MemoryPlan plan = plan_memory(b.g, storage, workspace);
    CHECK((plan.workspace_arena[gi] >= 0) == (k.partial_bytes > 0));
  }
#endif
}

TEST_CASE("reduction codegen: a norm's affine backward is one kernel, eager's bits",
          "[jit][cuda]") {
  EMBER_REQUIRE_CUDA();
  // dy * gamma joins the group of sum(dy * xhat) as a sibling (fusion_rules.cpp): the product
  // is written elementwise as eager writes it, the sum keeps eager's order.
  for (Mode mode : {Mode::Default, Mode::ReduceOverhead})
    for (const Shape& shape : std::vector<Shape>{{4096, 128}, {64, 512}, {33, 7}}) {
      const std::string what = shape.str() + (mode == Mode::Default ? "" : " (graph replay)");
      INFO(what);
      const ReductionLoweringStats before = reduction_lowering_stats();
      auto fn = [](const Tensor& dy, const Tensor& gamma, const Tensor& xhat) {
        return std::vector<Tensor>{mul(dy, gamma), sum(mul(dy, xhat), {0}, true)};
      };
      auto compiled = jit::compile(fn, {.mode = mode, .fullgraph = true, .name = "norm_affine"});
      for (int call = 0; call < 3; ++call) {
        const Tensor dy = rand(shape, kGpu) + 0.5;
        const Tensor gamma = rand({shape[1]}, kGpu) + 0.5;
        const Tensor xhat = rand(shape, kGpu) + 0.5;
        const std::vector<Tensor> want = fn(dy, gamma, xhat);
        const std::vector<Tensor> got = compiled(dy, gamma, xhat);
        REQUIRE(got.size() == 2);
        check_bitwise_equal(got[0], want[0], "dy * gamma, call " + std::to_string(call));
        std::vector<double> ref, mag;
        column_sums(as_doubles(mul(dy, xhat)), shape[0], shape[1], ref, mag);
        check_close(got[1], ref, mag, 1e-6, "column sum vs float64");
        check_bitwise_equal(got[1], want[1], "column sum vs eager");
      }
      const jit::Explanation e =
          jit::explain(fn, rand(shape, kGpu), rand({shape[1]}, kGpu), rand(shape, kGpu));
      INFO(e.str());
      CHECK(e.kernels_per_replay == 1);
      check_lowered(before);
    }
}

TEST_CASE("reduction codegen: a lone column sum of a product is one generated kernel, eager's bits",
          "[jit][cuda]") {
  EMBER_REQUIRE_CUDA();
  // The bias gradient of a layer fed by a GEMM or the cross entropy: no pointwise member, so
  // the sum is a Reduction group of its own (fuse.cpp); with 8192 rows eager splits the rows
  // and finishes in a second kernel, the generated kernel in its last block.
  for (Mode mode : {Mode::Default, Mode::ReduceOverhead})
    for (const Shape& shape :
         std::vector<Shape>{{64, 10}, {8192, 10}, {8192, 64}, {4096, 128}, {8192, 384}, {300, 7}}) {
      const std::string what = shape.str() + (mode == Mode::Default ? "" : " (graph replay)");
      INFO(what);
      const ReductionLoweringStats before = reduction_lowering_stats();
      auto fn = [](const Tensor& a, const Tensor& b) { return sum(mm(a, b), {0}, true); };
      auto compiled = jit::compile(fn, {.mode = mode, .fullgraph = true, .name = "lone_sum"});
      for (int call = 0; call < 4; ++call) {
        const Tensor a = rand({shape[0], 16}, kGpu) + 0.25;
        const Tensor b = rand({16, shape[1]}, kGpu) + 0.25;
        const Tensor want = fn(a, b);
        const Tensor got = compiled(a, b);
        REQUIRE(got.sizes() == Shape{1, shape[1]});
        std::vector<double> ref, mag;
        column_sums(as_doubles(mm(a, b)), shape[0], shape[1], ref, mag);
        check_close(got, ref, mag, 1e-6, "column sum vs float64");
        check_bitwise_equal(got, want, "column sum vs eager");
      }
      check_lowered(before);
    }
}

TEST_CASE("reduction codegen: a small-K product inside the relu backward gives eager's bits",
          "[jit][cuda]") {
  EMBER_REQUIRE_CUDA();
  // dH = where(h > 0, dO W2, 0) and its column sums: the product computed inside the generated
  // kernel must sum as eager's SmallK kernel does, so both outputs equal eager's bit for bit.
  for (Mode mode : {Mode::Default, Mode::ReduceOverhead})
    for (const Shape& s :
         std::vector<Shape>{{64, 10, 512}, {8192, 10, 512}, {33, 16, 70}, {5, 1, 3}}) {
      const std::string what = s.str() + (mode == Mode::Default ? "" : " (graph replay)");
      INFO(what);
      const ReductionLoweringStats before = reduction_lowering_stats();
      // W2 as Linear keeps it ([N,K], used transposed), as in the MLP's backward.
      auto fn = [](const Tensor& h, const Tensor& d_out, const Tensor& w2t) {
        const Tensor w = where(gt(h, 0.0), mm(d_out, w2t.t()), 0.0);
        return std::vector<Tensor>{w, sum(w, {0}, true)};
      };
      auto compiled = jit::compile(fn, {.mode = mode, .fullgraph = true, .name = "relu_bwd"});
      for (int call = 0; call < 5; ++call) {
        const Tensor h = randn({s[0], s[2]}, kGpu);
        const Tensor d_out = randn({s[0], s[1]}, kGpu);
        const Tensor w2t = randn({s[2], s[1]}, kGpu);
        const std::vector<Tensor> want = fn(h, d_out, w2t);
        const std::vector<Tensor> got = compiled(h, d_out, w2t);
        REQUIRE(got.size() == 2);
        check_bitwise_equal(got[0], want[0], "masked product, call " + std::to_string(call));
        check_bitwise_equal(got[1], want[1], "column sum, call " + std::to_string(call));
        // And against float64: the product and its mask from the inputs alone.
        const std::vector<double> hh = as_doubles(h), dd = as_doubles(d_out), ww = as_doubles(w2t);
        std::vector<double> ref(static_cast<size_t>(s[0] * s[2])), mag(ref.size());
        for (int64_t i = 0; i < s[0]; ++i)
          for (int64_t j = 0; j < s[2]; ++j) {
            double acc = 0, m = 0;
            for (int64_t k = 0; k < s[1]; ++k) {
              acc += dd[i * s[1] + k] * ww[j * s[1] + k];
              m += std::abs(dd[i * s[1] + k] * ww[j * s[1] + k]);
            }
            const bool on = hh[i * s[2] + j] > 0;
            ref[i * s[2] + j] = on ? acc : 0.0;
            mag[i * s[2] + j] = on ? m : 0.0;
          }
        check_close(got[0], ref, mag, 1e-6, "masked product vs float64");
      }
      CHECK(compiled.stats().replays >= 2);
      check_lowered(before);
    }
}

TEST_CASE("reduction codegen: ne + sum to int64 is exact", "[jit][cuda]") {
  EMBER_REQUIRE_CUDA();
  for (int64_t n : {1, 64, 8192, 100003}) {
    INFO(n);
    const ReductionLoweringStats before = reduction_lowering_stats();
    auto fn = [](const Tensor& t) { return sum(ne(t, -100)); };
    auto compiled = jit::compile(fn, {.fullgraph = true, .name = "ne_sum"});
    for (int call = 0; call < 4; ++call) {
      const Tensor t = randint(-101, -97, {n}, TensorOptions(kInt64).device(kGpu));
      const Tensor got = compiled(t);
      REQUIRE(got.dtype() == kInt64);
      int64_t ref = 0;
      for (int64_t v : t.cpu().to_vector<int64_t>()) ref += v != -100 ? 1 : 0;
      CHECK(got.cpu().to_vector<int64_t>()[0] == ref);
      check_bitwise_equal(got, fn(t), "vs eager");
    }
    check_lowered(before);
  }
}

TEST_CASE("reduction codegen: mean over the last dim with keepdim", "[jit][cuda]") {
  EMBER_REQUIRE_CUDA();
  for (const Shape& shape : std::vector<Shape>{{64, 512}, {7, 13}, {3, 5000}}) {
    INFO(shape.str());
    const ReductionLoweringStats before = reduction_lowering_stats();
    auto fn = [](const Tensor& x, const Tensor& y) { return mean(exp(x) * y, {-1}, true); };
    auto compiled = jit::compile(fn, {.fullgraph = true, .name = "mean_last"});
    for (int call = 0; call < 4; ++call) {
      const Tensor x = rand(shape, kGpu), y = rand(shape, kGpu) + 0.25;
      const Tensor got = compiled(x, y);
      REQUIRE(got.sizes() == Shape{shape[0], 1});
      // Reference: the product eager computes (float, per element), averaged in float64.
      const std::vector<double> p = as_doubles(exp(x) * y);
      std::vector<double> ref(static_cast<size_t>(shape[0]), 0.0);
      for (int64_t r = 0; r < shape[0]; ++r) {
        for (int64_t c = 0; c < shape[1]; ++c) ref[r] += p[r * shape[1] + c];
        ref[r] /= static_cast<double>(shape[1]);
      }
      check_close(got, ref, ref, 1e-6, "mean vs float64");
    }
    check_lowered(before);
  }
}

TEST_CASE("reduction codegen: amax over dim 0 and amin are exact", "[jit][cuda]") {
  EMBER_REQUIRE_CUDA();
  for (const Shape& shape : std::vector<Shape>{{8192, 512}, {64, 512}, {7, 13}, {1, 1}}) {
    INFO(shape.str());
    const ReductionLoweringStats before = reduction_lowering_stats();
    auto fmax = [](const Tensor& x, const Tensor& y) { return amax(x * y, {0}); };
    auto fmin = [](const Tensor& x, const Tensor& y) { return amin(x - y, {1}, true); };
    auto cmax = jit::compile(fmax, {.fullgraph = true, .name = "amax0"});
    auto cmin = jit::compile(fmin, {.fullgraph = true, .name = "amin1"});
    for (int call = 0; call < 4; ++call) {
      const Tensor x = randn(shape, kGpu), y = randn(shape, kGpu);
      check_bitwise_equal(cmax(x, y), fmax(x, y), "amax");
      check_bitwise_equal(cmin(x, y), fmin(x, y), "amin");
    }
    check_lowered(before);
  }
}

TEST_CASE("reduction codegen: a transposed input", "[jit][cuda]") {
  EMBER_REQUIRE_CUDA();
  const ReductionLoweringStats before = reduction_lowering_stats();
  auto fn = [](const Tensor& a, const Tensor& c) { return sum(relu(a.t() + c), {0}); };
  auto compiled = jit::compile(fn, {.fullgraph = true, .name = "transposed"});
  for (int call = 0; call < 4; ++call) {
    const Tensor a = rand({512, 64}, kGpu), c = rand({64, 512}, kGpu);
    const Tensor got = compiled(a, c);
    std::vector<double> ref, mag;
    column_sums(as_doubles(relu(a.t() + c)), 64, 512, ref, mag);
    check_close(got, ref, mag, 1e-6, "transposed column sum vs float64");
  }
  check_lowered(before);
}

TEST_CASE("reduction codegen: a group whose kernel cannot be built runs member by member",
          "[jit][cuda]") {
  EMBER_REQUIRE_CUDA();
  const ReductionLoweringStats before = reduction_lowering_stats();
  set_reduction_kernel_failure_for_testing(true);
  auto fn = [](const Tensor& h, const Tensor& g) {
    const Tensor w = where(gt(h, 0.0), g, 0.0);
    return std::vector<Tensor>{w, sum(w, {0}, true)};
  };
  auto compiled = jit::compile(fn, {.fullgraph = true, .name = "fallback"});
  for (int call = 0; call < 4; ++call) {
    const Tensor h = randn({96, 64}, kGpu), g = randn({96, 64}, kGpu);
    const std::vector<Tensor> want = fn(h, g);
    const std::vector<Tensor> got = compiled(h, g);
    check_bitwise_equal(got[0], want[0], "where output");
    check_bitwise_equal(got[1], want[1], "sum (eager kernels)");
  }
  set_reduction_kernel_failure_for_testing(false);
  CHECK(reduction_lowering_stats().fallbacks > before.fallbacks);
  CHECK(reduction_lowering_stats().groups == before.groups);
}

namespace {
struct BiasNetImpl : nn::Module {
  nn::Linear fc1{nullptr}, fc2{nullptr};
  BiasNetImpl() {
    fc1 = register_module("fc1", nn::Linear(100, 512));
    fc2 = register_module("fc2", nn::Linear(512, 10));
  }
  Tensor forward(const Tensor& x) { return fc2(relu(fc1(x))); }
};
EMBER_MODULE(BiasNet);

std::vector<float> train_bias_net(bool compiled, int64_t batch) {
  manual_seed(11);
  BiasNet net;
  net->to(kGpu);
  optim::SGD opt(net->parameters(), optim::SGDOptions(0.05));
  nn::CrossEntropyLoss criterion;
  auto body = [&](const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss = criterion(net(x), y);
    loss.backward();
    opt.step();
    return loss;
  };
  auto step = jit::compile(body, {.fullgraph = true, .name = "bias_net"});
  manual_seed(99);
  std::vector<float> losses;
  for (int i = 0; i < 8; ++i) {
    const Tensor x = randn({batch, 100}, kGpu);
    const Tensor y = randint(0, 10, {batch}, kGpu);
    losses.push_back((compiled ? step(x, y) : body(x, y)).item<float>());
  }
  return losses;
}
}  // namespace

TEST_CASE("reduction codegen: the MLP step's reduction groups are lowered, losses match eager",
          "[jit][cuda]") {
  EMBER_REQUIRE_CUDA();
  for (int64_t batch : {64, 8192}) {
    INFO("batch " << batch);
    const std::vector<float> eager = train_bias_net(false, batch);
    const ReductionLoweringStats before = reduction_lowering_stats();
    const std::vector<float> compiled = train_bias_net(true, batch);
    check_lowered(before);
    for (size_t i = 0; i < eager.size(); ++i) {
      INFO("step " << i << ": compiled " << compiled[i] << ", eager " << eager[i]);
      CHECK(std::abs(compiled[i] - eager[i]) <= 1e-5 * std::abs(eager[i]));
    }
  }
}
