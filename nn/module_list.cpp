#include "nn/module_list.h"

namespace ember::nn {

void ModuleListImpl::push_back(std::shared_ptr<Module> module) {
  add_child(std::to_string(modules_.size()), module);  // checks for null and cycles
  modules_.push_back(std::move(module));
}

std::shared_ptr<Module> ModuleListImpl::ptr(size_t i) const {
  EMBER_CHECK(i < modules_.size(), "ModuleList: index ", i, " out of range for ", modules_.size(),
              " modules");
  return modules_[i];
}

}  // namespace ember::nn
