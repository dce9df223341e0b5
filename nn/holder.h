#pragma once
// Module holders: `Linear` is a shared handle to a `LinearImpl`, so models pass modules around by
// value while every copy refers to one set of parameters (libtorch's ModuleHolder/TORCH_MODULE).
//
//   struct NetImpl : nn::Module { ... Tensor forward(const Tensor& x); };
//   EMBER_MODULE(Net);
//   Net net;            // constructs NetImpl()
//   Net later{nullptr}; // empty, assigned afterwards
//   net->to(dev); Tensor y = net(x);  // operator() calls forward()
#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "core/error.h"
#include "nn/module.h"

namespace ember::nn {

template <class T>
class ModuleHolder {
  static_assert(std::is_base_of_v<Module, T>, "ModuleHolder<T>: T must derive from nn::Module");

 public:
  using ContainedType = T;

  // Default construction builds T with its default constructor (when it has one).
  ModuleHolder() requires std::is_default_constructible_v<T> : impl_(std::make_shared<T>()) {}
  // An empty holder, to be assigned later (members declared before register_module).
  ModuleHolder(std::nullptr_t) {}  // NOLINT: `Linear fc{nullptr}` and `fc = nullptr` read well
  ModuleHolder(std::shared_ptr<T> impl) : impl_(std::move(impl)) {}  // NOLINT
  // Any other arguments construct T: Linear(784, 512), Dropout(0.1), Sequential(a, b, c).
  template <class A0, class... As>
  requires((sizeof...(As) > 0 || !std::is_base_of_v<ModuleHolder, std::remove_cvref_t<A0>>)&&!std::
               is_same_v<std::remove_cvref_t<A0>, std::nullptr_t> &&
           !std::is_same_v<std::remove_cvref_t<A0>, std::shared_ptr<T>> &&
           std::is_constructible_v<T, A0, As...>) explicit ModuleHolder(A0&& a0, As&&... as)
      : impl_(std::make_shared<T>(std::forward<A0>(a0), std::forward<As>(as)...)) {}

  T* operator->() const { return get(); }
  T& operator*() const { return *get(); }
  T* get() const {
    EMBER_CHECK(impl_ != nullptr, "nn: the ", detail::module_type_name(typeid(T)),
                " holder is empty (constructed from nullptr); assign a module before using it");
    return impl_.get();
  }
  const std::shared_ptr<T>& ptr() const { return impl_; }
  bool is_empty() const { return impl_ == nullptr; }
  explicit operator bool() const { return impl_ != nullptr; }

  // Calls the module's forward with the given arguments.
  template <class... Args>
  decltype(auto) operator()(Args&&... args) const {
    return get()->forward(std::forward<Args>(args)...);
  }
  // Forwards indexing to the module (Sequential, ModuleList).
  template <class Arg>
  decltype(auto) operator[](Arg&& arg) const {
    return (*get())[std::forward<Arg>(arg)];
  }

 private:
  std::shared_ptr<T> impl_;
};

template <class T>
std::ostream& operator<<(std::ostream& os, const ModuleHolder<T>& h) {
  return os << *h;
}

}  // namespace ember::nn

// Defines `Name` as the holder of `NameImpl` (which must be declared before).
#define EMBER_MODULE(Name)                                     \
  class Name : public ::ember::nn::ModuleHolder<Name##Impl> {  \
   public:                                                     \
    using ::ember::nn::ModuleHolder<Name##Impl>::ModuleHolder; \
    Name() = default;                                          \
  }
