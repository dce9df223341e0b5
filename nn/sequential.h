#pragma once
// Sequential: a chain of modules, each taking and returning one tensor. Any module with
// `Tensor forward(const Tensor&)` fits; the chain keeps a plain function pointer per entry (no
// std::function), and the modules are children named "0", "1", ...
//   nn::Sequential mlp(nn::Linear(784, 512), nn::ReLU(), nn::Linear(512, 10));
//   Tensor y = mlp(x);
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

template <class M>
concept TensorToTensorModule = std::derived_from<M, Module> && requires(M& m, const Tensor& x) {
  { m.forward(x) } -> std::convertible_to<Tensor>;
};

class SequentialImpl : public Module {
 public:
  SequentialImpl() = default;
  template <class... Ms>
  requires(sizeof...(Ms) > 0) explicit SequentialImpl(Ms&&... modules) {
    (push_back(std::forward<Ms>(modules)), ...);
  }

  template <ModuleHolderLike H>
  void push_back(const H& holder) {
    push_back(holder.ptr());
  }
  template <class M>
  requires std::derived_from<M, Module>
  void push_back(std::shared_ptr<M> module) {
    static_assert(TensorToTensorModule<M>,
                  "Sequential holds modules with `Tensor forward(const Tensor&)`");
    const std::string name = std::to_string(entries_.size());
    add_child(name, module);  // checks for null and cycles
    entries_.push_back({std::move(module), &call_forward<M>});
  }

  // Runs the chain (the input itself when empty).
  Tensor forward(const Tensor& x);

  size_t size() const { return entries_.size(); }
  bool is_empty() const { return entries_.empty(); }
  std::shared_ptr<Module> operator[](size_t i) const { return ptr(i); }
  std::shared_ptr<Module> ptr(size_t i) const;
  // Entry i as its concrete type; an ember::Error when it is something else.
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
EMBER_MODULE(Sequential);

}  // namespace ember::nn
