#pragma once
// nn::Module: the base of every layer and model. A module owns named parameters (leaves that
// require grad), buffers (state without gradients) and child modules, all kept in registration
// order so names and parameter lists are stable ("fc1.weight", "fc1.bias", "fc2.weight", ...).
#include <concepts>
#include <cstddef>
#include <memory>
#include <ostream>
#include <string>
#include <type_traits>
#include <typeinfo>
#include <utility>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/tensor.h"

namespace ember::nn {

class Module;

namespace detail {
// "Linear" for ember::nn::LinearImpl: the demangled name without namespaces or an Impl suffix.
std::string module_type_name(const std::type_info& type);
}  // namespace detail

// Anything that holds a module through a shared pointer: ModuleHolder<T> and the classes
// EMBER_MODULE defines (see nn/holder.h).
template <class H>
concept ModuleHolderLike = requires(const H& h) {
  typename H::ContainedType;
  { h.ptr() } -> std::convertible_to<std::shared_ptr<Module>>;
};

template <class V>
using NamedList = std::vector<std::pair<std::string, V>>;

class Module : public std::enable_shared_from_this<Module> {
 public:
  Module() = default;
  // A module with a fixed display name instead of one derived from its C++ type.
  explicit Module(std::string name) : name_(std::move(name)) {}
  virtual ~Module() = default;
  // Modules are shared through holders, never copied: a copy would silently share or split
  // parameters depending on how it was made.
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  std::string name() const;

  // Registers `tensor` as parameter `name` and returns the registered handle (store it in a
  // member: it stays valid across to()). A non-leaf is detached first, as nn.Parameter does.
  // An undefined tensor registers an absent parameter that every listing skips.
  Tensor register_parameter(std::string name, Tensor tensor, bool requires_grad = true);
  Tensor register_buffer(std::string name, Tensor tensor);
  // Weight tying: parameter `name` (registered) becomes `shared`, another module's parameter of
  // the same shape, dtype and device, so the two hold one tensor and accumulate one gradient
  // (PyTorch's `head.weight = tok.weight`). Returns `shared`; store it in the member too:
  //   head->weight = head->tie_parameter("weight", tok->weight);
  Tensor tie_parameter(const std::string& name, const Tensor& shared);
  template <class M>
  requires std::derived_from<M, Module> std::shared_ptr<M> register_module(
      std::string name, std::shared_ptr<M> module) {
    add_child(std::move(name), module);
    return module;
  }
  template <ModuleHolderLike H>
  H register_module(std::string name, H holder) {
    add_child(std::move(name), holder.ptr());
    return holder;
  }

  // Parameters and buffers of this module and (with recurse) its descendants, each tensor once
  // even when registered under several names (tied weights).
  std::vector<Tensor> parameters(bool recurse = true) const;
  NamedList<Tensor> named_parameters(bool recurse = true) const;
  std::vector<Tensor> buffers(bool recurse = true) const;
  NamedList<Tensor> named_buffers(bool recurse = true) const;
  std::vector<std::shared_ptr<Module>> children() const;
  NamedList<std::shared_ptr<Module>> named_children() const;
  // This module (when it is owned by a shared_ptr, as holders do) and every descendant, in
  // pre-order, each once. Names are dotted paths; this module's is "".
  std::vector<std::shared_ptr<Module>> modules(bool include_self = true);
  NamedList<std::shared_ptr<Module>> named_modules(bool include_self = true);

  // Training mode (for Dropout and the like), applied to every descendant.
  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // Moves or casts every parameter, buffer and gradient in place of the tensor handle: the
  // registered tensors (and the members or optimizer lists holding them) keep their identity
  // and see the new data; parameters stay leaves that require grad. to(dtype) casts floating
  // tensors only and accepts floating dtypes only.
  void to(Device device);
  void to(DType dtype);
  void to(Device device, DType dtype);

  // Clears the gradient of every parameter: to undefined (default) or to zeros in place.
  void zero_grad(bool set_to_none = true);

  // One line describing this module for printing, e.g. "Linear(in_features=4, ...)".
  virtual void pretty_print(std::ostream& os) const;

 protected:
  // Lets containers name children "0", "1", ... and check what they are given.
  void add_child(std::string name, std::shared_ptr<Module> module);

 private:
  void check_new_name(const std::string& name, const char* what) const;
  NamedList<Tensor> named_tensors(bool recurse, bool params) const;
  // Every distinct module of the tree rooted here with its dotted path, this one first (its
  // `shared` is null: the root may not be owned by a shared_ptr).
  struct TreeEntry {
    std::string path;
    const Module* module;
    std::shared_ptr<Module> shared;
  };
  std::vector<TreeEntry> tree() const;
  void convert(const Device* device, const DType* dtype);

  std::string name_;
  NamedList<Tensor> params_;
  NamedList<Tensor> buffers_;
  NamedList<std::shared_ptr<Module>> children_;
  bool training_ = true;
};

// Prints the module tree like PyTorch:  Net(\n  (fc1): Linear(...)\n  ...\n)
std::ostream& operator<<(std::ostream& os, const Module& m);

}  // namespace ember::nn
