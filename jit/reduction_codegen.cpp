// Source generation for fused Reduction groups (see reduction_codegen.h). The pointwise members
// come from the pointwise generator (its `body`, over a pseudo Pointwise group whose outputs are
// the members' results the group returns plus the reduced value); this file adds the walk over
// (output, reduced position) pairs, the per-operand indexing and the reduction's types, around
// the driver in kernels/cuda/fused_reduce.cuh.
#include "jit/reduction_codegen.h"

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <sstream>

#include "core/error.h"
#include "kernels/cuda/small_gemm.h"
#include "kernels/reduce_grid.h"

namespace ember::jit {
static_assert(kReductionMaxProductK == kernels::cuda::kSmallGemmMaxK,
              "a fused product must be one the eager SmallK kernels compute");
namespace {

template <class... A>
std::string str(const A&... a) {
  std::ostringstream os;
  (os << ... << a);
  return os.str();
}

bool is_reduction_op(OpId op) {
  return op == OpId::sum || op == OpId::mean || op == OpId::amax || op == OpId::amin;
}

// The eager CUDA reduction's accumulator for `op` over `in` (kernels/cuda/reduce.cu), or null
// when eager has no kernel for the combination.
const char* accumulate_type(OpId op, DType in) {
  const bool f16 = in == DType::Float16 || in == DType::BFloat16;
  if (in == DType::Float32 || f16) return "float";
  if (in == DType::Float64) return "double";
  if (op == OpId::sum) return "int64_t";  // integers and bools sum into int64
  if (op == OpId::mean) return nullptr;
  if (in == DType::Int32) return "int32_t";
  if (in == DType::Int64) return "int64_t";
  return nullptr;  // amax/amin of bool
}

int64_t accumulate_bytes(const char* acc) {
  const std::string a(acc);
  return a == "float" || a == "int32_t" ? 4 : 8;
}

const Node& reduction_node(const Graph& g, const Group& grp) { return g.nodes[grp.nodes.back()]; }

// A small-K product member (fuse.cpp absorbs one into the group that alone reads its result),
// anywhere among the members: not part of body(); its result reaches body() as a parameter
// computed by fp::small_k_dot from operands outside the group.
bool is_product_member(const Node& n) { return n.op == OpId::mm; }

// The members before the reduction as a Pointwise group whose outputs are the members' results
// the group returns and the reduced value.
Group pointwise_part(const Graph& g, const Group& grp) {
  const Node& red = reduction_node(g, grp);
  Group p;
  p.kind = GroupKind::Pointwise;
  for (size_t i = 0; i + 1 < grp.nodes.size(); ++i)
    if (!is_product_member(g.nodes[grp.nodes[i]])) p.nodes.push_back(grp.nodes[i]);
  for (ValueId o : grp.outputs)
    if (o != red.out) p.outputs.push_back(o);
  if (std::find(p.outputs.begin(), p.outputs.end(), red.inputs[0]) == p.outputs.end())
    p.outputs.push_back(red.inputs[0]);
  for (int32_t ni : p.nodes)
    for (ValueId in : g.nodes[ni].inputs) {
      bool member = false;
      for (int32_t m : p.nodes) member = member || g.nodes[m].out == in;
      if (!member && std::find(p.inputs.begin(), p.inputs.end(), in) == p.inputs.end())
        p.inputs.push_back(in);
    }
  return p;
}

// The reduced dims of `red` over an input of rank `rank`, sorted, as flags.
std::vector<bool> reduced_flags(const Node& red, int rank) {
  std::vector<bool> r(static_cast<size_t>(rank), red.attrs.dims.empty());
  for (int64_t d : red.attrs.dims)
    r[static_cast<size_t>(wrap_dim(d, rank, "jit reduction"))] = true;
  return r;
}

}  // namespace

std::string small_k_product_problem(const Graph& g, const Node& n) {
  if (n.op != OpId::mm || n.inplace || n.out == kNoValue || n.inputs.size() != 2)
    return "not an out-of-place mm";
  const Value& a = g.values[n.inputs[0]];
  const Value& b = g.values[n.inputs[1]];
  const Value& o = g.values[n.out];
  if (a.shape.size() != 2 || b.shape.size() != 2) return "operands are not matrices";
  if (a.shape[1] > kReductionMaxProductK || a.shape[1] < 1)
    return "K = " + std::to_string(a.shape[1]) + " is not in 1.." +
           std::to_string(kReductionMaxProductK);
  if (a.dtype != o.dtype || b.dtype != o.dtype || (o.dtype != kFloat32 && o.dtype != kFloat64))
    return "not float32 or float64";
  if (a.device != o.device || b.device != o.device || !o.device.is_cuda())
    return "operands on another device";
  for (const Value* v : {&a, &b})
    for (int64_t st : v->strides)
      if (st < 0) return "a negative stride";
  return {};
}

namespace {

// Why a product member of `group` cannot be generated, or empty: a small-K product
// (small_k_product_problem) whose [M,N] result is the group's shape and not a group output (it
// is never stored), of operands from outside the group.
std::string product_member_problem(const Graph& g, const Group& group, const Node& n,
                                   const Shape& shape) {
  std::string bad = small_k_product_problem(g, n);
  if (!bad.empty()) return bad;
  const Value& o = g.values[n.out];
  if (o.shape != shape) return "its result " + o.shape.str() + " is not the group's shape";
  if (std::find(group.outputs.begin(), group.outputs.end(), n.out) != group.outputs.end())
    return "its result is a group output";
  for (int32_t m : group.nodes)
    for (ValueId in : n.inputs)
      if (g.nodes[m].out == in) return "an operand is a member's result";
  return {};
}

class Writer {
 public:
  Writer(const Graph& g, const Group& grp, int sms)
      : g_(g), grp_(grp), sms_(std::max(sms, 1)), red_(reduction_node(g, grp)) {}

  FusedReductionKernel run() {
    if (grp_.nodes.size() == 1) {
      // A reduction alone (fuse.cpp's lone column sums): no members, its input read directly.
      FusedOperand in;
      in.value = red_.inputs[0];
      in.elem_size = element_size(g_.values[in.value].dtype);
      pk_.operands = {in};
    } else {
      pk_ = generate_pointwise_kernel(g_, pointwise_part(g_, grp_));
    }
    in_dtype_ = g_.values[red_.inputs[0]].dtype;
    out_dtype_ = g_.values[red_.out].dtype;
    acc_ = accumulate_type(red_.op, in_dtype_);
    collect_operands();
    plan_space();
    plan_launch();
    FusedReductionKernel k;
    for (const Op& o : ops_) k.operands.push_back(o.info);
    k.words = static_cast<int32_t>(ops_.size()) + 2;
    k.partial_word = k.words - 2;
    k.ticket_word = k.words - 1;
    k.num_out = num_out_;
    k.count = count_;
    k.columns = columns_;
    k.tile_x = bx_;
    k.tile_y = by_;
    k.blocks_x = blocks_x_;
    k.splits = splits_;
    k.chunk = chunk_;
    if (splits_ > 1) {
      k.partial_bytes = splits_ * num_out_ * accumulate_bytes(acc_);
      k.ticket_count = blocks_x_;
    }
    k.summary = summary();
    k.source = source();
    return k;
  }

 private:
  struct Op {
    FusedOperand info;
    DType dtype = kFloat32;
    std::string param;  // its name in body() ("" for the reduction's result)
    Strides strides;    // per dim of the group's shape, in elements
  };
  // A product member's value: body()'s parameter `param` = sum over k < K of A[i,k] B[k,j].
  struct Dot {
    ValueId value = kNoValue;
    std::string param;
    int64_t k = 0, a_step = 0, b_step = 0;  // K, and A's and B's strides along k
    int32_t a_slot = 0, b_slot = 0;
  };
  struct Dim {
    int64_t size = 1;
    std::vector<int64_t> strides;  // per pointer operand
  };

  void collect_operands() {
    shape_ = g_.values[red_.inputs[0]].shape;
    const int rank = shape_.size();
    reduced_ = reduced_flags(red_, rank);
    // The names body() gives the pseudo group's operands.
    int32_t nx = 0, ny = 0;
    for (const FusedOperand& o : pk_.operands) {
      const std::string name = o.output ? str("y", ny++) : str("x", nx++);
      if (o.output) {
        out_locals_.push_back({o.value, name});
        if (o.value == red_.inputs[0]) reduced_local_ = name;
      } else {
        in_params_.push_back({o.value, name});
        if (o.value == red_.inputs[0]) reduced_local_ = name;  // a reduction without members
      }
    }
    auto add = [&](ValueId v, bool output, bool scalar, const std::string& param) {
      Op o;
      o.info.value = v;
      o.info.output = output;
      o.info.scalar = scalar;
      o.info.slot = static_cast<int32_t>(ops_.size());
      o.dtype = g_.values[v].dtype;
      o.info.elem_size = element_size(o.dtype);
      o.param = param;
      ops_.push_back(std::move(o));
    };
    // The reduction's result: its strides over the group's shape (0 along reduced dims).
    add(red_.out, true, false, "");
    {
      const Value& out = g_.values[red_.out];
      Strides s;
      int od = 0;
      for (int d = 0; d < rank; ++d) {
        if (reduced_[d]) {
          s.push_back(0);
          if (red_.attrs.keepdim) ++od;
        } else {
          s.push_back(out.strides[od++]);
        }
      }
      ops_.back().strides = s;
    }
    for (const auto& [v, name] : out_locals_)
      if (std::find(grp_.outputs.begin(), grp_.outputs.end(), v) != grp_.outputs.end()) {
        add(v, true, false, name);
        ops_.back().strides = g_.values[v].strides;
      }
    for (const FusedOperand& o : pk_.operands)
      if (!o.output && !o.scalar) {
        if (const Node* mm = product_of(o.value)) {
          // A product member: its operands A [M,K] and B [K,N] as pointers whose offsets over
          // the group's [M,N] are those of A's row i and B's column j.
          const Value& a = g_.values[mm->inputs[0]];
          const Value& b = g_.values[mm->inputs[1]];
          Dot d;
          d.value = o.value;
          d.param = param_of(o.value);
          d.k = a.shape[1];
          d.a_step = a.strides[1];
          d.b_step = b.strides[0];
          d.a_slot = static_cast<int32_t>(ops_.size());
          add(mm->inputs[0], false, false, "");
          ops_.back().strides = {a.strides[0], 0};
          d.b_slot = static_cast<int32_t>(ops_.size());
          add(mm->inputs[1], false, false, "");
          ops_.back().strides = {0, b.strides[1]};
          dots_.push_back(std::move(d));
          continue;
        }
        add(o.value, false, false, param_of(o.value));
        const Value& v = g_.values[o.value];
        ops_.back().strides = broadcast_strides(v.shape, v.strides, shape_);
      }
    for (const Op& o : ops_) pointers_ += o.info.scalar ? 0 : 1;
    for (const FusedOperand& o : pk_.operands)
      if (o.scalar) add(o.value, false, true, param_of(o.value));
  }

  // The product member of the group producing `v`, or null.
  const Node* product_of(ValueId v) const {
    for (int32_t ni : grp_.nodes)
      if (is_product_member(g_.nodes[ni]) && g_.nodes[ni].out == v) return &g_.nodes[ni];
    return nullptr;
  }
  const Dot* dot_of(ValueId v) const {
    for (const Dot& d : dots_)
      if (d.value == v) return &d;
    return nullptr;
  }

  std::string param_of(ValueId v) const {
    for (const auto& [id, name] : in_params_)
      if (id == v) return name;
    return "?";
  }

  // Kept and reduced dims, innermost first, size-1 dims dropped and dims that every operand walks
  // as one run merged. Dims are first ordered by the largest input's strides, so "innermost"
  // means innermost in memory for it (a transposed input still reads along its rows).
  void plan_space() {
    const int rank = shape_.size();
    std::vector<int> order(static_cast<size_t>(rank));
    for (int d = 0; d < rank; ++d) order[d] = d;
    int32_t lead = -1;
    for (int32_t k = 0; k < pointers_; ++k)
      if (!ops_[k].info.output && (lead < 0 || g_.values[ops_[k].info.value].numel() >
                                                   g_.values[ops_[lead].info.value].numel()))
        lead = k;
    if (lead >= 0) {
      const Strides& ls = ops_[lead].strides;
      std::stable_sort(order.begin(), order.end(),
                       [&](int a, int b) { return std::abs(ls[a]) > std::abs(ls[b]); });
    }
    for (auto it = order.rbegin(); it != order.rend(); ++it) {
      const int d = *it;
      if (shape_[d] == 1) continue;
      if (innermost_ < 0) innermost_ = d;
      std::vector<Dim>& cls = reduced_[d] ? red_dims_ : keep_dims_;
      Dim nd;
      nd.size = shape_[d];
      for (int32_t k = 0; k < pointers_; ++k) nd.strides.push_back(ops_[k].strides[d]);
      if (!cls.empty()) {
        Dim& last = cls.back();
        bool merge = true;
        for (int32_t k = 0; k < pointers_ && merge; ++k)
          merge = nd.strides[k] == last.strides[k] * last.size;
        if (merge) {
          last.size *= nd.size;
          continue;
        }
      }
      cls.push_back(std::move(nd));
    }
    num_out_ = 1;
    for (const Dim& d : keep_dims_) num_out_ *= d.size;
    count_ = 1;
    for (const Dim& d : red_dims_) count_ *= d.size;
    columns_ = innermost_ >= 0 && !reduced_[innermost_];
    // Eager folds contiguous rows (the reduced dims last in its row-major materialized input)
    // with 16-byte loads; when this kernel walks the space in the same row-major order, it folds
    // in the same order (fused_reduce.cuh), else element by element.
    std::vector<int> walked;
    for (int d : order)
      if (shape_[d] > 1) walked.push_back(d);
    bool row_major = std::is_sorted(walked.begin(), walked.end());
    bool seen_reduced = false;
    for (int d : walked) {
      if (reduced_[d])
        seen_reduced = true;
      else if (seen_reduced)
        row_major = false;  // a kept dim inside the reduced ones
    }
    vec_ = !columns_ && seen_reduced && row_major
               ? static_cast<int32_t>(16 / element_size(g_.values[red_.inputs[0]].dtype))
               : 0;
    // 32-bit indexing when every position and offset fits (and no stride is negative).
    bool small = num_out_ * count_ <= INT32_MAX;
    for (int32_t k = 0; k < pointers_ && small; ++k) {
      int64_t reach = 0;
      for (const std::vector<Dim>* cls : {&keep_dims_, &red_dims_})
        for (const Dim& d : *cls) {
          small = small && d.strides[k] >= 0;
          reach += (d.size - 1) * std::max<int64_t>(d.strides[k], 0);
        }
      for (const Dot& d : dots_) {
        if (k == d.a_slot) reach += (d.k - 1) * d.a_step;
        if (k == d.b_slot) reach += (d.k - 1) * d.b_step;
      }
      small = small && reach <= INT32_MAX;
    }
    index32_ = small;
  }

  // The tile, the blocks along the outputs, and the split of the reduction: the eager planner's
  // cut (kernels/reduce_grid.h), so that with the same fold and combine order
  // (kernels/cuda/fused_reduce.cuh) the fused sum equals the eager one bit for bit.
  void plan_launch() {
    static_assert(kernels::kReduceThreads == FusedReductionKernel::kMaxThreads);
    const kernels::ReduceTile t = kernels::plan_reduce_tile(columns_, num_out_, count_, sms_);
    bx_ = static_cast<int32_t>(t.bx);
    by_ = static_cast<int32_t>(t.by);
    blocks_x_ = t.blocks_x;
    chunk_ = t.chunk;
    splits_ = t.splits;
    // The finish of a split reduction works in whole warps (fused_reduce.cuh); a split only
    // happens for long reductions, which get full 256-thread tiles.
    EMBER_CHECK(splits_ == 1 || (int64_t{bx_} * by_) % 32 == 0,
                "jit reduction codegen: split over a partial-warp tile (internal error)");
    EMBER_CHECK(blocks_x_ * splits_ <= INT32_MAX, "jit reduction codegen: ", blocks_x_ * splits_,
                " blocks are too many for one launch");
  }

  std::string lit(int64_t v) const { return std::to_string(v) + (index32_ ? "u" : "ll"); }

  // Lines defining <prefix>0.. (coordinates of `dims`, innermost first) of flat position `pos`.
  void coordinates(std::ostream& os, const std::vector<Dim>& dims, const std::string& pos,
                   const std::string& prefix) const {
    std::string q = pos;
    for (size_t d = 0; d < dims.size(); ++d) {
      if (d + 1 == dims.size()) {
        os << "    const Index " << prefix << d << " = " << q << ";\n";
        break;
      }
      os << "    const Index " << prefix << d << " = " << q << " % " << lit(dims[d].size) << ";\n";
      os << "    const Index " << prefix << "q" << d << " = " << q << " / " << lit(dims[d].size)
         << ";\n";
      q = prefix + "q" + std::to_string(d);
    }
  }

  std::string offset(int32_t k, bool with_reduced) const {
    std::string e;
    auto term = [&](const std::vector<Dim>& dims, const std::string& prefix) {
      for (size_t d = 0; d < dims.size(); ++d) {
        const int64_t s = dims[d].strides[k];
        if (s == 0) continue;
        if (!e.empty()) e += " + ";
        e += prefix + std::to_string(d);
        if (s != 1) e += s < 0 ? str(" * static_cast<Index>(", lit(s), ")") : str(" * ", lit(s));
      }
    };
    term(keep_dims_, "ck");
    if (with_reduced) term(red_dims_, "cr");
    return e.empty() ? "0" : e;
  }

  std::string summary() const {
    std::ostringstream os;
    for (size_t i = 0; i < grp_.nodes.size(); ++i)
      os << (i ? ", " : "") << op_name(g_.nodes[grp_.nodes[i]].op);
    os << " over " << shape_.str() << " -> " << g_.values[red_.out].shape.str() << " ("
       << (columns_ ? "columns" : "rows") << ", " << blocks_x_ << " x " << splits_ << " blocks of "
       << bx_ << "x" << by_ << (vec_ ? ", eager's vector order" : "") << ", " << grp_.outputs.size()
       << " out)";
    return os.str();
  }

  std::string source() const {
    std::ostringstream os;
    os << "// Ember fused reduction kernel (codegen v" << kReductionCodegenVersion
       << "): " << summary() << "\n"
       << "#include \"kernels/cuda/fused_reduce.cuh\"\n\n"
          "namespace ember_fused {\n"
          "namespace fp = ::ember::kernels::cuda::fused;\n"
          "namespace ew = ::ember::kernels::cuda::elementwise;\n"
          "namespace dev = ::ember::kernels::cuda::dev;\n"
          "namespace pw = ::ember::pw;\n\n"
       << "typedef " << (index32_ ? "unsigned int" : "long long") << " Index;\n"
       << "constexpr Index kNumOut = " << lit(num_out_) << ";\n"
       << "constexpr Index kCount = " << lit(count_) << ";\n"
       << "constexpr Index kChunk = " << lit(chunk_) << ";\n"
       << "constexpr unsigned kBlocksX = " << blocks_x_ << "u;\n"
       << "constexpr unsigned kSplits = " << splits_ << "u;\n"
       << "typedef " << acc_ << " Acc;\n"
       << "typedef " << cuda_storage_type(out_dtype_) << " Out;\n";
    const bool sum = red_.op == OpId::sum || red_.op == OpId::mean;
    os << "typedef dev::" << (sum ? "SumOp" : "MinMaxOp") << "<Acc> Op;\n\n"
       << "// Pointers of the outputs (the reduction's result first) and inputs, the inline\n"
          "// scalars' bits, then the scratch of split reductions.\n"
          "struct Args {\n"
          "  char* p["
       << pointers_ << "];\n";
    if (static_cast<int32_t>(ops_.size()) > pointers_)
      os << "  unsigned long long s[" << ops_.size() - pointers_ << "];\n";
    os << "  char* partial;\n  unsigned int* tickets;\n};\n\n";
    os << "// The members, in the eager kernels' compute types; values stay in registers.\n"
       << pk_.body;
    // Element: the members at (o, r), in two steps: load() reads the operands into a Loads,
    // operator() computes the members, writes the members' results the group returns and gives
    // the value folded. reduce_tiles loads several positions before computing the first, so
    // their round trips to memory overlap: the stores of one position would otherwise hold back
    // the loads of the next (the pointers may alias, as far as the compiler knows).
    os << "// The members at output o, reduced position r.\n"
          "struct Element {\n"
          "  const Args& a;\n"
          "  struct Loads {\n";
    int32_t loaded = 0;
    for (const auto& [v, name] : in_params_)
      if (dot_of(v) || !op_of(v).info.scalar) {
        os << "    " << cuda_storage_type(g_.values[v].dtype) << " " << name << ";\n";
        ++loaded;
      }
    if (loaded == 0) os << "    char unused;\n";
    os << "  };\n"
          "  __device__ __forceinline__ void load(Index o, Index r, Loads& l) const {\n"
          "    (void)o;\n    (void)r;\n    (void)l;\n";
    if (loaded > 0) {
      coordinates(os, keep_dims_, "o", "ck");
      coordinates(os, red_dims_, "r", "cr");
    }
    for (const auto& [v, name] : in_params_) {
      if (const Dot* d = dot_of(v)) {
        // The loads of B's column repeat for every position of a thread's output: within a
        // batch of positions (fused_reduce.cuh) the compiler loads them once.
        os << "    l." << name << " = fp::small_k_dot<" << d->k << ", "
           << cuda_storage_type(g_.values[v].dtype) << ">(a.p[" << d->a_slot << "], "
           << "static_cast<Index>(" << offset(d->a_slot, true) << "), " << lit(d->a_step)
           << ", a.p[" << d->b_slot << "], static_cast<Index>(" << offset(d->b_slot, true) << "), "
           << lit(d->b_step) << ");\n";
        continue;
      }
      const Op& o = op_of(v);
      if (o.info.scalar) continue;
      os << "    l." << name << " = fp::load<" << cuda_storage_type(o.dtype) << ">(a.p["
         << o.info.slot << "], " << offset(o.info.slot, true) << ");\n";
    }
    os << "  }\n"
          "  __device__ __forceinline__ Acc operator()(Index o, Index r, const Loads& l) const {\n"
          "    (void)o;\n    (void)r;\n    (void)l;\n";
    coordinates(os, keep_dims_, "o", "ck");
    coordinates(os, red_dims_, "r", "cr");
    for (const auto& [v, name] : in_params_) {
      if (dot_of(v)) {
        os << "    const " << cuda_storage_type(g_.values[v].dtype) << " " << name << " = l."
           << name << ";\n";
        continue;
      }
      const Op& o = op_of(v);
      os << "    const " << cuda_storage_type(o.dtype) << " " << name << " = ";
      if (o.info.scalar)
        os << "ew::FromBits<" << cuda_storage_type(o.dtype) << ">::get(a.s["
           << o.info.slot - pointers_ << "]);\n";
      else
        os << "l." << name << ";\n";
    }
    for (const auto& [v, name] : out_locals_)
      os << "    " << cuda_storage_type(g_.values[v].dtype) << " " << name << ";\n";
    if (grp_.nodes.size() > 1) {
      os << "    body(";
      bool first = true;
      for (const auto& [v, name] : in_params_) os << (first ? "" : ", ") << name, first = false;
      for (const auto& [v, name] : out_locals_) os << (first ? "" : ", ") << name, first = false;
      os << ");\n";
    }
    for (int32_t k = 1; k < pointers_; ++k) {
      const Op& o = ops_[k];
      if (!o.info.output) continue;
      os << "    fp::store<" << cuda_storage_type(o.dtype) << ">(a.p[" << k << "], "
         << offset(k, true) << ", " << o.param << ");\n";
    }
    // keep: the reduced member's rounding stays its own (no contraction into the fold).
    os << "    return dev::to_acc<Acc>(fp::keep(" << reduced_local_ << "));\n  }\n};\n\n";
    os << "// Writes the result of output o.\n"
          "struct Store {\n"
          "  const Args& a;\n"
          "  const Op& op;\n"
          "  __device__ __forceinline__ void operator()(Index o, Op::State s) const {\n";
    if (keep_dims_.empty()) os << "    (void)o;\n";
    coordinates(os, keep_dims_, "o", "ck");
    os << "    fp::store<Out>(a.p[0], " << offset(0, false)
       << ", op.project<Out>(s, static_cast<int64_t>(kCount)));\n  }\n};\n\n"
       << "}  // namespace ember_fused\n\n"
          "extern \"C\" __global__ void __launch_bounds__(ember_fused::fp::kThreads)\n"
       << FusedReductionKernel::kKernel
       << "(const ember_fused::Args a) {\n"
          "  using namespace ember_fused;\n"
          "  Op op;\n";
    if (red_.op == OpId::mean) os << "  op.mean = true;\n";
    if (red_.op == OpId::amin) os << "  op.is_min = true;\n";
    os << "  fp::reduce_tiles<" << (columns_ ? "true" : "false") << ", " << bx_ << ", " << by_
       << ", " << vec_
       << ", Index>(op, kNumOut, kCount, kChunk, kBlocksX, kSplits,\n"
          "      reinterpret_cast<Op::State*>(a.partial), a.tickets, Element{a}, Store{a, op});\n"
          "}\n";
    return os.str();
  }

  const Op& op_of(ValueId v) const {
    for (const Op& o : ops_)
      if (!o.info.output && o.info.value == v) return o;
    EMBER_FAIL("jit reduction codegen: no operand for %", v, " (internal error)");
  }

  const Graph& g_;
  const Group& grp_;
  int sms_;
  const Node& red_;
  FusedPointwiseKernel pk_;
  DType in_dtype_ = kFloat32, out_dtype_ = kFloat32;
  const char* acc_ = "float";
  Shape shape_;
  std::vector<bool> reduced_;
  std::vector<std::pair<ValueId, std::string>> in_params_, out_locals_;
  std::string reduced_local_;
  std::vector<Op> ops_;
  std::vector<Dot> dots_;
  int32_t pointers_ = 0;
  std::vector<Dim> keep_dims_, red_dims_;
  int innermost_ = -1;
  int64_t num_out_ = 0, count_ = 0;
  bool columns_ = false, index32_ = true;
  int32_t bx_ = 32, by_ = 8;
  int32_t vec_ = 0;  // eager's vector width of a contiguous row, or 0 (fused_reduce.cuh)
  int64_t blocks_x_ = 1, splits_ = 1, chunk_ = 0;
};

}  // namespace

bool reduction_codegen_supports(const Graph& g, const Group& group, std::string* why) {
  auto fail = [&](std::string r) {
    if (why) *why = std::move(r);
    return false;
  };
  if (group.kind != GroupKind::Reduction) return fail("not a reduction group");
  if (group.nodes.empty()) return fail("an empty group");
  const Node& red = reduction_node(g, group);
  const std::string op(op_name(red.op));
  if (!is_reduction_op(red.op)) return fail(op + " is not sum, mean, amax or amin");
  if (red.inplace || red.out == kNoValue || red.inputs.size() != 1)
    return fail(op + " is not an out-of-place reduction of one input");
  const ValueId x = red.inputs[0];
  // A reduction alone (fuse.cpp's lone column sums) reads its input directly.
  bool from_member = group.nodes.size() == 1;
  for (size_t i = 0; i + 1 < group.nodes.size(); ++i)
    from_member = from_member || g.nodes[group.nodes[i]].out == x;
  if (!from_member || g.is_view(x)) return fail(op + " does not reduce a member's result");
  for (size_t i = 0; i + 1 < group.nodes.size(); ++i)
    if (!is_reduction_op(g.nodes[group.nodes[i]].op) &&
        op_info(g.nodes[group.nodes[i]].op).kind == OpKind::Reduce)
      return fail("more than one reduction");
  if (std::find(group.outputs.begin(), group.outputs.end(), red.out) == group.outputs.end())
    return fail(op + "'s result is not a group output");
  const Value& in = g.values[x];
  const Value& out = g.values[red.out];
  if (in.numel() == 0) return fail(op + " of an empty tensor");
  if (out.device != in.device) return fail(op + " changes device");
  const char* acc = accumulate_type(red.op, in.dtype);
  if (!acc) return fail(op + " over " + std::string(dtype_name(in.dtype)) + " has no CUDA kernel");
  const DType want = is_floating(in.dtype) ? in.dtype : kInt64;
  if (out.dtype != (red.op == OpId::sum ? want : in.dtype))
    return fail(op + ": unexpected output dtype " + std::string(dtype_name(out.dtype)));
  const int rank = in.shape.size();
  if (rank == 0 && !red.attrs.dims.empty()) return fail(op + " of a 0-dim tensor over dims");
  for (int64_t d : red.attrs.dims)
    if (d < -rank || d >= rank) return fail(op + ": dim " + std::to_string(d) + " out of range");
  int reduced = 0;
  if (rank > 0)
    for (bool r : reduced_flags(red, rank)) reduced += r ? 1 : 0;
  const int want_rank = red.attrs.keepdim ? rank : rank - reduced;
  if (out.shape.size() != want_rank || out.strides.size() != want_rank)
    return fail(op + ": result of unexpected rank " + std::to_string(out.shape.size()));
  // Product members (fuse.cpp): each a small-K product of values from outside the group, read
  // only inside it, over the group's shape.
  for (size_t i = 0; i + 1 < group.nodes.size(); ++i) {
    const Node& n = g.nodes[group.nodes[i]];
    if (!is_product_member(n)) continue;
    const std::string bad = product_member_problem(g, group, n, in.shape);
    if (!bad.empty()) return fail("product member: " + bad);
  }
  std::string reason;
  if (group.nodes.size() > 1 && !pointwise_codegen_supports(g, pointwise_part(g, group), &reason))
    return fail("pointwise members: " + reason);
  return true;
}

FusedReductionKernel generate_reduction_kernel(const Graph& g, const Group& group, int sm_count) {
  std::string why;
  EMBER_CHECK(reduction_codegen_supports(g, group, &why), "jit reduction codegen: ", why);
  return Writer(g, group, sm_count).run();
}

}  // namespace ember::jit
