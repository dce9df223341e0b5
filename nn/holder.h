#pragma once
/// \file
/// Module holders: `Linear` is a shared handle to a `LinearImpl` (libtorch's
/// ModuleHolder/TORCH_MODULE).
/// Models pass modules around by value while every copy refers to one set of parameters.
/// \code
/// struct NetImpl : nn::Module { ... Tensor forward(const Tensor& x); };
/// EMBER_MODULE(Net);
/// Net net;            // constructs NetImpl()
/// Net later{nullptr}; // empty, assigned afterwards
/// net->to(dev); Tensor y = net(x);  // operator() calls forward()
/// \endcode
#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "core/error.h"
#include "nn/module.h"

namespace ember::nn {

/// A shared handle to a module of type `T` (a Module subclass), like libtorch's
/// torch::nn::ModuleHolder.
/// Copies share one module; `->` reaches its members and `()` calls its forward(). Using an
/// empty holder (made from nullptr) is an ember::Error. EMBER_MODULE(Name) derives `Name` from
/// `ModuleHolder<NameImpl>`.
template <class T>
class ModuleHolder {
  static_assert(std::is_base_of_v<Module, T>, "ModuleHolder<T>: T must derive from nn::Module");

 public:
  /// The module type held.
  using ContainedType = T;

  /// Builds a `T` with its default constructor (when it has one).
  ModuleHolder() requires std::is_default_constructible_v<T> : impl_(std::make_shared<T>()) {}
  /// An empty holder, to be assigned later (members declared before register_module).
  ModuleHolder(std::nullptr_t) {}  // NOLINT: `Linear fc{nullptr}` and `fc = nullptr` read well
  /// A holder sharing an existing module (null gives an empty holder).
  ModuleHolder(std::shared_ptr<T> impl) : impl_(std::move(impl)) {}  // NOLINT
  /// Constructs a `T` from the arguments: Linear(784, 512), Dropout(0.1), Sequential(a, b, c).
  template <class A0, class... As>
  requires((sizeof...(As) > 0 || !std::is_base_of_v<ModuleHolder, std::remove_cvref_t<A0>>)&&!std::
               is_same_v<std::remove_cvref_t<A0>, std::nullptr_t> &&
           !std::is_same_v<std::remove_cvref_t<A0>, std::shared_ptr<T>> &&
           std::is_constructible_v<T, A0, As...>) explicit ModuleHolder(A0&& a0, As&&... as)
      : impl_(std::make_shared<T>(std::forward<A0>(a0), std::forward<As>(as)...)) {}

  /// The module's members: `linear->weight`. \throws ember::Error if the holder is empty.
  T* operator->() const { return get(); }
  /// The module. \throws ember::Error if the holder is empty.
  T& operator*() const { return *get(); }
  /// A pointer to the module (never null). \throws ember::Error if the holder is empty.
  T* get() const {
    EMBER_CHECK(impl_ != nullptr, "nn: the ", detail::module_type_name(typeid(T)),
                " holder is empty (constructed from nullptr); assign a module before using it");
    return impl_.get();
  }
  /// The shared pointer to the module (null when empty).
  const std::shared_ptr<T>& ptr() const { return impl_; }
  /// Whether the holder holds no module.
  bool is_empty() const { return impl_ == nullptr; }
  /// Whether the holder holds a module.
  explicit operator bool() const { return impl_ != nullptr; }

  /// Calls the module's forward with the given arguments: `model(x)` is `model->forward(x)`.
  /// \throws ember::Error if the holder is empty.
  template <class... Args>
  decltype(auto) operator()(Args&&... args) const {
    return get()->forward(std::forward<Args>(args)...);
  }
  /// Forwards indexing to the module (Sequential, ModuleList): `seq[0]`.
  template <class Arg>
  decltype(auto) operator[](Arg&& arg) const {
    return (*get())[std::forward<Arg>(arg)];
  }

 private:
  std::shared_ptr<T> impl_;
};

/// Prints the held module's tree, as `os << *h`. \throws ember::Error if the holder is empty.
template <class T>
std::ostream& operator<<(std::ostream& os, const ModuleHolder<T>& h) {
  return os << *h;
}

}  // namespace ember::nn

/// Defines class `Name` as the holder of `NameImpl` (which must be declared before), like
/// libtorch's TORCH_MODULE: `Name` is a ModuleHolder<NameImpl> with all its constructors, and
/// `Name()` default-constructs a `NameImpl`.
#define EMBER_MODULE(Name)                                     \
  class Name : public ::ember::nn::ModuleHolder<Name##Impl> {  \
   public:                                                     \
    using ::ember::nn::ModuleHolder<Name##Impl>::ModuleHolder; \
    Name() = default;                                          \
  }
