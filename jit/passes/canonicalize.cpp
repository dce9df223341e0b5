// Canonical forms: views that change nothing disappear, chained reshapes and permutes read the
// original, and same-dtype copies (clone/contiguous) disappear where the copy is unobservable
// and every consumer reads any layout (pointwise kernels; GEMMs take transposed operands as
// flags), or where the copy only becomes a parameter's gradient and the parameter can hold the
// original. The pipeline runs it twice: before the passes that join products and sums (their
// patterns match one form of each view chain) and after them (on what they made).
#include <vector>

#include "core/dispatch.h"
#include "jit/passes.h"

namespace ember::jit {
namespace {

bool same_layout(const Value& a, const Value& b) {
  return a.shape == b.shape && a.strides == b.strides && a.offset == b.offset &&
         a.dtype == b.dtype && a.device == b.device;
}

// Whether the caller holds `v`'s memory only as gradients: `v` owns its memory, is not returned,
// and the gradient effects reading it name `v` itself (not a view of it).
bool gives_grad_only(const Graph& g, ValueId v) {
  if (g.values[v].root != v) return false;
  for (ValueId o : g.outputs)
    if (g.values[o].root == v) return false;
  int effects = 0;
  for (const GradEffect& e : g.grad_effects) {
    if (e.value == kNoValue || g.values[e.value].root != v) continue;
    if (e.value != v) return false;
    ++effects;
  }
  return effects > 0;
}

// Row-major dense from offset 0 (strides of size-1 dims do not matter for addressing).
bool dense_at_zero(const Value& v) {
  if (v.offset != 0) return false;
  const Strides want = contiguous_strides(v.shape);
  for (int d = 0; d < v.shape.size(); ++d)
    if (v.shape[d] != 1 && v.strides[d] != want[d]) return false;
  return true;
}

bool any_layout_consumer(OpKind k) {
  return k == OpKind::Unary || k == OpKind::Binary || k == OpKind::Ternary || k == OpKind::Matmul;
}

// The transpose of a 2-D value: the source of a [1,0] permute, or a new permute view (added to
// `inserts`, placed before the node being rewritten).
ValueId transposed(Graph& g, ValueId v, std::vector<Node>& inserts) {
  const int32_t p = g.values[v].producer;
  if (p >= 0 && g.nodes[p].op == OpId::permute && !g.nodes[p].inplace &&
      g.nodes[p].attrs.dims == Dims{1, 0})
    return g.nodes[p].inputs[0];
  const Value src = g.values[v];
  Value t = src;
  t.kind = ValueKind::Node;
  t.shape = Shape{src.shape[1], src.shape[0]};
  t.strides = Strides{src.strides[1], src.strides[0]};
  t.producer = -1;
  t.slot = -1;
  const ValueId id = g.add_value(t);
  g.values[id].root = src.root;
  Node n;
  n.op = OpId::permute;
  n.attrs.dims = Dims{1, 0};
  n.inputs = {v};
  n.out = id;
  inserts.push_back(std::move(n));
  return id;
}

// contiguous(transpose(mm(A, B))) -- how autograd hands a Linear weight its gradient -- is
// mm(B^T, A^T): one GEMM with transposed operands instead of a GEMM plus a transposing copy.
// Only when the product and its transpose are read by nothing else and nothing writes them.
// Not on the CPU: Eigen evaluates the two products with their operands in other roles, which
// rounds differently, and a replay must give eager's bits (the copy costs little there).
bool fold_transposed_product(Graph& g, size_t i, const std::vector<std::vector<int32_t>>& consumers,
                             const std::vector<int64_t>& last_write,
                             std::vector<std::vector<Node>>& inserts) {
  Node& n = g.nodes[i];
  const ValueId v = n.inputs[0];
  const int32_t pv = g.values[v].producer;
  if (pv < 0 || g.nodes[pv].op != OpId::permute || g.nodes[pv].attrs.dims != Dims{1, 0})
    return false;
  const ValueId m = g.nodes[pv].inputs[0];
  if (!g.values[m].device.is_cuda()) return false;
  const int32_t pm = g.values[m].producer;
  if (pm < 0 || g.nodes[pm].op != OpId::mm || g.nodes[pm].inplace) return false;
  if (g.values[m].root != m || last_write[m] >= 0 || last_write[g.values[n.out].root] >= 0)
    return false;
  if (consumers[m].size() != 1 || consumers[v].size() != 1) return false;
  for (ValueId o : g.outputs)
    if (g.values[o].root == m) return false;
  const Value& out = g.values[n.out];
  if (out.dtype != g.values[m].dtype || out.strides != contiguous_strides(out.shape)) return false;
  const ValueId a = g.nodes[pm].inputs[0], b = g.nodes[pm].inputs[1];
  const ValueId bt = transposed(g, b, inserts[i]);
  const ValueId at = transposed(g, a, inserts[i]);
  Node& node = g.nodes[i];  // `g.values` may have grown; the node vector has not
  node.op = OpId::mm;
  node.attrs = Attrs{};
  node.inputs = {bt, at};
  return true;
}

}  // namespace

void canonicalize(Graph& g) {
  const size_t nv = g.values.size();
  const size_t nn = g.nodes.size();
  std::vector<ValueId> w;
  std::vector<int64_t> last_write(nv, -1);  // per root
  for (size_t i = 0; i < nn; ++i) {
    g.writes(g.nodes[i], w);
    for (ValueId r : w) last_write[r] = static_cast<int64_t>(i);
  }
  // Values a caller holds after the replay (by name or through their memory).
  std::vector<char> returned(nv, 0);
  auto mark = [&](ValueId v) { returned[v] = returned[g.values[v].root] = 1; };
  for (ValueId o : g.outputs) mark(o);
  for (const GradEffect& e : g.grad_effects)
    if (e.value != kNoValue) mark(e.value);
  // Consumers of each value, by node index. Only a copy's own consumers are asked for, when the
  // copy is visited, before any of them (all later nodes) was rewritten.
  std::vector<std::vector<int32_t>> consumers(nv);
  for (size_t i = 0; i < nn; ++i)
    for (ValueId in : g.nodes[i].inputs) consumers[in].push_back(static_cast<int32_t>(i));

  std::vector<bool> dead(nn, false);
  std::vector<std::vector<Node>> inserts(nn);  // new nodes to place before node i
  bool any = false;
  for (size_t i = 0; i < nn; ++i) {
    Node& n = g.nodes[i];
    if (n.inplace || n.out == kNoValue || n.inputs.empty()) continue;
    const OpKind kind = op_info(n.op).kind;
    const ValueId x = n.inputs[0];
    const ValueId out = n.out;

    if (kind == OpKind::View) {
      // view(view(x)) reads x directly when x itself admits the final shape with the same layout;
      // the middle view then dies (dce).
      if (n.op == OpId::view) {
        const int32_t p = g.values[x].producer;
        if (g.is_view(x) && p >= 0 && g.nodes[p].op == OpId::view && !g.nodes[p].inplace) {
          const ValueId src = g.nodes[p].inputs[0];
          try {
            const Tensor meta = g.meta_tensor(src);
            const OutputMeta m = infer_meta(OpId::view, std::span<const Tensor>(&meta, 1), n.attrs);
            const Value& o = g.values[out];
            if (m.shape == o.shape && m.strides == o.strides && m.offset == o.offset)
              n.inputs[0] = src;
          } catch (const Error&) {
            // src does not admit the shape directly: keep the chain
          }
        }
      }
      // permute(permute(x)) is one permute of x, by the composed order: autograd makes such
      // pairs (a transposed operand's gradient is a transposed view, transposed back by the
      // permute's backward), and passes that look for a product behind at most one transpose
      // (sum_products) see through them only once the pair is gone.
      if (n.op == OpId::permute) {
        const int32_t p = g.values[x].producer;
        if (p >= 0 && g.nodes[p].op == OpId::permute && !g.nodes[p].inplace) {
          const Dims inner = g.nodes[p].attrs.dims;
          Dims composed = n.attrs.dims;
          for (int d = 0; d < composed.size(); ++d)
            composed[d] = inner[static_cast<int>(n.attrs.dims[d])];
          n.inputs[0] = g.nodes[p].inputs[0];
          n.attrs.dims = composed;
          any = true;
        }
      }
      if (same_layout(g.values[out], g.values[n.inputs[0]])) {
        g.replace_uses(out, n.inputs[0]);
        dead[i] = true;
        any = true;
      }
      continue;
    }

    if (n.op != OpId::cast) continue;
    if (fold_transposed_product(g, i, consumers, last_write, inserts)) {
      any = true;
      continue;
    }
    const Value& xv = g.values[x];
    const Value& ov = g.values[out];
    if (ov.dtype != xv.dtype || n.attrs.dtype != xv.dtype || ov.device != xv.device) continue;
    const ValueId xr = xv.root;
    const ValueKind xrk = g.values[xr].kind;
    if (last_write[out] >= 0 || last_write[xr] > static_cast<int64_t>(i) ||
        xrk == ValueKind::Input || xrk == ValueKind::State)
      continue;
    if (returned[out]) {
      // A gradient that is a copy of an intermediate (autograd copies a gradient that is a view,
      // or that other nodes read): the parameter can hold the intermediate's memory instead,
      // when that memory is the copy's exact bytes, nothing writes it afterwards, and no other
      // gradient or output holds it. A second copy of the same memory stays a copy.
      if (!gives_grad_only(g, out) || returned[xr] || xrk != ValueKind::Node ||
          !dense_at_zero(xv) || xv.numel() != g.values[xr].numel())
        continue;
      g.replace_uses(out, x);
      mark(x);
      dead[i] = true;
      any = true;
      continue;
    }
    // Otherwise the copy is unobservable only if neither side changes afterwards and nobody
    // outside the replay holds the copy; inputs and state keep their copies (their memory is the
    // caller's).
    bool ok = dense_at_zero(xv);
    if (!ok) {
      ok = true;
      for (int32_t c : consumers[out]) ok = ok && any_layout_consumer(op_info(g.nodes[c].op).kind);
    }
    if (!ok) continue;
    g.replace_uses(out, x);
    dead[i] = true;
    any = true;
  }
  if (!any) return;
  std::vector<Node> kept;
  kept.reserve(nn);
  for (size_t i = 0; i < nn; ++i) {
    for (Node& extra : inserts[i]) kept.push_back(std::move(extra));
    if (!dead[i]) kept.push_back(std::move(g.nodes[i]));
  }
  g.nodes = std::move(kept);
  g.groups.clear();
  for (Node& node : g.nodes) node.group = -1;
  g.reindex();
}

}  // namespace ember::jit
