#pragma once
/// \file
/// nn::ModuleList: an indexable list of modules of any kinds (like torch.nn.ModuleList).
/// The modules are registered as children "0", "1", ... so their parameters belong to the
/// owner; the owner's forward decides how to call them.
#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "nn/holder.h"
#include "nn/module.h"

namespace ember::nn {

/// A list of submodules of any kinds, like torch.nn.ModuleList; it has no forward.
/// \code
/// nn::ModuleList blocks(nn::Linear(64, 64), nn::Linear(64, 64));
/// for (const auto& m : *blocks) ...;
/// Tensor y = blocks->at<nn::LinearImpl>(0).forward(x);
/// \endcode
class ModuleListImpl : public Module {
 public:
  /// An empty list.
  ModuleListImpl() = default;
  /// A list of the given modules (holders or shared pointers), in order.
  template <class... Ms>
  requires(sizeof...(Ms) > 0) explicit ModuleListImpl(Ms&&... modules) {
    (push_back(std::forward<Ms>(modules)), ...);
  }

  /// Appends the holder's module as child "<size()>". \throws ember::Error for an empty
  /// holder or a module that contains this list.
  template <ModuleHolderLike H>
  void push_back(const H& holder) {
    push_back(std::shared_ptr<Module>(holder.ptr()));
  }
  /// Appends `module` as child "<size()>". \throws ember::Error for a null module or a module
  /// that contains this list.
  void push_back(std::shared_ptr<Module> module);

  /// The number of modules.
  size_t size() const { return modules_.size(); }
  /// Whether the list is empty.
  bool is_empty() const { return modules_.empty(); }
  /// Module `i`, as ptr(i). \throws ember::Error if `i` is out of range.
  std::shared_ptr<Module> operator[](size_t i) const { return ptr(i); }
  /// Module `i` as a Module pointer. \throws ember::Error if `i` is out of range.
  std::shared_ptr<Module> ptr(size_t i) const;
  /// Module `i` as its concrete type `M` (such as LinearImpl).
  /// \throws ember::Error if `i` is out of range or the module is not an `M`.
  template <class M>
  M& at(size_t i) const {
    M* m = dynamic_cast<M*>(ptr(i).get());
    EMBER_CHECK(m != nullptr, "ModuleList: entry ", i, " is a ", ptr(i)->name(), ", not a ",
                detail::module_type_name(typeid(M)));
    return *m;
  }
  /// Iterator to the first module (a `std::shared_ptr<Module>`), for range-for.
  auto begin() const { return modules_.begin(); }
  /// Iterator past the last module.
  auto end() const { return modules_.end(); }

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};
/// The module holder of ModuleListImpl: `nn::ModuleList(a, b, c)`; `list[i]` indexes it.
EMBER_MODULE(ModuleList);

}  // namespace ember::nn
