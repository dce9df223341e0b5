#include "jit/dynamic.h"

#include <cmath>
#include <sstream>

#include "core/dispatch.h"
#include "core/philox.h"
#include "jit/fingerprint.h"

namespace ember::jit {
namespace {

bool same_meta_kind(const Value& a, const Value& b) {
  return a.kind == b.kind && a.dtype == b.dtype && a.device == b.device && a.root == b.root &&
         a.slot == b.slot && a.shape.size() == b.shape.size();
}

// Attrs with their size-bearing fields cleared, for comparing the rest.
Attrs sizeless(Attrs a) {
  a.shape = Shape();
  a.start = a.end = 0;
  a.range_start = a.range_end = 0;
  a.offset = 0;  // random offsets are recomputed from sizes
  return a;
}

std::string attrs_bytes(const Attrs& a) {
  Graph g;
  Node n;
  n.attrs = a;
  g.nodes.push_back(n);
  return fingerprint(g);
}

struct Finder {
  const std::vector<std::pair<int64_t, int64_t>>& pairs;  // per symbol: (a, b)
  // k with ea = k*a and eb = k*b for some symbol; false when none.
  bool linear(double ea, double eb, double& k, int32_t& sym) const {
    for (size_t s = 0; s < pairs.size(); ++s) {
      const double a = static_cast<double>(pairs[s].first),
                   b = static_cast<double>(pairs[s].second);
      if (a == 0 || b == 0) continue;
      const double ka = ea / a, kb = eb / b;
      if (ka == kb && std::floor(ka) == ka) {
        k = ka;
        sym = static_cast<int32_t>(s);
        return true;
      }
    }
    return false;
  }
};

}  // namespace

std::string SymbolicTemplate::describe() const {
  std::ostringstream os;
  for (size_t s = 0; s < symbols.size(); ++s) {
    if (s) os << "; ";
    for (size_t i = 0; i < symbols[s].size(); ++i)
      os << (i ? " and " : "") << "input " << symbols[s][i].arg << " dim " << symbols[s][i].dim;
    os << " as s" << s;
  }
  return os.str();
}

std::optional<SymbolicTemplate> generalize(const Graph& a, const Graph& b,
                                           const std::vector<uint16_t>& allowed, std::string* why) {
  auto fail = [&](std::string w) -> std::optional<SymbolicTemplate> {
    if (why) *why = std::move(w);
    return std::nullopt;
  };
  if (a.nodes.size() != b.nodes.size() || a.values.size() != b.values.size() ||
      a.inputs != b.inputs || a.outputs != b.outputs || a.state.size() != b.state.size() ||
      a.constants.size() != b.constants.size() || a.grad_effects.size() != b.grad_effects.size())
    return fail("the two traces differ in structure");
  SymbolicTemplate t;
  std::vector<std::pair<int64_t, int64_t>> pairs;
  for (size_t i = 0; i < a.inputs.size(); ++i) {
    const Value& va = a.values[a.inputs[i]];
    const Value& vb = b.values[b.inputs[i]];
    if (va.shape.size() != vb.shape.size()) return fail("an input changed rank");
    for (int d = 0; d < va.shape.size(); ++d) {
      if (va.shape[d] == vb.shape[d]) continue;
      if (i >= allowed.size() || !(allowed[i] >> d & 1))
        return fail("input " + std::to_string(i) + " dim " + std::to_string(d) + " is not dynamic");
      const std::pair<int64_t, int64_t> p{va.shape[d], vb.shape[d]};
      size_t s = 0;
      while (s < pairs.size() && pairs[s] != p) ++s;
      if (s == pairs.size()) {
        pairs.push_back(p);
        t.symbols.emplace_back();
      }
      t.symbols[s].push_back({static_cast<int32_t>(i), d});
    }
  }
  if (pairs.empty()) return fail("no input dim changed");
  for (size_t i = 0; i < a.values.size(); ++i)
    if (!same_meta_kind(a.values[i], b.values[i])) return fail("value kinds or dtypes differ");
  for (size_t i = 0; i < a.state.size(); ++i)
    if (!a.state[i].is_same(b.state[i])) return fail("the traces read different state");
  for (size_t i = 0; i < a.grad_effects.size(); ++i)
    if (a.grad_effects[i].state != b.grad_effects[i].state ||
        a.grad_effects[i].value != b.grad_effects[i].value)
      return fail("the traces set different gradients");
  if (a.grad_inputs.size() != b.grad_inputs.size())
    return fail("the traces read different gradients");
  for (size_t i = 0; i < a.grad_inputs.size(); ++i)
    if (a.grad_inputs[i].param != b.grad_inputs[i].param ||
        a.grad_inputs[i].value != b.grad_inputs[i].value ||
        a.grad_inputs[i].defined != b.grad_inputs[i].defined)
      return fail("the traces read different gradients");
  const Finder find{pairs};
  using Field = SymbolicTemplate::Field;
  for (size_t i = 0; i < a.nodes.size(); ++i) {
    const Node& na = a.nodes[i];
    const Node& nb = b.nodes[i];
    if (na.op != nb.op || na.inputs != nb.inputs || na.out != nb.out || na.inplace != nb.inplace ||
        na.inplace_of != nb.inplace_of ||
        attrs_bytes(sizeless(na.attrs)) != attrs_bytes(sizeless(nb.attrs)))
      return fail("op " + std::to_string(i) + " (" + std::string(op_name(nb.op)) + ") differs");
    auto field = [&](double ea, double eb, Field f, int32_t index) {
      if (ea == eb) return true;
      SymbolicTemplate::Patch p;
      p.node = static_cast<int32_t>(i);
      p.field = f;
      p.index = index;
      if (!find.linear(ea, eb, p.k, p.symbol)) return false;
      t.patches.push_back(p);
      return true;
    };
    if (na.attrs.shape.size() != nb.attrs.shape.size())
      return fail("op " + std::to_string(i) + " changed the rank of its shape");
    bool ok = true;
    for (int d = 0; d < na.attrs.shape.size() && ok; ++d)
      ok = field(static_cast<double>(na.attrs.shape[d]), static_cast<double>(nb.attrs.shape[d]),
                 Field::Shape, d);
    ok = ok && field(static_cast<double>(na.attrs.start), static_cast<double>(nb.attrs.start),
                     Field::Start, 0);
    ok = ok &&
         field(static_cast<double>(na.attrs.end), static_cast<double>(nb.attrs.end), Field::End, 0);
    ok = ok && field(na.attrs.range_start, nb.attrs.range_start, Field::RangeStart, 0);
    ok = ok && field(na.attrs.range_end, nb.attrs.range_end, Field::RangeEnd, 0);
    if (!ok)
      return fail("a size in op " + std::to_string(i) + " (" + std::string(op_name(nb.op)) +
                  ") is not a multiple of one changed input dim");
  }
  for (size_t c = 0; c < a.constants.size(); ++c) {
    const Tensor& ca = a.constants[c];
    const Tensor& cb = b.constants[c];
    if (ca.sizes() != cb.sizes() || ca.dtype() != cb.dtype()) return fail("constants differ");
    if (ca.nbytes() == 0 ||
        std::memcmp(ca.raw_data(), cb.raw_data(), static_cast<size_t>(ca.nbytes())) == 0)
      continue;
    // A wrapped number scaling with a size: k*s (a count) or k/s (a mean's 1/N).
    if (!ca.impl()->wrapped_number || !is_floating(ca.dtype()))
      return fail("host constant " + std::to_string(c) + " changed between the traces");
    const double va = ca.item<double>(), vb = cb.item<double>();
    SymbolicTemplate::Patch p;
    p.node = static_cast<int32_t>(c);
    p.field = Field::Constant;
    bool found = find.linear(va, vb, p.k, p.symbol);
    if (!found) {
      for (size_t s = 0; s < pairs.size() && !found; ++s) {
        const double ka = va * static_cast<double>(pairs[s].first);
        const double kb = vb * static_cast<double>(pairs[s].second);
        if (std::fabs(ka - kb) <= 1e-6 * std::fabs(ka)) {
          found = true;
          p.k = ka;
          p.reciprocal = true;
          p.symbol = static_cast<int32_t>(s);
        }
      }
    }
    if (!found) return fail("host constant " + std::to_string(c) + " changed between the traces");
    t.patches.push_back(p);
  }
  t.graph = b;
  // Self-check: instantiating at b's own sizes must give b's layouts exactly.
  std::vector<Tensor> metas;
  for (ValueId v : b.inputs) metas.push_back(b.meta_tensor(v));
  std::vector<int64_t> sv;
  try {
    if (!symbol_values(t, metas, sv)) return fail("symbol values disagree");
    const Graph check = instantiate(t, metas, sv);
    for (size_t i = 0; i < b.values.size(); ++i) {
      const Value& x = check.values[i];
      const Value& y = b.values[i];
      if (x.shape != y.shape || x.strides != y.strides || x.offset != y.offset)
        return fail("re-deriving the layouts at the traced sizes does not reproduce value " +
                    std::to_string(i));
    }
  } catch (const Error& e) {
    return fail(std::string("re-deriving the layouts failed: ") + e.what());
  }
  return t;
}

bool symbol_values(const SymbolicTemplate& t, std::span<const Tensor> args,
                   std::vector<int64_t>& values) {
  values.resize(t.symbols.size());
  for (size_t s = 0; s < t.symbols.size(); ++s) {
    const auto& dims = t.symbols[s];
    values[s] = args[dims[0].arg].size(dims[0].dim);
    for (const auto& d : dims)
      if (args[d.arg].size(d.dim) != values[s]) return false;
  }
  return true;
}

Graph instantiate(const SymbolicTemplate& t, std::span<const Tensor> args,
                  const std::vector<int64_t>& sv) {
  Graph g = t.graph;
  using Field = SymbolicTemplate::Field;
  for (const SymbolicTemplate::Patch& p : t.patches) {
    const double s = static_cast<double>(sv[p.symbol]);
    if (p.field == Field::Constant) {
      const Tensor& old = g.constants[p.node];
      EMBER_CHECK(s != 0 || !p.reciprocal, "jit dynamic: a size-dependent constant divides by 0");
      Tensor c = wrap_scalar(p.reciprocal ? p.k / s : p.k * s, old.dtype());
      g.constants[p.node] = c;
      continue;
    }
    Attrs& a = g.nodes[p.node].attrs;
    const double v = p.k * s;
    switch (p.field) {
      case Field::Shape:
        a.shape[p.index] = static_cast<int64_t>(v);
        break;
      case Field::Start:
        a.start = static_cast<int64_t>(v);
        break;
      case Field::End:
        a.end = static_cast<int64_t>(v);
        break;
      case Field::RangeStart:
        a.range_start = v;
        break;
      case Field::RangeEnd:
        a.range_end = v;
        break;
      case Field::Constant:
        break;
    }
  }
  for (size_t i = 0; i < g.inputs.size(); ++i) {
    Value& v = g.values[g.inputs[i]];
    if (v.slot != static_cast<int32_t>(i)) continue;
    v.shape = args[i].sizes();
    v.strides = args[i].strides();
    v.offset = args[i].storage_offset();
  }
  uint64_t rng = 0;
  std::vector<Tensor> metas;
  for (Node& n : g.nodes) {
    const OpKind kind = op_info(n.op).kind;
    if (kind == OpKind::Random) {
      n.attrs.offset = rng;
      rng += philox::counters_for(static_cast<uint64_t>(numel_of(n.attrs.shape)));
    }
    if (n.inplace) {
      const Value& target = g.values[n.inplace_of];
      Value& out = g.values[n.out];
      out.shape = target.shape;
      out.strides = target.strides;
      out.offset = target.offset;
      continue;
    }
    if (kind == OpKind::Nullary) {
      Value& out = g.values[n.out];
      out.shape = n.attrs.shape;
      out.strides = contiguous_strides(out.shape);
      out.offset = 0;
      continue;
    }
    metas.clear();
    for (ValueId v : n.inputs) metas.push_back(g.meta_tensor(v));
    const OutputMeta m = infer_meta(n.op, metas, n.attrs);
    if (n.out == kNoValue) continue;
    Value& out = g.values[n.out];
    out.shape = m.shape;
    if (kind == OpKind::View) {
      out.strides = m.strides;
      out.offset = m.offset;
    } else {
      out.strides = contiguous_strides(m.shape);
      out.offset = 0;
    }
  }
  return g;
}

}  // namespace ember::jit
