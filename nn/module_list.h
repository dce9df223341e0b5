#pragma once
// ModuleList: an indexable list of modules of any kinds, registered as children "0", "1", ...
// so their parameters belong to the owner; the owner's forward decides how to call them.
#include <cstddef>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"
#include "nn/holder.h"
#include "nn/module.h"

namespace ember::nn {

class ModuleListImpl : public Module {
 public:
  ModuleListImpl() = default;
  template <class... Ms>
  requires(sizeof...(Ms) > 0) explicit ModuleListImpl(Ms&&... modules) {
    (push_back(std::forward<Ms>(modules)), ...);
  }

  template <ModuleHolderLike H>
  void push_back(const H& holder) {
    push_back(std::shared_ptr<Module>(holder.ptr()));
  }
  void push_back(std::shared_ptr<Module> module);

  size_t size() const { return modules_.size(); }
  bool is_empty() const { return modules_.empty(); }
  std::shared_ptr<Module> operator[](size_t i) const { return ptr(i); }
  std::shared_ptr<Module> ptr(size_t i) const;
  template <class M>
  M& at(size_t i) const {
    M* m = dynamic_cast<M*>(ptr(i).get());
    EMBER_CHECK(m != nullptr, "ModuleList: entry ", i, " is a ", ptr(i)->name(), ", not a ",
                detail::module_type_name(typeid(M)));
    return *m;
  }
  auto begin() const { return modules_.begin(); }
  auto end() const { return modules_.end(); }

 private:
  std::vector<std::shared_ptr<Module>> modules_;
};
EMBER_MODULE(ModuleList);

}  // namespace ember::nn
