// Canonical forms: views that change nothing disappear, chained reshapes read the original,
// and same-dtype copies (clone/contiguous) disappear where the copy is unobservable and every
// consumer reads any layout (pointwise kernels; GEMMs take transposed operands as flags).
#include <vector>

#include "core/dispatch.h"
#include "jit/passes.h"

namespace ember::jit {
namespace {

bool same_layout(const Value& a, const Value& b) {
  return a.shape == b.shape && a.strides == b.strides && a.offset == b.offset &&
         a.dtype == b.dtype && a.device == b.device;
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
      if (same_layout(g.values[out], g.values[n.inputs[0]])) {
        g.replace_uses(out, n.inputs[0]);
        dead[i] = true;
        any = true;
      }
      continue;
    }

    if (n.op != OpId::cast) continue;
    const Value& xv = g.values[x];
    const Value& ov = g.values[out];
    if (ov.dtype != xv.dtype || n.attrs.dtype != xv.dtype || ov.device != xv.device) continue;
    const ValueId xr = xv.root;
    const ValueKind xrk = g.values[xr].kind;
    // The copy is unobservable only if neither side changes afterwards and nobody outside the
    // replay holds the copy; inputs and state keep their copies (their memory is the caller's).
    if (last_write[out] >= 0 || last_write[xr] > static_cast<int64_t>(i) || returned[out] ||
        xrk == ValueKind::Input || xrk == ValueKind::State)
      continue;
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
  if (any) g.erase_nodes(dead);
}

}  // namespace ember::jit
