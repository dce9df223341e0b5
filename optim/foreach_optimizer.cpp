#include "optim/foreach_optimizer.h"

#include <cmath>
#include <set>

#include "autograd/grad_mode.h"
#include "core/config_epoch.h"
#include "core/dispatch.h"
#include "core/error.h"
#include "core/factory.h"

namespace ember::optim {

ForeachOptimizer::ForeachOptimizer(std::unique_ptr<OptimizerOptions> defaults,
                                   std::vector<std::string> states,
                                   std::vector<std::string> flag_names, size_t device_hyper)
    : Optimizer(std::move(defaults)),
      state_names_(std::move(states)),
      flag_names_(std::move(flag_names)),
      device_hyper_(device_hyper) {}

void ForeachOptimizer::add_groups(std::vector<ParamGroup> groups) {
  validate_options(*defaults_);
  size_t total = 0;
  for (const ParamGroup& g : groups) total += g.params.size();
  EMBER_CHECK(total > 0, name(), ": got an empty parameter list");
  for (ParamGroup& g : groups) add_param_group(std::move(g));
}

void ForeachOptimizer::on_group_added(size_t group) {
  state_.emplace_back();
  state_[group].spec = spec(*groups_[group].options);
  state_[group].states.assign(state_names_.size(),
                              std::vector<Tensor>(groups_[group].params.size()));
  for (const Tensor& p : groups_[group].params) slot_for(group, p.device());
}

size_t ForeachOptimizer::slot_for(size_t group, Device device) {
  GroupState& st = state_[group];
  for (size_t s = 0; s < st.slots.size(); ++s)
    if (st.slots[s].device == device) return s;
  std::vector<double> values = option_values(*groups_[group].options);
  values.resize(device_hyper_);
  DeviceSlot slot;
  slot.device = device;
  slot.hyper = from_vector(values, {static_cast<int64_t>(device_hyper_)},
                           TensorOptions(kFloat64).device(device));
  slot.step = full({}, static_cast<double>(st.steps), TensorOptions(kFloat32).device(device));
  slot.one = full({}, 1.0, TensorOptions(kFloat32).device(device));
  st.slots.push_back(std::move(slot));
  return st.slots.size() - 1;
}

void ForeachOptimizer::write_hyper(size_t group) {
  NoGradGuard no_grad;
  const std::vector<double> values = option_values(*groups_[group].options);
  for (DeviceSlot& s : state_[group].slots) {
    // One fill per number: no host tensor to copy from, and nothing read back.
    for (size_t k = 0; k < device_hyper_; ++k)
      s.hyper.narrow(0, static_cast<int64_t>(k), 1).fill_(values[k]);
  }
}

void ForeachOptimizer::on_lr_changed(size_t group) {
  NoGradGuard no_grad;
  const double lr = groups_[group].options->get_lr();
  for (DeviceSlot& s : state_[group].slots) s.hyper.narrow(0, 0, 1).fill_(lr);
}

void ForeachOptimizer::replace_options(size_t group, std::unique_ptr<OptimizerOptions> next) {
  check_group(group, "set_options");
  validate_options(*next);
  const UpdateSpec before = spec(*groups_[group].options), after = spec(*next);
  // Numbers live in device memory a compiled step reads; flags change which kernel runs and
  // which tensors it reads, so a compiled step must retrace.
  if (before.keeps != after.keeps || !attrs_equal(before.flags, after.flags)) bump_config_epoch();
  groups_[group].options = std::move(next);
  state_[group].spec = after;
  write_hyper(group);
}

Tensor ForeachOptimizer::state(size_t group, size_t index, std::string_view which) const {
  check_group(group, "state");
  const GroupState& st = state_[group];
  for (size_t k = 0; k < state_names_.size(); ++k) {
    if (state_names_[k] != which) continue;
    EMBER_CHECK(index < st.states[k].size(), name(), ".state: parameter ", index,
                " out of range (group ", group, " has ", st.states[k].size(), ")");
    return st.states[k][index];
  }
  EMBER_FAIL(name(), ".state: no state named '", which, "'");
}

int64_t ForeachOptimizer::steps(size_t group) const {
  check_group(group, "steps");
  const GroupState& st = state_[group];
  if (st.slots.empty()) return st.steps;
  return static_cast<int64_t>(st.slots[0].step.item<float>());
}

void ForeachOptimizer::check_grads() const {
  for (size_t g = 0; g < groups_.size(); ++g) {
    const std::vector<Tensor>& params = groups_[g].params;
    for (size_t i = 0; i < params.size(); ++i) {
      const Tensor& p = params[i];
      const Tensor grad = p.grad();
      if (!grad.defined()) continue;
      EMBER_CHECK(p.is_contiguous(), name(), ".step: parameter ", i, " of group ", g, " (shape ",
                  p.sizes(), ", strides ", p.strides(),
                  ") is not contiguous; the update writes parameters in place");
      EMBER_CHECK(
          grad.sizes() == p.sizes() && grad.dtype() == p.dtype() && grad.device() == p.device(),
          name(), ".step: the gradient of parameter ", i, " of group ", g, " is ",
          dtype_name(grad.dtype()), " ", grad.sizes(), " on ", grad.device().str(),
          ", the parameter ", dtype_name(p.dtype()), " ", p.sizes(), " on ", p.device().str());
    }
  }
}

void ForeachOptimizer::run_update(size_t group, size_t slot, const std::vector<size_t>& idx,
                                  bool count_step) {
  GroupState& st = state_[group];
  const UpdateSpec& sp = st.spec;
  const std::vector<Tensor>& params = groups_[group].params;
  DeviceSlot& s = st.slots[slot];
  inputs_.clear();
  inputs_.push_back(s.hyper);
  inputs_.push_back(s.step);
  for (size_t i : idx) inputs_.push_back(params[i]);
  for (size_t i : idx) inputs_.push_back(grads_[i]);
  int64_t kept = 0;
  for (size_t k = 0; k < state_names_.size(); ++k) {
    if (!sp.keeps[k]) continue;
    ++kept;
    for (size_t i : idx) inputs_.push_back(st.states[k][i]);
  }
  Attrs a = sp.flags;
  a.num_tensors = static_cast<int64_t>(idx.size());
  a.num_states = kept;
  a.increment_step = count_step;
  if (found_inf().defined()) {
    inputs_.push_back(found_inf());  // GradScaler's flag: set, the update changes nothing
    a.skip_if_found_inf = true;
  }
  dispatch(sp.op, std::span<const Tensor>(inputs_), a);
  // Let go of the tensors (keeping the capacity): holding them would keep this step's gradients
  // alive through the next forward and backward.
  inputs_.clear();
}

void ForeachOptimizer::step() {
  NoGradGuard no_grad;
  // Everything is checked before anything is written, so a bad gradient leaves parameters,
  // states and counters as they were.
  check_grads();
  for (size_t g = 0; g < groups_.size(); ++g) {
    GroupState& st = state_[g];
    const std::vector<Tensor>& params = groups_[g].params;
    const OptimizerOptions& o = *groups_[g].options;
    const UpdateSpec& sp = st.spec;
    size_t n_buckets = 0;
    grads_.resize(params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      const Tensor& p = params[i];
      Tensor grad = p.grad();
      grads_[i] = Tensor();
      if (!grad.defined()) continue;  // PyTorch skips parameters without a gradient
      if (!grad.is_contiguous()) grad = grad.contiguous();
      grads_[i] = std::move(grad);
      for (size_t k = 0; k < state_names_.size(); ++k) {
        if (!sp.keeps[k]) continue;
        Tensor& t = st.states[k][i];
        if (!t.defined())
          t = full(p.sizes(), state_init(o, k), TensorOptions(p.dtype()).device(p.device()));
        else if (t.device() != p.device() || t.dtype() != p.dtype())
          t = t.to(p.device()).to(p.dtype());  // the parameter moved since
      }
      size_t b = 0;
      while (b < n_buckets && !(buckets_[b].device == p.device() && buckets_[b].dtype == p.dtype()))
        ++b;
      if (b == n_buckets) {
        if (buckets_.size() == n_buckets) buckets_.emplace_back();
        Bucket& nb = buckets_[n_buckets++];
        nb.device = p.device();
        nb.dtype = p.dtype();
        nb.params.clear();
      }
      buckets_[b].params.push_back(i);
    }
    if (n_buckets == 0) continue;
    for (size_t b = 0; b < n_buckets; ++b) buckets_[b].slot = slot_for(g, buckets_[b].device);
    // Every slot's counter advances once per group step, after every update of the step read
    // it: the slot's last update counts it itself, which saves a kernel per slot.
    for (size_t b = 0; b < n_buckets; ++b) {
      bool later = false;
      for (size_t c = b + 1; c < n_buckets && !later; ++c)
        later = buckets_[c].slot == buckets_[b].slot;
      run_update(g, buckets_[b].slot, buckets_[b].params, !later);
    }
    // A device none of whose parameters had a gradient this step still counts it.
    for (size_t s = 0; s < st.slots.size(); ++s) {
      bool counted = false;
      for (size_t b = 0; b < n_buckets && !counted; ++b) counted = buckets_[b].slot == s;
      if (!counted) count_step(st.slots[s].step, st.slots[s].one);
    }
    ++st.steps;
    for (Tensor& t : grads_) t = Tensor();
  }
}

// ---- state ----------------------------------------------------------------------------------

namespace {
std::string group_key(size_t g, const std::string& what) {
  return "param_groups." + std::to_string(g) + "." + what;
}
std::string state_key(size_t g, size_t i, const std::string& what) {
  return "state." + std::to_string(g) + "." + std::to_string(i) + "." + what;
}
}  // namespace

OptimizerState ForeachOptimizer::state_dict() const {
  OptimizerState out;
  out.metadata["optimizer"] = std::string(name());
  out.metadata["param_groups"] = std::to_string(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) {
    const OptimizerOptions& o = *groups_[g].options;
    out.metadata[group_key(g, "params")] = std::to_string(groups_[g].params.size());
    const std::vector<bool> flags = flag_values(o);
    for (size_t f = 0; f < flag_names_.size(); ++f)
      out.metadata[group_key(g, flag_names_[f])] = flags[f] ? "true" : "false";
    const std::vector<double> values = option_values(o);
    out.tensors[group_key(g, "options")] =
        from_vector(values, {static_cast<int64_t>(values.size())});
    const GroupState& st = state_[g];
    out.tensors[group_key(g, "step")] =
        st.slots.empty() ? full({}, static_cast<double>(st.steps), kFloat32) : st.slots[0].step;
    for (size_t k = 0; k < state_names_.size(); ++k)
      for (size_t i = 0; i < st.states[k].size(); ++i)
        if (st.states[k][i].defined()) out.tensors[state_key(g, i, state_names_[k])] = st.states[k][i];
  }
  return out;
}

void ForeachOptimizer::load_state_dict(const OptimizerState& in) {
  const std::string who = std::string(name()) + ".load_state_dict: ";
  auto meta = [&](const std::string& key) -> const std::string& {
    auto it = in.metadata.find(key);
    EMBER_CHECK(it != in.metadata.end(), who, "metadata '", key, "' is missing");
    return it->second;
  };
  auto count = [&](const std::string& key) {
    const std::string& v = meta(key);
    EMBER_CHECK(!v.empty() && v.size() < 12 && v.find_first_not_of("0123456789") == std::string::npos,
                who, "metadata '", key, "' must be a count, got '", v, "'");
    return static_cast<size_t>(std::stoull(v));
  };
  auto tensor = [&](const std::string& key) -> const Tensor& {
    auto it = in.tensors.find(key);
    EMBER_CHECK(it != in.tensors.end() && it->second.defined(), who, "tensor '", key,
                "' is missing");
    return it->second;
  };
  // Everything is checked before anything changes, so a bad state leaves the optimizer as it was.
  const std::string& kind = meta("optimizer");
  EMBER_CHECK(kind == name(), who, "the state is for optimizer '", kind, "'");
  const size_t n_groups = count("param_groups");
  EMBER_CHECK(n_groups == groups_.size(), who, "the state has ", n_groups,
              " parameter groups, this optimizer ", groups_.size());
  std::set<std::string> known;
  std::vector<std::unique_ptr<OptimizerOptions>> opts;
  std::vector<double> steps;
  for (size_t g = 0; g < n_groups; ++g) {
    const std::vector<Tensor>& params = groups_[g].params;
    const size_t n = count(group_key(g, "params"));
    EMBER_CHECK(n == params.size(), who, "group ", g, " has ", n, " parameters in the state, ",
                params.size(), " in this optimizer");
    const std::string okey = group_key(g, "options"), skey = group_key(g, "step");
    known.insert(okey);
    known.insert(skey);
    const Tensor& ot = tensor(okey);
    const size_t want = option_values(*groups_[g].options).size();
    EMBER_CHECK(is_floating(ot.dtype()) && ot.dim() == 1 && ot.numel() == static_cast<int64_t>(want),
                who, "'", okey, "' must hold ", want, " floating numbers, got ",
                dtype_name(ot.dtype()), " ", ot.sizes());
    std::vector<bool> flags;
    for (const std::string& f : flag_names_) {
      const std::string& v = meta(group_key(g, f));
      EMBER_CHECK(v == "true" || v == "false", who, "metadata '", group_key(g, f),
                  "' must be true or false, got '", v, "'");
      flags.push_back(v == "true");
    }
    std::unique_ptr<OptimizerOptions> o = make_options(ot.cpu().to_vector<double>(), flags);
    validate_options(*o);
    const Tensor& stp = tensor(skey);
    EMBER_CHECK(is_floating(stp.dtype()) && stp.numel() == 1, who, "'", skey,
                "' must be one floating number, got ", dtype_name(stp.dtype()), " ", stp.sizes());
    const double s = stp.item<double>();
    EMBER_CHECK(s >= 0 && s == std::floor(s) && s < 16777216.0, who, "'", skey,
                "' must be a whole number of steps in [0, 2^24), got ", s);
    steps.push_back(s);
    const UpdateSpec sp = spec(*o);
    for (size_t k = 0; k < state_names_.size(); ++k) {
      for (size_t i = 0; i < n; ++i) {
        auto it = in.tensors.find(state_key(g, i, state_names_[k]));
        if (it == in.tensors.end()) continue;
        known.insert(it->first);
        const Tensor& t = it->second;
        EMBER_CHECK(sp.keeps[k], who, "'", it->first, "' is a state these options do not keep");
        EMBER_CHECK(t.defined() && is_floating(t.dtype()) && t.sizes() == params[i].sizes(), who,
                    "'", it->first, "' must be a floating tensor of shape ", params[i].sizes(),
                    " like its parameter, got ",
                    t.defined() ? std::string(dtype_name(t.dtype())) : std::string("undefined"),
                    " ", t.defined() ? t.sizes() : Shape{});
      }
    }
    opts.push_back(std::move(o));
  }
  std::string unexpected;
  for (const auto& [key, t] : in.tensors)
    if (!known.count(key)) unexpected += (unexpected.empty() ? "" : ", ") + key;
  EMBER_CHECK(unexpected.empty(), who, "unexpected tensors: ", unexpected);

  NoGradGuard no_grad;
  for (size_t g = 0; g < n_groups; ++g) {
    replace_options(g, std::move(opts[g]));
    GroupState& st = state_[g];
    st.steps = static_cast<int64_t>(steps[g]);
    for (DeviceSlot& slot : st.slots) slot.step.fill_(steps[g]);
    const std::vector<Tensor>& params = groups_[g].params;
    for (size_t k = 0; k < state_names_.size(); ++k) {
      for (size_t i = 0; i < params.size(); ++i) {
        auto it = in.tensors.find(state_key(g, i, state_names_[k]));
        Tensor& t = st.states[k][i];
        if (it == in.tensors.end()) {
          t = Tensor();
          continue;
        }
        const Tensor& p = params[i];
        if (!t.defined() || t.device() != p.device() || t.dtype() != p.dtype())
          t = zeros(p.sizes(), TensorOptions(p.dtype()).device(p.device()));
        t.copy_(it->second);
      }
    }
  }
}

}  // namespace ember::optim
