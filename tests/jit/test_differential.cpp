// Differential test of the JIT: random programs of table ops (pointwise unary/binary with
// broadcasting and wrapped scalars, where over a comparison, sum/mean/amax over random dims,
// matmuls with transposed operands, views: transpose, reshape, view, slice, narrow, unsqueeze,
// expand), every Unary and Binary op of the op table drawn generically (kOpInfo, through
// dispatch with default Attrs, inputs mapped into the op's domain: kDomains), gelu in both
// forms, layer_norm over the last dims, multi_norm of two values, cross_entropy through nn::functional with its backward into a parameter, and SGD steps
// through optim::SGD with and without momentum, over 1-3 float inputs of random shapes and
// layouts (contiguous, transposed, at a storage offset that changes per call) and class-index
// targets; about a third are large enough that the CPU executor runs fused groups in several
// chunks. Each program is compiled and called 4 times with fresh random inputs (calls 1-2 trace,
// 3-4 replay the executable; with momentum SGD, whose first step creates state, calls 1-3
// trace); every output of every call is compared with the same program run
// eagerly on the same inputs (tolerance in check_calls). Parameters and optimizer state live in
// a World: the compiled function, the eager run and the float64 run each have their own, from
// the same start, so each call's updates are compared like any output. A failure prints the
// seed and the program.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

#include "autograd/grad_mode.h"
#include "core/dispatch.h"
#include "core/factory.h"
#include "core/generator.h"
#include "core/op.h"
#include "core/ops.h"
#include "jit/compile.h"
#include "nn/functional.h"
#include "nn/options.h"
#include "optim/sgd.h"
#include "test_util.h"

using namespace ember;

namespace {

enum class Op {
  Relu,
  Neg,
  Abs,
  Tanh,
  Sigmoid,
  ExpTanh,  // exp(tanh(a)): bounded
  LogAbs1,  // log(|a| + 1)
  Add,
  Sub,
  Mul,
  DivSafe,  // a / (|b| + 1)
  Maximum,
  AddScalar,
  MulScalar,
  ScalarSub,  // s - a (the scalar on the left)
  WhereGt,    // where(a > s, a, b)
  Sum,
  Mean,
  Amax,
  Matmul,  // matmul(a or a^T, b or b^T) over the last two dims
  Transpose,
  Reshape,
  View,
  Slice,
  Narrow,
  Unsqueeze,
  Expand,
  TableUnary,    // any Unary op of the table (Instr::table_op) on its domain
  TableBinary,   // any Binary op of the table on its domains
  Gelu,          // gelu(a), i0: the tanh approximation
  LayerNorm,     // layer_norm(a) over its last i0 dims, eps s (nn::functional, no affine)
  MultiNorm,     // multi_norm({a, b}, p = s)
  CrossEntropy,  // cross_entropy(a + param, target) (nn::functional), backward into param
  ParamGrad,     // the gradient the last backward left in param
  SgdStep,       // optim::SGD step of param on the loss sum(a * param); 2 * param after it
};

// ---- the op table, drawn generically ----------------------------------------------------------
//
// Every Unary and Binary op of kOpInfo that takes float32 is drawn through dispatch(op, inputs,
// Attrs{}), so an op added to the table is covered with no change here. Each operand is first
// mapped into a domain: Real, (-2, 2) (2 tanh(x)), unless kDomains names another for the op.
// An op that gives a non-finite value on its domain fails the test at once, naming the op and
// this table (ProgramGen::emit), rather than letting NaN reach the comparisons: a new op with a
// restricted domain (log1p, acos, ...) needs a line here. Comparisons (ToBool) become 0/1 in the
// program's dtype.
enum class Domain {
  Real,      // 2 tanh(x): (-2, 2)
  Positive,  // 2 sigmoid(x) + 0.25: (0.25, 2.25), away from 0 and bounded
};

struct DomainRule {
  std::string_view op;
  Domain arg[2];
};
const DomainRule kDomains[] = {
    {"log", {Domain::Positive, Domain::Real}},    // -inf / NaN at x <= 0
    {"sqrt", {Domain::Positive, Domain::Real}},   // NaN below 0
    {"rsqrt", {Domain::Positive, Domain::Real}},  // inf at 0
    {"pow", {Domain::Positive, Domain::Real}},    // NaN for a negative base, fractional exponent
    {"div", {Domain::Real, Domain::Positive}},    // unbounded near a zero denominator
};

// Table ops the generic draw leaves out, and why: their default Attrs make no meaningful op.
struct SkipRule {
  std::string_view op, why;
};
const SkipRule kSkipped[] = {
    {"clamp", "no bound set (has_lo = has_hi = false): nothing to test"},
    {"cast",
     "attrs.dtype defaults to float32: a copy here and a narrowing of the float64 "
     "reference (copies are drawn through reshape/contiguous anyway)"},
};

const DomainRule* domain_rule(std::string_view op) {
  for (const DomainRule& d : kDomains)
    if (d.op == op) return &d;
  return nullptr;
}
bool skipped(std::string_view op) {
  for (const SkipRule& r : kSkipped)
    if (r.op == op) return true;
  return false;
}

// The ops of one kind the generic draw takes (everything float32 of that kind not skipped).
const std::vector<OpId>& table_ops(OpKind kind) {
  static const auto make = [](OpKind k) {
    std::vector<OpId> ops;
    for (int i = 0; i < kNumOps; ++i) {
      const OpInfo& info = kOpInfo[i];
      if (info.kind == k && in_set(info.dtypes, kFloat32) && !skipped(info.name))
        ops.push_back(static_cast<OpId>(i));
    }
    return ops;
  };
  static const std::vector<OpId> unary = make(OpKind::Unary), binary = make(OpKind::Binary);
  return kind == OpKind::Unary ? unary : binary;
}

Tensor to_domain(const Tensor& x, Domain d) {
  return d == Domain::Positive ? add(mul(sigmoid(x), 2.0), 0.25) : mul(tanh(x), 2.0);
}

// How often each op and special instruction was drawn over all programs generated so far:
// the CPU test checks that every drawable op was.
std::map<std::string, int>& drawn() {
  static std::map<std::string, int> m;
  return m;
}

struct Instr {
  Op op = Op::Relu;
  OpId table_op = OpId::neg;  // TableUnary / TableBinary
  int param = -1;             // CrossEntropy, ParamGrad, SgdStep: Program::param_init index
  int target = -1;            // CrossEntropy: Program::targets index
  int sgd = -1;               // SgdStep: Program::sgd index
  int a = -1, b = -1;
  int64_t i0 = 0, i1 = 0, i2 = 0, i3 = 0;
  double s = 0;
  bool keepdim = false;
  Dims dims;
  Shape shape;
  std::string text;
};

// How an input is passed: contiguous, transposed (strided), or at a storage offset.
enum class Layout { Contiguous, Transposed, Offset };
const char* layout_name(Layout l) {
  switch (l) {
    case Layout::Contiguous:
      return "";
    case Layout::Transposed:
      return " (transposed layout)";
    case Layout::Offset:
      return " (rows of a bigger tensor, at a varying offset)";
  }
  return "";
}

// An int64 class-index input [n] in [0, classes); `ignore` (or -100) is the loss's
// ignore_index, never the class of row 0, so a mean never divides by zero.
struct TargetSpec {
  int64_t n = 0, classes = 0, ignore = -100;
};

struct SgdSpec {
  int param = -1;
  double lr = 0.1, momentum = 0, weight_decay = 0;
  bool nesterov = false;
};

struct Program {
  uint64_t seed = 0;
  std::vector<Shape> input_shapes;
  std::vector<Layout> input_layout;
  std::vector<TargetSpec> targets;  // passed after the float inputs
  std::vector<Tensor> param_init;   // CPU float32 start values of the parameters
  std::vector<SgdSpec> sgd;         // one optimizer each
  std::vector<Instr> instrs;
  std::vector<int> outputs;  // value indices (inputs first, then one per instr)
  int num_inputs() const { return static_cast<int>(input_shapes.size()); }
  std::string str() const {
    std::ostringstream os;
    os << "program (seed " << seed << "):\n";
    for (int i = 0; i < num_inputs(); ++i)
      os << "  %" << i << " = input " << input_shapes[i] << layout_name(input_layout[i]) << "\n";
    for (size_t t = 0; t < targets.size(); ++t)
      os << "  target" << t << " = input int64 [" << targets[t].n << "] in [0, "
         << targets[t].classes << ")\n";
    for (size_t k = 0; k < param_init.size(); ++k)
      os << "  param" << k << " = parameter " << param_init[k].sizes() << "\n";
    for (size_t k = 0; k < sgd.size(); ++k)
      os << "  sgd" << k << " = SGD(param" << sgd[k].param << ", lr " << sgd[k].lr << ", momentum "
         << sgd[k].momentum << (sgd[k].nesterov ? ", nesterov" : "") << ", weight_decay "
         << sgd[k].weight_decay << ")\n";
    for (size_t k = 0; k < instrs.size(); ++k)
      os << "  %" << num_inputs() + k << " = " << instrs[k].text << "\n";
    os << "  return";
    for (int o : outputs) os << " %" << o;
    os << "\n";
    return os.str();
  }
};

// The program's parameters (leaves requiring grad: state in a trace) and one SGD optimizer per
// Program::sgd entry, on one device in one dtype.
struct World {
  std::vector<Tensor> params;
  std::vector<std::unique_ptr<optim::SGD>> opts;
};

Tensor make_param(const Tensor& init, Device dev, DType dt) {
  Tensor t = init.to(dt).to(dev).clone();
  t.requires_grad_();
  return t;
}
std::unique_ptr<optim::SGD> make_sgd(const SgdSpec& s, const Tensor& param) {
  return std::make_unique<optim::SGD>(std::vector<Tensor>{param},
                                      optim::SGDOptions(s.lr)
                                          .momentum(s.momentum)
                                          .nesterov(s.nesterov)
                                          .weight_decay(s.weight_decay));
}
std::unique_ptr<World> make_world(const Program& p, Device dev, DType dt) {
  auto w = std::make_unique<World>();
  for (const Tensor& init : p.param_init) w->params.push_back(make_param(init, dev, dt));
  for (const SgdSpec& s : p.sgd) w->opts.push_back(make_sgd(s, w->params[s.param]));
  return w;
}

const nn::Reduction kReductions[] = {nn::Reduction::Mean, nn::Reduction::Sum, nn::Reduction::None};

Tensor apply_instr(const Instr& in, const std::vector<Tensor>& v,
                   const std::vector<Tensor>& targets, World& world) {
  const Tensor& a = v[in.a];
  const Tensor b = in.b >= 0 ? v[in.b] : Tensor();
  switch (in.op) {
    case Op::Relu:
      return relu(a);
    case Op::Neg:
      return neg(a);
    case Op::Abs:
      return abs(a);
    case Op::Tanh:
      return tanh(a);
    case Op::Sigmoid:
      return sigmoid(a);
    case Op::ExpTanh:
      return exp(tanh(a));
    case Op::LogAbs1:
      return log(abs(a) + 1.0);
    case Op::Add:
      return add(a, b);
    case Op::Sub:
      return sub(a, b);
    case Op::Mul:
      return mul(a, b);
    case Op::DivSafe:
      return div(a, abs(b) + 1.0);
    case Op::Maximum:
      return maximum(a, b);
    case Op::AddScalar:
      return add(a, in.s);
    case Op::MulScalar:
      return mul(a, in.s);
    case Op::ScalarSub:
      return sub(in.s, a);
    case Op::WhereGt:
      return where(gt(a, in.s), a, b);
    case Op::Sum:
      return sum(a, in.dims, in.keepdim);
    case Op::Mean:
      return mean(a, in.dims, in.keepdim);
    case Op::Amax:
      return amax(a, in.dims, in.keepdim);
    case Op::Matmul: {
      const Tensor x = in.i0 ? a.transpose(-2, -1) : a;
      const Tensor y = in.i1 ? b.transpose(-2, -1) : b;
      return a.dim() == 2 && b.dim() == 2 ? mm(x, y) : matmul(x, y);
    }
    case Op::Transpose:
      return a.transpose(in.i0, in.i1);
    case Op::Reshape:
      return a.reshape(in.shape);
    case Op::View:
      return a.view(in.shape);
    case Op::Slice:
      return a.slice(in.i0, in.i1, in.i2, in.i3);
    case Op::Narrow:
      return a.narrow(in.i0, in.i1, in.i2);
    case Op::Unsqueeze:
      return a.unsqueeze(in.i0);
    case Op::Expand:
      return a.expand(in.shape);
    case Op::TableUnary:
    case Op::TableBinary: {
      const DomainRule* d = domain_rule(op_name(in.table_op));
      std::vector<Tensor> args{to_domain(a, d ? d->arg[0] : Domain::Real)};
      if (in.op == Op::TableBinary) args.push_back(to_domain(b, d ? d->arg[1] : Domain::Real));
      const Tensor r = dispatch(in.table_op, args, Attrs{});
      return r.dtype() == a.dtype() ? r : r.to(a.dtype());
    }
    case Op::Gelu:
      return gelu(a, in.i0 != 0);
    case Op::LayerNorm: {
      Shape trailing;
      for (int d = a.dim() - static_cast<int>(in.i0); d < a.dim(); ++d) trailing.push_back(a.size(d));
      return nn::functional::layer_norm(a, trailing, {}, {}, in.s);
    }
    case Op::MultiNorm:
      return multi_norm({a, b}, in.s);
    case Op::CrossEntropy: {
      Tensor& param = world.params[in.param];
      param.set_grad({});  // this call's gradient only, in every world alike
      nn::CrossEntropyLossOptions o;
      o.ignore_index(in.i0).label_smoothing(in.s).reduction(kReductions[in.i1]);
      const Tensor loss = nn::functional::cross_entropy(add(a, param), targets[in.target], o);
      (loss.dim() == 0 ? loss : loss.sum()).backward();
      return loss.detach();  // later instructions build no graph on it
    }
    case Op::ParamGrad:
      return world.params[in.param].grad();
    case Op::SgdStep: {
      Tensor& param = world.params[in.param];
      optim::SGD& opt = *world.opts[in.sgd];
      opt.zero_grad();
      mul(a, param).sum().backward();  // d/dparam = a
      opt.step();
      NoGradGuard no_grad;
      return mul(param, 2.0);  // a new value (never the state itself), without a graph
    }
  }
  return {};
}

// The program run eagerly on (float inputs..., targets...): the reference, and the body the JIT
// compiles.
std::vector<Tensor> interpret(const Program& p, const std::vector<Tensor>& args, World& world) {
  std::vector<Tensor> v(args.begin(), args.begin() + p.num_inputs());
  const std::vector<Tensor> targets(args.begin() + p.num_inputs(), args.end());
  for (const Instr& in : p.instrs) v.push_back(apply_instr(in, v, targets, world));
  std::vector<Tensor> out;
  for (int o : p.outputs) out.push_back(v[o]);
  return out;
}

Tensor make_input(const Shape& shape, Layout layout, Device dev) {
  switch (layout) {
    case Layout::Contiguous:
      break;
    case Layout::Transposed: {
      Shape rev = shape;
      const int last = shape.size() - 1;
      std::swap(rev[0], rev[last]);
      return randn(rev, TensorOptions(dev)).transpose(0, last);
    }
    case Layout::Offset: {
      // Rows [start, start + n) of a bigger tensor: the strides of a contiguous tensor at an
      // offset that changes from call to call.
      Shape big = shape;
      big[0] += 3;
      const int64_t start = randint(0, 4, {1}).item<int64_t>();
      return randn(big, TensorOptions(dev)).narrow(0, start, shape[0]);
    }
  }
  return randn(shape, TensorOptions(dev));
}

// A float64 copy on the CPU with the same strides (views in the program depend on them).
Tensor to_float64(const Tensor& t, Layout layout) {
  if (layout != Layout::Transposed) return t.cpu().contiguous().to(kFloat64);
  const int last = t.dim() - 1;
  return t.transpose(0, last).cpu().contiguous().to(kFloat64).transpose(0, last);
}

Tensor make_target(const TargetSpec& t, Device dev) {
  std::vector<int64_t> v = randint(0, t.classes, {t.n}).to_vector<int64_t>();
  if (v[0] == t.ignore) v[0] = (t.ignore + 1) % t.classes;
  return from_vector(v, {t.n}).to(dev);
}

// The float inputs, then the targets.
std::vector<Tensor> make_inputs(const Program& p, Device dev) {
  std::vector<Tensor> in;
  for (int i = 0; i < p.num_inputs(); ++i)
    in.push_back(make_input(p.input_shapes[i], p.input_layout[i], dev));
  for (const TargetSpec& t : p.targets) in.push_back(make_target(t, dev));
  return in;
}

bool broadcastable(const Shape& a, const Shape& b) {
  const int n = std::max(a.size(), b.size());
  for (int i = 0; i < n; ++i) {
    const int64_t x = i < a.size() ? a[a.size() - 1 - i] : 1;
    const int64_t y = i < b.size() ? b[b.size() - 1 - i] : 1;
    if (x != y && x != 1 && y != 1) return false;
  }
  return true;
}

int64_t broadcast_numel(const Shape& a, const Shape& b) {
  const int n = std::max(a.size(), b.size());
  int64_t numel = 1;
  for (int i = 0; i < n; ++i) {
    const int64_t x = i < a.size() ? a[a.size() - 1 - i] : 1;
    const int64_t y = i < b.size() ? b[b.size() - 1 - i] : 1;
    numel *= std::max(x, y);
  }
  return numel;
}

std::string shape_str(const Shape& s) {
  std::ostringstream os;
  os << s;
  return os.str();
}

// Builds a random program, running each op on sample inputs as it goes so that shapes, layouts
// (view() needs a contiguous input) and a bound on the magnitudes are known.
class ProgramGen {
 public:
  explicit ProgramGen(uint64_t seed) : rng_(seed), world_(std::make_unique<World>()) {
    p_.seed = seed;
  }

  Program make() {
    make_inputs();
    const int n = pick(5, 15);
    int guard = 0;
    while (static_cast<int>(p_.instrs.size()) < n && ++guard < 1000) step();
    // Outputs: the last value and up to two other computed ones.
    const int first = p_.num_inputs(), last = static_cast<int>(vals_.size()) - 1;
    p_.outputs.push_back(last);
    const int extra = pick(0, 2);
    for (int k = 0; k < extra && last > first; ++k) {
      const int o = pick(first, last - 1);
      if (std::find(p_.outputs.begin(), p_.outputs.end(), o) == p_.outputs.end())
        p_.outputs.push_back(o);
    }
    return p_;
  }

 private:
  static constexpr double kBoundCap = 30;
  // Values stay below this many elements (large programs: big enough that the CPU executor
  // runs fused groups in several chunks of CpuGroupRunner::kChunkElems).
  int64_t max_numel_ = 2048;

  int pick(int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng_); }
  bool coin(double p) { return std::uniform_real_distribution<double>(0, 1)(rng_) < p; }
  int any_value() { return pick(0, static_cast<int>(vals_.size()) - 1); }
  const Shape& shape(int v) const { return vals_[v].sizes(); }
  static std::string name(int v) {
    std::ostringstream os;  // not "%" + to_string: GCC 12 -O3 warns (-Wrestrict) on that
    os << '%' << v;
    return os.str();
  }

  void make_inputs() {
    int rank = pick(1, 3);
    Shape base;
    for (int d = 0; d < rank; ++d) base.push_back(pick(1, 6));
    if (coin(0.3)) {
      // Large: many rows (several chunks of a fused group), or fewer rows of many columns.
      max_numel_ = 65536;
      rank = pick(2, 3);
      base.clear();
      if (rank == 2) {
        if (coin(0.5)) {
          base.push_back(pick(1500, 4000));
          base.push_back(pick(1, 6));
        } else {
          base.push_back(pick(100, 300));
          base.push_back(pick(40, 100));
        }
      } else {
        base.push_back(pick(100, 400));
        base.push_back(pick(1, 8));
        base.push_back(pick(2, 16));
      }
    }
    const int n = pick(1, 3);
    for (int i = 0; i < n; ++i) {
      Shape s;
      const int drop = (rank > 1 && coin(0.25)) ? pick(1, rank - 1) : 0;
      for (int d = drop; d < rank; ++d) s.push_back(coin(0.25) ? 1 : base[d]);
      Layout layout = Layout::Contiguous;
      if (s.size() >= 2 && coin(0.2))
        layout = Layout::Transposed;
      else if (s.size() >= 1 && coin(0.2))
        layout = Layout::Offset;
      p_.input_shapes.push_back(s);
      p_.input_layout.push_back(layout);
      vals_.push_back(make_input(s, layout, Device::cpu()));
      bound_.push_back(5);  // randn: |x| < 5 except with probability ~6e-7
    }
  }

  void emit(Instr in, double bound) {
    Tensor r = apply_instr(in, vals_, targets_, *world_);
    std::ostringstream os;
    os << in.text << "  : " << shape_str(r.sizes()) << (r.is_contiguous() ? "" : " (strided)");
    in.text = os.str();
    p_.instrs.push_back(std::move(in));
    vals_.push_back(std::move(r));
    bound_.push_back(bound);
    if (bound > kBoundCap) {  // keep every value finite and well scaled
      Instr t;
      t.op = Op::Tanh;
      t.a = static_cast<int>(vals_.size()) - 1;
      t.text = "tanh(" + name(t.a) + ")";
      emit(std::move(t), 1);
    }
  }

  // A value that broadcasts with `a` into a result of reasonable size (`a` itself at worst).
  int partner(int a) {
    std::vector<int> c;
    for (int v = 0; v < static_cast<int>(vals_.size()); ++v)
      if (broadcastable(shape(a), shape(v)) && broadcast_numel(shape(a), shape(v)) <= max_numel_)
        c.push_back(v);
    return c[pick(0, static_cast<int>(c.size()) - 1)];
  }

  double scalar() {
    static const double kScalars[] = {0.5, -1.5, 2.0, 0.25, 3.0, -0.75};
    return kScalars[pick(0, 5)];
  }

  // Random non-empty subset of dims (empty: all dims, which 0-dim values always use).
  Dims reduce_dims(int a) {
    const int rank = static_cast<int>(shape(a).size());
    Dims d;
    if (rank == 0 || coin(0.2)) return d;
    for (int i = 0; i < rank; ++i)
      if (coin(0.5)) d.push_back(coin(0.3) ? i - rank : i);  // negative dims too
    if (d.empty()) d.push_back(pick(0, rank - 1));
    return d;
  }

  // Shapes a value can be reshaped to: flattened, two adjacent dims merged, a dim split.
  std::vector<Shape> reshape_targets(int a) {
    const Shape& s = shape(a);
    std::vector<Shape> out;
    out.push_back(Shape{numel_of(s)});
    for (int d = 0; d + 1 < s.size(); ++d) {
      Shape m;
      for (int i = 0; i < s.size(); ++i) {
        if (i == d + 1) continue;
        m.push_back(i == d ? s[d] * s[d + 1] : s[i]);
      }
      out.push_back(m);
    }
    if (s.size() < 4)
      for (int d = 0; d < s.size(); ++d)
        for (int64_t f = 2; f < s[d]; ++f)
          if (s[d] % f == 0) {
            Shape m;
            for (int i = 0; i < s.size(); ++i) {
              if (i == d) {
                m.push_back(f);
                m.push_back(s[d] / f);
              } else {
                m.push_back(s[i]);
              }
            }
            out.push_back(m);
          }
    return out;
  }

  void step() {
    // Sometimes the previous op again on the same operand (with fresh attributes): near-
    // duplicates that common-subexpression elimination must tell apart (or merge correctly).
    int a = any_value(), op = pick(0, 39);
    if (last_op_ >= 0 && coin(0.2)) a = last_a_, op = last_op_;
    last_a_ = a;
    last_op_ = op;
    const Shape& sa = shape(a);
    const int rank = static_cast<int>(sa.size());
    const double ba = bound_[a];
    Instr in;
    in.a = a;
    switch (op) {
      case 0:
        in.op = Op::Relu, in.text = "relu(" + name(a) + ")";
        return emit(in, ba);
      case 1:
        in.op = Op::Neg, in.text = "neg(" + name(a) + ")";
        return emit(in, ba);
      case 2:
        in.op = Op::Abs, in.text = "abs(" + name(a) + ")";
        return emit(in, ba);
      case 3:
        in.op = Op::Tanh, in.text = "tanh(" + name(a) + ")";
        return emit(in, 1);
      case 4:
        in.op = Op::Sigmoid, in.text = "sigmoid(" + name(a) + ")";
        return emit(in, 1);
      case 5:
        in.op = Op::ExpTanh, in.text = "exp(tanh(" + name(a) + "))";
        return emit(in, 2.72);
      case 6:
        in.op = Op::LogAbs1, in.text = "log(abs(" + name(a) + ") + 1)";
        return emit(in, std::log(ba + 1));
      case 7:
      case 8:
      case 9:
      case 10:
      case 11:
      case 12: {
        static const Op kBinary[] = {Op::Add, Op::Sub, Op::Mul, Op::DivSafe, Op::Maximum, Op::Add};
        static const char* kNames[] = {"add", "sub", "mul", "div_safe", "maximum", "add"};
        const int k = pick(0, 5);
        in.op = kBinary[k];
        in.b = partner(a);
        const double bb = bound_[in.b];
        in.text = std::string(kNames[k]) + "(" + name(a) + ", " + name(in.b) + ")" +
                  (in.op == Op::DivSafe ? "  [a / (|b| + 1)]" : "");
        const double bound = in.op == Op::Mul       ? ba * bb
                             : in.op == Op::DivSafe ? ba
                             : in.op == Op::Maximum ? std::max(ba, bb)
                                                    : ba + bb;
        return emit(in, bound);
      }
      case 13:
      case 14: {
        const int k = pick(0, 2);
        in.s = scalar();
        in.op = k == 0 ? Op::AddScalar : k == 1 ? Op::MulScalar : Op::ScalarSub;
        std::ostringstream os;
        os << (k == 0   ? "add(" + name(a) + ", "
               : k == 1 ? "mul(" + name(a) + ", "
                        : "sub(")
           << in.s << (k == 2 ? ", " + name(a) : "") << ")";
        in.text = os.str();
        return emit(in, k == 1 ? ba * std::abs(in.s) : ba + std::abs(in.s));
      }
      case 15: {
        in.op = Op::WhereGt;
        in.b = partner(a);
        in.s = scalar() / 4;
        std::ostringstream os;
        os << "where(" << name(a) << " > " << in.s << ", " << name(a) << ", " << name(in.b) << ")";
        in.text = os.str();
        return emit(in, std::max(ba, bound_[in.b]));
      }
      case 16:
      case 17:
      case 18: {
        const int k = pick(0, 2);
        in.op = k == 0 ? Op::Sum : k == 1 ? Op::Mean : Op::Amax;
        in.dims = reduce_dims(a);
        in.keepdim = coin(0.5);
        int64_t n = 1;
        if (in.dims.empty()) {
          n = numel_of(sa);
        } else {
          for (int64_t d : in.dims) n *= sa[d < 0 ? d + rank : d];
        }
        std::ostringstream os;
        os << (k == 0   ? "sum"
               : k == 1 ? "mean"
                        : "amax")
           << "(" << name(a) << ", dims " << shape_str(in.dims) << ", keepdim " << in.keepdim
           << ")";
        in.text = os.str();
        return emit(in, k == 0 ? ba * static_cast<double>(n) : ba);
      }
      case 19:
      case 20: {
        // Matmul over the last two dims: a [.., m, k] (or transposed) with a partner.
        if (rank < 2 || rank > 3) return;
        in.op = Op::Matmul;
        in.i0 = coin(0.3);
        const int64_t k = in.i0 ? sa[rank - 2] : sa[rank - 1];
        struct Cand {
          int v;
          bool t;
        };
        std::vector<Cand> c;
        for (int v = 0; v < static_cast<int>(vals_.size()); ++v) {
          const Shape& sb = shape(v);
          const int rb = static_cast<int>(sb.size());
          if (rb < 2 || rb > 3) continue;
          if (rb == 3 && (rank != 3 || sb[0] != sa[0])) continue;
          if (sb[rb - 2] == k) c.push_back({v, false});
          if (sb[rb - 1] == k) c.push_back({v, true});
        }
        if (c.empty()) return;
        const Cand ch = c[pick(0, static_cast<int>(c.size()) - 1)];
        in.b = ch.v;
        in.i1 = ch.t;
        {
          const Shape& sb = shape(in.b);
          const int rb = sb.size();
          const int64_t m = in.i0 ? sa[rank - 1] : sa[rank - 2];
          const int64_t n = in.i1 ? sb[rb - 2] : sb[rb - 1];
          const int64_t batch = rank == 3 ? sa[0] : 1;
          if (batch * m * n > max_numel_) return;
        }
        std::ostringstream os;
        os << "matmul(" << name(a) << (in.i0 ? "^T" : "") << ", " << name(in.b)
           << (in.i1 ? "^T" : "") << ")";
        in.text = os.str();
        return emit(in, static_cast<double>(k) * ba * bound_[in.b]);
      }
      case 21: {
        if (rank < 2) return;
        in.op = Op::Transpose;
        in.i0 = pick(0, rank - 1);
        in.i1 = pick(0, rank - 1);
        if (coin(0.3)) in.i1 -= rank;  // negative dims
        in.text = "transpose(" + name(a) + ", " + std::to_string(in.i0) + ", " +
                  std::to_string(in.i1) + ")";
        return emit(in, ba);
      }
      case 22: {
        const std::vector<Shape> t = reshape_targets(a);
        in.shape = t[pick(0, static_cast<int>(t.size()) - 1)];
        const bool view = vals_[a].is_contiguous() && coin(0.5);
        in.op = view ? Op::View : Op::Reshape;
        in.text =
            std::string(view ? "view(" : "reshape(") + name(a) + ", " + shape_str(in.shape) + ")";
        return emit(in, ba);
      }
      case 23: {
        std::vector<int> dims;
        for (int d = 0; d < rank; ++d)
          if (sa[d] >= 2) dims.push_back(d);
        if (dims.empty()) return;
        const int d = dims[pick(0, static_cast<int>(dims.size()) - 1)];
        const int n = static_cast<int>(sa[d]);
        if (coin(0.5)) {
          in.op = Op::Slice;
          in.i0 = d;
          in.i1 = pick(0, n - 1);
          in.i2 = pick(static_cast<int>(in.i1) + 1, n);
          in.i3 = pick(1, 2);
          in.text = "slice(" + name(a) + ", dim " + std::to_string(d) + ", " +
                    std::to_string(in.i1) + ":" + std::to_string(in.i2) + ":" +
                    std::to_string(in.i3) + ")";
        } else {
          in.op = Op::Narrow;
          in.i0 = d;
          in.i1 = pick(0, n - 1);
          in.i2 = pick(1, n - static_cast<int>(in.i1));
          in.text = "narrow(" + name(a) + ", dim " + std::to_string(d) + ", start " +
                    std::to_string(in.i1) + ", length " + std::to_string(in.i2) + ")";
        }
        return emit(in, ba);
      }
      case 24: {
        if (rank >= 4) return;
        in.op = Op::Unsqueeze;
        in.i0 = pick(0, rank);
        in.text = "unsqueeze(" + name(a) + ", " + std::to_string(in.i0) + ")";
        return emit(in, ba);
      }
      case 27:
      case 28: {
        // A pointwise op feeding a reduction over the leading dim (and maybe more): the
        // executor's fused reduction group, whose partial results over chunks of rows combine.
        if (rank == 0) return;
        Instr u;
        u.a = a;
        u.op = Op::MulScalar;
        u.s = scalar();
        std::ostringstream us;
        us << "mul(" << name(a) << ", " << u.s << ")";
        u.text = us.str();
        emit(u, ba * std::abs(u.s));
        in.a = static_cast<int>(vals_.size()) - 1;
        const int k = pick(0, 2);
        in.op = k == 0 ? Op::Sum : k == 1 ? Op::Mean : Op::Amax;
        in.dims = {0};
        if (rank > 1 && coin(0.4)) in.dims.push_back(pick(1, rank - 1));
        in.keepdim = coin(0.5);
        int64_t n = 1;
        for (int64_t d : in.dims) n *= sa[d];
        std::ostringstream os;
        os << (k == 0   ? "sum"
               : k == 1 ? "mean"
                        : "amax")
           << "(" << name(in.a) << ", dims " << shape_str(in.dims) << ", keepdim " << in.keepdim
           << ")";
        in.text = os.str();
        return emit(in, (k == 0 ? static_cast<double>(n) : 1.0) * bound_[in.a]);
      }
      case 29:
      case 30:
        return table_op(in, OpKind::Unary);
      case 31:
      case 32:
        return table_op(in, OpKind::Binary);
      case 33: {
        in.op = Op::Gelu;
        in.i0 = coin(0.5);
        in.text = "gelu(" + name(a) + (in.i0 ? ", tanh)" : ")");
        ++drawn()[in.i0 ? "gelu tanh" : "gelu exact"];
        return emit(in, ba);
      }
      case 34:
        return cross_entropy(in);
      case 37:
        return coin(0.5) ? layer_norm(in) : multi_norm(in);
      case 38:
        return table_op(in, OpKind::Unary);
      case 39:
        return table_op(in, OpKind::Binary);
      case 35:
      case 36:
        return sgd_step(in);
      case 25:
      case 26: {
        // Expand size-1 dims, or a new leading dim.
        Shape s = sa;
        bool changed = false;
        for (auto& d : s)
          if (d == 1 && coin(0.7)) d = pick(2, 4), changed = true;
        if (!changed || coin(0.3)) {
          if (rank >= 4) return;
          s.insert(0, pick(2, 3));
        }
        if (numel_of(s) > max_numel_) return;
        in.op = Op::Expand;
        in.shape = s;
        in.text = "expand(" + name(a) + ", " + shape_str(s) + ")";
        return emit(in, ba);
      }
    }
  }

  // A new parameter of this shape (its start values drawn now), in the program and in the
  // generator's own world.
  int add_param(const Shape& s) {
    p_.param_init.push_back(randn(s));
    world_->params.push_back(make_param(p_.param_init.back(), Device::cpu(), kFloat32));
    return static_cast<int>(p_.param_init.size()) - 1;
  }

  // Largest |value| of a generic table op's result on the sample; a non-finite one means the
  // op needs a domain (kDomains).
  static double sample_max(const Tensor& r, OpId op) {
    double m = 0;
    for (double x : r.detach().to(kFloat64).contiguous().to_vector<double>()) {
      if (!std::isfinite(x))
        FAIL("table op '" << op_name(op) << "' gave " << x << " on inputs in its domain: add it "
                          << "to kDomains in tests/jit/test_differential.cpp with the domain it "
                          << "needs (or to kSkipped, saying why)");
      m = std::max(m, std::abs(x));
    }
    return m;
  }

  void table_op(Instr& in, OpKind kind) {
    const std::vector<OpId>& ops = table_ops(kind);
    in.table_op = ops[pick(0, static_cast<int>(ops.size()) - 1)];
    in.op = kind == OpKind::Unary ? Op::TableUnary : Op::TableBinary;
    if (kind == OpKind::Binary) in.b = partner(in.a);
    in.text = std::string(op_name(in.table_op)) + "(" + name(in.a) +
              (kind == OpKind::Binary ? ", " + name(in.b) : std::string()) +
              ")  [dispatch, operands mapped into the op's domain]";
    // The operands are bounded (their domains), so the result is too; four times the sample's
    // largest value as its bound, the tanh cap in emit() keeping later values finite.
    const double bound = 4 * sample_max(apply_instr(in, vals_, targets_, *world_), in.table_op);
    ++drawn()[std::string(op_name(in.table_op))];
    emit(in, std::max(bound, 1.0));
  }

  // layer_norm over the last one or two dims of a (no affine part).
  void layer_norm(Instr& in) {
    const int a = in.a;
    const Shape& sa = shape(a);
    const int rank = static_cast<int>(sa.size());
    if (rank == 0) return;
    in.op = Op::LayerNorm;
    in.i0 = pick(1, std::min(rank, 2));
    // An eps of the data's scale keeps a row of (nearly) equal values well conditioned
    // against the float64 run.
    in.s = coin(0.5) ? 0.1 : 1.0;
    int64_t n = 1;
    for (int d = rank - static_cast<int>(in.i0); d < rank; ++d) n *= sa[d];
    std::ostringstream os;
    os << "layer_norm(" << name(a) << ", last " << in.i0 << " dims, eps " << in.s << ")";
    in.text = os.str();
    ++drawn()["layer_norm"];
    return emit(in, std::sqrt(static_cast<double>(n)));
  }

  // multi_norm of a and a partner, p 1, 2 or inf.
  void multi_norm(Instr& in) {
    const int a = in.a;
    const Shape& sa = shape(a);
    const double ba = bound_[a];
    in.op = Op::MultiNorm;
    in.b = partner(a);
    const int k = pick(0, 2);
    in.s = k == 0 ? 1.0 : k == 1 ? 2.0 : INFINITY;
    const double na = static_cast<double>(numel_of(sa)),
                 nb = static_cast<double>(numel_of(shape(in.b)));
    const double bb = bound_[in.b];
    std::ostringstream os;
    os << "multi_norm({" << name(a) << ", " << name(in.b) << "}, " << in.s << ")";
    in.text = os.str();
    ++drawn()["multi_norm"];
    return emit(in, k == 0   ? std::max(ba * na, bb * nb)
                    : k == 1 ? std::max(ba * std::sqrt(na), bb * std::sqrt(nb))
                             : std::max(ba, bb));
  }

  void cross_entropy(Instr& in) {
    if (p_.targets.size() >= 2) return;
    if (shape(in.a).size() != 2) {  // logits: any 2-D value, [N, C]
      std::vector<int> c;
      for (int v = 0; v < static_cast<int>(vals_.size()); ++v)
        if (shape(v).size() == 2) c.push_back(v);
      if (c.empty()) return;
      in.a = c[pick(0, static_cast<int>(c.size()) - 1)];
    }
    const Shape& sa = shape(in.a);
    const int64_t n = sa[0], c = sa[1];
    TargetSpec t;
    t.n = n;
    t.classes = c;
    if (c >= 2 && coin(0.4)) t.ignore = pick(0, static_cast<int>(c) - 1);
    p_.targets.push_back(t);
    targets_.push_back(make_target(t, Device::cpu()));
    in.op = Op::CrossEntropy;
    in.target = static_cast<int>(p_.targets.size()) - 1;
    in.param = add_param(sa);
    in.i0 = t.ignore;
    in.s = coin(0.5) ? 0.0 : 0.1;
    in.i1 = pick(0, 2);
    static const char* kRed[] = {"mean", "sum", "none"};
    std::ostringstream os;
    os << "cross_entropy(" << name(in.a) << " + param" << in.param << ", target" << in.target
       << ", ignore_index " << t.ignore << ", label_smoothing " << in.s << ", reduction "
       << kRed[in.i1] << "), backward";
    in.text = os.str();
    // Per row at most log C + 2 max|logit| (logits: the value plus randn < 5).
    const double row = std::log(static_cast<double>(c)) + 2 * (bound_[in.a] + 5);
    ++drawn()["cross_entropy"];
    const int param = in.param;
    emit(in, in.i1 == 1 ? row * static_cast<double>(n) : row);
    Instr g;
    g.op = Op::ParamGrad;
    g.a = in.a;
    g.param = param;
    g.text = "grad(param" + std::to_string(param) + ")";
    emit(g, 2);  // |softmax - smoothed one-hot| <= 2 per element, per row of a sum
  }

  void sgd_step(Instr& in) {
    SgdSpec s;
    s.param = add_param(shape(in.a));
    s.momentum = coin(0.5) ? 0.0 : 0.9;
    s.nesterov = s.momentum > 0 && coin(0.3);
    s.weight_decay = coin(0.3) ? 0.01 : 0.0;
    p_.sgd.push_back(s);
    world_->opts.push_back(make_sgd(s, world_->params[s.param]));
    in.op = Op::SgdStep;
    in.param = s.param;
    in.sgd = static_cast<int>(p_.sgd.size()) - 1;
    in.text = "sgd" + std::to_string(in.sgd) + ".step() on sum(" + name(in.a) + " * param" +
              std::to_string(s.param) + "); 2 * param" + std::to_string(s.param);
    ++drawn()[s.momentum > 0 ? "sgd with momentum" : "sgd without momentum"];
    // 4 calls of steps of lr |grad| (grad: the value, plus weight decay), momentum summing up
    // to 1 / (1 - 0.9) of them, from randn < 5.
    const double step = s.lr * (bound_[in.a] + 1) * (s.momentum > 0 ? 10 : 1);
    emit(in, 2 * (5 + 4 * step));
  }

  std::mt19937_64 rng_;
  int last_a_ = -1, last_op_ = -1;
  Program p_;
  std::vector<Tensor> vals_;
  std::vector<double> bound_;
  std::vector<Tensor> targets_;   // samples of the program's targets (CPU)
  std::unique_ptr<World> world_;  // the samples' parameters and optimizers (CPU float32)
};

std::vector<double> host(const Tensor& t) {
  return t.detach().cpu().to(kFloat64).contiguous().to_vector<double>();
}

// A compiled result against the eager one, with the float64 run's result to tell how far float32
// rounding alone moves it (see check_calls).
void check_against_eager(const Tensor& got, const Tensor& want, const Tensor& exact) {
  REQUIRE(got.defined());
  REQUIRE(got.sizes() == want.sizes());
  CHECK(got.dtype() == want.dtype());
  CHECK(got.device() == want.device());
  const std::vector<double> g = host(got), w = host(want), e = host(exact);
  REQUIRE(e.size() == w.size());
  double rounding = 0;  // eager float32's largest error in this output
  for (size_t i = 0; i < w.size(); ++i) {
    if (!std::isfinite(w[i])) FAIL("the eager program produced a non-finite value");
    rounding = std::max(rounding, std::abs(w[i] - e[i]));
  }
  size_t bad = 0, worst = 0;
  double worst_ratio = -1;
  for (size_t i = 0; i < w.size(); ++i) {
    const double err = std::abs(g[i] - w[i]);
    const double tol = 1e-5 * std::abs(w[i]) + 1e-6 + 8 * rounding;
    if (!(err <= tol)) ++bad;
    const double ratio = std::isnan(err) ? INFINITY : err / tol;
    if (ratio > worst_ratio) worst_ratio = ratio, worst = i;
  }
  INFO(bad << " of " << w.size() << " elements differ; worst at " << worst << ": compiled "
           << (g.empty() ? 0 : g[worst]) << ", eager " << (w.empty() ? 0 : w[worst]) << ", float64 "
           << (e.empty() ? 0 : e[worst]));
  CHECK(bad == 0);
}

// Compares the compiled function's outputs with the eager program's for 4 calls, then the
// parameters and gradients each left; each runs on its own world (`exact`: float64 on the CPU),
// the compiled function on `compiled`, the one it was compiled over.
template <class F>
void check_calls(F& f, const Program& p, Device dev, const World& compiled, World& eager,
                 World& exact_world) {
  for (int call = 0; call < 4; ++call) {
    INFO("call " << call + 1);
    const std::vector<Tensor> in = make_inputs(p, dev);
    std::vector<Tensor> got;
    switch (in.size()) {
      case 1:
        got = f(in[0]);
        break;
      case 2:
        got = f(in[0], in[1]);
        break;
      case 3:
        got = f(in[0], in[1], in[2]);
        break;
      case 4:
        got = f(in[0], in[1], in[2], in[3]);
        break;
      default:
        REQUIRE(in.size() == 5);  // at most 3 float inputs and 2 targets
        got = f(in[0], in[1], in[2], in[3], in[4]);
        break;
    }
    const std::vector<Tensor> want = interpret(p, in, eager);
    // The same program in float64 on the CPU: how far float32 rounding alone moves an output.
    // A fused reduction sums in another order than eager (chunks of rows, then the partials),
    // so where rounding matters (cancellation after a long sum) the compiled result may differ
    // from eager by about as much as eager differs from float64; beyond that, compiled and
    // eager agree to 1e-5 relative + 1e-6 absolute.
    std::vector<Tensor> in64;
    for (int i = 0; i < p.num_inputs(); ++i) in64.push_back(to_float64(in[i], p.input_layout[i]));
    for (size_t t = p.num_inputs(); t < in.size(); ++t) in64.push_back(in[t].cpu());
    const std::vector<Tensor> exact = interpret(p, in64, exact_world);
    REQUIRE(got.size() == want.size());
    for (size_t o = 0; o < want.size(); ++o) {
      INFO("output " << o << " (%" << p.outputs[o] << ")");
      check_against_eager(got[o], want[o], exact[o]);
    }
  }
  // The state the calls left: every parameter (SGD's updates, whether returned or not) and
  // every gradient (what backward or zero_grad left in .grad), as eager left them.
  for (size_t k = 0; k < p.param_init.size(); ++k) {
    INFO("param" << k << " after the 4 calls");
    check_against_eager(compiled.params[k].detach(), eager.params[k].detach(),
                        exact_world.params[k].detach());
    const Tensor gc = compiled.params[k].grad(), ge = eager.params[k].grad();
    CHECK(gc.defined() == ge.defined());
    if (gc.defined() && ge.defined()) {
      INFO("its gradient");
      check_against_eager(gc, ge, exact_world.params[k].grad());
    }
  }
  const jit::CompileStats& s = f.stats();
  INFO("traces " << s.traces << ", executables " << s.executables << ", replays " << s.replays
                 << ", eager calls " << s.eager_calls << ", graph breaks " << s.graph_breaks);
  // A momentum SGD step creates its buffers on the first call, so the two agreeing traces a
  // signature needs are calls 2-3 (jit/compile.cpp): one replay; otherwise calls 1-2, two.
  const bool creates_state =
      std::any_of(p.sgd.begin(), p.sgd.end(), [](const SgdSpec& sg) { return sg.momentum > 0; });
  CHECK(s.graph_breaks == 0);
  CHECK(s.executables == 1);
  CHECK(s.traces == (creates_state ? 3 : 2));
  CHECK(s.replays == (creates_state ? 1 : 2));
}

void run_seed(uint64_t seed, Device dev) {
  Program p = ProgramGen(seed).make();
  INFO("seed " << seed << " on " << dev.str() << "\n" << p.str());
  manual_seed(seed);  // the inputs of the 4 calls
  const std::unique_ptr<World> compiled = make_world(p, dev, kFloat32);
  const std::unique_ptr<World> eager = make_world(p, dev, kFloat32);
  const std::unique_ptr<World> exact = make_world(p, Device::cpu(), kFloat64);
  auto f = jit::compile([&p, &compiled](const auto&... xs) {
    return interpret(p, std::vector<Tensor>{xs...}, *compiled);
  });
  check_calls(f, p, dev, *compiled, *eager, *exact);
}

}  // namespace

TEST_CASE("jit: random table-op programs compiled match eager on the CPU", "[jit]") {
  drawn().clear();
  for (uint64_t seed = 1; seed <= 200; ++seed) run_seed(seed, Device::cpu());
  // Every generic table op and every special instruction was drawn: an op the draw cannot
  // reach (or that a change here stopped drawing) is untested, which must not pass silently.
  std::vector<std::string> want = {"gelu exact", "gelu tanh",  "cross_entropy", "sgd with momentum",
                                   "sgd without momentum", "layer_norm", "multi_norm"};
  for (OpKind k : {OpKind::Unary, OpKind::Binary})
    for (OpId op : table_ops(k)) want.emplace_back(op_name(op));
  for (const std::string& w : want) {
    INFO(w << " drawn " << drawn()[w] << " times in 200 programs");
    CHECK(drawn()[w] > 0);
  }
}

TEST_CASE("jit: random table-op programs compiled match eager on CUDA", "[jit][cuda]") {
  EMBER_REQUIRE_CUDA();
  for (uint64_t seed = 1001; seed <= 1050; ++seed) run_seed(seed, Device::cuda(0));
}
