#include "core/autocast.h"

#include <vector>

#include "core/dispatch.h"
#include "core/error.h"

namespace ember {
namespace {

struct DeviceState {
  bool enabled = false;
  DType dtype = kBFloat16;
};

// One parameter's cast: valid while the parameter's storage version is unchanged.
struct CachedCast {
  const TensorImpl* source;
  std::weak_ptr<TensorImpl> alive;  // the source, to tell a reused address from the same tensor
  uint32_t version;
  Tensor cast;
};

struct State {
  DeviceState device[2];
  int open = 0;  // regions open (enabled or not), for dropping the cache at the outermost end
  std::vector<CachedCast> cache;
};

thread_local State t_state;

int index_of(DeviceType d) { return d == DeviceType::CPU ? 0 : 1; }

void refresh_any() {
  autocast_detail::t_any_enabled = t_state.device[0].enabled || t_state.device[1].enabled;
}

Tensor cast_to(const Tensor& t, DType to) {
  // Parameters (leaves that require grad) are cast once per region while unchanged; anything
  // else is an activation, cast where it is used.
  const bool cacheable = t.requires_grad() && t.is_leaf();
  const TensorImpl* key = t.impl();
  if (cacheable)
    for (CachedCast& c : t_state.cache)
      if (c.source == key && c.cast.dtype() == to && !c.alive.expired()) {
        if (c.version == t.version()) return c.cast;
        c.cast = Tensor();
        c.source = nullptr;
        break;
      }
  Tensor out = t.to(to);
  if (cacheable) t_state.cache.push_back({key, t.impl_ptr(), t.version(), out});
  return out;
}

// Floating tensors autocast may cast: not float64, as PyTorch leaves doubles alone.
bool eligible(const Tensor& t) {
  return t.defined() && is_floating(t.dtype()) && t.dtype() != kFloat64;
}

}  // namespace

AutocastGuard::AutocastGuard(DeviceType device, DType dtype, bool enabled) : device_(device) {
  EMBER_CHECK(dtype == kBFloat16 || dtype == kFloat16,
              "autocast: the low dtype is bfloat16 or float16, got ", dtype_name(dtype));
  DeviceState& s = t_state.device[index_of(device)];
  prev_enabled_ = s.enabled;
  prev_dtype_ = s.dtype;
  s.enabled = enabled;
  s.dtype = dtype;
  ++t_state.open;
  refresh_any();
}

AutocastGuard::~AutocastGuard() {
  DeviceState& s = t_state.device[index_of(device_)];
  s.enabled = prev_enabled_;
  s.dtype = prev_dtype_;
  if (--t_state.open == 0) t_state.cache.clear();
  refresh_any();
}

bool autocast_enabled(DeviceType device) { return t_state.device[index_of(device)].enabled; }
DType autocast_dtype(DeviceType device) { return t_state.device[index_of(device)].dtype; }

uint32_t autocast_key() {
  uint32_t k = 0;
  for (int d = 0; d < 2; ++d) {
    const DeviceState& s = t_state.device[d];
    if (s.enabled) k |= (1u | (static_cast<uint32_t>(s.dtype) << 1)) << (8 * d);
  }
  return k;
}

namespace autocast_detail {

void clear_cache() { t_state.cache.clear(); }

bool cast_inputs(OpId op, std::span<const Tensor> in, std::span<Tensor> out) {
  const AutocastPolicy policy = op_info(op).autocast;
  if (policy == AutocastPolicy::None || in.empty()) return false;
  // The op runs where its first tensor lives; that device type's region decides.
  Device dev;
  bool found = false;
  for (const Tensor& t : in)
    if (t.defined()) {
      dev = t.device();
      found = true;
      break;
    }
  if (!found) return false;
  const DeviceState& s = t_state.device[index_of(dev.type)];
  if (!s.enabled) return false;
  DType to = s.dtype;
  if (policy == AutocastPolicy::Fp32) {
    to = kFloat32;
  } else if (policy == AutocastPolicy::Promote) {
    // The widest floating dtype among the inputs (float32 over either 16-bit type).
    bool any16 = false, any32 = false;
    DType first16 = kFloat32;
    for (const Tensor& t : in) {
      if (!eligible(t)) continue;
      if (t.dtype() == kFloat32) {
        any32 = true;
      } else if (!any16) {
        any16 = true;
        first16 = t.dtype();
      } else if (t.dtype() != first16) {
        any32 = true;  // bfloat16 with float16: float32 holds both
      }
    }
    if (!any16 || !any32) return false;
    to = kFloat32;
  }
  bool any = false;
  for (size_t i = 0; i < in.size(); ++i) {
    const Tensor& t = in[i];
    const bool cast = eligible(t) && t.dtype() != to &&
                      (policy != AutocastPolicy::Fp32 || t.dtype() != kFloat32);
    if (cast) any = true;
    out[i] = cast ? cast_to(t, to) : t;
  }
  return any;
}

}  // namespace autocast_detail

Tensor autocast_lower(const Tensor& t) {
  if (!autocast_detail::any_enabled() || !eligible(t)) return t;
  const DeviceState& s = t_state.device[index_of(t.device().type)];
  if (!s.enabled || t.dtype() == s.dtype) return t;
  return cast_to(t, s.dtype);
}

Tensor autocast_fp32(const Tensor& t) {
  if (!autocast_detail::any_enabled() || !eligible(t) || t.dtype() == kFloat32) return t;
  if (!t_state.device[index_of(t.device().type)].enabled) return t;
  return cast_to(t, kFloat32);
}

}  // namespace ember
