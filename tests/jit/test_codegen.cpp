// Code generation for fused pointwise groups (jit/pointwise_codegen.h) and its NVRTC path
// (kernels/cuda/nvrtc.h).
//  - Host-only, on any machine: the source generated for hand-built groups holds what the
//    group needs (functors in the eager compute types, per-input indexing, vector accesses,
//    inline scalars, outputs only); unsupported groups are refused with a reason. CUDA builds:
//    every generated source compiles with NVRTC to an sm_90 cubin (NVRTC needs no GPU), a broken
//    source raises ember::Error carrying NVRTC's log, cache keys separate what they must, and a
//    compiled binary round-trips through a binary store / the disk cache.
//  - [cuda], on the GPU machine: per fusion pattern, a compiled function whose group runs as the
//    generated kernel returns bit for bit what eager returns (the same functors in the same
//    compute types), for fresh random inputs over several calls; and the MLP training step
//    compiled on CUDA, with its pointwise groups lowered, matches eager.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/factory.h"
#include "core/generator.h"
#include "core/ops.h"
#include "jit/compile.h"
#include "jit/disk_cache.h"
#include "jit/lower.h"
#include "jit/passes.h"
#include "jit/pointwise_codegen.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/module.h"
#include "optim/sgd.h"
#include "test_util.h"
#if defined(EMBER_WITH_CUDA)
#include "kernels/cuda/nvrtc.h"
#include "kernels/cuda/nvrtc_workers.h"
#include "memory_binary_store.h"
#endif

using namespace ember;
using namespace ember::jit;

namespace {

// ---- hand-built graphs on cuda:0 (no GPU needed: only metadata) -------------------------------

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
  ValueId cast(ValueId v, DType t) {
    Attrs a;
    a.dtype = t;
    return op(OpId::cast, {v}, a);
  }
  // Fuses with `outputs` returned and expects one group.
  const Group& fused(std::vector<ValueId> outputs) {
    g.outputs = std::move(outputs);
    fuse(g);
    REQUIRE(g.groups.size() == 1);
    return g.groups[0];
  }
  FusedPointwiseKernel kernel(std::vector<ValueId> outputs) {
    const Group& grp = fused(std::move(outputs));
    std::string why;
    const bool ok = pointwise_codegen_supports(g, grp, &why);
    INFO(why);
    REQUIRE(ok);
    return generate_pointwise_kernel(g, grp);
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
#define CHECK_HAS_NOT(src, what) \
  do {                           \
    INFO(src);                   \
    CHECK_FALSE(has(src, what)); \
  } while (0)

#if defined(EMBER_WITH_CUDA)
namespace rtc = kernels::cuda::nvrtc;

// Compiles for sm_90 (the H200's architecture) and checks NVRTC produced an ELF cubin.
void check_compiles(const FusedPointwiseKernel& k) {
  INFO(k.source);
  const rtc::Binary b = rtc::compile(k.source, 90, "test.cu");
  CHECK_FALSE(b.ptx);
  REQUIRE(b.bytes.size() > 4);
  CHECK(b.bytes.compare(0, 4,
                        "\x7f"
                        "ELF") == 0);
}

using MemoryStore = test::MemoryBinaryStore;
#else
void check_compiles(const FusedPointwiseKernel&) {}
#endif

}  // namespace

// ---- host-only: generated source -------------------------------------------------------------

TEST_CASE("codegen: a unary chain becomes one flat vectorized kernel", "[jit][codegen]") {
  Builder b;
  const ValueId x = b.input({64, 512});
  const ValueId y = b.op(OpId::relu, {b.op(OpId::exp, {b.op(OpId::neg, {x})})});
  const FusedPointwiseKernel k = b.kernel({y});
  const std::string& s = k.source;
  CHECK(k.numel == 64 * 512);
  CHECK(k.vec == 4);  // 16 bytes of float32
  REQUIRE(k.operands.size() == 2);
  CHECK(k.operands[0].output);
  CHECK(k.operands[0].value == y);
  CHECK(k.operands[0].vec_align == 16);
  CHECK(k.operands[1].value == x);
  CHECK_HAS(s, "#include \"kernels/cuda/fused_pointwise.cuh\"");
  CHECK_HAS(s, "ew::ComputeOp<pw::neg, float, float>{pw::neg{}}(x0)");
  CHECK_HAS(s, "ew::ComputeOp<pw::relu, float, float>");
  // Results other members read are kept from FMA contraction; the final one needs nothing.
  CHECK_HAS(s, "fp::keep(ew::ComputeOp<pw::neg");
  CHECK_HAS(s, "fp::keep(ew::ComputeOp<pw::exp");
  CHECK_HAS_NOT(s, "fp::keep(ew::ComputeOp<pw::relu");
  // One dense dim after coalescing: a linear index, 16-byte accesses, 32-bit indexing.
  CHECK_HAS(s, "typedef unsigned int Index;");
  CHECK_HAS(s, "kNumel = 32768u");
  CHECK_HAS(s, "const Index c0 = i;");
  CHECK_HAS(s, "fp::load_vec<4>(x0, a.p[1], c0)");
  CHECK_HAS(s, "fp::store_vec<4>(a.p[0], c0, y0)");
  CHECK_HAS(s, "char* p[2];");  // the output and the input: intermediates are never stored
  CHECK_HAS(s, FusedPointwiseKernel::kElementKernel);
  CHECK_HAS(s, FusedPointwiseKernel::kVectorKernel);
  check_compiles(k);
}

TEST_CASE("codegen: inputs broadcast along rows and along columns", "[jit][codegen]") {
  Builder b;
  const ValueId x = b.input({64, 512});
  const ValueId bias = b.input({512});
  const ValueId col = b.input({64, 1});
  const ValueId t = b.op(OpId::add, {x, bias});
  const ValueId y = b.op(OpId::sub, {b.op(OpId::mul, {b.op(OpId::relu, {t}), col}), x});
  const FusedPointwiseKernel k = b.kernel({y});
  const std::string& s = k.source;
  CHECK(k.vec == 4);
  // Each input with its own indexing over [64, 512]: c0 the column, c1 the row.
  CHECK_HAS(s, "const Index c0 = i % 512u;");
  CHECK_HAS(s, "const Index c1 = q0;");
  CHECK_HAS(s, "fp::load<float>(a.p[1], c0 + c1 * 512u)");  // x
  CHECK_HAS(s, "fp::load<float>(a.p[2], c0)");              // bias: same for every row
  CHECK_HAS(s, "fp::load<float>(a.p[3], c1)");              // col: same for every column
  // Vector kernel: the bias is a vector too, the column value is one load for all lanes.
  CHECK_HAS(s, "fp::load_vec<4>(x1, a.p[2], c0)");
  CHECK_HAS(s, "fp::fill<4>(x2, fp::load<float>(a.p[3], c1))");
  // x is read by two members but loaded once.
  CHECK(k.operands.size() == 4);
  check_compiles(k);
}

TEST_CASE("codegen: a transposed input is read through its strides", "[jit][codegen]") {
  Builder b;
  const ValueId a = b.input({512, 64});
  Attrs perm;
  perm.dims = {1, 0};
  const ValueId at = b.op(OpId::permute, {a}, perm);  // [64, 512], strides {1, 64}
  const ValueId c = b.input({64, 512});
  const ValueId y = b.op(OpId::tanh, {b.op(OpId::add, {at, c})});
  const FusedPointwiseKernel k = b.kernel({y});
  const std::string& s = k.source;
  CHECK_HAS(s, "fp::load<float>(a.p[1], c0 * 64u + c1)");
  CHECK_HAS(s, "fp::load_strided<4>(x0, a.p[1], c0 * 64u + c1, static_cast<Index>(64u))");
  CHECK(k.operands[1].value == at);
  CHECK(k.operands[1].vec_align == 0);  // never read as a vector
  check_compiles(k);
}

TEST_CASE("codegen: an inner size that no vector divides gets no vector kernel", "[jit][codegen]") {
  Builder b;
  const ValueId x = b.input({7, 13});
  const ValueId y = b.input({13});
  const ValueId z = b.op(OpId::sigmoid, {b.op(OpId::mul, {x, y})});
  const FusedPointwiseKernel k = b.kernel({z});
  CHECK(k.vec == 0);
  CHECK_HAS_NOT(k.source, FusedPointwiseKernel::kVectorKernel);
  check_compiles(k);
}

TEST_CASE("codegen: where, comparisons and casts across dtypes, bool included", "[jit][codegen]") {
  Builder b;
  const ValueId x = b.input({32, 48});
  const ValueId n = b.input({32, 48}, kInt32);
  const ValueId zero = b.constant(0.0, kFloat32);
  const ValueId mask = b.op(OpId::gt, {x, zero});                  // bool
  const ValueId m = b.op(OpId::mul, {b.cast(mask, kFloat32), x});  // bool -> float
  const ValueId w = b.op(OpId::where, {mask, m, b.op(OpId::neg, {m})});
  const ValueId ni = b.op(OpId::abs, {b.op(OpId::mul, {b.cast(mask, kInt32), n})});  // int32
  const ValueId y = b.op(OpId::add, {w, b.cast(ni, kFloat32)});
  const ValueId yi = b.cast(y, kInt64);
  const FusedPointwiseKernel k = b.kernel({yi, mask});
  const std::string& s = k.source;
  CHECK_HAS(s, "ew::ComputeOp<pw::gt, float, bool>{pw::gt{}}");
  CHECK_HAS(s, "ew::CastOp<float>{}");
  CHECK_HAS(s, "ew::WhereOp<float, float>{}");
  CHECK_HAS(s, "ew::ComputeOp<pw::abs, int32_t, int32_t>");
  CHECK_HAS(s, "ew::CastOp<int32_t>{}");
  CHECK_HAS(s, "fp::keep(ew::ComputeOp<pw::mul, int32_t, int32_t>");  // no overflow reasoning
  CHECK_HAS_NOT(s, "fp::keep(ew::ComputeOp<pw::gt");                  // bool needs nothing
  CHECK_HAS(s, "ew::CastOp<int64_t>{}");
  CHECK_HAS(s, "bool& y0, int64_t& y1");             // both outputs, in the members' order
  CHECK_HAS(s, "y0 = t0;");                          // mask, the group's first member
  CHECK_HAS(s, "ew::FromBits<float>::get(a.s[0])");  // the 0-dim host constant
  CHECK_HAS(s, "unsigned long long s[1];");
  // int32 and bool are vectors of 4 with the float32 operands; int64 limits V to 2.
  CHECK(k.vec == 2);
  check_compiles(k);
}

TEST_CASE("codegen: 16-bit floats compute in float and round between members", "[jit][codegen]") {
  for (DType t : {kFloat16, kBFloat16}) {
    Builder b;
    const ValueId x = b.input({128, 256}, t);
    const ValueId y = b.input({128, 256}, t);
    const ValueId c = b.constant(0.5, t);
    const ValueId z = b.op(OpId::sigmoid, {b.op(OpId::add, {b.op(OpId::mul, {x, y}), c})});
    const FusedPointwiseKernel k = b.kernel({z});
    const std::string& s = k.source;
    const std::string st = t == kFloat16 ? "__half" : "__nv_bfloat16";
    INFO(dtype_name(t));
    CHECK_HAS(s, "ew::ComputeOp<pw::mul, float, " + st + ">");
    CHECK_HAS(s, "const " + st + " t0 = ");  // intermediates held in the storage type
    CHECK_HAS_NOT(s, "fp::keep");            // the conversion to 16 bits already rounds
    CHECK_HAS(s, "ew::FromBits<" + st + ">::get(a.s[0])");
    CHECK(k.vec == 8);  // 16 bytes of 16-bit values
    check_compiles(k);
  }
}

TEST_CASE("codegen: attributes become functor members, doubles exactly", "[jit][codegen]") {
  Builder b;
  const ValueId x = b.input({1000}, kFloat64);
  Attrs cl;
  cl.has_lo = cl.has_hi = true;
  cl.lo = Scalar(-0.1);
  cl.hi = Scalar(1e300);
  Attrs ge;
  ge.approximate_tanh = true;
  const ValueId y = b.op(OpId::gelu, {b.op(OpId::clamp, {x}, cl)}, ge);
  const ValueId g = b.op(OpId::gelu_backward, {y, x});
  const FusedPointwiseKernel k = b.kernel({g});
  const std::string& s = k.source;
  CHECK_HAS(s,
            "pw::clamp{fp::f64_bits(0xbfb999999999999aull), fp::f64_bits(0x7e37e43c8800759cull), "
            "true, true}");
  CHECK_HAS(s, "ew::ComputeOp<pw::gelu, double, double>{pw::gelu{true}}");
  CHECK_HAS(s, "pw::gelu_backward{false}");
  CHECK_HAS(s, "fp::keep(ew::ComputeOp<pw::clamp");  // double results are kept too
  check_compiles(k);
}

TEST_CASE("codegen: a member result read later and returned is stored once, used in registers",
          "[jit][codegen]") {
  Builder b;
  const ValueId x = b.input({256});
  const ValueId two = b.constant(2.0, kFloat32);
  const ValueId y = b.op(OpId::mul, {x, two});
  const ValueId z = b.op(OpId::add, {y, x});
  const FusedPointwiseKernel k = b.kernel({y, z});
  const std::string& s = k.source;
  REQUIRE(k.operands.size() == 4);
  CHECK(k.operands[0].value == y);
  CHECK(k.operands[1].value == z);
  CHECK(k.operands[3].scalar);
  CHECK(k.words == 4);
  CHECK_HAS(s, "y0 = t0;");  // y is the group's first member
  CHECK_HAS(s, "ew::ComputeOp<pw::add, float, float>{pw::add{}}(t0, x0)");
  check_compiles(k);
}

TEST_CASE("codegen: a cat of member results stores each piece in its place", "[jit][codegen]") {
  // A recurrent step's gate gradients: pieces of [8, 32] joined along dim 1 into [8, 96].
  Builder b;
  const ValueId x = b.input({8, 32});
  const ValueId y = b.input({8, 32});
  const ValueId p0 = b.op(OpId::mul, {x, y});
  const ValueId p1 = b.op(OpId::sub, {x, y});
  const ValueId p2 = b.op(OpId::tanh, {p0});
  Attrs along;
  along.dim = 1;
  SECTION("the pieces are read by the cat alone: the cat is the group's last member") {
    const ValueId c = b.op(OpId::cat, {p0, p1, p2}, along);
    const Group& grp = b.fused({c});
    CHECK(grp.nodes.size() == 4);
    CHECK(grp.outputs == std::vector<ValueId>{c});
    std::string why;
    const bool ok = pointwise_codegen_supports(b.g, grp, &why);
    INFO(why);
    REQUIRE(ok);
    const FusedPointwiseKernel k = generate_pointwise_kernel(b.g, grp);
    const std::string& s = k.source;
    REQUIRE(k.operands.size() == 5);  // three pieces, then x and y
    for (int i = 0; i < 3; ++i) {
      CHECK(k.operands[i].output);
      CHECK(k.operands[i].value == c);
      CHECK(k.operands[i].elem_offset == 32 * i);
    }
    CHECK(k.operands[3].value == x);
    CHECK(k.operands[3].elem_offset == 0);
    CHECK_HAS(s, "y0 = t0;");
    CHECK_HAS(s, "y1 = t1;");
    CHECK_HAS(s, "y2 = t2;");
    CHECK_HAS(s, "* 96");  // a piece's rows are the cat's rows apart
    CHECK(k.vec == 4);
    check_compiles(k);
  }
  SECTION("two cats sharing pieces (a GRU's input and hidden gate gradients): both in place") {
    const ValueId p3 = b.op(OpId::neg, {p1});
    const ValueId c = b.op(OpId::cat, {p0, p1, p2}, along);
    const ValueId d = b.op(OpId::cat, {p0, p1, p3}, along);
    const Group& grp = b.fused({c, d});
    CHECK(grp.nodes.size() == 6);
    CHECK(grp.outputs == std::vector<ValueId>{c, d});
    std::string why;
    const bool ok = pointwise_codegen_supports(b.g, grp, &why);
    INFO(why);
    REQUIRE(ok);
    const FusedPointwiseKernel k = generate_pointwise_kernel(b.g, grp);
    REQUIRE(k.operands.size() == 8);  // three pieces of each cat, then x and y
    for (int i = 0; i < 6; ++i) {
      CHECK(k.operands[i].output);
      CHECK(k.operands[i].value == (i < 3 ? c : d));
      CHECK(k.operands[i].elem_offset == 32 * (i % 3));
    }
    CHECK_HAS(k.source, "y3 = t0;");  // p0 again, into the second cat
    CHECK_HAS(k.source, "y5 = t3;");  // p3, the second cat's own piece
    check_compiles(k);
  }
  SECTION("a piece also returned: the cat stays a kernel of its own") {
    const ValueId c = b.op(OpId::cat, {p0, p1, p2}, along);
    b.g.outputs = {c, p1};
    fuse(b.g);
    REQUIRE(b.g.groups.size() == 1);
    CHECK(b.g.groups[0].nodes.size() == 3);
    CHECK(b.g.nodes[static_cast<size_t>(b.g.groups[0].nodes.back())].op != OpId::cat);
  }
}

TEST_CASE("codegen: groups computing the same thing emit the same source, whatever their value ids",
          "[jit][codegen]") {
  // As a model's repeated layers do: one compile, one cache entry and one module for all.
  auto layer = [](int unrelated_before) {
    Builder b;
    for (int i = 0; i < unrelated_before; ++i) b.input({3});  // shifts every later value id
    const ValueId x = b.input({32, 128});
    const ValueId w = b.input({128});
    const ValueId h = b.op(OpId::mul, {x, w});
    const ValueId y = b.op(OpId::gelu, {b.op(OpId::add, {h, x})});
    return b.kernel({h, y}).source;
  };
  const std::string first = layer(0), later = layer(7);
  INFO(first);
  INFO(later);
  CHECK(first == later);
}

TEST_CASE("codegen: groups it cannot run are refused with a reason", "[jit][codegen]") {
  SECTION("a reduction group") {
    Builder b;
    const ValueId x = b.input({16, 32});
    Attrs d;
    d.dims = {0};
    const ValueId s = b.op(OpId::sum, {b.op(OpId::relu, {b.op(OpId::neg, {x})})}, d);
    const Group& grp = b.fused({s});
    std::string why;
    CHECK_FALSE(pointwise_codegen_supports(b.g, grp, &why));
    CHECK(why == "not a pointwise group");
    CHECK_FALSE(pointwise_lowering_storage(b.g, grp).has_value());
    CHECK_THROWS_AS(generate_pointwise_kernel(b.g, grp), Error);
  }
  SECTION("a group on the CPU") {
    Graph g;
    const ValueId x = g.add_constant(zeros({4, 4}));
    const ValueId y = g.append(OpId::exp, {g.append(OpId::neg, {x})});
    g.outputs = {y};
    fuse(g);
    REQUIRE(g.groups.size() == 1);
    std::string why;
    CHECK_FALSE(pointwise_codegen_supports(g, g.groups[0], &why));
    CHECK(has(why, "computes on cpu"));
  }
}

TEST_CASE("codegen: supported groups need no memory for their internals", "[jit][codegen]") {
  Builder b;
  const ValueId x = b.input({64, 64});
  const ValueId y = b.op(OpId::exp, {b.op(OpId::neg, {x})});
  const Group& grp = b.fused({y});
  const std::optional<GroupStorage> how = pointwise_lowering_storage(b.g, grp);
#if defined(EMBER_WITH_CUDA)
  REQUIRE(how.has_value());
  CHECK(*how == GroupStorage::None);
#else
  CHECK_FALSE(how.has_value());  // no lowering without CUDA
#endif
}

// ---- host-only: NVRTC (CUDA builds) -------------------------------------------------------

#if defined(EMBER_WITH_CUDA)
TEST_CASE("nvrtc: a broken source raises an error carrying NVRTC's log", "[jit][codegen]") {
  const std::string src =
      "#include \"kernels/cuda/fused_pointwise.cuh\"\n"
      "extern \"C\" __global__ void broken(float* p) { p[0] = no_such_function(p[1]); }\n";
  try {
    (void)rtc::compile(src, 90, "broken.cu");
    FAIL("a broken source compiled");
  } catch (const Error& e) {
    const std::string msg = e.what();
    INFO(msg);
    CHECK(has(msg, "broken.cu does not compile for sm_90"));
    CHECK(has(msg, "no_such_function"));  // NVRTC's own diagnostic, with the line
    CHECK(has(msg, "broken.cu(2)"));
  }
}

TEST_CASE("nvrtc workers: binaries made in worker processes are compile()'s, a broken one left out",
          "[jit][codegen]") {
  // Three kernels the generator writes, and one that does not compile.
  std::vector<std::string> sources;
  for (int64_t n : {256, 4096, 100000}) {
    Builder b;
    const ValueId x = b.input({n});
    sources.push_back(b.kernel({b.op(OpId::gelu, {b.op(OpId::neg, {x})})}).source);
  }
  sources.push_back("extern \"C\" __global__ void broken(float* p) { p[0] = nope(p[1]); }\n");
  std::vector<rtc::WorkerJob> jobs;
  for (size_t i = 0; i < sources.size(); ++i)
    jobs.push_back({sources[i], "job" + std::to_string(i) + ".cu"});
  const std::string& worker = rtc::worker_path();
  INFO("worker: " << worker);
  REQUIRE_FALSE(worker.empty());  // the build makes it beside the library
  for (unsigned processes : {1u, 2u, 8u}) {
    INFO(processes << " processes");
    const std::vector<std::optional<rtc::Binary>> got =
        rtc::compile_in_workers(jobs, 90, processes, worker);
    REQUIRE(got.size() == jobs.size());
    for (size_t i = 0; i + 1 < jobs.size(); ++i) {
      REQUIRE(got[i].has_value());
      CHECK_FALSE(got[i]->ptx);
      CHECK(got[i]->bytes == rtc::compile(sources[i], 90, jobs[i].name).bytes);
    }
    CHECK_FALSE(got.back().has_value());
  }
  // No worker to start: nothing compiled, nothing thrown (precompile then uses threads).
  const std::vector<std::optional<rtc::Binary>> none =
      rtc::compile_in_workers(jobs, 90, 2, "/nonexistent/ember-nvrtc-worker");
  CHECK(std::none_of(none.begin(), none.end(), [](const auto& b) { return b.has_value(); }));
  // The worker refuses a malformed command line instead of guessing.
  std::string prog = "w", bad_arch = "sm90", one = "x.cu";
  char* args[] = {prog.data(), bad_arch.data(), one.data(), one.data(), one.data()};
  CHECK(rtc::worker_main(5, args) == 2);
  CHECK(rtc::worker_main(3, args) == 2);
}

TEST_CASE("nvrtc: the embedded headers are the eager kernels' own", "[jit][codegen]") {
  // The templates and functors compile as NVRTC sees them, with no include path at all.
  const std::string src =
      "#include \"kernels/cuda/pointwise.cuh\"\n"
      "namespace ew = ember::kernels::cuda::elementwise;\n"
      "extern \"C\" __global__ void k(const float* a, __half* b, __nv_bfloat16* c) {\n"
      "  b[0] = ew::ComputeOp<ember::pw::gelu, float, __half>{}(a[0]);\n"
      "  c[0] = ew::convert<__nv_bfloat16>(b[0]);\n"
      "}\n";
  const rtc::Binary b = rtc::compile(src, 90, "headers.cu");
  CHECK(b.bytes.compare(0, 4,
                        "\x7f"
                        "ELF") == 0);
  CHECK(rtc::version() >= 12000);
  // The options: the exact architecture, no fast math, FMA contraction as nvcc's default.
  const std::vector<std::string> opts = rtc::compile_options(90);
  CHECK(opts.front() == "--gpu-architecture=sm_90");
  for (const std::string& o : opts) CHECK_FALSE(has(o, "fast"));
}

TEST_CASE("nvrtc: cache keys separate sources, architectures and generators", "[jit][codegen]") {
  const std::string a = "extern \"C\" __global__ void k() {}\n";
  const std::string b = "extern \"C\" __global__ void k() { }\n";
  const std::string k1 = rtc::cache_key(a, 90, "pointwise_v1");
  CHECK(k1.size() == 32);
  CHECK(k1 == rtc::cache_key(a, 90, "pointwise_v1"));
  CHECK(k1 != rtc::cache_key(b, 90, "pointwise_v1"));
  CHECK(k1 != rtc::cache_key(a, 80, "pointwise_v1"));
  CHECK(k1 != rtc::cache_key(a, 90, "pointwise_v2"));
}

TEST_CASE("nvrtc: a compiled binary is reused from the store, then from the disk cache",
          "[jit][codegen][cache]") {
  Builder g;
  const ValueId x = g.input({4096});
  const FusedPointwiseKernel k = g.kernel({g.op(OpId::exp, {g.op(OpId::neg, {x})})});

  MemoryStore mem;
  rtc::Origin origin{};
  const rtc::Binary first = rtc::fetch_or_compile(k.source, 90, "test_v1", &mem, &origin);
  CHECK(origin == rtc::Origin::Compiled);
  CHECK(mem.map.size() == 1);
  const rtc::Binary again = rtc::fetch_or_compile(k.source, 90, "test_v1", &mem, &origin);
  CHECK(origin == rtc::Origin::Store);
  CHECK(again.bytes == first.bytes);

  // Through the disk cache: a new cache object (a new process) gets the same cubin.
  std::string tmpl = (std::filesystem::temp_directory_path() / "ember_cg_XXXXXX").string();
  REQUIRE(::mkdtemp(tmpl.data()) != nullptr);
  const std::string key = rtc::cache_key(k.source, 90, "test_v1");
  {
    DiskCache disk(tmpl);
    REQUIRE(disk.store(key, first.bytes));
  }
  DiskCache fresh(tmpl);
  const std::optional<std::string> loaded = fresh.load(key);
  REQUIRE(loaded.has_value());
  CHECK(*loaded == first.bytes);
  std::filesystem::remove_all(tmpl);
}
#endif

// ---- [cuda]: generated kernels against eager, bit for bit ----------------------------------

namespace {

using Pattern = std::vector<Tensor> (*)(const Tensor&, const Tensor&, const Tensor&);
using Inputs = std::function<std::vector<Tensor>()>;

void check_bitwise(const Tensor& got, const Tensor& want, const std::string& what) {
  INFO(what);
  REQUIRE(got.sizes() == want.sizes());
  REQUIRE(got.dtype() == want.dtype());
  const Tensor g = got.cpu().contiguous(), w = want.cpu().contiguous();
  const auto* pg = static_cast<const unsigned char*>(g.raw_data());
  const auto* pw = static_cast<const unsigned char*>(w.raw_data());
  const int64_t es = g.element_size();
  for (int64_t i = 0; i < g.numel(); ++i)
    if (std::memcmp(pg + i * es, pw + i * es, static_cast<size_t>(es)) != 0) {
      FAIL_CHECK("element " << i << " of " << g.numel() << " differs: compiled "
                            << g.to(kFloat64).contiguous().to_vector<double>()[i] << ", eager "
                            << w.to(kFloat64).contiguous().to_vector<double>()[i]);
      return;
    }
}

// Compiles `fn`, checks its pointwise groups were lowered to generated kernels, and compares
// several replays on fresh inputs with eager.
void lowered_matches_eager(const std::string& what, Pattern fn, const Inputs& make) {
  INFO(what);
  auto compiled =
      jit::compile([fn](const Tensor& a, const Tensor& b, const Tensor& c) { return fn(a, b, c); },
                   {.fullgraph = true, .name = what});
  const PointwiseLoweringStats before = pointwise_lowering_stats();
  for (int call = 0; call < 4; ++call) {
    const std::vector<Tensor> in = make();
    const std::vector<Tensor> want = fn(in[0], in[1], in[2]);
    const std::vector<Tensor> got = compiled(in[0], in[1], in[2]);
    REQUIRE(got.size() == want.size());
    for (size_t i = 0; i < want.size(); ++i)
      check_bitwise(got[i], want[i],
                    what + ", call " + std::to_string(call) + ", output " + std::to_string(i));
  }
  CHECK(compiled.stats().replays >= 2);  // calls 1-2 trace (two traces must agree), 3-4 replay
  INFO(
      "the pointwise group was not lowered to a generated kernel (is lower_pointwise_cuda "
      "wired into jit/lower_cuda.cpp?)");
  CHECK(pointwise_lowering_stats().groups > before.groups);
}

const Device kGpu = Device::cuda(0);
Tensor gpu_randn(const Shape& s, DType t = kFloat32) {
  return randn(s, TensorOptions(t).device(kGpu));
}

}  // namespace

TEST_CASE("codegen: generated kernels match eager bit for bit, per fusion pattern", "[jit][cuda]") {
  EMBER_REQUIRE_CUDA();
  const Inputs three_2d = [] {
    return std::vector<Tensor>{gpu_randn({64, 512}), gpu_randn({64, 512}), gpu_randn({64, 512})};
  };

  lowered_matches_eager(
      "unary chain",
      [](const Tensor& a, const Tensor&, const Tensor&) -> std::vector<Tensor> {
        return {relu(tanh(exp(neg(a)))) + sqrt(abs(a))};
      },
      three_2d);

  lowered_matches_eager(
      "broadcast along rows (bias) and columns",
      [](const Tensor& x, const Tensor& b, const Tensor& c) -> std::vector<Tensor> {
        return {relu(x + b) * c - x * b};  // a*b + c is where FMA contraction would differ
      },
      [] {
        return std::vector<Tensor>{gpu_randn({64, 512}), gpu_randn({512}), gpu_randn({64, 1})};
      });

  lowered_matches_eager(
      "where and comparisons",
      [](const Tensor& a, const Tensor& b, const Tensor& c) -> std::vector<Tensor> {
        const Tensor m = a > b;
        return {where(m, a * c + b, b - a * c), m, maximum(a, c) >= minimum(b, c)};
      },
      three_2d);

  lowered_matches_eager(
      "strided and transposed inputs",
      [](const Tensor& a, const Tensor& b, const Tensor&) -> std::vector<Tensor> {
        return {sigmoid(a.t() * b + b), a.t() / (b * b + 1.0)};
      },
      [] {
        return std::vector<Tensor>{gpu_randn({512, 64}), gpu_randn({64, 512}), gpu_randn({1})};
      });

  lowered_matches_eager(
      "a misaligned view and an odd shape",
      [](const Tensor& a, const Tensor& b, const Tensor&) -> std::vector<Tensor> {
        const Tensor v = a.slice(0, 1, 32769);  // offset 1: the vector kernel's alignment fails
        return {exp(v * 0.5) - v, gelu(b * b, true) + b};
      },
      [] {
        return std::vector<Tensor>{gpu_randn({32769}), gpu_randn({7, 13}), gpu_randn({1})};
      });

  lowered_matches_eager(
      "mixed dtypes, bool included",
      [](const Tensor& a, const Tensor& n, const Tensor& b) -> std::vector<Tensor> {
        const Tensor mask = a > b;
        const Tensor y = cast(mask, kFloat32) * a + cast(abs(n), kFloat32);
        return {cast(y * 3.0, kInt32), mask != (n > 0), clamp(n * 2, -3, 4)};
      },
      [] {
        return std::vector<Tensor>{gpu_randn({96, 80}),
                                   randint(-9, 9, {96, 80}, TensorOptions(kInt32).device(kGpu)),
                                   gpu_randn({96, 80})};
      });

  lowered_matches_eager(
      "pieces stored into their cat's result, along rows and columns",
      [](const Tensor& a, const Tensor& b, const Tensor& c) -> std::vector<Tensor> {
        const Tensor s = sigmoid(a) * b;
        return {cat({s, tanh(a) - c, s * c}, 1), cat({a * b, b - c}, 0)};
      },
      three_2d);

  lowered_matches_eager(
      "0-dim host constants",
      [](const Tensor& a, const Tensor& b, const Tensor&) -> std::vector<Tensor> {
        return {(a * 2.5 + 1.0) / 3.0 - pow(abs(b) + 0.25, 1.5)};
      },
      three_2d);

  for (DType t : {kFloat16, kBFloat16, kFloat64}) {
    lowered_matches_eager(
        std::string("16-bit and 64-bit floats: ") + std::string(dtype_name(t)),
        [](const Tensor& a, const Tensor& b, const Tensor& c) -> std::vector<Tensor> {
          return {sigmoid(a * b + c) - gelu(a * 0.5), rsqrt(b * b + 1.0) * c};
        },
        [t] {
          return std::vector<Tensor>{gpu_randn({128, 256}, t), gpu_randn({128, 256}, t),
                                     gpu_randn({256}, t)};
        });
  }
}

TEST_CASE("codegen: a group whose kernel cannot be built runs member by member, still exact",
          "[jit][cuda]") {
  EMBER_REQUIRE_CUDA();
  const PointwiseLoweringStats before = pointwise_lowering_stats();
  struct Inject {
    Inject() { set_pointwise_kernel_failure_for_testing(true); }
    ~Inject() { set_pointwise_kernel_failure_for_testing(false); }
  } inject;
  auto fn = [](const Tensor& a, const Tensor& b) { return relu(a * b + a) - b; };
  auto compiled = jit::compile(fn, {.fullgraph = true, .name = "fallback"});
  for (int call = 0; call < 3; ++call) {
    const Tensor a = gpu_randn({64, 512}), b = gpu_randn({512});
    check_bitwise(compiled(a, b), fn(a, b), "fallback, call " + std::to_string(call));
  }
  CHECK(pointwise_lowering_stats().fallbacks > before.fallbacks);
  CHECK(pointwise_lowering_stats().groups == before.groups);
}

namespace {

struct TinyNetImpl : nn::Module {
  nn::Linear fc1{nullptr}, fc2{nullptr};
  TinyNetImpl() {
    fc1 = register_module("fc1", nn::Linear(100, 256));
    fc2 = register_module("fc2", nn::Linear(256, 10));
  }
  // The input is scaled and shifted first: that pointwise pair is the step's pointwise group.
  // (The loss is one fused kernel, and pointwise ops after a GEMM join its epilogue group.)
  Tensor forward(const Tensor& x) { return fc2(relu(fc1(x * 0.5 + 0.25))); }
};
EMBER_MODULE(TinyNet);

std::vector<double> train_tiny(bool compiled, std::vector<Tensor>& params) {
  manual_seed(7);
  TinyNet net;
  net->to(kGpu);
  optim::SGD opt(net->parameters(), optim::SGDOptions(0.05).momentum(0.9).nesterov(true));
  nn::CrossEntropyLoss criterion;
  auto body = [&](const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss = criterion(net(x), y);
    loss.backward();
    opt.step();
    return loss;
  };
  auto step = jit::compile(body);
  manual_seed(1234);
  std::vector<double> losses;
  for (int i = 0; i < 12; ++i) {
    const Tensor x = randn({64, 100}, kGpu);
    const Tensor y = randint(0, 10, {64}, kGpu);
    losses.push_back((compiled ? step(x, y) : body(x, y)).item<float>());
  }
  for (const Tensor& p : net->parameters()) params.push_back(p.detach().cpu().clone());
  return losses;
}

}  // namespace

TEST_CASE("codegen: the MLP training step on CUDA, pointwise groups lowered, matches eager",
          "[jit][cuda]") {
  EMBER_REQUIRE_CUDA();
  std::vector<Tensor> eager_params, compiled_params;
  const std::vector<double> eager = train_tiny(false, eager_params);
  const PointwiseLoweringStats before = pointwise_lowering_stats();
  const std::vector<double> compiled = train_tiny(true, compiled_params);
  {
    INFO("no pointwise group of the step was lowered to a generated kernel");
    CHECK(pointwise_lowering_stats().groups > before.groups);
  }
  REQUIRE(compiled.size() == eager.size());
  for (size_t i = 0; i < eager.size(); ++i) {
    INFO("step " << i << ": compiled " << compiled[i] << ", eager " << eager[i]);
    CHECK(std::abs(compiled[i] - eager[i]) <= 1e-5 * std::abs(eager[i]));
  }
  CHECK(eager.back() != eager.front());
  REQUIRE(compiled_params.size() == eager_params.size());
  for (size_t i = 0; i < eager_params.size(); ++i) {
    const std::vector<double> c = compiled_params[i].to(kFloat64).to_vector<double>();
    const std::vector<double> e = eager_params[i].to(kFloat64).to_vector<double>();
    double worst = 0, scale = 0;
    for (size_t j = 0; j < e.size(); ++j) {
      worst = std::max(worst, std::abs(c[j] - e[j]));
      scale = std::max(scale, std::abs(e[j]));
    }
    INFO("parameter " << i << ": max difference " << worst << " at scale " << scale);
    CHECK(worst <= 1e-5 * scale);
  }
}
