// Public ops: dtype promotion, dim normalisation and composites; primitives go to dispatch().
#include "core/ops.h"

#include <atomic>
#include <cmath>

#include "core/autocast.h"
#include "core/dispatch.h"

namespace ember {
namespace {

// An operand as type promotion sees it.
struct Operand {
  DType dtype;
  bool zero_dim;
  bool wrapped;
};

Operand operand_of(const Tensor& t) { return {t.dtype(), t.dim() == 0, t.impl()->wrapped_number}; }
Operand operand_of(const Scalar& s) { return {s.natural_dtype(), true, true}; }

// Like c10's result_type: dimensioned tensors, 0-dim tensors and wrapped numbers form three
// tiers; a lower tier only changes the result when it is of a higher category (bool < int <
// float).
constexpr int kNone = -1;
int promote_opt(int a, DType b) {
  return a == kNone ? static_cast<int>(b) : static_cast<int>(promote_types(DType(a), b));
}
int combine(int higher, int lower) {
  if (higher == kNone) return lower;
  if (lower == kNone) return higher;
  const DType h = DType(higher), l = DType(lower);
  if (is_floating(h)) return higher;
  if (h == kBool || is_floating(l)) return static_cast<int>(promote_types(h, l));
  return higher;
}
struct Promotion {
  int dim_r = kNone, zero_r = kNone, wrapped_r = kNone;
  void add(const Operand& o) {
    if (o.wrapped) {
      // A wrapped float counts as the default float dtype, whatever precision it is stored in.
      const DType d = is_floating(o.dtype) ? kFloat32 : is_integral(o.dtype) ? kInt64 : kBool;
      wrapped_r = promote_opt(wrapped_r, d);
    } else if (o.zero_dim) {
      zero_r = promote_opt(zero_r, o.dtype);
    } else {
      dim_r = promote_opt(dim_r, o.dtype);
    }
  }
  DType result() const { return DType(combine(dim_r, combine(zero_r, wrapped_r))); }
};
DType result_type_of(std::initializer_list<Operand> ops) {
  Promotion p;
  for (const Operand& o : ops) p.add(o);
  return p.result();
}

DType compute_type(OpId op, DType rt) {
  if (op_info(op).rule == OutRule::IntToFloat && !is_floating(rt)) return kFloat32;
  return rt;
}

Tensor as_type(const Tensor& t, DType d) { return t.dtype() == d ? t : cast(t, d); }

// Wrapped numbers keep float64 precision on the host until cast to the compute type.
Tensor wrap(const Scalar& s) {
  return wrap_scalar(s, s.is_floating() ? kFloat64 : s.natural_dtype());
}

void check_defined(const Tensor& t, OpId op) {
  EMBER_CHECK(t.defined(), op_name(op), ": undefined tensor");
}

Tensor unary(OpId op, const Tensor& a, const Attrs& attrs = {}) {
  check_defined(a, op);
  return dispatch(op, {as_type(a, compute_type(op, a.dtype()))}, attrs);
}

Tensor binary(OpId op, const Tensor& a, const Tensor& b) {
  check_defined(a, op);
  check_defined(b, op);
  const DType ct = compute_type(op, result_type_of({operand_of(a), operand_of(b)}));
  return dispatch(op, {as_type(a, ct), as_type(b, ct)});
}

Tensor binary(OpId op, const Tensor& a, const Scalar& b) {
  check_defined(a, op);
  const DType ct = compute_type(op, result_type_of({operand_of(a), operand_of(b)}));
  return dispatch(op, {as_type(a, ct), wrap_scalar(b, ct)});
}

Tensor binary(OpId op, const Scalar& a, const Tensor& b) {
  check_defined(b, op);
  const DType ct = compute_type(op, result_type_of({operand_of(a), operand_of(b)}));
  return dispatch(op, {wrap_scalar(a, ct), as_type(b, ct)});
}

// Sorted, unique, non-negative dims; empty means all.
Dims normalize_dims(const Dims& dims, int ndim, const char* op) {
  Dims out;
  if (dims.empty()) {
    for (int i = 0; i < ndim; ++i) out.push_back(i);
    return out;
  }
  bool seen[kMaxDims] = {};
  for (int64_t d : dims) {
    const int w = wrap_dim(d, ndim, op);
    EMBER_CHECK(!seen[w], op, ": dim ", w, " appears more than once in ", dims);
    seen[w] = true;
  }
  for (int i = 0; i < std::max(ndim, 1); ++i)
    if (seen[i]) out.push_back(i);
  return out;
}

Tensor reduce(OpId op, const Tensor& a, const Dims& dims, bool keepdim) {
  check_defined(a, op);
  Tensor x = as_type(a, compute_type(op, a.dtype()));
  Attrs attrs;
  attrs.keepdim = keepdim;
  if (x.dim() == 0) {  // reduce a scalar as a one-element vector
    normalize_dims(dims, 0, op_name(op).data());
    attrs.dims = {0};
    attrs.keepdim = false;
    return dispatch(op, {x.view({1})}, attrs);
  }
  attrs.dims = normalize_dims(dims, x.dim(), op_name(op).data());
  return dispatch(op, {x}, attrs);
}

std::atomic<bool> g_allow_tf32{false};
std::atomic<bool> g_deterministic{true};

}  // namespace

DType result_type(std::span<const Tensor> operands) {
  EMBER_CHECK(!operands.empty(), "result_type: no operands");
  Promotion p;
  for (const Tensor& t : operands) p.add(operand_of(t));
  return p.result();
}

// ---- elementwise --------------------------------------------------------------------------

Tensor neg(const Tensor& a) { return unary(OpId::neg, a); }
Tensor abs(const Tensor& a) { return unary(OpId::abs, a); }
Tensor relu(const Tensor& a) { return unary(OpId::relu, a); }
Tensor exp(const Tensor& a) { return unary(OpId::exp, a); }
Tensor log(const Tensor& a) { return unary(OpId::log, a); }
Tensor sqrt(const Tensor& a) { return unary(OpId::sqrt, a); }
Tensor rsqrt(const Tensor& a) { return unary(OpId::rsqrt, a); }
Tensor sigmoid(const Tensor& a) { return unary(OpId::sigmoid, a); }
Tensor tanh(const Tensor& a) { return unary(OpId::tanh, a); }
Tensor gelu(const Tensor& a, bool approximate_tanh) {
  Attrs attrs;
  attrs.approximate_tanh = approximate_tanh;
  return unary(OpId::gelu, a, attrs);
}
Tensor detail::unary_op(OpId op, const Tensor& a, const Attrs& attrs) {
  return unary(op, a, attrs);
}
Tensor relu6(const Tensor& a) { return hardtanh(a, 0, 6); }
Tensor clamp(const Tensor& a, std::optional<Scalar> lo, std::optional<Scalar> hi) {
  EMBER_CHECK(lo || hi, "clamp: at least one of min and max must be given");
  Attrs attrs;
  attrs.has_lo = lo.has_value();
  attrs.has_hi = hi.has_value();
  if (lo) attrs.lo = *lo;
  if (hi) attrs.hi = *hi;
  // A float bound on an int tensor promotes it, as in PyTorch.
  DType t = a.dtype();
  if (!is_floating(t) && ((lo && lo->is_floating()) || (hi && hi->is_floating()))) t = kFloat32;
  check_defined(a, OpId::clamp);
  return dispatch(OpId::clamp, {as_type(a, t)}, attrs);
}

Tensor add(const Tensor& a, const Tensor& b) { return binary(OpId::add, a, b); }
Tensor sub(const Tensor& a, const Tensor& b) { return binary(OpId::sub, a, b); }
Tensor mul(const Tensor& a, const Tensor& b) { return binary(OpId::mul, a, b); }
Tensor div(const Tensor& a, const Tensor& b) { return binary(OpId::div, a, b); }
Tensor pow(const Tensor& a, const Tensor& b) { return binary(OpId::pow, a, b); }
// A number exponent is an attribute: the gradient needs no log of the base.
Tensor pow(const Tensor& a, const Scalar& b) {
  Attrs attrs;
  attrs.exponent = b.to_double();
  return unary(OpId::pow_scalar, a, attrs);
}
Tensor maximum(const Tensor& a, const Tensor& b) { return binary(OpId::maximum, a, b); }
Tensor minimum(const Tensor& a, const Tensor& b) { return binary(OpId::minimum, a, b); }
Tensor eq(const Tensor& a, const Tensor& b) { return binary(OpId::eq, a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return binary(OpId::ne, a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return binary(OpId::lt, a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return binary(OpId::le, a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return binary(OpId::gt, a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return binary(OpId::ge, a, b); }

#define EMBER_SCALAR_OVERLOADS(fn)                                               \
  Tensor fn(const Tensor& a, const Scalar& b) { return binary(OpId::fn, a, b); } \
  Tensor fn(const Scalar& a, const Tensor& b) { return binary(OpId::fn, a, b); }
EMBER_SCALAR_OVERLOADS(add)
EMBER_SCALAR_OVERLOADS(sub)
EMBER_SCALAR_OVERLOADS(mul)
EMBER_SCALAR_OVERLOADS(div)
EMBER_SCALAR_OVERLOADS(maximum)
EMBER_SCALAR_OVERLOADS(minimum)
EMBER_SCALAR_OVERLOADS(eq)
EMBER_SCALAR_OVERLOADS(ne)
EMBER_SCALAR_OVERLOADS(lt)
EMBER_SCALAR_OVERLOADS(le)
EMBER_SCALAR_OVERLOADS(gt)
EMBER_SCALAR_OVERLOADS(ge)
#undef EMBER_SCALAR_OVERLOADS

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  check_defined(cond, OpId::where);
  check_defined(a, OpId::where);
  check_defined(b, OpId::where);
  EMBER_CHECK(cond.dtype() == kBool, "where: condition must be bool, got ",
              dtype_name(cond.dtype()));
  const DType ct = result_type_of({operand_of(a), operand_of(b)});
  return dispatch(OpId::where, {cond, as_type(a, ct), as_type(b, ct)});
}
Tensor where(const Tensor& cond, const Tensor& a, const Scalar& b) {
  return where(cond, a, wrap(b));
}
Tensor where(const Tensor& cond, const Scalar& a, const Tensor& b) {
  return where(cond, wrap(a), b);
}

Tensor operator-(const Tensor& a) { return neg(a); }
Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator+(const Tensor& a, const Scalar& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Scalar& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Scalar& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Scalar& b) { return div(a, b); }
Tensor operator+(const Scalar& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Scalar& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Scalar& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Scalar& a, const Tensor& b) { return div(a, b); }
Tensor operator==(const Tensor& a, const Tensor& b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, const Tensor& b) { return ne(a, b); }
Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
Tensor operator==(const Tensor& a, const Scalar& b) { return eq(a, b); }
Tensor operator!=(const Tensor& a, const Scalar& b) { return ne(a, b); }
Tensor operator<(const Tensor& a, const Scalar& b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, const Scalar& b) { return le(a, b); }
Tensor operator>(const Tensor& a, const Scalar& b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, const Scalar& b) { return ge(a, b); }

// ---- reductions ---------------------------------------------------------------------------

Tensor sum(const Tensor& a, const Dims& dims, bool keepdim) {
  return reduce(OpId::sum, a, dims, keepdim);
}
Tensor mean(const Tensor& a, const Dims& dims, bool keepdim) {
  return reduce(OpId::mean, a, dims, keepdim);
}
Tensor amax(const Tensor& a, const Dims& dims, bool keepdim) {
  return reduce(OpId::amax, a, dims, keepdim);
}
Tensor amin(const Tensor& a, const Dims& dims, bool keepdim) {
  return reduce(OpId::amin, a, dims, keepdim);
}
Tensor max(const Tensor& a) { return amax(a); }
Tensor min(const Tensor& a) { return amin(a); }
Tensor argmax(const Tensor& a) { return reduce(OpId::argmax, a, {}, false); }
Tensor argmax(const Tensor& a, int64_t dim, bool keepdim) {
  return reduce(OpId::argmax, a, {dim}, keepdim);
}
Tensor logsumexp(const Tensor& a, const Dims& dims, bool keepdim) {
  return reduce(OpId::logsumexp, a, dims, keepdim);
}

// ---- matrix products ----------------------------------------------------------------------

void set_allow_tf32(bool on) { g_allow_tf32.store(on, std::memory_order_relaxed); }
bool allow_tf32() { return g_allow_tf32.load(std::memory_order_relaxed); }
void set_deterministic_algorithms(bool on) { g_deterministic.store(on, std::memory_order_relaxed); }
bool deterministic_algorithms() { return g_deterministic.load(std::memory_order_relaxed); }
void set_float32_matmul_precision(std::string_view precision) {
  EMBER_CHECK(precision == "highest" || precision == "high" || precision == "medium",
              "set_float32_matmul_precision: expected \"highest\", \"high\" or \"medium\", got \"",
              precision, "\"");
  set_allow_tf32(precision != "highest");
}
std::string_view float32_matmul_precision() { return allow_tf32() ? "high" : "highest"; }

namespace {
// Contractions do not promote, as in PyTorch: a float64 input on float32 weights is more often a
// mistake than a request for a float64 product, and a silent cast would hide it.
std::pair<Tensor, Tensor> same_dtype_pair(const Tensor& a, const Tensor& b, const char* op) {
  EMBER_CHECK(a.defined() && b.defined(), op, ": input ", a.defined() ? 1 : 0,
              " is an undefined tensor");
  EMBER_CHECK(a.dtype() == b.dtype(), op, ": expected both operands to have the same dtype, got ",
              dtype_name(a.dtype()), " ", a.sizes(), " and ", dtype_name(b.dtype()), " ",
              b.sizes());
  return {a, b};
}
}  // namespace

Tensor mm(const Tensor& a, const Tensor& b) {
  auto [x, y] = same_dtype_pair(a, b, "mm");
  return dispatch(OpId::mm, {x, y});
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  auto [x, y] = same_dtype_pair(a, b, "bmm");
  return dispatch(OpId::bmm, {x, y});
}

Tensor matmul(const Tensor& a0, const Tensor& b0) {
  auto [a, b] = same_dtype_pair(a0, b0, "matmul");
  const int da = a.dim(), db = b.dim();
  EMBER_CHECK(da > 0 && db > 0, "matmul: both arguments need at least 1 dim, got shapes ",
              a.sizes(), " and ", b.sizes());
  if (da == 1 && db == 1) {
    EMBER_CHECK(a.size(0) == b.size(0), "matmul: vectors of length ", a.size(0), " and ", b.size(0),
                " have no dot product");
    return dispatch(OpId::mm, {a.view({1, a.size(0)}), b.view({b.size(0), 1})}).view({});
  }
  if (da == 2 && db == 2) return dispatch(OpId::mm, {a, b});
  if (da == 1 && db == 2) return dispatch(OpId::mm, {a.unsqueeze(0), b}).squeeze(0);
  if (da == 2 && db == 1) return dispatch(OpId::mm, {a, b.unsqueeze(1)}).squeeze(1);
  if (db <= 2) {
    // [..., M, K] x [K, N] (or [K]): fold the batch into M, one GEMM.
    const int64_t k = a.size(-1);
    const Tensor b2 = db == 1 ? b.unsqueeze(1) : b;
    EMBER_CHECK(b2.size(0) == k, "matmul: shapes ", a.sizes(), " and ", b.sizes(),
                " cannot be multiplied (", k, " != ", b2.size(0), ")");
    Shape out_shape = a.sizes();
    out_shape[da - 1] = b2.size(1);
    Tensor r = dispatch(OpId::mm, {a.reshape({-1, k}), b2}).view(out_shape);
    return db == 1 ? r.squeeze(-1) : r;
  }
  // General batched case: broadcast the batch dims, then one bmm.
  const Tensor a2 = da == 1 ? a.unsqueeze(0) : a;
  const Tensor b2 = db == 1 ? b.unsqueeze(1) : b;
  const int64_t m = a2.size(-2), k = a2.size(-1), n = b2.size(-1);
  EMBER_CHECK(b2.size(-2) == k, "matmul: shapes ", a.sizes(), " and ", b.sizes(),
              " cannot be multiplied (", k, " != ", b2.size(-2), ")");
  Shape batch_a, batch_b;
  for (int i = 0; i < a2.dim() - 2; ++i) batch_a.push_back(a2.size(i));
  for (int i = 0; i < b2.dim() - 2; ++i) batch_b.push_back(b2.size(i));
  const Shape batch = broadcast_shapes(batch_a, batch_b, "matmul");
  const int64_t nb = numel_of(batch);
  Shape ea = batch, eb = batch;
  ea.push_back(m);
  ea.push_back(k);
  eb.push_back(k);
  eb.push_back(n);
  Tensor r =
      dispatch(OpId::bmm, {a2.expand(ea).reshape({nb, m, k}), b2.expand(eb).reshape({nb, k, n})});
  Shape out = batch;
  if (da > 1) out.push_back(m);
  if (db > 1) out.push_back(n);
  return r.view(out);
}

Tensor linear(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in) {
  EMBER_CHECK(weight_in.defined() && weight_in.dim() == 2, "linear: weight must be 2-D [out, in]");
  EMBER_CHECK(x_in.defined(), "linear: input is an undefined tensor");
  // One autocast op, as in PyTorch: all three operands in the low dtype (core/autocast.h).
  const Tensor x = autocast_lower(x_in), weight = autocast_lower(weight_in),
               bias = autocast_lower(bias_in);
  EMBER_CHECK(x.dtype() == weight.dtype(), "linear: input is ", dtype_name(x.dtype()), " ",
              x.sizes(), " but weight is ", dtype_name(weight.dtype()), " ", weight.sizes(),
              "; expected both operands to have the same dtype");
  Tensor y = matmul(x, weight.t());
  return bias.defined() ? add(y, bias) : y;
}

// ---- normalisers and losses ---------------------------------------------------------------

namespace {
Tensor softmax_like(OpId op, const Tensor& a, int64_t dim) {
  check_defined(a, op);
  Tensor x = as_type(a, compute_type(op, a.dtype()));
  Attrs attrs;
  if (x.dim() == 0) {
    wrap_dim(dim, 0, op_name(op).data());
    attrs.dim = 0;
    return dispatch(op, {x.view({1})}, attrs).view({});
  }
  attrs.dim = wrap_dim(dim, x.dim(), op_name(op).data());
  return dispatch(op, {x.contiguous()}, attrs);
}
}  // namespace

Tensor softmax(const Tensor& a, int64_t dim) { return softmax_like(OpId::softmax, a, dim); }
Tensor log_softmax(const Tensor& a, int64_t dim) { return softmax_like(OpId::log_softmax, a, dim); }

Tensor cross_entropy_per_sample(const Tensor& logits, const Tensor& target, int64_t ignore_index,
                                double label_smoothing) {
  return cross_entropy_reduced(logits, target, ignore_index, label_smoothing, LossReduction::None);
}

Tensor cross_entropy_reduced(const Tensor& logits, const Tensor& target, int64_t ignore_index,
                             double label_smoothing, LossReduction reduction) {
  check_defined(logits, OpId::cross_entropy);
  check_defined(target, OpId::cross_entropy);
  EMBER_CHECK(target.dtype() == kInt64, "cross_entropy: target must hold int64 class indices, got ",
              dtype_name(target.dtype()));
  Attrs attrs;
  attrs.ignore_index = ignore_index;
  attrs.label_smoothing = label_smoothing;
  attrs.reduction = reduction;
  const Tensor x = as_type(logits, compute_type(OpId::cross_entropy, logits.dtype()));
  return dispatch(OpId::cross_entropy, {x.contiguous(), target.contiguous()}, attrs);
}

// ---- indexing -----------------------------------------------------------------------------

Tensor gather(const Tensor& a, int64_t dim, const Tensor& index) {
  check_defined(a, OpId::gather);
  check_defined(index, OpId::gather);
  EMBER_CHECK(is_integral(index.dtype()), "gather: index must be an integer tensor, got ",
              dtype_name(index.dtype()));
  Attrs attrs;
  attrs.dim = wrap_dim(dim, a.dim(), "gather");
  return dispatch(OpId::gather, {a.contiguous(), as_type(index, kInt64).contiguous()}, attrs);
}

Tensor index_select(const Tensor& a, int64_t dim, const Tensor& index) {
  check_defined(a, OpId::index_select);
  check_defined(index, OpId::index_select);
  EMBER_CHECK(is_integral(index.dtype()), "index_select: index must be an integer tensor, got ",
              dtype_name(index.dtype()));
  Attrs attrs;
  attrs.dim = wrap_dim(dim, a.dim(), "index_select");
  return dispatch(OpId::index_select, {a.contiguous(), as_type(index, kInt64).contiguous()}, attrs);
}

Tensor one_hot(const Tensor& index, int64_t num_classes) {
  check_defined(index, OpId::one_hot);
  EMBER_CHECK(is_integral(index.dtype()), "one_hot: input must be an integer tensor, got ",
              dtype_name(index.dtype()));
  const Tensor idx = as_type(index, kInt64).contiguous();
  if (num_classes == -1) {
    EMBER_CHECK(idx.numel() > 0, "one_hot: cannot infer num_classes from an empty tensor");
    num_classes = amax(idx).item<int64_t>() + 1;  // a host read, like PyTorch
  }
  Attrs attrs;
  attrs.num_classes = num_classes;
  return dispatch(OpId::one_hot, {idx}, attrs);
}

Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) {
  EMBER_CHECK(!tensors.empty(), "cat: expected a non-empty list of tensors");
  for (const Tensor& t : tensors) check_defined(t, OpId::cat);
  const DType rt = result_type(tensors);
  std::vector<Tensor> in;
  in.reserve(tensors.size());
  for (const Tensor& t : tensors) in.push_back(as_type(t, rt));
  Attrs attrs;
  attrs.dim = wrap_dim(dim, tensors[0].dim(), "cat");
  return dispatch(OpId::cat, std::span<const Tensor>(in), attrs);
}

Tensor multi_norm(const std::vector<Tensor>& tensors, double p) {
  EMBER_CHECK(!tensors.empty(), "multi_norm: expected a non-empty list of tensors");
  std::vector<Tensor> in;
  in.reserve(tensors.size());
  for (const Tensor& t : tensors) {
    check_defined(t, OpId::multi_norm);
    in.push_back(t.contiguous());  // the kernels read each tensor as one run of memory
  }
  Attrs attrs;
  attrs.norm_type = p;
  return dispatch(OpId::multi_norm, std::span<const Tensor>(in), attrs);
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  EMBER_CHECK(!tensors.empty(), "stack: expected a non-empty list of tensors");
  EMBER_CHECK(tensors[0].defined() && tensors[0].dim() < kMaxDims, "stack: tensors of shape ",
              tensors[0].defined() ? tensors[0].sizes() : Shape{}, " would need more than ",
              kMaxDims, " dims");
  const int d = wrap_dim(dim, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> parts;
  parts.reserve(tensors.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    EMBER_CHECK(tensors[i].defined() && tensors[i].sizes() == tensors[0].sizes(), "stack: tensor ",
                i, " has shape ", tensors[i].sizes(), ", expected ", tensors[0].sizes());
    parts.push_back(tensors[i].unsqueeze(d));
  }
  return cat(parts, d);
}

// ---- casting and moving -------------------------------------------------------------------

Tensor cast(const Tensor& a, DType dtype) {
  check_defined(a, OpId::cast);
  Attrs attrs;
  attrs.dtype = dtype;
  return dispatch(OpId::cast, {a}, attrs);
}

Tensor to_device(const Tensor& a, Device device) {
  check_defined(a, OpId::to_device);
  Attrs attrs;
  attrs.device = device;
  return dispatch(OpId::to_device, {a}, attrs);
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  EMBER_CHECK(a.defined() && b.defined(), "allclose: undefined tensor");
  const Shape s = broadcast_shapes(a.sizes(), b.sizes(), "allclose");
  const std::vector<double> x = a.expand(s).to_vector<double>();
  const std::vector<double> y = b.expand(s).to_vector<double>();
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i]) || std::isnan(y[i])) return false;
    if (x[i] == y[i]) continue;  // equal infinities
    if (!(std::abs(x[i] - y[i]) <= atol + rtol * std::abs(y[i]))) return false;
  }
  return true;
}

bool equal(const Tensor& a, const Tensor& b) {
  EMBER_CHECK(a.defined() && b.defined(), "equal: undefined tensor");
  if (a.sizes() != b.sizes()) return false;
  return a.to_vector<double>() == b.to_vector<double>();
}

}  // namespace ember
