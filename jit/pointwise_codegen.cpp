// Source generation for fused pointwise groups (see pointwise_codegen.h). The kernel is the
// group's members written out as one `body` over registers, plus two drivers from
// kernels/cuda/fused_pointwise.cuh: an element loop for any layout and, where the innermost dim
// allows, a vector loop moving up to 16 bytes per operand access.
//
// Equality with eager, bit for bit: each member is applied exactly as the eager kernel applies
// it (ComputeOp, or CastOp / WhereOp for the op table's Cast and Select rules: convert to the
// compute type, the functor, convert to the storage type) and its result is held in its storage
// type, so a float16 intermediate is rounded to float16 as eager rounds it when storing; a
// float/double/integer result another member reads passes through fp::keep, which stops FMA
// contraction (and, for integers, overflow reasoning) across members.
#include "jit/pointwise_codegen.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "core/error.h"

namespace ember::jit {

const char* cuda_storage_type(DType t) {
  switch (t) {
    case DType::Float32:
      return "float";
    case DType::Float64:
      return "double";
    case DType::Float16:
      return "__half";
    case DType::BFloat16:
      return "__nv_bfloat16";
    case DType::Int32:
      return "int32_t";
    case DType::Int64:
      return "int64_t";
    case DType::Bool:
      return "bool";
  }
  return "?";
}

namespace {

// Concatenation through a stream (GCC 12 warns falsely on `"x" + std::to_string(n)`).
template <class... A>
std::string str(const A&... a) {
  std::ostringstream os;
  (os << ... << a);
  return os.str();
}

// The eager kernels' compute type (ew::compute_t): 16-bit floats compute in float.
const char* compute_type(DType t) {
  return t == DType::Float16 || t == DType::BFloat16 ? "float" : cuda_storage_type(t);
}

// The functor expression of an elementwise op with its attributes, as make_functor builds it
// for the eager kernels (generated from the op table, like make_functor itself).
std::string functor_of(const Node& n) { return pointwise_functor_source(n.op, n.attrs); }

bool broadcasts_to(const Shape& s, const Shape& target) {
  if (s.size() > target.size()) return false;
  const int off = target.size() - s.size();
  for (int i = 0; i < s.size(); ++i)
    if (s[i] != 1 && s[i] != target[i + off]) return false;
  return true;
}

bool is_member_output(const Graph& g, const Group& grp, ValueId v) {
  for (int32_t ni : grp.nodes)
    if (g.nodes[ni].out == v) return true;
  return false;
}

// The cats that end the group (a GRU's gate gradients go into two: the input's and the hidden
// state's), in member order; empty when the group ends otherwise.
std::vector<const Node*> trailing_cats(const Graph& g, const Group& grp) {
  size_t k = grp.nodes.size();
  while (k > 0 && g.nodes[grp.nodes[k - 1]].op == OpId::cat) --k;
  std::vector<const Node*> cats;
  for (size_t j = k; j < grp.nodes.size(); ++j) cats.push_back(&g.nodes[grp.nodes[j]]);
  return cats;
}

const Node* cat_of(const std::vector<const Node*>& cats, ValueId out) {
  for (const Node* c : cats)
    if (c->out == out) return c;
  return nullptr;
}

// The cat's dim (recorded wrapped: core/ops.cpp).
int cat_dim(const Node& cat) { return static_cast<int>(cat.attrs.dim); }

// Whether the dtypes of `n` are a combination the eager kernel accepts (pointwise.cu).
bool dtypes_ok(const Graph& g, const Node& n, std::string& why) {
  const OpInfo& info = op_info(n.op);
  const DType out = g.values[n.out].dtype;
  auto in = [&](size_t i) { return g.values[n.inputs[i]].dtype; };
  const std::string op(info.name);
  if (info.rule == OutRule::Cast) {
    if (n.inputs.size() == 1) return true;
    why = str(op, " with ", n.inputs.size(), " inputs");
    return false;
  }
  if (info.rule == OutRule::Select) {
    if (n.inputs.size() == 3 && in(0) == kBool && in(1) == in(2) && out == in(1) &&
        in_set(info.dtypes, out))
      return true;
    why = op + " over unexpected dtypes";
    return false;
  }
  const size_t arity = info.kind == OpKind::Unary ? 1 : info.kind == OpKind::Binary ? 2 : 0;
  if (arity == 0 || n.inputs.size() != arity) {
    why = op + ": unexpected arity";
    return false;
  }
  const DType t = in(0);
  for (size_t i = 1; i < arity; ++i)
    if (in(i) != t) {
      why = op + ": inputs of different dtypes";
      return false;
    }
  if (!in_set(info.dtypes, t)) {
    why = op + ": dtype " + std::string(dtype_name(t)) + " is not supported";
    return false;
  }
  if (out != (info.rule == OutRule::ToBool ? kBool : t)) {
    why = op + ": unexpected output dtype " + std::string(dtype_name(out));
    return false;
  }
  return true;
}

// The iteration space after dropping size-1 dims and merging dims every operand walks
// contiguously, innermost dim first; strides in elements per operand.
struct Space {
  std::vector<int64_t> sizes;
  std::vector<std::vector<int64_t>> strides;  // [operand][dim]
};

Space coalesce(const Shape& shape, const std::vector<Strides>& op_strides) {
  Space s;
  s.strides.resize(op_strides.size());
  if (numel_of(shape) == 0) return s;  // nothing runs; no division by a zero size
  for (int d = shape.size() - 1; d >= 0; --d) {
    if (shape[d] == 1) continue;
    if (!s.sizes.empty()) {
      const size_t t = s.sizes.size() - 1;
      bool merge = true;
      for (size_t k = 0; k < op_strides.size() && merge; ++k)
        merge = op_strides[k][d] == s.strides[k][t] * s.sizes[t];
      if (merge) {
        s.sizes[t] *= shape[d];
        continue;
      }
    }
    s.sizes.push_back(shape[d]);
    for (size_t k = 0; k < op_strides.size(); ++k) s.strides[k].push_back(op_strides[k][d]);
  }
  return s;
}

class Writer {
 public:
  Writer(const Graph& g, const Group& grp) : g_(g), grp_(grp) {}

  FusedPointwiseKernel run() {
    collect_operands();
    plan_space();
    FusedPointwiseKernel k;
    k.numel = numel_;
    k.vec = vec_;
    k.words = static_cast<int32_t>(ops_.size());
    for (const Op& o : ops_) k.operands.push_back(o.info);
    k.summary = summary();
    std::ostringstream body;
    write_body(body);
    k.body = body.str();
    k.source = source();
    return k;
  }

 private:
  struct Op {
    FusedOperand info;
    DType dtype = kFloat32;
    std::string param;          // its name in body(): x<k> for inputs, y<k> for outputs
    ValueId source = kNoValue;  // an output: the member result it stores
    Strides strides;            // an output: where its elements go
  };

  void collect_operands() {
    const Value& first = g_.values[g_.nodes[grp_.nodes.front()].out];
    shape_ = first.shape;
    numel_ = numel_of(shape_);
    std::vector<ValueId> inputs, scalars;
    for (int32_t ni : grp_.nodes)
      for (ValueId in : g_.nodes[ni].inputs) {
        if (is_member_output(g_, grp_, in)) continue;
        std::vector<ValueId>& list = g_.values[in].device.is_cpu() ? scalars : inputs;
        if (std::find(list.begin(), list.end(), in) == list.end()) list.push_back(in);
      }
    auto add = [&](ValueId v, bool output, bool scalar) {
      Op o;
      o.info.value = v;
      o.info.output = output;
      o.info.scalar = scalar;
      o.info.slot = static_cast<int32_t>(ops_.size());
      o.dtype = g_.values[v].dtype;
      o.info.elem_size = element_size(o.dtype);
      ops_.push_back(std::move(o));
    };
    const std::vector<const Node*> cats = trailing_cats(g_, grp_);
    for (ValueId o : grp_.outputs) {
      const Node* cat = cat_of(cats, o);
      if (!cat) {
        add(o, true, false);
        ops_.back().source = o;
        ops_.back().strides = g_.values[o].strides;
        continue;
      }
      // Each piece of the cat: an output into the cat's result, from the piece's start on.
      const Value& whole = g_.values[o];
      const int d = cat_dim(*cat);
      int64_t at = 0;
      for (ValueId piece : cat->inputs) {
        add(o, true, false);
        ops_.back().source = piece;
        ops_.back().strides = whole.strides;
        ops_.back().info.elem_offset = at * whole.strides[d];
        at += g_.values[piece].shape[d];
      }
    }
    for (ValueId v : inputs) add(v, false, false);
    for (ValueId v : scalars) add(v, false, true);
    int32_t nx = 0, ny = 0;
    for (Op& o : ops_) o.param = o.info.output ? str("y", ny++) : str("x", nx++);
    for (const Op& o : ops_)
      if (!o.info.scalar) ++pointers_;
  }

  void plan_space() {
    std::vector<Strides> st;
    for (int32_t k = 0; k < pointers_; ++k) {
      const Value& v = g_.values[ops_[k].info.value];
      st.push_back(ops_[k].info.output ? ops_[k].strides
                                       : broadcast_strides(v.shape, v.strides, shape_));
    }
    space_ = coalesce(shape_, st);
    // 32-bit indexing when the linear index and every offset fit (and no stride is negative).
    bool small = numel_ <= INT32_MAX;
    for (int32_t k = 0; k < pointers_ && small; ++k) {
      int64_t reach = 0;
      for (size_t d = 0; d < space_.sizes.size(); ++d) {
        const int64_t s = space_.strides[k][d];
        small = small && s >= 0;
        reach += (space_.sizes[d] - 1) * std::max<int64_t>(s, 0);
      }
      small = small && reach <= INT32_MAX;
    }
    index32_ = small;
    // The vector kernel: V consecutive elements of the innermost dim per work item, every operand
    // contiguous along it moved as one access of V * size bytes (at most 16).
    if (space_.sizes.empty()) return;
    int64_t widest = 0;
    for (int32_t k = 0; k < pointers_; ++k)
      if (space_.strides[k][0] == 1) widest = std::max(widest, ops_[k].info.elem_size);
    if (widest == 0) return;
    for (int64_t v = 16 / widest; v >= 2; v /= 2) {
      bool ok = space_.sizes[0] % v == 0;
      for (int32_t k = 0; k < pointers_ && ok; ++k) {
        if (space_.strides[k][0] != 1) continue;
        for (size_t d = 1; d < space_.sizes.size() && ok; ++d) ok = space_.strides[k][d] % v == 0;
      }
      if (!ok) continue;
      vec_ = static_cast<int32_t>(v);
      for (int32_t k = 0; k < pointers_; ++k)
        if (space_.strides[k][0] == 1) ops_[k].info.vec_align = v * ops_[k].info.elem_size;
      return;
    }
  }

  std::string lit(int64_t v) const { return std::to_string(v) + (index32_ ? "u" : "ll"); }

  // Lines defining c0.. (the coordinates, innermost first) of linear index `i`.
  void coordinates(std::ostream& os, const char* i, const char* indent) const {
    const size_t nd = space_.sizes.size();
    std::string q = i;
    for (size_t d = 0; d < nd; ++d) {
      if (d + 1 == nd) {
        os << indent << "const Index c" << d << " = " << q << ";\n";
        break;
      }
      os << indent << "const Index c" << d << " = " << q << " % " << lit(space_.sizes[d]) << ";\n";
      os << indent << "const Index q" << d << " = " << q << " / " << lit(space_.sizes[d]) << ";\n";
      q = str("q", d);
    }
  }

  // The element offset of pointer operand k at coordinates c0..
  std::string offset(int32_t k) const {
    std::string e;
    for (size_t d = 0; d < space_.sizes.size(); ++d) {
      const int64_t s = space_.strides[k][d];
      if (s == 0) continue;
      if (!e.empty()) e += " + ";
      e += str("c", d);
      if (s != 1) e += s < 0 ? str(" * static_cast<Index>(", lit(s), ")") : str(" * ", lit(s));
    }
    return e.empty() ? "0" : e;
  }

  std::string summary() const {
    std::ostringstream os;
    for (size_t i = 0; i < grp_.nodes.size(); ++i)
      os << (i ? ", " : "") << op_name(g_.nodes[grp_.nodes[i]].op);
    int64_t outs = 0;
    for (const Op& o : ops_) outs += o.info.output ? 1 : 0;
    os << " over " << shape_.str() << " (" << static_cast<int64_t>(ops_.size()) - outs << " in, "
       << outs << " out";
    if (vec_) os << ", vec " << vec_;
    os << ")";
    return os.str();
  }

  void write_body(std::ostream& os) const {
    os << "__device__ __forceinline__ void body(";
    bool first = true;
    for (const Op& o : ops_) {
      if (o.info.output) continue;
      os << (first ? "" : ", ") << cuda_storage_type(o.dtype) << " " << o.param;
      first = false;
    }
    for (const Op& o : ops_) {
      if (!o.info.output) continue;
      os << (first ? "" : ", ") << cuda_storage_type(o.dtype) << "& " << o.param;
      first = false;
    }
    os << ") {\n";
    std::vector<ValueId> read_inside;
    for (int32_t ni : grp_.nodes)
      for (ValueId in : g_.nodes[ni].inputs) read_inside.push_back(in);
    // Intermediates are named by their member's position in the group, never by graph value
    // ids: groups that compute the same thing (a model's repeated layers) then emit the same
    // source and share one compile, one cache entry and one loaded module.
    auto local = [&](ValueId v) {
      for (size_t i = 0; i < grp_.nodes.size(); ++i)
        if (g_.nodes[grp_.nodes[i]].out == v) return str("t", i);
      EMBER_FAIL("pointwise codegen: value ", v, " is neither an operand nor a member's output");
    };
    auto name = [&](ValueId v) {
      for (const Op& o : ops_)
        if (!o.info.output && o.info.value == v) return o.param;
      return local(v);
    };
    for (int32_t ni : grp_.nodes) {
      const Node& n = g_.nodes[ni];
      if (n.op == OpId::cat) continue;  // the trailing cat: its pieces are stored in place
      const DType out = g_.values[n.out].dtype;
      std::string args;
      for (size_t i = 0; i < n.inputs.size(); ++i) args += (i ? ", " : "") + name(n.inputs[i]);
      std::string expr;
      const OutRule rule = op_info(n.op).rule;
      if (rule == OutRule::Cast) {
        expr = std::string("ew::CastOp<") + cuda_storage_type(out) + ">{}(" + args + ")";
      } else if (rule == OutRule::Select) {
        expr = std::string("ew::WhereOp<") + compute_type(out) + ", " + cuda_storage_type(out) +
               ">{}(" + args + ")";
      } else {
        const DType in = g_.values[n.inputs[0]].dtype;
        const std::string f = functor_of(n);
        expr = "ew::ComputeOp<" + f.substr(0, f.find('{')) + ", " + compute_type(in) + ", " +
               cuda_storage_type(out) + ">{" + f + "}(" + args + ")";
      }
      const bool kept = out == kFloat32 || out == kFloat64 || out == kInt32 || out == kInt64;
      if (kept && std::count(read_inside.begin(), read_inside.end(), n.out) > 0)
        expr = "fp::keep(" + expr + ")";
      os << "  const " << cuda_storage_type(out) << " " << local(n.out) << " = " << expr << ";  // "
         << op_name(n.op) << "\n";
    }
    for (const Op& o : ops_)
      if (o.info.output) os << "  " << o.param << " = " << local(o.source) << ";\n";
    os << "}\n\n";
  }

  std::string scalar_expr(const Op& o) const {
    return std::string("ew::FromBits<") + cuda_storage_type(o.dtype) + ">::get(a.s[" +
           std::to_string(o.info.slot - pointers_) + "])";
  }

  void write_element(std::ostream& os) const {
    os << "// One element at linear index i.\n"
          "struct Element {\n"
          "  const Args& a;\n"
          "  __device__ __forceinline__ void operator()(Index i) const {\n";
    coordinates(os, "i", "    ");
    for (int32_t k = 0; k < pointers_; ++k) {
      const Op& o = ops_[k];
      if (o.info.output) os << "    " << cuda_storage_type(o.dtype) << " " << o.param << ";\n";
    }
    os << "    body(";
    bool first = true;
    for (const Op& o : ops_) {
      if (o.info.output) continue;
      os << (first ? "" : ",\n         ");
      first = false;
      if (o.info.scalar)
        os << scalar_expr(o);
      else
        os << "fp::load<" << cuda_storage_type(o.dtype) << ">(a.p[" << o.info.slot << "], "
           << offset(o.info.slot) << ")";
    }
    for (const Op& o : ops_)
      if (o.info.output) os << (first ? "" : ", ") << o.param, first = false;
    os << ");\n";
    for (const Op& o : ops_)
      if (o.info.output)
        os << "    fp::store<" << cuda_storage_type(o.dtype) << ">(a.p[" << o.info.slot << "], "
           << offset(o.info.slot) << ", " << o.param << ");\n";
    os << "  }\n};\n\n";
  }

  void write_vector(std::ostream& os) const {
    const std::string v = std::to_string(vec_);
    os << "// " << v << " consecutive elements of the innermost dim, from linear index " << v
       << " * k.\n"
          "struct Vector {\n"
          "  const Args& a;\n"
          "  __device__ __forceinline__ void operator()(Index k) const {\n"
          "    const Index i = k * "
       << lit(vec_) << ";\n";
    coordinates(os, "i", "    ");
    for (const Op& o : ops_) {
      const char* t = cuda_storage_type(o.dtype);
      os << "    " << t << " " << o.param << "[" << v << "];\n";
      if (o.info.output) continue;
      if (o.info.scalar) {
        os << "    fp::fill<" << v << ">(" << o.param << ", " << scalar_expr(o) << ");\n";
        continue;
      }
      const int32_t k = o.info.slot;
      const int64_t inner = space_.strides[k][0];
      const std::string p = str("a.p[", k, "]");
      if (inner == 1)
        os << "    fp::load_vec<" << v << ">(" << o.param << ", " << p << ", " << offset(k)
           << ");\n";
      else if (inner == 0)
        os << "    fp::fill<" << v << ">(" << o.param << ", fp::load<" << t << ">(" << p << ", "
           << offset(k) << "));\n";
      else
        os << "    fp::load_strided<" << v << ">(" << o.param << ", " << p << ", " << offset(k)
           << ", static_cast<Index>(" << lit(inner) << "));\n";
    }
    os << "#pragma unroll\n    for (int j = 0; j < " << v << "; ++j) body(";
    bool first = true;
    for (const Op& o : ops_)
      if (!o.info.output) os << (first ? "" : ", ") << o.param << "[j]", first = false;
    for (const Op& o : ops_)
      if (o.info.output) os << (first ? "" : ", ") << o.param << "[j]", first = false;
    os << ");\n";
    for (const Op& o : ops_) {
      if (!o.info.output) continue;
      const int32_t k = o.info.slot;
      const std::string p = str("a.p[", k, "]");
      if (space_.strides[k][0] == 1)
        os << "    fp::store_vec<" << v << ">(" << p << ", " << offset(k) << ", " << o.param
           << ");\n";
      else
        os << "    fp::store_strided<" << v << ">(" << p << ", " << offset(k)
           << ", static_cast<Index>(" << lit(space_.strides[k][0]) << "), " << o.param << ");\n";
    }
    os << "  }\n};\n\n";
  }

  std::string source() const {
    std::ostringstream os;
    os << "// Ember fused pointwise kernel (codegen v" << kPointwiseCodegenVersion
       << "): " << summary() << "\n"
       << "#include \"kernels/cuda/fused_pointwise.cuh\"\n\n"
          "namespace ember_fused {\n"
          "namespace fp = ::ember::kernels::cuda::fused;\n"
          "namespace ew = ::ember::kernels::cuda::elementwise;\n"
          "namespace pw = ::ember::pw;\n\n"
       << "typedef " << (index32_ ? "unsigned int" : "long long") << " Index;\n"
       << "constexpr Index kNumel = " << lit(numel_) << ";\n"
       << "// Pointers of the outputs and inputs, then the inline scalars' bits.\n"
          "struct Args {\n"
          "  char* p["
       << pointers_ << "];\n";
    if (static_cast<int32_t>(ops_.size()) > pointers_)
      os << "  unsigned long long s[" << ops_.size() - pointers_ << "];\n";
    os << "};\n\n";
    os << "// The members, in the eager kernels' compute types; values stay in registers.\n";
    write_body(os);
    write_element(os);
    if (vec_) write_vector(os);
    os << "}  // namespace ember_fused\n\n"
          "extern \"C\" __global__ void __launch_bounds__(ember_fused::fp::kThreads)\n"
       << FusedPointwiseKernel::kElementKernel
       << "(const ember_fused::Args a) {\n"
          "  ember_fused::fp::grid_stride(ember_fused::kNumel, ember_fused::Element{a});\n"
          "}\n";
    if (vec_)
      os << "\nextern \"C\" __global__ void __launch_bounds__(ember_fused::fp::kThreads)\n"
         << FusedPointwiseKernel::kVectorKernel
         << "(const ember_fused::Args a) {\n"
            "  ember_fused::fp::grid_stride(ember_fused::Index(ember_fused::kNumel / "
         << lit(vec_) << "), ember_fused::Vector{a});\n}\n";
    return os.str();
  }

  const Graph& g_;
  const Group& grp_;
  Shape shape_;
  int64_t numel_ = 0;
  std::vector<Op> ops_;
  int32_t pointers_ = 0;
  Space space_;
  bool index32_ = true;
  int32_t vec_ = 0;
};

}  // namespace

bool pointwise_codegen_supports(const Graph& g, const Group& group, std::string* why) {
  std::string reason;
  auto fail = [&](std::string r) {
    if (why) *why = std::move(r);
    return false;
  };
  if (group.kind != GroupKind::Pointwise) return fail("not a pointwise group");
  if (group.nodes.empty() || group.outputs.empty()) return fail("the group computes nothing");
  const Node& head = g.nodes[group.nodes.front()];
  if (head.out == kNoValue) return fail("a member defines no value");
  const Value& first = g.values[head.out];
  const Device dev = first.device;
  const Shape& shape = first.shape;
  if (!dev.is_cuda()) return fail("the group computes on " + dev.str());
  const std::vector<const Node*> cats = trailing_cats(g, group);
  if (cats.size() >= group.nodes.size()) return fail("cats alone");
  for (const Node* cat : cats) {
    if (cat->inplace || cat->out == kNoValue || cat->inputs.empty())
      return fail("a cat that defines no new value");
    const Value& whole = g.values[cat->out];
    const int d = cat_dim(*cat);
    if (whole.device != dev || whole.shape.size() != shape.size() || d < 0 || d >= shape.size())
      return fail("a cat of another device or rank");
    for (size_t k = 0; k < cat->inputs.size(); ++k) {
      const ValueId piece = cat->inputs[k];
      const Value& pv = g.values[piece];
      if (!is_member_output(g, group, piece) || cat_of(cats, piece))
        return fail("a cat of a value the group does not compute");
      if (std::find(cat->inputs.begin(), cat->inputs.begin() + static_cast<int64_t>(k), piece) !=
          cat->inputs.begin() + static_cast<int64_t>(k))
        return fail("a cat reading one piece twice");
      if (pv.shape != shape || pv.dtype != whole.dtype)
        return fail("a cat piece " + value_type_str(pv) + " differs from the group's " +
                    value_type_str(first) + " or the cat's dtype");
      if (std::find(group.outputs.begin(), group.outputs.end(), piece) != group.outputs.end())
        return fail("a cat piece needed after the group");
    }
  }
  for (int32_t ni : group.nodes) {
    const Node& n = g.nodes[ni];
    if (n.op == OpId::cat && cat_of(cats, n.out)) continue;
    const OpKind kind = op_info(n.op).kind;
    const std::string op(op_name(n.op));
    if (kind != OpKind::Unary && kind != OpKind::Binary && kind != OpKind::Ternary)
      return fail(op + " is not an elementwise op with inputs");
    if (n.inplace || n.out == kNoValue) return fail(op + " writes in place");
    const OutRule rule = op_info(n.op).rule;
    if (rule != OutRule::Cast && rule != OutRule::Select && functor_of(n).empty())
      return fail(op + " has no known functor");
    const Value& out = g.values[n.out];
    if (out.shape != shape || out.device != dev)
      return fail(op + ": output " + value_type_str(out) + " differs from the group's " +
                  value_type_str(first));
    if (!dtypes_ok(g, n, reason)) return fail(reason);
    for (ValueId in : n.inputs) {
      if (is_member_output(g, group, in)) continue;
      const Value& v = g.values[in];
      if (v.device.is_cpu()) {
        if (!v.shape.empty()) return fail(op + " reads a host tensor that is not 0-dim");
        continue;
      }
      if (v.device != dev) return fail(op + " reads a tensor on " + v.device.str());
      if (!broadcasts_to(v.shape, shape))
        return fail(op + ": input " + value_type_str(v) + " does not broadcast to the group");
      if (is_member_output(g, group, v.root))
        return fail(op + " reads a view of another member's result");
    }
  }
  for (ValueId o : group.outputs)
    if (!is_member_output(g, group, o)) return fail("an output is not a member's result");
  return true;
}

FusedPointwiseKernel generate_pointwise_kernel(const Graph& g, const Group& group) {
  std::string why;
  EMBER_CHECK(pointwise_codegen_supports(g, group, &why), "jit pointwise codegen: ", why);
  return Writer(g, group).run();
}

}  // namespace ember::jit
