#include "optim/grad_scaler.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "core/dispatch.h"
#include "core/error.h"
#include "core/factory.h"
#include "core/ops.h"
#include "nn/serialize.h"

namespace ember::optim {
namespace {

void check_options(const GradScalerOptions& o) {
  EMBER_CHECK(std::isfinite(o.init_scale) && o.init_scale > 0,
              "GradScaler: init_scale must be positive and finite, got ", o.init_scale);
  EMBER_CHECK(std::isfinite(o.growth_factor) && o.growth_factor > 1,
              "GradScaler: growth_factor must be above 1, got ", o.growth_factor);
  EMBER_CHECK(std::isfinite(o.backoff_factor) && o.backoff_factor > 0 && o.backoff_factor < 1,
              "GradScaler: backoff_factor must be in (0, 1), got ", o.backoff_factor);
  EMBER_CHECK(o.growth_interval > 0, "GradScaler: growth_interval must be positive, got ",
              o.growth_interval);
}

Tensor scalar(double v, Device d) { return full({}, v, TensorOptions(kFloat32).device(d)); }

// A double as text that reads back to the same double.
std::string exact(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

// The number a state's metadata entry `key` holds, if it has one.
std::optional<double> metadata_number(const OptimizerState& st, const char* key) {
  const auto it = st.metadata.find(key);
  if (it == st.metadata.end()) return std::nullopt;
  const char* text = it->second.c_str();
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  EMBER_CHECK(end != text && *end == '\0', "GradScaler.load_state_dict: ", key, " '", it->second,
              "' is not a number");
  return v;
}

}  // namespace

GradScaler::GradScaler(Device device, GradScalerOptions options)
    : device_(device), options_(options) {
  check_options(options_);
  scale_ = scalar(options_.init_scale, device_);
  growth_tracker_ = scalar(0, device_);
  found_inf_ = scalar(0, device_);
  one_ = scalar(1, device_);
}

Tensor GradScaler::scale(const Tensor& loss) const {
  if (!options_.enabled) return loss;
  EMBER_CHECK(loss.defined() && is_floating(loss.dtype()),
              "GradScaler.scale: expected a floating loss");
  EMBER_CHECK(loss.device() == device_, "GradScaler.scale: the loss is on ", loss.device().str(),
              " but the scaler on ", device_.str());
  return mul(loss.dtype() == kFloat32 ? loss : loss.to(kFloat32), scale_);
}

void GradScaler::unscale_(Optimizer& opt) {
  if (!options_.enabled) return;
  EMBER_CHECK(std::find(unscaled_.begin(), unscaled_.end(), &opt) == unscaled_.end(),
              "GradScaler.unscale_: already called for this ", opt.name(),
              " since the last update()");
  NoGradGuard no_grad;
  // The gradients by dtype, one amp_unscale each; checked first, so a bad one changes nothing.
  std::vector<Tensor> by_dtype[4];
  auto slot_of = [](DType t) {
    return t == kFloat32 ? 0 : t == kFloat16 ? 1 : t == kBFloat16 ? 2 : 3;
  };
  for (size_t g = 0; g < opt.num_groups(); ++g)
    for (const Tensor& p : opt.param_groups()[g].params) {
      Tensor grad = p.grad();
      if (!grad.defined()) continue;
      EMBER_CHECK(grad.device() == device_, "GradScaler.unscale_: a gradient of group ", g,
                  " is on ", grad.device().str(), " but the scaler on ", device_.str());
      EMBER_CHECK(is_floating(grad.dtype()), "GradScaler.unscale_: a gradient of group ", g,
                  " has dtype ", dtype_name(grad.dtype()));
      EMBER_CHECK(grad.is_contiguous(), "GradScaler.unscale_: a gradient of group ", g, " (",
                  grad.sizes(), ", strides ", grad.strides(), ") is not contiguous");
      by_dtype[slot_of(grad.dtype())].push_back(std::move(grad));
    }
  // inv_scale as PyTorch forms it: the reciprocal in double, rounded to float32.
  const Tensor inv = div(one_.to(kFloat64), scale_.to(kFloat64)).to(kFloat32).view({1});
  for (std::vector<Tensor>& grads : by_dtype) {
    if (grads.empty()) continue;
    std::vector<Tensor> in;
    in.reserve(grads.size() + 2);
    in.push_back(inv);
    in.push_back(found_inf_);
    for (Tensor& g : grads) in.push_back(g);
    Attrs a;
    a.num_tensors = static_cast<int64_t>(grads.size());
    a.grads_only = true;
    dispatch(OpId::amp_unscale, std::span<const Tensor>(in), a);
  }
  unscaled_.push_back(&opt);
}

void GradScaler::step(Optimizer& opt) {
  if (!options_.enabled) {
    opt.step();
    return;
  }
  if (std::find(unscaled_.begin(), unscaled_.end(), &opt) == unscaled_.end()) unscale_(opt);
  opt.step_unless_found_inf(found_inf_);
}

void GradScaler::update() {
  if (!options_.enabled) return;
  NoGradGuard no_grad;
  const Tensor found = gt(found_inf_, 0.0);
  const Tensor counted = add(growth_tracker_, 1.0);
  const Tensor grow = ge(counted, static_cast<double>(options_.growth_interval));
  const Tensor grown = mul(scale_, options_.growth_factor);
  const Tensor grown_ok = lt(abs(grown), std::numeric_limits<double>::infinity());
  const Tensor kept = where(grow, where(grown_ok, grown, scale_), scale_);
  const Tensor new_scale = where(found, mul(scale_, options_.backoff_factor), kept);
  const Tensor new_tracker = where(found, 0.0, where(grow, 0.0, counted));
  scale_.copy_(new_scale);
  growth_tracker_.copy_(new_tracker);
  found_inf_.fill_(0.0);
  unscaled_.clear();
}

double GradScaler::get_scale() const { return options_.enabled ? scale_.item<float>() : 1.0; }

OptimizerState GradScaler::state_dict() const {
  OptimizerState st;
  st.tensors["scale"] = scale_.cpu();
  st.tensors["growth_tracker"] = growth_tracker_.cpu();
  st.metadata["scaler"] = "GradScaler";
  st.metadata["growth_factor"] = exact(options_.growth_factor);
  st.metadata["backoff_factor"] = exact(options_.backoff_factor);
  st.metadata["growth_interval"] = std::to_string(options_.growth_interval);
  return st;
}

void GradScaler::load_state_dict(const OptimizerState& st) {
  auto get = [&](const char* key) -> const Tensor& {
    const auto it = st.tensors.find(key);
    EMBER_CHECK(it != st.tensors.end(), "GradScaler.load_state_dict: no tensor '", key, "'");
    EMBER_CHECK(it->second.numel() == 1 && it->second.dtype() == kFloat32,
                "GradScaler.load_state_dict: '", key, "' must be a float32 scalar, got ",
                dtype_name(it->second.dtype()), " ", it->second.sizes());
    return it->second;
  };
  const Tensor& s = get("scale");
  const Tensor& t = get("growth_tracker");
  const auto kind = st.metadata.find("scaler");
  EMBER_CHECK(kind != st.metadata.end() && kind->second == "GradScaler",
              "GradScaler.load_state_dict: not a GradScaler state");
  const double sv = s.item<float>(), tv = t.item<float>();
  EMBER_CHECK(std::isfinite(sv) && sv > 0, "GradScaler.load_state_dict: scale ", sv,
              " is not positive and finite");
  EMBER_CHECK(tv >= 0 && tv == std::floor(tv), "GradScaler.load_state_dict: growth_tracker ", tv,
              " is not a count");
  // The growth parameters come with the state, as PyTorch's load_state_dict takes them (an entry
  // the state lacks keeps this scaler's value); checked like the constructor's before anything
  // changes.
  GradScalerOptions next = options_;
  if (auto v = metadata_number(st, "growth_factor")) next.growth_factor = *v;
  if (auto v = metadata_number(st, "backoff_factor")) next.backoff_factor = *v;
  if (auto v = metadata_number(st, "growth_interval")) {
    EMBER_CHECK(*v == std::floor(*v) && *v >= 1 && *v < 9.2e18,
                "GradScaler.load_state_dict: growth_interval ", *v, " is not a positive count");
    next.growth_interval = static_cast<int64_t>(*v);
  }
  try {
    check_options(next);
  } catch (const Error& e) {
    throw Error(std::string("GradScaler.load_state_dict: ") + e.what());
  }
  scale_.copy_(s.reshape(scale_.sizes()).to(device_));
  growth_tracker_.copy_(t.reshape(growth_tracker_.sizes()).to(device_));
  options_ = next;
}

void save(const GradScaler& scaler, const std::string& path) {
  const OptimizerState state = scaler.state_dict();
  nn::save_tensors(state.tensors, path, state.metadata);
}

void load(GradScaler& scaler, const std::string& path) {
  nn::TensorFile file = nn::load_tensor_file(path);
  OptimizerState state{std::move(file.tensors), std::move(file.metadata)};
  try {
    scaler.load_state_dict(state);
  } catch (const Error& e) {
    throw Error(std::string("optim::load: ") + path + ": " + e.what());
  }
}

}  // namespace ember::optim
