#pragma once
/// \file
/// nn::Module, the base class of every layer and model (like torch.nn.Module).
/// A module owns named parameters (leaves that require grad), buffers (state without gradients)
/// and child modules, all kept in registration order so names and parameter lists are stable
/// ("fc1.weight", "fc1.bias", "fc2.weight", ...).
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

/// Anything that holds a module through a shared pointer: ModuleHolder<T> and the classes
/// EMBER_MODULE defines (see nn/holder.h). It names `ContainedType` and has `ptr()`.
template <class H>
concept ModuleHolderLike = requires(const H& h) {
  typename H::ContainedType;
  { h.ptr() } -> std::convertible_to<std::shared_ptr<Module>>;
};

/// An ordered list of (name, value) pairs, as Module::named_parameters() returns.
template <class V>
using NamedList = std::vector<std::pair<std::string, V>>;

/// The base class of every layer and model, like torch.nn.Module.
///
/// Derive from it (as `NetImpl`), register parameters, buffers and submodules in the
/// constructor, give it a `forward`, and wrap it in a holder with EMBER_MODULE(Net):
/// \code
/// struct NetImpl : nn::Module {
///   nn::Linear fc1{nullptr}, fc2{nullptr};
///   NetImpl() {
///     fc1 = register_module("fc1", nn::Linear(784, 512));
///     fc2 = register_module("fc2", nn::Linear(512, 10));
///   }
///   Tensor forward(const Tensor& x) { return fc2(relu(fc1(x))); }
/// };
/// EMBER_MODULE(Net);
/// \endcode
/// Names must be non-empty, contain no '.', and be unique within a module across parameters,
/// buffers and submodules; a violation is an ember::Error.
class Module : public std::enable_shared_from_this<Module> {
 public:
  /// A module whose name() is derived from its C++ type ("Linear" for LinearImpl).
  Module() = default;
  /// A module with a fixed display name instead of one derived from its C++ type.
  explicit Module(std::string name) : name_(std::move(name)) {}
  virtual ~Module() = default;
  /// Not copyable: modules are shared through holders, never copied (a copy would silently
  /// share or split parameters depending on how it was made).
  Module(const Module&) = delete;
  /// Not copy-assignable, for the same reason.
  Module& operator=(const Module&) = delete;

  /// The display name: the one given to the constructor, else the C++ type's name without
  /// namespaces and without an `Impl` suffix ("Linear" for ember::nn::LinearImpl).
  std::string name() const;

  /// Registers `tensor` as parameter `name` and returns the registered handle.
  /// Store the handle in a member: it stays valid across to(). A non-leaf is detached first,
  /// as nn.Parameter does; the result requires grad when `requires_grad`. An undefined tensor
  /// registers an absent parameter that every listing skips (like PyTorch's `None`).
  /// \throws ember::Error if the name is invalid or taken, or if `requires_grad` is set for a
  /// tensor that is not floating.
  Tensor register_parameter(std::string name, Tensor tensor, bool requires_grad = true);
  /// Registers `tensor` as buffer `name` (state without gradients, such as running
  /// statistics) and returns it. Buffers move with to(), are listed by buffers() and saved by
  /// nn::save; undefined ones are skipped. \throws ember::Error if the name is invalid or taken.
  Tensor register_buffer(std::string name, Tensor tensor);
  /// Weight tying: registered parameter `name` becomes `shared`, another module's parameter.
  /// `shared` must be a leaf that requires grad with the same shape, dtype and device, so the
  /// two modules hold one tensor and accumulate one gradient (PyTorch's
  /// `head.weight = tok.weight`); listings report it once, under its first name. Returns
  /// `shared`; store it in the member too:
  /// \code
  /// head->weight = head->tie_parameter("weight", tok->weight);
  /// \endcode
  /// \throws ember::Error if there is no parameter `name` or `shared` does not fit.
  Tensor tie_parameter(const std::string& name, const Tensor& shared);
  /// Registers `module` as child `name` and returns it: its parameters and buffers become this
  /// module's, under "name.". \throws ember::Error for a null module, an invalid or taken
  /// name, or a module that contains this one.
  template <class M>
  requires std::derived_from<M, Module> std::shared_ptr<M> register_module(
      std::string name, std::shared_ptr<M> module) {
    add_child(std::move(name), module);
    return module;
  }
  /// Registers the module a holder points to as child `name` and returns the holder:
  /// `fc1 = register_module("fc1", nn::Linear(784, 512));`.
  /// \throws ember::Error for an empty holder, an invalid or taken name, or a module that
  /// contains this one.
  template <ModuleHolderLike H>
  H register_module(std::string name, H holder) {
    add_child(std::move(name), holder.ptr());
    return holder;
  }

  /// The parameters of this module and (with `recurse`) its descendants, in registration
  /// order (pre-order over the tree), each tensor once even when registered under several
  /// names (tied weights); absent (undefined) parameters are skipped. Pass this to an optimizer.
  std::vector<Tensor> parameters(bool recurse = true) const;
  /// parameters() with their dotted names: "fc1.weight", "fc1.bias", ...
  NamedList<Tensor> named_parameters(bool recurse = true) const;
  /// The buffers of this module and (with `recurse`) its descendants, like parameters().
  std::vector<Tensor> buffers(bool recurse = true) const;
  /// buffers() with their dotted names: "bn.running_mean", ...
  NamedList<Tensor> named_buffers(bool recurse = true) const;
  /// The direct submodules, in registration order.
  std::vector<std::shared_ptr<Module>> children() const;
  /// The direct submodules with their names.
  NamedList<std::shared_ptr<Module>> named_children() const;
  /// This module (with `include_self`) and every descendant, in pre-order, each once.
  /// \throws ember::Error with `include_self` when this module is not owned by a shared_ptr
  /// (holders and std::make_shared own it; a module on the stack does not).
  std::vector<std::shared_ptr<Module>> modules(bool include_self = true);
  /// modules() with dotted paths as names ("fc1", "block.0", ...); this module's is "".
  NamedList<std::shared_ptr<Module>> named_modules(bool include_self = true);

  /// Sets training mode (`on`) or eval mode on this module and every descendant.
  /// Layers such as Dropout and BatchNorm behave differently in the two. Modules start in
  /// training mode. Changing the mode makes jit::compile'd functions retrace.
  virtual void train(bool on = true);
  /// Sets eval mode: train(false).
  void eval() { train(false); }
  /// Whether this module is in training mode.
  bool is_training() const { return training_; }

  /// Moves every parameter, buffer and gradient to `device`, in place of the tensor handle.
  /// The registered tensors (and the members or optimizer lists holding them) keep their
  /// identity and see the new data; parameters stay leaves that require grad.
  void to(Device device);
  /// Casts every floating parameter, buffer and gradient to `dtype` in place of the handle
  /// (integer buffers such as num_batches_tracked are left as they are).
  /// \throws ember::Error if `dtype` is not floating.
  void to(DType dtype);
  /// to(device) and to(dtype) in one pass. \throws ember::Error if `dtype` is not floating.
  void to(Device device, DType dtype);

  /// Clears the gradient of every parameter: to undefined (`set_to_none`, the default) or to
  /// zeros in place (a gradient that carries a graph is detached first).
  void zero_grad(bool set_to_none = true);

  /// Writes the one-line description of this module used when printing, such as
  /// "Linear(in_features=4, out_features=2, bias=true)"; the default writes name().
  /// Override it to show a layer's options.
  virtual void pretty_print(std::ostream& os) const;

 protected:
  /// Registers child `name` (what register_module does); lets containers name children
  /// "0", "1", ... \throws ember::Error for a null module, an invalid or taken name, or a
  /// module that contains this one.
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

/// Prints the module tree like PyTorch: each module's pretty_print(), children indented under
/// it as "(name): ...":
/// \code
/// Net(
///   (fc1): Linear(in_features=784, out_features=512, bias=true)
///   (fc2): Linear(in_features=512, out_features=10, bias=true)
/// )
/// \endcode
std::ostream& operator<<(std::ostream& os, const Module& m);

}  // namespace ember::nn
