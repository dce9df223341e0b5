#include "nn/module.h"

#include "core/config_epoch.h"

#include <cxxabi.h>

#include <algorithm>
#include <cstdlib>
#include <unordered_set>

#include "autograd/grad_mode.h"
#include "core/config_epoch.h"
#include "core/error.h"

namespace ember::nn {

namespace detail {

std::string module_type_name(const std::type_info& type) {
  int status = 0;
  char* demangled = abi::__cxa_demangle(type.name(), nullptr, nullptr, &status);
  std::string full = status == 0 && demangled ? demangled : type.name();
  std::free(demangled);
  // Drop template arguments, then namespaces and enclosing classes.
  if (const size_t lt = full.find('<'); lt != std::string::npos) full.resize(lt);
  if (const size_t colon = full.rfind("::"); colon != std::string::npos) full.erase(0, colon + 2);
  constexpr std::string_view kImpl = "Impl";
  if (full.size() > kImpl.size() && full.ends_with(kImpl)) full.resize(full.size() - kImpl.size());
  return full;
}

}  // namespace detail

namespace {

std::string join_path(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

// Replaces the data behind `t`'s handle with `src`'s, keeping the TensorImpl (and so its
// identity and autograd state): like PyTorch's `param.data = ...`.
void assign_data(const Tensor& t, const Tensor& src) {
  if (src.impl() == t.impl()) return;
  TensorImpl* dst = t.impl();
  const TensorImpl* s = src.impl();
  dst->storage = s->storage;
  dst->sizes = s->sizes;
  dst->strides = s->strides;
  dst->offset = s->offset;
  dst->dtype = s->dtype;
  dst->device = s->device;
}

Tensor converted(const Tensor& t, const Device* device, const DType* dtype) {
  Tensor r = t.detach();
  if (device) r = r.to(*device);
  if (dtype && is_floating(r.dtype())) r = r.to(*dtype);
  return r;
}

}  // namespace

std::string Module::name() const {
  return name_.empty() ? detail::module_type_name(typeid(*this)) : name_;
}

void Module::check_new_name(const std::string& key, const char* what) const {
  EMBER_CHECK(!key.empty(), name(), ": ", what, ": the name must not be empty");
  EMBER_CHECK(key.find('.') == std::string::npos, name(), ": ", what, ": name '", key,
              "' must not contain '.'");
  const auto taken = [&](const auto& list) {
    for (const auto& [n, v] : list)
      if (n == key) return true;
    return false;
  };
  const char* kind = taken(params_)     ? "a parameter"
                     : taken(buffers_)  ? "a buffer"
                     : taken(children_) ? "a submodule"
                                        : nullptr;
  EMBER_CHECK(!kind, name(), ": ", what, ": name '", key, "' is already registered as ", kind);
}

Tensor Module::register_parameter(std::string key, Tensor tensor, bool requires_grad) {
  check_new_name(key, "register_parameter");
  if (tensor.defined()) {
    EMBER_CHECK(!requires_grad || is_floating(tensor.dtype()), name(), ": register_parameter: '",
                key, "' is ", dtype_name(tensor.dtype()), " ", tensor.sizes(),
                "; only floating tensors can require grad");
    if (!tensor.is_leaf()) tensor = tensor.detach();
    tensor.requires_grad_(requires_grad);
  }
  params_.emplace_back(std::move(key), tensor);
  return tensor;
}

Tensor Module::tie_parameter(const std::string& key, const Tensor& shared) {
  auto it =
      std::find_if(params_.begin(), params_.end(), [&](const auto& e) { return e.first == key; });
  EMBER_CHECK(it != params_.end(), name(), ": tie_parameter: no parameter '", key, "'");
  EMBER_CHECK(shared.defined() && shared.requires_grad() && shared.is_leaf(), name(),
              ": tie_parameter: '", key, "' must be tied to another module's parameter");
  const Tensor& own = it->second;
  EMBER_CHECK(!own.defined() || (own.sizes() == shared.sizes() && own.dtype() == shared.dtype() &&
                                 own.device() == shared.device()),
              name(), ": tie_parameter: '", key, "' is ", dtype_name(own.dtype()), " ", own.sizes(),
              " on ", own.device().str(), ", the shared parameter ", dtype_name(shared.dtype()),
              " ", shared.sizes(), " on ", shared.device().str());
  it->second = shared;
  return shared;
}

Tensor Module::register_buffer(std::string key, Tensor tensor) {
  check_new_name(key, "register_buffer");
  buffers_.emplace_back(std::move(key), tensor);
  return tensor;
}

void Module::add_child(std::string key, std::shared_ptr<Module> module) {
  check_new_name(key, "register_module");
  EMBER_CHECK(module != nullptr, name(), ": register_module: '", key,
              "' is an empty module holder (constructed from nullptr)");
  for (const TreeEntry& e : module->tree())
    EMBER_CHECK(e.module != this, name(), ": register_module: '", key,
                "' contains this module; a module cannot be its own descendant");
  children_.emplace_back(std::move(key), std::move(module));
}

std::vector<Module::TreeEntry> Module::tree() const {
  std::vector<TreeEntry> out;
  std::unordered_set<const Module*> seen;
  // Pre-order without recursion limits on our side: a stack of (entry) in reverse child order.
  std::vector<TreeEntry> stack{{"", this, nullptr}};
  while (!stack.empty()) {
    TreeEntry e = std::move(stack.back());
    stack.pop_back();
    if (!seen.insert(e.module).second) continue;
    const auto& kids = e.module->children_;
    for (auto it = kids.rbegin(); it != kids.rend(); ++it)
      stack.push_back({join_path(e.path, it->first), it->second.get(), it->second});
    out.push_back(std::move(e));
  }
  return out;
}

NamedList<Tensor> Module::named_tensors(bool recurse, bool params) const {
  NamedList<Tensor> out;
  std::unordered_set<const TensorImpl*> seen;
  const auto add_own = [&](const Module& m, const std::string& prefix) {
    for (const auto& [n, t] : params ? m.params_ : m.buffers_)
      if (t.defined() && seen.insert(t.impl()).second) out.emplace_back(join_path(prefix, n), t);
  };
  if (!recurse) {
    add_own(*this, "");
    return out;
  }
  for (const TreeEntry& e : tree()) add_own(*e.module, e.path);
  return out;
}

NamedList<Tensor> Module::named_parameters(bool recurse) const {
  return named_tensors(recurse, true);
}
NamedList<Tensor> Module::named_buffers(bool recurse) const {
  return named_tensors(recurse, false);
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_tensors(recurse, true)) out.push_back(std::move(t));
  return out;
}

std::vector<Tensor> Module::buffers(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [n, t] : named_tensors(recurse, false)) out.push_back(std::move(t));
  return out;
}

NamedList<std::shared_ptr<Module>> Module::named_children() const { return children_; }

std::vector<std::shared_ptr<Module>> Module::children() const {
  std::vector<std::shared_ptr<Module>> out;
  for (const auto& [n, m] : children_) out.push_back(m);
  return out;
}

NamedList<std::shared_ptr<Module>> Module::named_modules(bool include_self) {
  NamedList<std::shared_ptr<Module>> out;
  for (TreeEntry& e : tree()) {
    if (e.module != this) {
      out.emplace_back(std::move(e.path), std::move(e.shared));
    } else if (include_self) {
      std::shared_ptr<Module> self = weak_from_this().lock();
      EMBER_CHECK(self != nullptr, name(),
                  ": modules(): this module is not owned by a shared_ptr (create it through a "
                  "holder or std::make_shared), so it cannot list itself; pass include_self = "
                  "false");
      out.emplace_back("", std::move(self));
    }
  }
  return out;
}

std::vector<std::shared_ptr<Module>> Module::modules(bool include_self) {
  std::vector<std::shared_ptr<Module>> out;
  for (auto& [n, m] : named_modules(include_self)) out.push_back(std::move(m));
  return out;
}

void Module::train(bool on) {
  if (training_ != on) bump_config_epoch();  // compiled steps traced in the other mode retrace
  training_ = on;
  for (auto& [n, m] : children_) m->train(on);
}

void Module::convert(const Device* device, const DType* dtype) {
  NoGradGuard no_grad;
  for (const TreeEntry& e : tree()) {
    for (const auto* list : {&e.module->params_, &e.module->buffers_}) {
      for (const auto& [n, t] : *list) {
        if (!t.defined()) continue;
        assign_data(t, converted(t, device, dtype));
        Tensor handle = t;
        if (const Tensor g = handle.grad(); g.defined())
          handle.set_grad(converted(g, device, dtype));
      }
    }
  }
}

void Module::to(Device device) { convert(&device, nullptr); }

void Module::to(DType dtype) {
  EMBER_CHECK(is_floating(dtype), name(),
              ": to(dtype) casts floating parameters and buffers and needs a floating dtype, got ",
              dtype_name(dtype));
  convert(nullptr, &dtype);
}

void Module::to(Device device, DType dtype) {
  EMBER_CHECK(is_floating(dtype), name(),
              ": to(dtype) casts floating parameters and buffers and needs a floating dtype, got ",
              dtype_name(dtype));
  convert(&device, &dtype);
}

void Module::zero_grad(bool set_to_none) {
  NoGradGuard no_grad;
  for (Tensor& p : parameters()) {
    Tensor g = p.grad();
    if (!g.defined()) continue;
    if (set_to_none) {
      p.set_grad(Tensor());
    } else {
      // A gradient built with a graph (create_graph) must not carry it into the next step.
      if (g.grad_fn()) {
        g = g.detach();
        p.set_grad(g);
      }
      g.zero_();
    }
  }
}

void Module::pretty_print(std::ostream& os) const { os << name(); }

namespace {
void print_tree(std::ostream& os, const Module& m, int indent) {
  m.pretty_print(os);
  const auto kids = m.named_children();
  if (kids.empty()) return;
  os << "(\n";
  for (const auto& [n, child] : kids) {
    os << std::string(indent + 2, ' ') << '(' << n << "): ";
    print_tree(os, *child, indent + 2);
    os << '\n';
  }
  os << std::string(indent, ' ') << ')';
}
}  // namespace

std::ostream& operator<<(std::ostream& os, const Module& m) {
  print_tree(os, m, 0);
  return os;
}

}  // namespace ember::nn
