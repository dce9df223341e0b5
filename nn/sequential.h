#pragma once
/// \file
/// nn::Sequential: a chain of modules, each taking and returning one tensor (like
/// torch.nn.Sequential).
/// Any module with `Tensor forward(const Tensor&)` fits; the chain keeps a plain function
/// pointer per entry (no std::function), and the modules are children named "0", "1", ...
/// \code
/// nn::Sequential mlp(nn::Linear(784, 512), nn::ReLU(), nn::Linear(512, 10));
/// Tensor y = mlp(x);
/// \endcode
#include <concepts>
#include <cstddef>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "core/error.h"
#include "nn/holder.h"
#include "nn/module.h"

namespace ember::nn {

/// A Module type with `forward(const Tensor&)` returning a Tensor: what Sequential can hold.
template <class M>
concept TensorToTensorModule = std::derived_from<M, Module> && requires(M& m, const Tensor& x) {
  { m.forward(x) } -> std::convertible_to<Tensor>;
};

/// A chain of tensor-to-tensor modules run in order, like torch.nn.Sequential.
/// Its parameters are those of its entries, named "0.weight", "0.bias", "2.weight", ...
class SequentialImpl : public Module {
 public:
  /// An empty chain (its forward returns the input).
  SequentialImpl() = default;
  /// A chain of the given modules (holders or shared pointers), in order.
  template <class... Ms>
  requires(sizeof...(Ms) > 0) explicit SequentialImpl(Ms&&... modules) {
    (push_back(std::forward<Ms>(modules)), ...);
  }

  /// Appends the holder's module as child "<size()>"; it must have
  /// `Tensor forward(const Tensor&)` (checked at compile time).
  /// \throws ember::Error for an empty holder or a module that contains this chain.
  template <ModuleHolderLike H>
  void push_back(const H& holder) {
    push_back(holder.ptr());
  }
  /// Appends `module` as child "<size()>"; it must have `Tensor forward(const Tensor&)`
  /// (checked at compile time). \throws ember::Error for a null module or a module that
  /// contains this chain.
  template <class M>
  requires std::derived_from<M, Module>
  void push_back(std::shared_ptr<M> module) {
    static_assert(TensorToTensorModule<M>,
                  "Sequential holds modules with `Tensor forward(const Tensor&)`");
    const std::string name = std::to_string(entries_.size());
    add_child(name, module);  // checks for null and cycles
    entries_.push_back({std::move(module), &call_forward<M>});
  }

  /// Runs the chain: each module's forward on the previous one's output (the input itself
  /// when empty).
  Tensor forward(const Tensor& x);

  /// The number of modules.
  size_t size() const { return entries_.size(); }
  /// Whether the chain is empty.
  bool is_empty() const { return entries_.empty(); }
  /// Entry `i`, as ptr(i). \throws ember::Error if `i` is out of range.
  std::shared_ptr<Module> operator[](size_t i) const { return ptr(i); }
  /// Entry `i` as a Module pointer. \throws ember::Error if `i` is out of range.
  std::shared_ptr<Module> ptr(size_t i) const;
  /// Entry `i` as its concrete type `M`: `seq->at<nn::LinearImpl>(0).weight`.
  /// \throws ember::Error if `i` is out of range or the entry is not an `M`.
  template <class M>
  M& at(size_t i) const {
    M* m = dynamic_cast<M*>(ptr(i).get());
    EMBER_CHECK(m != nullptr, "Sequential: entry ", i, " is a ", ptr(i)->name(), ", not a ",
                detail::module_type_name(typeid(M)));
    return *m;
  }

 private:
  template <class M>
  static Tensor call_forward(Module& m, const Tensor& x) {
    return static_cast<M&>(m).forward(x);
  }
  struct Entry {
    std::shared_ptr<Module> module;
    Tensor (*forward)(Module&, const Tensor&);
  };
  std::vector<Entry> entries_;
};
/// The module holder of SequentialImpl: `nn::Sequential(a, b, c)`; `seq(x)` runs it.
EMBER_MODULE(Sequential);

}  // namespace ember::nn
