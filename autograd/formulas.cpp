// Backward formulas, one case per op of core/ops.yaml with `backward: formula`. Each is written
// with public ops (so a traced backward is ordinary graph nodes) and reads only what the row's
// save rules kept. Rows with a `grad` expression need no case: their generated <op>_backward
// row is dispatched on (g, x) or (g, y).
#include "autograd/formulas.h"

#include <algorithm>

#include "core/dispatch.h"
#include "core/factory.h"
#include "core/ops.h"

namespace ember::autograd {

bool is_differentiable(OpId op) { return op_info(op).differentiable; }

SavePlan save_plan(OpId op, const std::vector<bool>& need) {
  auto kept = [&](SaveWhen w) {
    switch (w) {
      case SaveWhen::Never:
        return false;
      case SaveWhen::Always:
        return true;
      case SaveWhen::IfNeed0:
      case SaveWhen::IfNeed1:
      case SaveWhen::IfNeed2: {
        const size_t i = static_cast<size_t>(w) - static_cast<size_t>(SaveWhen::IfNeed0);
        return i < need.size() && need[i];
      }
    }
    return false;
  };
  const OpInfo& info = op_info(op);
  SavePlan p;
  for (int i = 0; i < 3; ++i) p.input[i] = kept(info.save[i]);
  p.output = kept(info.save[3]);
  return p;
}

Tensor sum_to(const Tensor& g, const Shape& shape) {
  if (g.sizes() == shape) return g;
  const int lead = g.dim() - shape.size();
  Dims dims;
  for (int i = 0; i < lead; ++i) dims.push_back(i);
  for (int i = 0; i < shape.size(); ++i)
    if (shape[i] == 1 && g.size(lead + i) != 1) dims.push_back(lead + i);
  const Tensor r = dims.empty() ? g : sum(g, dims, /*keepdim=*/true);
  return r.reshape(shape);
}

namespace {

// Re-inserts reduced dims (size 1) so a reduction's gradient broadcasts over its input. (A 0-dim
// input was reduced as a [1] view, which is what the node recorded, so no special case here.)
Tensor unreduce(const Tensor& g, const OpNode& n) {
  if (n.attrs.keepdim) return g;
  Shape s = n.inputs[0].shape;
  for (int64_t d : n.attrs.dims) s[d] = 1;
  return g.reshape(s);
}

int64_t reduced_count(const OpNode& n) {
  int64_t c = 1;
  for (int64_t d : n.attrs.dims) c *= n.inputs[0].shape[d];
  return c;
}

Tensor in(const OpNode& n, int i) { return n.saved_inputs[i].unpack(n.name().c_str()); }
Tensor out(const OpNode& n) { return n.saved_output.unpack(n.name().c_str()); }

}  // namespace

std::vector<Tensor> backward_formula(const OpNode& n, const Tensor& g) {
  const size_t k = n.inputs.size();
  std::vector<Tensor> r(k);
  auto need = [&](size_t i) { return n.needs_input_grad(i); };
  auto shape = [&](size_t i) -> const Shape& { return n.inputs[i].shape; };
  const Attrs& a = n.attrs;

  if (const OpInfo& info = op_info(n.op); info.has_grad_op) {
    const bool reads_out = info.save[3] != SaveWhen::Never;
    r[0] = dispatch(info.grad_op, {g, reads_out ? out(n) : in(n, 0)}, a);
    return r;
  }
  switch (n.op) {
    case OpId::neg:
      r[0] = neg(g);
      break;
    case OpId::abs: {
      const Tensor x = in(n, 0);
      const DType t = x.dtype();
      r[0] = g * (cast(gt(x, 0), t) - cast(lt(x, 0), t));
      break;
    }
    case OpId::relu:
      r[0] = where(gt(out(n), 0), g, 0);
      break;
    case OpId::exp:
      r[0] = g * out(n);
      break;
    case OpId::log:
      r[0] = g / in(n, 0);
      break;
    case OpId::sqrt:
      r[0] = g / (out(n) * 2);
      break;
    case OpId::rsqrt: {
      const Tensor y = out(n);
      r[0] = g * (y * y * y) * -0.5;
      break;
    }
    case OpId::sigmoid: {
      const Tensor y = out(n);
      r[0] = g * y * (1 - y);
      break;
    }
    case OpId::tanh: {
      const Tensor y = out(n);
      r[0] = g * (1 - y * y);
      break;
    }
    case OpId::gelu: {
      Attrs ga;
      ga.approximate_tanh = a.approximate_tanh;
      r[0] = dispatch(OpId::gelu_backward, {g, in(n, 0)}, ga);
      break;
    }
    case OpId::clamp: {
      const Tensor x = in(n, 0);
      Tensor gg = g;
      if (a.has_lo) gg = where(ge(x, a.lo), gg, 0);
      if (a.has_hi) gg = where(le(x, a.hi), gg, 0);
      r[0] = gg;
      break;
    }
    case OpId::cast:
      if (is_floating(n.inputs[0].dtype)) r[0] = g.to(n.inputs[0].dtype);
      break;
    case OpId::add:
      if (need(0)) r[0] = sum_to(g, shape(0));
      if (need(1)) r[1] = sum_to(g, shape(1));
      break;
    case OpId::sub:
      if (need(0)) r[0] = sum_to(g, shape(0));
      if (need(1)) r[1] = sum_to(neg(g), shape(1));
      break;
    case OpId::mul:
      if (need(0)) r[0] = sum_to(g * in(n, 1), shape(0));
      if (need(1)) r[1] = sum_to(g * in(n, 0), shape(1));
      break;
    case OpId::div: {
      const Tensor b = in(n, 1);
      if (need(0)) r[0] = sum_to(g / b, shape(0));
      if (need(1)) r[1] = sum_to(neg(g) * in(n, 0) / (b * b), shape(1));
      break;
    }
    case OpId::pow: {
      const Tensor x = in(n, 0), e = in(n, 1);
      if (need(0)) r[0] = sum_to(g * e * pow(x, e - 1), shape(0));
      if (need(1)) {
        // d/de x^e = x^e log x; taken as 0 where x == 0 (the limit for e > 0), like PyTorch.
        const Tensor safe_log = log(where(eq(x, 0), ones_like(x), x));
        r[1] = sum_to(g * out(n) * safe_log, shape(1));
      }
      break;
    }
    case OpId::maximum:
    case OpId::minimum: {
      // Ties split the gradient evenly, as in PyTorch.
      const Tensor x = in(n, 0), y = in(n, 1);
      const Tensor x_wins = n.op == OpId::maximum ? gt(x, y) : lt(x, y);
      const Tensor y_wins = n.op == OpId::maximum ? lt(x, y) : gt(x, y);
      const Tensor half = g / 2, tie = eq(x, y);
      if (need(0)) r[0] = sum_to(where(x_wins, g, where(tie, half, 0)), shape(0));
      if (need(1)) r[1] = sum_to(where(y_wins, g, where(tie, half, 0)), shape(1));
      break;
    }
    case OpId::where: {
      const Tensor c = in(n, 0);
      if (need(1)) r[1] = sum_to(where(c, g, 0), shape(1));
      if (need(2)) r[2] = sum_to(where(c, 0, g), shape(2));
      break;
    }
    case OpId::sum:
      r[0] = unreduce(g, n).expand(shape(0));
      break;
    case OpId::mean:
      r[0] = unreduce(g / static_cast<double>(reduced_count(n)), n).expand(shape(0));
      break;
    case OpId::amax:
    case OpId::amin: {
      // The gradient goes to every element equal to the extremum, split evenly among ties.
      const Tensor x = in(n, 0);
      const Tensor m = eq(x, unreduce(out(n), n));
      const Tensor count = sum(cast(m, x.dtype()), a.dims, /*keepdim=*/true);
      r[0] = where(m, unreduce(g, n) / count, 0);
      break;
    }
    case OpId::logsumexp:
      r[0] = unreduce(g, n) * exp(in(n, 0) - unreduce(out(n), n));
      break;
    case OpId::mm:
      // Each gradient in its operand's layout (as PyTorch's mm_mat*_backward): a transposed
      // operand, such as a Linear's weight.t(), gets (B^T A)^T, a transposed view of a
      // contiguous product, so its gradient reaches the weight without a transposing copy.
      if (need(0)) r[0] = n.inputs[0].column_major ? mm(in(n, 1), g.t()).t() : mm(g, in(n, 1).t());
      if (need(1)) r[1] = n.inputs[1].column_major ? mm(g.t(), in(n, 0)).t() : mm(in(n, 0).t(), g);
      break;
    case OpId::bmm:
      if (need(0)) r[0] = bmm(g, in(n, 1).transpose(1, 2));
      if (need(1)) r[1] = bmm(in(n, 0).transpose(1, 2), g);
      break;
    case OpId::conv2d: {
      // The input's gradient is the transposed convolution of g, the weight's the correlation of
      // the input with g: two rows of their own (cuDNN's backward-data and backward-filter).
      const Tensor gc = g.contiguous();
      Attrs ca = a;
      if (need(0)) {
        ca.shape = shape(0);
        r[0] = dispatch(OpId::conv2d_backward_input, {gc, in(n, 1)}, ca);
      }
      if (need(1)) {
        ca.shape = shape(1);
        r[1] = dispatch(OpId::conv2d_backward_weight, {gc, in(n, 0)}, ca);
      }
      break;
    }
    case OpId::max_pool2d:
      r[0] = dispatch(OpId::max_pool2d_backward, {g.contiguous(), in(n, 0)}, a);
      break;
    case OpId::attention: {
      // The backward rows recompute the probabilities from the row logsumexp, computed once
      // here, and delta_i = sum_e grad_ie out_ie (core/ops.yaml). Interleaved results (and so
      // their gradient) are [B1, L, B2, E]: the rows read them as [B1, B2, L, E] views.
      const Tensor q = in(n, 0), k = in(n, 1), v = in(n, 2);
      auto standard = [&](const Tensor& t) { return a.interleaved ? t.permute({0, 2, 1, 3}) : t; };
      const Tensor gs = standard(g), os = standard(out(n));
      const Tensor gc = gs.stride(-1) == 1 ? gs : gs.contiguous();
      const Tensor lse = dispatch(OpId::attention_lse, {q, k}, a);
      const DType st = attention_stats_dtype(q.dtype());
      const Tensor delta = sum(gc.to(st) * os.to(st), {gc.dim() - 1});
      if (need(0))
        r[0] = standard(dispatch(OpId::attention_backward_query, {gc, q, k, v, lse, delta}, a));
      if (need(1) || need(2)) {
        const Tensor kv = dispatch(OpId::attention_backward_kv, {gc, q, k, v, lse, delta}, a);
        r[1] = standard(kv.select(0, 0));
        r[2] = standard(kv.select(0, 1));
      }
      break;
    }
    case OpId::softmax: {
      const Tensor y = out(n);
      r[0] = y * (g - sum(g * y, {a.dim}, /*keepdim=*/true));
      break;
    }
    case OpId::log_softmax:
      r[0] = g - exp(out(n)) * sum(g, {a.dim}, /*keepdim=*/true);
      break;
    case OpId::layer_norm:
      r[0] = dispatch(OpId::layer_norm_backward, {g.contiguous(), in(n, 0)}, a);
      break;
    case OpId::cross_entropy:
      r[0] = dispatch(OpId::cross_entropy_backward, {g.contiguous(), in(n, 0), in(n, 1)}, a);
      break;
    case OpId::gather: {
      Attrs sa;
      sa.dim = a.dim;
      sa.shape = shape(0);
      r[0] = dispatch(OpId::scatter_add, {g.contiguous(), in(n, 1)}, sa);
      break;
    }
    case OpId::index_select: {
      // index_select == gather with the index broadcast along every other dim; scatter_add
      // reads the broadcast through zero strides, so the [N, D] index is never materialized.
      Shape is = Shape::filled(g.dim(), 1);
      if (g.dim() > 0) is[a.dim] = g.size(a.dim);
      const Tensor idx = in(n, 1).reshape(is).expand(g.sizes());
      Attrs sa;
      sa.dim = a.dim;
      sa.shape = shape(0);
      r[0] = dispatch(OpId::scatter_add, {g.contiguous(), idx}, sa);
      break;
    }
    case OpId::scatter_add:
      r[0] = gather(g, a.dim, in(n, 1));
      break;
    case OpId::cat: {
      int64_t off = 0;
      for (size_t i = 0; i < k; ++i) {
        const int64_t len = shape(i)[a.dim];
        if (need(i)) r[i] = g.narrow(a.dim, off, len);
        off += len;
      }
      break;
    }
    case OpId::view:
      r[0] = g.reshape(shape(0));
      break;
    case OpId::permute: {
      Dims inv = Dims::filled(a.dims.size(), 0);
      for (int i = 0; i < a.dims.size(); ++i) inv[a.dims[i]] = i;
      r[0] = g.permute(inv);
      break;
    }
    case OpId::slice: {
      Tensor z = zeros(shape(0), TensorOptions(g.dtype()).device(g.device()));
      z.slice(a.dim, a.start, a.end, a.step).copy_(g);
      r[0] = z;
      break;
    }
    case OpId::expand:
      r[0] = sum_to(g, shape(0));
      break;
    case OpId::to_device:
      r[0] = g.to(n.inputs[0].device);
      break;
    default:
      EMBER_FAIL(op_name(n.op), ": has no backward formula");
  }
  return r;
}

}  // namespace ember::autograd
