#include "nn/sequential.h"

namespace ember::nn {

Tensor SequentialImpl::forward(const Tensor& x) {
  Tensor y = x;
  for (const Entry& e : entries_) y = e.forward(*e.module, y);
  return y;
}

std::shared_ptr<Module> SequentialImpl::ptr(size_t i) const {
  EMBER_CHECK(i < entries_.size(), "Sequential: index ", i, " out of range for ", entries_.size(),
              " modules");
  return entries_[i].module;
}

}  // namespace ember::nn
