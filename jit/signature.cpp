#include "jit/signature.h"

#include <cstring>
#include <sstream>

#include "core/autocast.h"

namespace ember::jit::detail {

void PlainKey::add(const void* p, size_t n) {
  EMBER_CHECK(size + n <= bytes.size(), "jit::compile: plain arguments take more than ",
              bytes.size(), " bytes; pass large data as tensors");
  std::memcpy(bytes.data() + size, p, n);
  size += n;
}

void PlainKey::end_arg(size_t call_position) {
  EMBER_CHECK(count < kMaxArgs, "jit::compile: more than ", kMaxArgs,
              " plain arguments; pass them in a tensor or capture them");
  ends[count] = static_cast<uint8_t>(size);
  position[count] = static_cast<uint8_t>(call_position);
  ++count;
}

bool PlainKey::operator==(const PlainKey& o) const {
  return size == o.size && count == o.count && std::memcmp(bytes.data(), o.bytes.data(), size) == 0;
}

int32_t alias_of(std::span<const Tensor> t, size_t i) {
  for (size_t j = 0; j < i; ++j)
    if (t[j].is_same(t[i])) return static_cast<int32_t>(j);
  return -1;
}

Signature Signature::of(std::span<const Tensor> tensors, const PlainKey& plain, bool grad_mode) {
  Signature s;
  for (size_t i = 0; i < tensors.size(); ++i) {
    ArgSig a;
    a.sizes = tensors[i].sizes();
    a.strides = tensors[i].strides();
    a.dtype = tensors[i].dtype();
    a.device = tensors[i].device();
    a.requires_grad = tensors[i].requires_grad();
    a.alias = alias_of(tensors, i);
    s.args.push_back(std::move(a));
  }
  s.sym.assign(tensors.size(), 0);
  s.plain = plain;
  s.grad_mode = grad_mode;
  s.autocast = autocast_key();
  return s;
}

namespace {

// Writes the explanation when one is wanted; always reports the miss.
template <class... Parts>
bool miss(std::string* why, const Parts&... parts) {
  if (why) {
    std::ostringstream os;
    (os << ... << parts);
    *why = os.str();
  }
  return false;
}

const char* on_off(bool b) { return b ? "on" : "off"; }

std::string describe_autocast(uint32_t key) {
  std::string out;
  const char* names[2] = {"cpu", "cuda"};
  for (int d = 0; d < 2; ++d) {
    const uint32_t b = (key >> (8 * d)) & 0xff;
    if (!(b & 1)) continue;
    if (!out.empty()) out += ", ";
    out += std::string(names[d]) + " " + std::string(dtype_name(static_cast<DType>(b >> 1)));
  }
  return out.empty() ? "off" : out;
}

}  // namespace

bool fits(const Signature& s, std::span<const Tensor> t, const PlainKey& plain, bool grad_mode,
          std::string* why) {
  if (s.grad_mode != grad_mode)
    return miss(why, "grad mode: ", on_off(s.grad_mode), " -> ", on_off(grad_mode));
  // The traced casts and dtypes hold only for the autocast state they were traced under.
  if (const uint32_t now = autocast_key(); s.autocast != now)
    return miss(why, "autocast state: ", describe_autocast(s.autocast), " -> ",
                describe_autocast(now));
  if (s.args.size() != t.size())
    return miss(why, "number of tensor arguments: ", s.args.size(), " -> ", t.size());
  for (size_t i = 0; i < t.size(); ++i) {
    const ArgSig& a = s.args[i];
    const TensorImpl& x = *t[i].impl();
    if (a.dtype != x.dtype)
      return miss(why, "input ", i, " dtype: ", dtype_name(a.dtype), " -> ", dtype_name(x.dtype));
    if (a.device != x.device)
      return miss(why, "input ", i, " device: ", a.device.str(), " -> ", x.device.str());
    const bool rg = t[i].requires_grad();
    if (a.requires_grad != rg)
      return miss(why, "input ", i, " requires_grad: ", a.requires_grad, " -> ", rg);
    if (a.sizes.size() != x.sizes.size())
      return miss(why, "input ", i, " dims: ", a.sizes.size(), " -> ", x.sizes.size());
    const uint16_t dyn = s.symbolic ? s.sym[i] : 0;
    for (int d = 0; d < a.sizes.size(); ++d)
      if (!(dyn >> d & 1) && a.sizes[d] != x.sizes[d])
        return miss(why, "input ", i, " dim ", d, ": ", a.sizes[d], " -> ", x.sizes[d],
                    s.symbolic ? " (a static dim of a dynamic signature)" : "");
    if (dyn != 0) {
      if (!x.is_contiguous())
        return miss(why, "input ", i, " strides: ", x.strides,
                    " (a dynamic signature takes contiguous arguments)");
    } else if (a.strides != x.strides) {
      return miss(why, "input ", i, " strides: ", a.strides, " -> ", x.strides);
    }
    // Both directions: an argument that stopped or started being another one.
    const int32_t al = (a.alias != -1 || i > 0) ? alias_of(t, i) : -1;
    if (al != a.alias) {
      if (a.alias == -1) return miss(why, "input ", i, " is now the same tensor as input ", al);
      if (al == -1)
        return miss(why, "input ", i, " is no longer the same tensor as input ", a.alias);
      return miss(why, "input ", i, " is now the same tensor as input ", al, " instead of ",
                  a.alias);
    }
  }
  if (s.plain == plain) return true;
  if (s.plain.count != plain.count)
    return miss(why, "number of plain arguments: ", int(s.plain.count), " -> ", int(plain.count));
  size_t begin = 0;
  for (size_t k = 0; k < plain.count; ++k) {
    const size_t end_a = s.plain.ends[k], end_b = plain.ends[k];
    if (end_a != end_b ||
        std::memcmp(s.plain.bytes.data() + begin, plain.bytes.data() + begin, end_a - begin) != 0)
      return miss(why, "argument ", int(plain.position[k]), " (a plain value) changed");
    begin = end_a;
  }
  return miss(why, "a plain argument changed");  // not reached: some argument differs
}

bool grads_fit(std::span<const GradGuard> guards, std::string* why) {
  for (const GradGuard& g : guards) {
    const Tensor cur = g.param.grad();
    if (cur.defined() != g.defined)
      return miss(why, "state ", g.state, " (shape ", g.param.sizes(),
                  ") gradient: ", g.defined ? "set" : "none", " -> ",
                  cur.defined() ? "set" : "none");
    if (!g.bound) continue;
    const TensorImpl& x = *cur.impl();
    if (x.sizes != g.sizes || x.strides != g.strides || x.dtype != g.dtype || x.device != g.device)
      return miss(why, "state ", g.state, " gradient layout: ", dtype_name(g.dtype), g.sizes, "/",
                  g.strides, "@", g.device.str(), " -> ", dtype_name(x.dtype), x.sizes, "/",
                  x.strides, "@", x.device.str());
  }
  return true;
}

}  // namespace ember::jit::detail
