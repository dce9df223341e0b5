// Meta inference: validate an op's inputs and attrs and decide its output, by op kind.
// The public API (core/ops.cpp) has already promoted dtypes and normalised dims; meta still
// checks everything, because the JIT and other layers dispatch directly.
#include <algorithm>
#include <cmath>

#include "core/collective.h"
#include "core/cuda_runtime.h"
#include "core/dispatch.h"

namespace ember {
namespace {

const char* cname(OpId op) { return op_info(op).name.data(); }

// A 0-dim CPU tensor may join an op on any device (its value is read on the host).
bool is_host_scalar(const Tensor& t) { return t.device().is_cpu() && t.dim() == 0; }

Device common_device(OpId op, std::span<const Tensor> in, bool allow_host_scalars) {
  Device dev = in[0].device();
  bool found = !(allow_host_scalars && is_host_scalar(in[0]));
  for (size_t i = 1; i < in.size(); ++i) {
    if (allow_host_scalars && is_host_scalar(in[i])) continue;
    if (!found) {
      dev = in[i].device();
      found = true;
      continue;
    }
    EMBER_CHECK(in[i].device() == dev, op_name(op),
                ": expected all tensors on one device, but input 0 is on ", dev.str(),
                " and input ", i, " is on ", in[i].device().str());
  }
  return dev;
}

void check_dtype(OpId op, DType t, int input) {
  EMBER_CHECK(in_set(op_info(op).dtypes, t), op_name(op), ": input ", input, " has dtype ",
              dtype_name(t), ", which this op does not support");
}

DType apply_rule(OpId op, DType in) {
  switch (op_info(op).rule) {
    case OutRule::Same:
    case OutRule::IntToFloat:
      return in;
    case OutRule::ToBool:
      return kBool;
    case OutRule::ToInt64:
      return is_floating(in) ? in : kInt64;
    case OutRule::Index:
      return kInt64;
    case OutRule::Cast:
      return in;  // handled by the caller
    case OutRule::Select:
      return in;
  }
  return in;
}

OutputMeta pointwise_meta(OpId op, std::span<const Tensor> in, const Attrs& a) {
  const OpKind kind = op_info(op).kind;
  const size_t arity = kind == OpKind::Unary ? 1 : kind == OpKind::Binary ? 2 : 3;
  EMBER_CHECK(in.size() == arity, op_name(op), ": expected ", arity, " inputs, got ", in.size());
  OutputMeta m;
  m.device = common_device(op, in, true);
  // A selection's condition is bool; the value operands share the compute dtype.
  const OutRule rule = op_info(op).rule;
  const size_t first = rule == OutRule::Select ? 1 : 0;
  if (rule == OutRule::Select)
    EMBER_CHECK(in[0].dtype() == kBool, op_name(op), ": condition must be bool, got ",
                dtype_name(in[0].dtype()));
  const DType t = in[first].dtype();
  for (size_t i = first + 1; i < in.size(); ++i)
    EMBER_CHECK(in[i].dtype() == t, op_name(op),
                ": inputs must share a dtype after promotion, got ", dtype_name(t), " and ",
                dtype_name(in[i].dtype()));
  check_dtype(op, t, static_cast<int>(first));
  m.dtype = rule == OutRule::Cast ? a.dtype : apply_rule(op, t);
  m.shape = in[0].sizes();
  for (size_t i = 1; i < in.size(); ++i)
    m.shape = broadcast_shapes(m.shape, in[i].sizes(), cname(op));
  if (op == OpId::clamp)
    EMBER_CHECK(a.has_lo || a.has_hi, "clamp: at least one of min and max must be given");
  return m;
}

OutputMeta reduce_meta(OpId op, const Tensor& x, const Attrs& a) {
  OutputMeta m;
  m.device = x.device();
  check_dtype(op, x.dtype(), 0);
  m.dtype = apply_rule(op, x.dtype());
  const int nd = x.dim();
  int prev = -1;
  for (int64_t d : a.dims) {
    EMBER_CHECK(d > prev && d < std::max(nd, 1), op_name(op),
                ": reduce dims must be sorted, unique and in range for ", nd, " dims, got ",
                a.dims);
    prev = static_cast<int>(d);
  }
  EMBER_CHECK(!a.dims.empty(), op_name(op), ": no dims to reduce");
  if (op == OpId::argmax)
    EMBER_CHECK(a.dims.size() == 1 || a.dims.size() == nd, "argmax: reduces one dim or all, got ",
                a.dims);
  int64_t reduced = 1;
  for (int d = 0; d < nd; ++d) {
    const bool r = std::find(a.dims.begin(), a.dims.end(), d) != a.dims.end();
    if (r) reduced *= x.size(d);
    if (!r)
      m.shape.push_back(x.size(d));
    else if (a.keepdim)
      m.shape.push_back(1);
  }
  if (op == OpId::amax || op == OpId::amin || op == OpId::argmax)
    EMBER_CHECK(reduced > 0, op_name(op), ": cannot reduce over zero elements (shape ", x.sizes(),
                ", dims ", a.dims, ")");
  return m;
}

OutputMeta matmul_meta(OpId op, std::span<const Tensor> in) {
  EMBER_CHECK(in.size() == 2, op_name(op), ": expected 2 inputs");
  const Tensor &a = in[0], &b = in[1];
  OutputMeta m;
  m.device = common_device(op, in, false);
  EMBER_CHECK(a.dtype() == b.dtype(), op_name(op), ": dtypes differ: ", dtype_name(a.dtype()),
              " and ", dtype_name(b.dtype()));
  check_dtype(op, a.dtype(), 0);
  m.dtype = a.dtype();
  if (op == OpId::mm) {
    EMBER_CHECK(a.dim() == 2 && b.dim() == 2, "mm: expected 2-D matrices, got shapes ", a.sizes(),
                " and ", b.sizes());
    EMBER_CHECK(a.size(1) == b.size(0), "mm: shapes ", a.sizes(), " and ", b.sizes(),
                " cannot be multiplied (", a.size(1), " != ", b.size(0), ")");
    m.shape = {a.size(0), b.size(1)};
  } else {
    EMBER_CHECK(a.dim() == 3 && b.dim() == 3, "bmm: expected 3-D batches, got shapes ", a.sizes(),
                " and ", b.sizes());
    EMBER_CHECK(a.size(0) == b.size(0) && a.size(2) == b.size(1), "bmm: shapes ", a.sizes(),
                " and ", b.sizes(), " cannot be multiplied");
    m.shape = {a.size(0), a.size(1), b.size(2)};
  }
  return m;
}

OutputMeta view_meta(OpId op, const Tensor& x, const Attrs& a) {
  OutputMeta m;
  m.device = x.device();
  m.dtype = x.dtype();
  m.offset = x.storage_offset();
  const int nd = x.dim();
  switch (op) {
    case OpId::view: {
      EMBER_CHECK(checked_numel(a.shape, "view") == x.numel(), "view: shape ", a.shape,
                  " is invalid for ", x.numel(), " elements (input shape ", x.sizes(), ")");
      EMBER_CHECK(compute_view_strides(x.sizes(), x.strides(), a.shape, m.strides), "view: shape ",
                  a.shape, " is not compatible with the input's shape ", x.sizes(), " and strides ",
                  x.strides(), "; use reshape (it copies)");
      m.shape = a.shape;
      break;
    }
    case OpId::permute: {
      EMBER_CHECK(a.dims.size() == nd, "permute: order ", a.dims, " has ", a.dims.size(),
                  " entries for a tensor of ", nd, " dims");
      bool seen[kMaxDims] = {};
      for (int i = 0; i < nd; ++i) {
        const int64_t d = a.dims[i];
        EMBER_CHECK(d >= 0 && d < nd && !seen[d], "permute: ", a.dims,
                    " is not a permutation of the ", nd, " dims");
        seen[d] = true;
        m.shape.push_back(x.size(d));
        m.strides.push_back(x.stride(d));
      }
      break;
    }
    case OpId::slice: {
      EMBER_CHECK(a.dim >= 0 && a.dim < nd, "slice: dim ", a.dim, " out of range for shape ",
                  x.sizes());
      const int64_t n = x.size(a.dim);
      EMBER_CHECK(a.step > 0, "slice: step must be positive, got ", a.step);
      EMBER_CHECK(a.start >= 0 && a.start <= a.end && a.end <= n, "slice: range [", a.start, ", ",
                  a.end, ") is invalid for dim ", a.dim, " of size ", n);
      m.shape = x.sizes();
      m.strides = x.strides();
      m.shape[a.dim] = (a.end - a.start + a.step - 1) / a.step;
      m.strides[a.dim] = x.stride(a.dim) * a.step;
      m.offset += a.start * x.stride(a.dim);
      break;
    }
    case OpId::expand: {
      EMBER_CHECK(a.shape.size() >= nd, "expand: target shape ", a.shape,
                  " has fewer dims than the input ", x.sizes());
      const int lead = a.shape.size() - nd;
      m.shape.resize(a.shape.size());
      m.strides.resize(a.shape.size());
      for (int i = 0; i < a.shape.size(); ++i) {
        const int j = i - lead;
        int64_t want = a.shape[i];
        if (j < 0) {
          EMBER_CHECK(want >= 0, "expand: invalid size ", want, " for new leading dim ", i,
                      " in shape ", a.shape, " (-1 keeps a size, and a new dim has none)");
          m.shape[i] = want;
          m.strides[i] = 0;
          continue;
        }
        if (want == -1) want = x.size(j);  // -1 keeps the input's size
        EMBER_CHECK(want >= 0, "expand: invalid size ", want, " at dim ", i, " in shape ", a.shape,
                    " (only -1, keep the size, may be negative)");
        EMBER_CHECK(x.size(j) == want || x.size(j) == 1, "expand: cannot expand shape ", x.sizes(),
                    " to ", a.shape, " (dim ", i, ": ", x.size(j), " -> ", want, ")");
        m.shape[i] = want;
        m.strides[i] = x.size(j) == want ? x.stride(j) : 0;
      }
      checked_numel(m.shape, "expand");  // a view too large to index is refused here, not later
      break;
    }
    default:
      EMBER_FAIL(op_name(op), ": not a view op");
  }
  return m;
}

OutputMeta factory_meta(OpId op, const Attrs& a) {
  OutputMeta m;
  m.shape = a.shape;
  m.dtype = a.dtype;
  m.device = a.device;
  EMBER_CHECK(in_set(op_info(op).dtypes, a.dtype), op_name(op), ": dtype ", dtype_name(a.dtype),
              " is not supported");
  // The byte count too: the random factories validate here before reserving counters.
  checked_nbytes(a.shape, element_size(a.dtype), cname(op));
  if (op == OpId::randint)
    EMBER_CHECK(a.lo.to_int() < a.hi.to_int(), "randint: empty range [", a.lo.to_int(), ", ",
                a.hi.to_int(), ")");
  return m;
}

// conv2d and its backward rows: the input, weight and output shapes they relate, checked.
struct ConvShapes {
  Shape x, w, y;
};

ConvShapes conv_shapes(OpId op, std::span<const Tensor> in, const Attrs& a) {
  const std::string_view name = op_name(op);
  EMBER_CHECK(in.size() == 2, name, ": expected 2 inputs, got ", in.size());
  common_device(op, in, false);
  check_dtype(op, in[0].dtype(), 0);
  EMBER_CHECK(in[1].dtype() == in[0].dtype(), name, ": inputs are ", dtype_name(in[0].dtype()),
              " and ", dtype_name(in[1].dtype()), "; expected one dtype");
  EMBER_CHECK(
      a.conv_stride.size() == 2 && a.conv_padding.size() == 2 && a.conv_dilation.size() == 2, name,
      ": stride, padding and dilation take 2 values each, got ", a.conv_stride, ", ",
      a.conv_padding, " and ", a.conv_dilation);
  for (int i = 0; i < 2; ++i)
    EMBER_CHECK(a.conv_stride[i] >= 1 && a.conv_dilation[i] >= 1 && a.conv_padding[i] >= 0, name,
                ": stride ", a.conv_stride, " and dilation ", a.conv_dilation,
                " must be positive and padding ", a.conv_padding, " non-negative");
  EMBER_CHECK(a.groups >= 1, name, ": groups must be positive, got ", a.groups);
  ConvShapes c;
  if (op == OpId::conv2d) {
    c.x = in[0].sizes();
    c.w = in[1].sizes();
  } else if (op == OpId::conv2d_backward_input) {
    c.x = a.shape;
    c.w = in[1].sizes();
  } else {
    c.x = in[1].sizes();
    c.w = a.shape;
  }
  EMBER_CHECK(c.x.size() == 4 && c.w.size() == 4, name, ": expected a 4-D input [N, C, H, W] and ",
              "a 4-D weight [OC, C / groups, kH, kW], got ", c.x, " and ", c.w);
  const int64_t C = c.x[1], OC = c.w[0];
  EMBER_CHECK(OC % a.groups == 0 && c.w[1] * a.groups == C, name, ": input ", c.x, " and weight ",
              c.w, " do not fit groups = ", a.groups, " (want C = weight dim 1 * groups and OC ",
              "divisible by groups)");
  c.y = Shape{c.x[0], OC, 0, 0};
  for (int i = 0; i < 2; ++i) {
    const int64_t span = c.x[2 + i] + 2 * a.conv_padding[i] - a.conv_dilation[i] * (c.w[2 + i] - 1);
    EMBER_CHECK(c.w[2 + i] >= 1 && span >= 1, name, ": kernel ", c.w, " (dilation ",
                a.conv_dilation, ") is larger than the padded input ", c.x, " + padding ",
                a.conv_padding);
    c.y[2 + i] = (span - 1) / a.conv_stride[i] + 1;
  }
  if (op != OpId::conv2d)
    EMBER_CHECK(in[0].sizes() == c.y, name, ": grad must have the output's shape ", c.y, ", got ",
                in[0].sizes());
  checked_numel(c.y, cname(op));
  return c;
}

// max_pool2d's output shape; PyTorch's size formula (ceil_mode drops a last window that would
// start in the right padding).
Shape pool_shape(OpId op, const Tensor& x, const Attrs& a) {
  const std::string_view name = op_name(op);
  check_dtype(op, x.dtype(), 0);
  EMBER_CHECK(x.dim() == 4, name, ": expected a 4-D input [N, C, H, W], got ", x.sizes());
  EMBER_CHECK(a.window.size() == 2 && a.conv_stride.size() == 2 && a.conv_padding.size() == 2 &&
                  a.conv_dilation.size() == 2,
              name, ": window, stride, padding and dilation take 2 values each");
  Shape out = x.sizes();
  for (int i = 0; i < 2; ++i) {
    const int64_t k = a.window[i], s = a.conv_stride[i], p = a.conv_padding[i],
                  d = a.conv_dilation[i], in = x.size(2 + i);
    EMBER_CHECK(k >= 1 && s >= 1 && d >= 1 && p >= 0 && 2 * p <= k, name, ": window ", a.window,
                ", stride ", a.conv_stride, ", dilation ", a.conv_dilation,
                " must be positive and padding ", a.conv_padding, " at most half the window");
    const int64_t span = in + 2 * p - d * (k - 1) - 1;
    EMBER_CHECK(span >= 0, name, ": window ", a.window, " is larger than the padded input ",
                x.sizes());
    int64_t o = (a.ceil_mode ? (span + s - 1) / s : span / s) + 1;
    if (a.ceil_mode && (o - 1) * s >= in + p) --o;
    out[2 + i] = o;
  }
  return out;
}

// The attention rows (core/ops.yaml): q [..., L, E], k and v [..., S, E] with one or two equal
// batch dims and unit last strides; the backward rows also take grad [..., L, E] and the float32
// lse and delta [..., L].
OutputMeta attention_meta(OpId op, std::span<const Tensor> in, const Attrs& a) {
  const std::string_view name = op_name(op);
  const bool backward = op == OpId::attention_backward_query || op == OpId::attention_backward_kv;
  const size_t want = op == OpId::attention ? 3 : op == OpId::attention_lse ? 2 : 6;
  EMBER_CHECK(in.size() == want, name, ": expected ", want, " inputs, got ", in.size());
  common_device(op, in, false);
  const std::span<const Tensor> qkv =
      in.subspan(backward ? 1 : 0, op == OpId::attention_lse ? 2 : 3);
  const Tensor& q = qkv[0];
  check_dtype(op, q.dtype(), 0);
  const int64_t n = q.dim();
  EMBER_CHECK(n == 3 || n == 4, name, ": expected [B, L, E] or [B1, B2, L, E] queries, got ",
              q.sizes());
  for (const Tensor& t : qkv) {
    EMBER_CHECK(t.dtype() == q.dtype() && t.dim() == n, name, ": query, key and value must share ",
                "a dtype and rank, got ", dtype_name(t.dtype()), " ", t.sizes(), " beside ",
                dtype_name(q.dtype()), " ", q.sizes());
    EMBER_CHECK(
        t.size(-1) == q.size(-1) && t.size(0) == q.size(0) && t.size(n - 3) == q.size(n - 3), name,
        ": query ", q.sizes(), " and key/value ", t.sizes(),
        " must share their batch dims and head size");
    EMBER_CHECK(t.size(-1) <= 1 || t.stride(-1) == 1, name, ": the last dim must be contiguous, ",
                "got strides ", t.strides());
  }
  EMBER_CHECK(qkv.size() < 3 || qkv[1].size(-2) == qkv[2].size(-2), name, ": key ", qkv[1].sizes(),
              " and value ", qkv[2].sizes(), " must have as many rows");
  EMBER_CHECK(a.attn_scale == a.attn_scale, name, ": attn_scale is NaN");
  Shape rows = q.sizes();
  rows.resize(rows.size() - 1);  // [..., L]
  const DType stats = attention_stats_dtype(q.dtype());
  if (backward) {
    EMBER_CHECK(in[0].sizes() == q.sizes() && in[0].dtype() == q.dtype() &&
                    (in[0].size(-1) <= 1 || in[0].stride(-1) == 1),
                name, ": grad must be ", dtype_name(q.dtype()), " ", q.sizes(),
                " with a contiguous last dim, got ", dtype_name(in[0].dtype()), " ", in[0].sizes());
    for (int i = 4; i < 6; ++i)
      EMBER_CHECK(in[i].sizes() == rows && in[i].dtype() == stats && in[i].is_contiguous(), name,
                  ": ", i == 4 ? "lse" : "delta", " must be a contiguous ", dtype_name(stats), " ",
                  rows, ", got ", dtype_name(in[i].dtype()), " ", in[i].sizes());
  }
  EMBER_CHECK(!a.interleaved || n == 4, name, ": interleaved results need 4-D inputs, got ",
              q.sizes());
  auto laid_out = [&](Shape s) {  // [B1, B2, len, E] -> [B1, len, B2, E] when interleaved
    if (a.interleaved) std::swap(s[1], s[2]);
    return s;
  };
  switch (op) {
    case OpId::attention_lse:
      return {rows, stats, q.device()};
    case OpId::attention_backward_kv: {
      Shape s = laid_out(qkv[1].sizes());
      s.insert(0, 2);
      return {s, q.dtype(), q.device()};
    }
    default:
      return {laid_out(q.sizes()), q.dtype(), q.device()};
  }
}

}  // namespace

MultiTensorShape multi_tensor_shape(OpId op, const Attrs& a) {
  switch (op) {
    case OpId::sgd_update:  // {lr, momentum, dampening, weight_decay}; momentum buffers
      return {4, a.momentum_buffers ? 1 : 0, kFloat32};
    case OpId::adam_update:  // {lr, beta1, beta2, eps, weight_decay}; exp_avg, exp_avg_sq, max
      return {5, a.amsgrad ? 3 : 2, kFloat64};
    case OpId::rmsprop_update:  // {lr, alpha, eps, weight_decay, momentum}
      return {5, 1 + (a.momentum_buffers ? 1 : 0) + (a.centered ? 1 : 0), kFloat64};
    case OpId::adagrad_update:  // {lr, lr_decay, weight_decay, eps}; sum
      return {4, 1, kFloat64};
    case OpId::amp_unscale:  // {inv_scale}; no states
      return {1, 0, kFloat32};
    default:
      EMBER_FAIL(op_name(op), ": not a multi-tensor update");
  }
}

OutputMeta infer_meta(OpId op, std::span<const Tensor> in, const Attrs& a) {
  const OpKind kind = op_info(op).kind;
  for (size_t i = 0; i < in.size(); ++i)
    EMBER_CHECK(in[i].defined(), op_name(op), ": input ", i, " is an undefined tensor");
  switch (kind) {
    case OpKind::Nullary: {
      OutputMeta m;  // fill writes into a given tensor; meta only checks the value
      return m;
    }
    case OpKind::Unary:
    case OpKind::Binary:
    case OpKind::Ternary:
      return pointwise_meta(op, in, a);
    case OpKind::Reduce:
      EMBER_CHECK(in.size() == 1, op_name(op), ": expected 1 input");
      return reduce_meta(op, in[0], a);
    case OpKind::Matmul:
      return matmul_meta(op, in);
    case OpKind::Softmax: {
      EMBER_CHECK(in.size() == 1, op_name(op), ": expected 1 input");
      check_dtype(op, in[0].dtype(), 0);
      EMBER_CHECK(a.dim >= 0 && a.dim < std::max(in[0].dim(), 1), op_name(op), ": dim ", a.dim,
                  " out of range for shape ", in[0].sizes());
      return {in[0].sizes(), in[0].dtype(), in[0].device()};
    }
    case OpKind::Loss: {
      if (op == OpId::cross_entropy_backward) {
        EMBER_CHECK(in.size() == 3, "cross_entropy_backward: expected grad, logits and target");
        const OutputMeta fwd = infer_meta(OpId::cross_entropy, in.subspan(1), a);
        // A reduced loss's gradient may be a 0-dim host tensor (read by value, like a
        // pointwise op's host scalar): a compiled step's constant seed then needs no device
        // memory.
        const bool host_scalar = a.reduction != LossReduction::None && is_host_scalar(in[0]);
        EMBER_CHECK(in[0].dtype() == in[1].dtype() && in[0].sizes() == fwd.shape &&
                        (in[0].device() == in[1].device() || host_scalar),
                    "cross_entropy_backward: grad must be ", dtype_name(in[1].dtype()), " ",
                    fwd.shape, " on ", in[1].device().str(), ", got ", dtype_name(in[0].dtype()),
                    " ", in[0].sizes(), " on ", in[0].device().str());
        return {in[1].sizes(), in[1].dtype(), in[1].device()};
      }
      EMBER_CHECK(in.size() == 2, "cross_entropy: expected logits and target");
      EMBER_CHECK(a.label_smoothing >= 0 && a.label_smoothing <= 1,
                  "cross_entropy: label_smoothing must be in [0, 1], got ", a.label_smoothing);
      const Tensor &x = in[0], &t = in[1];
      common_device(op, in, false);
      check_dtype(op, x.dtype(), 0);
      EMBER_CHECK(x.dim() == 2 && t.dim() == 1 && t.size(0) == x.size(0),
                  "cross_entropy: expected logits [N, C] and target [N], got ", x.sizes(), " and ",
                  t.sizes());
      EMBER_CHECK(t.dtype() == kInt64, "cross_entropy: target must be int64 class indices, got ",
                  dtype_name(t.dtype()));
      EMBER_CHECK(x.size(1) > 0, "cross_entropy: logits have zero classes");
      if (a.reduction != LossReduction::None) return {Shape{}, x.dtype(), x.device()};
      return {Shape{x.size(0)}, x.dtype(), x.device()};
    }
    case OpKind::Index: {
      if (op == OpId::one_hot) {
        EMBER_CHECK(in.size() == 1, "one_hot: expected 1 input");
        EMBER_CHECK(in[0].dtype() == kInt64, "one_hot: input must be int64, got ",
                    dtype_name(in[0].dtype()));
        EMBER_CHECK(a.num_classes > 0, "one_hot: num_classes must be positive, got ",
                    a.num_classes);
        OutputMeta m{in[0].sizes(), kInt64, in[0].device()};
        m.shape.push_back(a.num_classes);
        return m;
      }
      EMBER_CHECK(in.size() == 2, op_name(op), ": expected input and index");
      const Tensor &x = in[0], &idx = in[1];
      common_device(op, in, false);
      if (op == OpId::scatter_add) {
        check_dtype(op, x.dtype(), 0);
        EMBER_CHECK(idx.dtype() == kInt64, "scatter_add: index must be int64, got ",
                    dtype_name(idx.dtype()));
        EMBER_CHECK(idx.sizes() == x.sizes(), "scatter_add: index ", idx.sizes(), " and source ",
                    x.sizes(), " must have one shape");
        EMBER_CHECK(a.shape.size() == x.dim() && a.dim >= 0 && a.dim < std::max(x.dim(), 1),
                    "scatter_add: target shape ", a.shape, " and dim ", a.dim,
                    " do not fit a source of shape ", x.sizes());
        for (int d = 0; d < x.dim(); ++d)
          EMBER_CHECK(d == a.dim || x.size(d) <= a.shape[d], "scatter_add: source shape ",
                      x.sizes(), " exceeds target shape ", a.shape, " at dim ", d);
        return {a.shape, x.dtype(), x.device()};
      }
      EMBER_CHECK(idx.dtype() == kInt64, op_name(op), ": index must be int64, got ",
                  dtype_name(idx.dtype()));
      EMBER_CHECK(a.dim >= 0 && a.dim < std::max(x.dim(), 1), op_name(op), ": dim ", a.dim,
                  " out of range for shape ", x.sizes());
      OutputMeta m{x.sizes(), x.dtype(), x.device()};
      if (op == OpId::gather) {
        EMBER_CHECK(idx.dim() == x.dim(), "gather: index ", idx.sizes(),
                    " must have as many dims as the input ", x.sizes());
        for (int d = 0; d < x.dim(); ++d)
          EMBER_CHECK(d == a.dim || idx.size(d) <= x.size(d), "gather: index shape ", idx.sizes(),
                      " exceeds input shape ", x.sizes(), " at dim ", d);
        m.shape = idx.sizes();
      } else {
        EMBER_CHECK(idx.dim() <= 1, "index_select: index must be 1-D, got shape ", idx.sizes());
        if (x.dim() > 0) m.shape[a.dim] = idx.numel();
      }
      return m;
    }
    case OpKind::Cat: {
      EMBER_CHECK(!in.empty(), "cat: expected at least one tensor");
      common_device(op, in, false);
      const Tensor& f = in[0];
      EMBER_CHECK(f.dim() > 0, "cat: zero-dim tensors cannot be concatenated");
      EMBER_CHECK(a.dim >= 0 && a.dim < f.dim(), "cat: dim ", a.dim, " out of range for shape ",
                  f.sizes());
      OutputMeta m{f.sizes(), f.dtype(), f.device()};
      int64_t total = 0;
      for (size_t i = 0; i < in.size(); ++i) {
        EMBER_CHECK(in[i].dtype() == f.dtype(), "cat: tensor ", i, " has dtype ",
                    dtype_name(in[i].dtype()), ", expected ", dtype_name(f.dtype()));
        EMBER_CHECK(in[i].dim() == f.dim(), "cat: tensor ", i, " has shape ", in[i].sizes(),
                    ", expected ", f.dim(), " dims like ", f.sizes());
        for (int d = 0; d < f.dim(); ++d)
          EMBER_CHECK(d == a.dim || in[i].size(d) == f.size(d), "cat: tensor ", i, " has shape ",
                      in[i].sizes(), ", which does not match ", f.sizes(), " outside dim ", a.dim);
        total += in[i].size(a.dim);
      }
      m.shape[a.dim] = total;
      return m;
    }
    case OpKind::View:
      EMBER_CHECK(in.size() == 1, op_name(op), ": expected 1 input");
      return view_meta(op, in[0], a);
    case OpKind::Factory:
    case OpKind::Random:
      return factory_meta(op, a);
    case OpKind::MultiTensor: {
      // [hyper, step, params..., grads..., states...], updated in place (MultiTensorLayout).
      const MultiTensorLayout layout = MultiTensorLayout::of(a);
      const int64_t n = a.num_tensors;
      const std::string_view name = op_name(op);
      EMBER_CHECK(n > 0 && in.size() == layout.inputs(), name, ": expected ", layout.inputs(),
                  " tensors for ", n, " parameters, got ", in.size());
      const MultiTensorShape want = multi_tensor_shape(op, a);
      EMBER_CHECK(layout.state_groups == want.states, name, ": ", layout.state_groups,
                  " state tensors per parameter, but these flags need ", want.states);
      const Device dev = in[2].device();
      EMBER_CHECK(in[0].dtype() == want.hyper_dtype && in[0].numel() == want.hyper &&
                      in[0].device() == dev && in[0].is_contiguous(),
                  name, ": hyperparameters must be a contiguous ", dtype_name(want.hyper_dtype),
                  " [", want.hyper, "] tensor on ", dev.str(), ", got ", dtype_name(in[0].dtype()),
                  " ", in[0].sizes(), " on ", in[0].device().str());
      EMBER_CHECK(layout.lists == (op == OpId::amp_unscale ? 1 : 2), name,
                  op == OpId::amp_unscale ? ": needs grads_only" : ": grads_only is amp_unscale's");
      const char* slot1 = op == OpId::amp_unscale ? "found_inf" : "step";
      EMBER_CHECK(in[1].numel() == 1 && in[1].dtype() == kFloat32 && in[1].device() == dev, name,
                  ": ", slot1, " must be a float32 scalar on ", dev.str(), ", got ",
                  dtype_name(in[1].dtype()), " ", in[1].sizes(), " on ", in[1].device().str());
      if (layout.reads_found_inf) {
        const Tensor& f = in[layout.found_inf()];
        EMBER_CHECK(f.numel() == 1 && f.dtype() == kFloat32 && f.device() == dev, name,
                    ": found_inf must be a float32 scalar on ", dev.str(), ", got ",
                    dtype_name(f.dtype()), " ", f.sizes(), " on ", f.device().str());
      }
      for (int64_t i = 0; i < n; ++i) {
        const Tensor& p = in[layout.param(i)];
        check_dtype(op, p.dtype(), static_cast<int>(layout.param(i)));
        EMBER_CHECK(p.is_contiguous(), name, ": parameter ", i, " must be contiguous");
        for (int g = layout.lists == 2 ? -1 : 0; g < layout.state_groups; ++g) {
          const Tensor& t = in[g < 0 ? layout.grad(i) : layout.state(g, i)];
          EMBER_CHECK(t.sizes() == p.sizes() && t.dtype() == p.dtype() && t.device() == dev &&
                          t.is_contiguous(),
                      name, ": ", g < 0 ? "gradient" : "state tensor", " of parameter ", i, " is ",
                      dtype_name(t.dtype()), " ", t.sizes(), " on ", t.device().str(),
                      ", expected a contiguous ", dtype_name(p.dtype()), " ", p.sizes(), " on ",
                      dev.str());
        }
      }
      return {Shape{}, kFloat32, dev};
    }
    case OpKind::Conv: {
      const ConvShapes c = conv_shapes(op, in, a);
      const Shape& shape = op == OpId::conv2d ? c.y : op == OpId::conv2d_backward_input ? c.x : c.w;
      return {shape, in[0].dtype(), in[0].device()};
    }
    case OpKind::Pool: {
      if (op == OpId::max_pool2d) {
        EMBER_CHECK(in.size() == 1, "max_pool2d: expected 1 input");
        return {pool_shape(op, in[0], a), in[0].dtype(), in[0].device()};
      }
      EMBER_CHECK(in.size() == 2, op_name(op), ": expected grad and input");
      common_device(op, in, false);
      const Shape y = pool_shape(op, in[1], a);
      EMBER_CHECK(in[0].sizes() == y && in[0].dtype() == in[1].dtype(), op_name(op),
                  ": grad must be ", dtype_name(in[1].dtype()), " ", y, ", got ",
                  dtype_name(in[0].dtype()), " ", in[0].sizes());
      return {in[1].sizes(), in[1].dtype(), in[1].device()};
    }
    case OpKind::Attention:
      return attention_meta(op, in, a);
    case OpKind::Collective:
      EMBER_CHECK(in.size() == 1, op_name(op), ": expected 1 input, got ", in.size());
      check_dtype(op, in[0].dtype(), 0);
      EMBER_CHECK(in[0].is_contiguous(), op_name(op), ": the tensor of shape ", in[0].sizes(),
                  " must be contiguous (the communicator sends its memory as it lies)");
      EMBER_CHECK(a.reduce_op != ReduceOp::Avg || is_floating(in[0].dtype()), op_name(op),
                  ": Avg needs a floating tensor, got ", in[0].dtype(), " (reduce with Sum)");
      check_communicator(op_name(op), a.group, in[0].device());
      return {in[0].sizes(), in[0].dtype(), in[0].device()};
    case OpKind::Norm: {
      const bool bwd = op == OpId::layer_norm_backward;
      EMBER_CHECK(in.size() == (bwd ? 2u : 1u), op_name(op), ": expected ", bwd ? 2 : 1,
                  " inputs, got ", in.size());
      const Tensor& x = in.back();
      check_dtype(op, x.dtype(), static_cast<int>(in.size()) - 1);
      EMBER_CHECK(x.dim() >= 1 && a.dim >= 0 && a.dim < x.dim(), op_name(op),
                  ": normalized dims from ", a.dim, " out of range for shape ", x.sizes());
      EMBER_CHECK(a.eps >= 0, op_name(op), ": eps must be non-negative, got ", a.eps);
      if (bwd) {
        common_device(op, in, false);
        EMBER_CHECK(in[0].sizes() == x.sizes() && in[0].dtype() == x.dtype(), op_name(op),
                    ": grad must be ", dtype_name(x.dtype()), " ", x.sizes(), ", got ",
                    dtype_name(in[0].dtype()), " ", in[0].sizes());
      }
      return {x.sizes(), x.dtype(), x.device()};
    }
    case OpKind::MultiReduce: {
      EMBER_CHECK(!in.empty(), op_name(op), ": expected at least one tensor");
      const Device dev = common_device(op, in, false);
      EMBER_CHECK(a.norm_type >= 1 || (std::isinf(a.norm_type) && a.norm_type > 0), op_name(op),
                  ": norm_type must be >= 1 or inf, got ", a.norm_type);
      bool wide = false;
      for (size_t i = 0; i < in.size(); ++i) {
        EMBER_CHECK(is_floating(in[i].dtype()), op_name(op), ": tensor ", i, " (", in[i].sizes(),
                    ") has dtype ", dtype_name(in[i].dtype()), "; expected a floating dtype");
        wide |= in[i].dtype() == kFloat64;
      }
      return {Shape{static_cast<int64_t>(in.size())}, wide ? kFloat64 : kFloat32, dev};
    }
    case OpKind::Transfer:
      EMBER_CHECK(in.size() == 1, "to_device: expected 1 input");
      if (a.device.is_cuda()) {
        const int n = cuda::device_count();
        EMBER_CHECK(n > 0, "to(", a.device.str(),
                    "): CUDA is not available (Ember built without "
                    "CUDA, or no CUDA driver or device was found)");
        EMBER_CHECK(a.device.index >= 0 && a.device.index < n, "to(", a.device.str(), "): device ",
                    a.device.str(), " does not exist (", n,
                    n == 1 ? " CUDA device is" : " CUDA devices are", " visible)");
      }
      return {in[0].sizes(), in[0].dtype(), a.device};
  }
  EMBER_FAIL(op_name(op), ": unknown op kind");
}

}  // namespace ember
