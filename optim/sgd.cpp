#include "optim/sgd.h"

#include <cmath>
#include <set>
#include <string>

#include "autograd/grad_mode.h"
#include "core/config_epoch.h"
#include "core/dispatch.h"
#include "core/error.h"
#include "core/factory.h"

namespace ember::optim {

namespace {
// Positions in the device hyperparameter tensor (the sgd_update layout).
enum Hyper : int { kLr = 0, kMomentum = 1, kDampening = 2, kWeightDecay = 3 };
}  // namespace

void SGDOptions::validate() const {
  EMBER_CHECK(lr_ >= 0, "SGD: invalid learning rate ", lr_, " (must be >= 0)");
  EMBER_CHECK(momentum_ >= 0, "SGD: invalid momentum ", momentum_, " (must be >= 0)");
  EMBER_CHECK(weight_decay_ >= 0, "SGD: invalid weight_decay ", weight_decay_, " (must be >= 0)");
  EMBER_CHECK(std::isfinite(dampening_), "SGD: invalid dampening ", dampening_);
  EMBER_CHECK(!nesterov_ || (momentum_ > 0 && dampening_ == 0),
              "SGD: nesterov momentum requires momentum > 0 and dampening == 0, got momentum ",
              momentum_, " and dampening ", dampening_);
}

SGD::SGD(std::vector<Tensor> params, const SGDOptions& options)
    : SGD(std::vector<ParamGroup>{ParamGroup(std::move(params))}, options) {}

SGD::SGD(std::vector<ParamGroup> groups, const SGDOptions& defaults) : Optimizer(defaults.clone()) {
  defaults.validate();
  size_t total = 0;
  for (const ParamGroup& g : groups) total += g.params.size();
  EMBER_CHECK(total > 0, "SGD: got an empty parameter list");
  for (ParamGroup& g : groups) add_param_group(std::move(g));
}

void SGD::validate_options(const OptimizerOptions& options) const {
  const auto* o = dynamic_cast<const SGDOptions*>(&options);
  EMBER_CHECK(o != nullptr, "SGD: a parameter group's options are not SGDOptions");
  o->validate();
}

const SGDOptions& SGD::options(size_t group) const {
  check_group(group, "options");
  return static_cast<const SGDOptions&>(*groups_[group].options);
}

void SGD::on_group_added(size_t group) {
  state_.emplace_back();
  state_[group].buffers.resize(groups_[group].params.size());
  // Device numbers for every device the group uses now; a parameter moved later gets its
  // slot at the next step.
  for (const Tensor& p : groups_[group].params) slot_for(group, p.device());
}

size_t SGD::slot_for(size_t group, Device device) {
  GroupState& st = state_[group];
  for (size_t s = 0; s < st.slots.size(); ++s)
    if (st.slots[s].device == device) return s;
  const SGDOptions& o = options(group);
  DeviceSlot slot;
  slot.device = device;
  const std::vector<float> values = {static_cast<float>(o.lr()), static_cast<float>(o.momentum()),
                                     static_cast<float>(o.dampening()),
                                     static_cast<float>(o.weight_decay())};
  slot.hyper = from_vector(values, {4}, TensorOptions(kFloat32).device(device));
  slot.step = full({}, static_cast<double>(st.steps), TensorOptions(kFloat32).device(device));
  slot.one = full({}, 1.0, TensorOptions(kFloat32).device(device));
  st.slots.push_back(std::move(slot));
  return st.slots.size() - 1;
}

void SGD::write_hyper(size_t group, int which, double value) {
  NoGradGuard no_grad;
  for (DeviceSlot& s : state_[group].slots) s.hyper.narrow(0, which, 1).fill_(value);
}

void SGD::on_lr_changed(size_t group) { write_hyper(group, kLr, options(group).lr()); }

void SGD::set_options(size_t group, const SGDOptions& next) {
  check_group(group, "set_options");
  next.validate();
  const SGDOptions prev = options(group);
  groups_[group].options = next.clone();
  // Values live in device memory a compiled step reads; these change which kernels run.
  if (next.nesterov() != prev.nesterov() || next.maximize() != prev.maximize() ||
      (next.momentum() == 0) != (prev.momentum() == 0))
    bump_config_epoch();
  if (next.lr() != prev.lr()) write_hyper(group, kLr, next.lr());
  if (next.momentum() != prev.momentum()) write_hyper(group, kMomentum, next.momentum());
  if (next.dampening() != prev.dampening()) write_hyper(group, kDampening, next.dampening());
  if (next.weight_decay() != prev.weight_decay())
    write_hyper(group, kWeightDecay, next.weight_decay());
}

void SGD::set_momentum(size_t g, double v) { set_options(g, SGDOptions(options(g)).momentum(v)); }
void SGD::set_dampening(size_t g, double v) { set_options(g, SGDOptions(options(g)).dampening(v)); }
void SGD::set_weight_decay(size_t g, double v) {
  set_options(g, SGDOptions(options(g)).weight_decay(v));
}
void SGD::set_nesterov(size_t g, bool v) { set_options(g, SGDOptions(options(g)).nesterov(v)); }
void SGD::set_maximize(size_t g, bool v) { set_options(g, SGDOptions(options(g)).maximize(v)); }

Tensor SGD::momentum_buffer(size_t group, size_t index) const {
  check_group(group, "momentum_buffer");
  const auto& bufs = state_[group].buffers;
  EMBER_CHECK(index < bufs.size(), "SGD.momentum_buffer: parameter ", index,
              " out of range (group ", group, " has ", bufs.size(), ")");
  return bufs[index];
}

int64_t SGD::steps(size_t group) const {
  check_group(group, "steps");
  // The device counter is the truth: a jit::compile'd step advances it without running this
  // object's host code.
  const GroupState& st = state_[group];
  if (st.slots.empty()) return st.steps;
  return static_cast<int64_t>(st.slots[0].step.item<float>());
}

void SGD::run_update(size_t group, size_t slot, const std::vector<size_t>& idx, bool first_step,
                     bool count_step) {
  const SGDOptions& o = options(group);
  const bool use_buffers = o.momentum() != 0;
  const std::vector<Tensor>& params = groups_[group].params;
  DeviceSlot& s = state_[group].slots[slot];
  if (first_step && !s.zero_step.defined())
    s.zero_step = zeros({}, TensorOptions(kFloat32).device(s.device));
  inputs_.clear();
  inputs_.push_back(s.hyper);
  inputs_.push_back(first_step ? s.zero_step : s.step);
  for (size_t i : idx) inputs_.push_back(params[i]);
  for (size_t i : idx) inputs_.push_back(grads_[i]);
  if (use_buffers)
    for (size_t i : idx) inputs_.push_back(state_[group].buffers[i]);
  Attrs a;
  a.num_tensors = static_cast<int64_t>(idx.size());
  a.nesterov = o.nesterov();
  a.maximize = o.maximize();
  a.momentum_buffers = use_buffers;
  // zero_step is shared and must stay 0: only the slot's own counter is ever counted.
  a.increment_step = count_step && !first_step;
  if (found_inf().defined()) {
    inputs_.push_back(found_inf());  // GradScaler's flag: set, the update changes nothing
    a.skip_if_found_inf = true;
  }
  dispatch(OpId::sgd_update, std::span<const Tensor>(inputs_), a);
  // Let go of the tensors (keeping the capacity): holding them would keep this step's gradients
  // alive through the next forward and backward, and a compiled step's last traced gradients
  // alive for good (its replays never come back here).
  inputs_.clear();
}

void SGD::check_grads() const {
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::vector<Tensor>& params = groups_[g].params;
    for (size_t i = 0; i < params.size(); ++i) {
      const Tensor& p = params[i];
      const Tensor grad = p.grad();
      if (!grad.defined()) continue;
      EMBER_CHECK(p.is_contiguous(), "SGD.step: parameter ", i, " of group ", g, " (shape ",
                  p.sizes(), ", strides ", p.strides(),
                  ") is not contiguous; the update writes parameters in place");
      EMBER_CHECK(
          grad.sizes() == p.sizes() && grad.dtype() == p.dtype() && grad.device() == p.device(),
          "SGD.step: the gradient of parameter ", i, " of group ", g, " is ",
          dtype_name(grad.dtype()), " ", grad.sizes(), " on ", grad.device().str(),
          ", the parameter ", dtype_name(p.dtype()), " ", p.sizes(), " on ", p.device().str());
    }
  }
}

void SGD::step() {
  NoGradGuard no_grad;
  // Everything is checked before anything is written, so a bad gradient leaves parameters,
  // buffers and counters as they were.
  check_grads();
  for (size_t g = 0; g < groups_.size(); ++g) {
    GroupState& st = state_[g];
    const std::vector<Tensor>& params = groups_[g].params;
    const bool use_buffers = options(g).momentum() != 0;
    size_t n_buckets = 0;
    grads_.resize(params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      const Tensor& p = params[i];
      Tensor grad = p.grad();
      grads_[i] = Tensor();
      if (!grad.defined()) continue;  // PyTorch skips parameters without a gradient
      if (!grad.is_contiguous()) grad = grad.contiguous();
      grads_[i] = std::move(grad);
      bool fresh = false;
      if (use_buffers) {
        Tensor& buf = st.buffers[i];
        if (!buf.defined()) {
          buf = zeros(p.sizes(), TensorOptions(p.dtype()).device(p.device()));
          fresh = st.steps > 0;
        } else if (buf.device() != p.device() || buf.dtype() != p.dtype()) {
          buf = buf.to(p.device()).to(p.dtype());  // the parameter moved since
        }
      }
      size_t b = 0;
      while (b < n_buckets && !(buckets_[b].device == p.device() && buckets_[b].dtype == p.dtype()))
        ++b;
      if (b == n_buckets) {
        if (buckets_.size() == n_buckets) buckets_.emplace_back();
        Bucket& nb = buckets_[n_buckets++];
        nb.device = p.device();
        nb.dtype = p.dtype();
        nb.ready.clear();
        nb.fresh.clear();
      }
      (fresh ? buckets_[b].fresh : buckets_[b].ready).push_back(i);
    }
    if (n_buckets == 0) continue;
    for (size_t b = 0; b < n_buckets; ++b) buckets_[b].slot = slot_for(g, buckets_[b].device);
    // Every slot's counter advances once per group step, after every update of the step read
    // it. The last update of a slot that reads the slot's counter (a `ready` one) counts it
    // itself, which saves a kernel per slot; the `fresh` updates read zero_step instead, so
    // their order against that increment does not matter.
    auto counts_later = [&](size_t b) {
      for (size_t later = b + 1; later < n_buckets; ++later)
        if (buckets_[later].slot == buckets_[b].slot && !buckets_[later].ready.empty()) return true;
      return false;
    };
    for (size_t b = 0; b < n_buckets; ++b) {
      const Bucket& bucket = buckets_[b];
      const size_t s = bucket.slot;
      if (!bucket.ready.empty()) run_update(g, s, bucket.ready, false, !counts_later(b));
      // A buffer born after the group's first step must still start as a copy of d_p, as
      // PyTorch's does; a step counter that reads 0 selects that branch of the kernel.
      if (!bucket.fresh.empty()) run_update(g, s, bucket.fresh, true, false);
    }
    // Slots no ready update counted: a device whose parameters had no gradient this step, or
    // whose updates all read zero_step. Counted as before, by a separate increment.
    for (size_t s = 0; s < st.slots.size(); ++s) {
      bool counted = false;
      for (size_t b = 0; b < n_buckets && !counted; ++b)
        counted = buckets_[b].slot == s && !buckets_[b].ready.empty();
      if (!counted) count_step(st.slots[s].step, st.slots[s].one);
    }
    ++st.steps;
    for (Tensor& t : grads_) t = Tensor();
  }
}

// ---- state ----------------------------------------------------------------------------------

namespace {
std::string group_key(size_t g, const char* what) {
  return "param_groups." + std::to_string(g) + "." + what;
}
std::string buffer_key(size_t g, size_t i) {
  return "state." + std::to_string(g) + "." + std::to_string(i) + ".momentum_buffer";
}
const char* flag(bool v) { return v ? "true" : "false"; }

const std::string& need_meta(const OptimizerState& st, const std::string& key) {
  auto it = st.metadata.find(key);
  EMBER_CHECK(it != st.metadata.end(), "SGD.load_state_dict: metadata '", key, "' is missing");
  return it->second;
}
bool parse_flag(const OptimizerState& st, const std::string& key) {
  const std::string& v = need_meta(st, key);
  EMBER_CHECK(v == "true" || v == "false", "SGD.load_state_dict: metadata '", key,
              "' must be true or false, got '", v, "'");
  return v == "true";
}
size_t parse_count(const OptimizerState& st, const std::string& key) {
  const std::string& v = need_meta(st, key);
  size_t pos = 0;
  unsigned long long n = 0;
  try {
    n = std::stoull(v, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  EMBER_CHECK(!v.empty() && pos == v.size() && v[0] != '-', "SGD.load_state_dict: metadata '", key,
              "' must be a count, got '", v, "'");
  return static_cast<size_t>(n);
}
const Tensor& need_tensor(const OptimizerState& st, const std::string& key) {
  auto it = st.tensors.find(key);
  EMBER_CHECK(it != st.tensors.end() && it->second.defined(), "SGD.load_state_dict: tensor '", key,
              "' is missing");
  return it->second;
}
}  // namespace

OptimizerState SGD::state_dict() const {
  OptimizerState out;
  out.metadata["optimizer"] = "SGD";
  out.metadata["param_groups"] = std::to_string(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) {
    const SGDOptions& o = options(g);
    out.metadata[group_key(g, "params")] = std::to_string(groups_[g].params.size());
    out.metadata[group_key(g, "nesterov")] = flag(o.nesterov());
    out.metadata[group_key(g, "maximize")] = flag(o.maximize());
    // float64 on the host so the numbers come back exactly as they were set.
    out.tensors[group_key(g, "options")] = from_vector(
        std::vector<double>{o.lr(), o.momentum(), o.dampening(), o.weight_decay()}, {4});
    const GroupState& st = state_[g];
    out.tensors[group_key(g, "step")] =
        st.slots.empty() ? full({}, static_cast<double>(st.steps), kFloat32) : st.slots[0].step;
    for (size_t i = 0; i < st.buffers.size(); ++i)
      if (st.buffers[i].defined()) out.tensors[buffer_key(g, i)] = st.buffers[i];
  }
  return out;
}

void SGD::load_state_dict(const OptimizerState& in) {
  // Everything is checked before anything changes, so a bad state leaves the optimizer as it was.
  const std::string& kind = need_meta(in, "optimizer");
  EMBER_CHECK(kind == "SGD", "SGD.load_state_dict: the state is for optimizer '", kind, "'");
  const size_t n_groups = parse_count(in, "param_groups");
  EMBER_CHECK(n_groups == groups_.size(), "SGD.load_state_dict: the state has ", n_groups,
              " parameter groups, this optimizer ", groups_.size());
  std::set<std::string> known;
  std::vector<SGDOptions> opts;
  std::vector<double> steps;
  for (size_t g = 0; g < n_groups; ++g) {
    const std::vector<Tensor>& params = groups_[g].params;
    const size_t n = parse_count(in, group_key(g, "params"));
    EMBER_CHECK(n == params.size(), "SGD.load_state_dict: group ", g, " has ", n,
                " parameters in the state, ", params.size(), " in this optimizer");
    const std::string okey = group_key(g, "options"), skey = group_key(g, "step");
    known.insert(okey);
    known.insert(skey);
    const Tensor& ot = need_tensor(in, okey);
    EMBER_CHECK(is_floating(ot.dtype()) && ot.numel() == 4, "SGD.load_state_dict: '", okey,
                "' must hold 4 floating numbers, got ", dtype_name(ot.dtype()), " ", ot.sizes());
    const std::vector<double> v = ot.to_vector<double>();
    SGDOptions o(v[0]);
    o.momentum(v[1]).dampening(v[2]).weight_decay(v[3]);
    o.nesterov(parse_flag(in, group_key(g, "nesterov")));
    o.maximize(parse_flag(in, group_key(g, "maximize")));
    o.validate();
    opts.push_back(o);
    const Tensor& stp = need_tensor(in, skey);
    EMBER_CHECK(is_floating(stp.dtype()) && stp.numel() == 1, "SGD.load_state_dict: '", skey,
                "' must be one floating number, got ", dtype_name(stp.dtype()), " ", stp.sizes());
    const double s = stp.item<double>();
    EMBER_CHECK(s >= 0 && s == std::floor(s) && s < 9.0e15, "SGD.load_state_dict: '", skey,
                "' must be a non-negative whole number, got ", s);
    steps.push_back(s);
    for (size_t i = 0; i < n; ++i) {
      auto it = in.tensors.find(buffer_key(g, i));
      if (it == in.tensors.end()) continue;
      known.insert(it->first);
      const Tensor& b = it->second;
      EMBER_CHECK(b.defined() && is_floating(b.dtype()) && b.sizes() == params[i].sizes(),
                  "SGD.load_state_dict: '", it->first, "' must be a floating tensor of shape ",
                  params[i].sizes(), " like its parameter, got ",
                  b.defined() ? std::string(dtype_name(b.dtype())) : std::string("undefined"), " ",
                  b.defined() ? b.sizes() : Shape{});
    }
  }
  std::string unexpected;
  for (const auto& [key, t] : in.tensors)
    if (!known.count(key)) unexpected += (unexpected.empty() ? "" : ", ") + key;
  EMBER_CHECK(unexpected.empty(), "SGD.load_state_dict: unexpected tensors: ", unexpected);

  NoGradGuard no_grad;
  for (size_t g = 0; g < n_groups; ++g) {
    set_options(g, opts[g]);
    GroupState& st = state_[g];
    st.steps = static_cast<int64_t>(steps[g]);
    for (DeviceSlot& slot : st.slots) slot.step.fill_(steps[g]);
    const std::vector<Tensor>& params = groups_[g].params;
    for (size_t i = 0; i < params.size(); ++i) {
      auto it = in.tensors.find(buffer_key(g, i));
      Tensor& buf = st.buffers[i];
      if (it == in.tensors.end()) {
        buf = Tensor();
        continue;
      }
      const Tensor& p = params[i];
      if (!buf.defined() || buf.device() != p.device() || buf.dtype() != p.dtype())
        buf = zeros(p.sizes(), TensorOptions(p.dtype()).device(p.device()));
      buf.copy_(it->second);
    }
  }
}

}  // namespace ember::optim
