#pragma once
// Tensor: a cheap refcounted handle to (storage, shape, strides, offset, dtype, device).
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <ostream>
#include <source_location>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/scalar.h"
#include "core/shape.h"
#include "core/storage.h"

namespace ember {

struct AutogradMeta;  // defined by autograd/; core only carries the pointer
namespace autograd {
struct Node;
}

struct TensorImpl {
  StoragePtr storage;
  Shape sizes;
  Strides strides;     // in elements
  int64_t offset = 0;  // in elements
  DType dtype = kFloat32;
  Device device;
  // A host number wrapped as a 0-dim tensor: it does not decide the result dtype of an op
  // against dimensioned tensors of the same category (like PyTorch's wrapped numbers).
  bool wrapped_number = false;
  bool is_view = false;  // made by a view op: shares another tensor's storage
  std::shared_ptr<AutogradMeta> autograd;

  int64_t numel() const { return numel_of(sizes); }
  bool is_contiguous() const;
  char* data() const { return static_cast<char*>(storage->data) + offset * element_size(dtype); }
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }

  // Metadata. On an undefined tensor these throw ("undefined tensor") instead of reading
  // through a null handle; the check is one compare on the hot path.
  int dim() const { return checked("dim").sizes.size(); }
  const Shape& sizes() const { return checked("sizes").sizes; }
  const Strides& strides() const { return checked("strides").strides; }
  int64_t size(int64_t d) const;
  int64_t stride(int64_t d) const;
  int64_t numel() const { return checked("numel").numel(); }
  int64_t storage_offset() const { return checked("storage_offset").offset; }
  DType dtype() const { return checked("dtype").dtype; }
  Device device() const { return checked("device").device; }
  bool is_cuda() const { return device().is_cuda(); }
  bool is_contiguous() const { return checked("is_contiguous").is_contiguous(); }
  int64_t element_size() const { return ember::element_size(dtype()); }
  int64_t nbytes() const { return numel() * element_size(); }
  // Raw pointer to the first element (a device pointer for CUDA tensors).
  void* raw_data() const { return checked("raw_data").data(); }
  template <class T>
  T* data_ptr(std::source_location where = std::source_location::current()) const;

  // Host reads. item() copies one element to the host (a sync for CUDA tensors). Inside a
  // jit::compile'd function these are graph breaks; the call site names them.
  template <class T>
  T item(std::source_location where = std::source_location::current()) const;
  Scalar item(std::source_location where = std::source_location::current()) const;
  template <class T>  // contiguous copy on the host
  std::vector<T> to_vector(std::source_location where = std::source_location::current()) const;

  // Conversions and copies.
  Tensor to(Device d, std::source_location where = std::source_location::current()) const;
  Tensor to(DType t) const;
  Tensor cpu(std::source_location where = std::source_location::current()) const {
    return to(Device::cpu(), where);
  }
  Tensor cuda(int index = 0) const { return to(Device::cuda(index)); }
  Tensor contiguous() const;
  Tensor clone() const;

  // Views (share storage).
  Tensor view(const Shape& shape) const;
  Tensor reshape(const Shape& shape) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor transpose(int64_t a, int64_t b) const;
  Tensor t() const;
  Tensor permute(const Dims& order) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor expand(const Shape& shape) const;
  Tensor expand_as(const Tensor& other) const { return expand(other.sizes()); }
  Tensor squeeze() const;
  Tensor squeeze(int64_t dim) const;
  Tensor unsqueeze(int64_t dim) const;

  // In place (bump the storage version).
  Tensor& copy_(const Tensor& src);
  Tensor& fill_(const Scalar& v);
  Tensor& zero_();
  Tensor& add_(const Tensor& other);
  Tensor& add_(const Scalar& other);
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(const Scalar& other);

  // Reductions and common ops as methods.
  Tensor sum() const;
  Tensor sum(const Dims& dims, bool keepdim = false) const;
  Tensor mean() const;
  Tensor mean(const Dims& dims, bool keepdim = false) const;
  Tensor max() const;
  Tensor min() const;
  Tensor argmax() const;
  Tensor argmax(int64_t dim, bool keepdim = false) const;
  Tensor exp() const;
  Tensor log() const;
  Tensor relu() const;
  Tensor matmul(const Tensor& other) const;

  std::string str() const;  // printed like PyTorch

  // Autograd (implemented in autograd/variable.cpp).
  bool requires_grad() const;
  // Marks a leaf as needing gradients (floating dtypes only).
  Tensor& requires_grad_(bool on = true);
  bool is_leaf() const;            // no grad_fn: created by the user, not by a recorded op
  Tensor grad() const;             // the accumulated gradient, undefined until backward reaches it
  void set_grad(const Tensor& g);  // an undefined tensor clears it
  std::shared_ptr<autograd::Node> grad_fn() const;
  // Backpropagates from this tensor. A scalar needs no `gradient`; otherwise it is the
  // gradient of some scalar with respect to this tensor (same shape).
  void backward(const Tensor& gradient = {}, bool retain_graph = false) const;
  // A tensor sharing this one's storage, cut from the graph (requires_grad false).
  Tensor detach() const;
  uint32_t version() const { return checked("version").storage->version; }

 private:
  const TensorImpl& checked(const char* accessor) const {
    if (__builtin_expect(impl_ == nullptr, 0)) throw_undefined(accessor);
    return *impl_;
  }
  [[noreturn]] static void throw_undefined(const char* accessor);

  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// Makes a fresh tensor with contiguous layout (no kernel; contents uninitialised). A negative
// size, or an element or byte count past int64, is an error naming `op` and the shape.
Tensor make_empty(const Shape& shape, DType dtype, Device device, const char* op = "empty");
// A 0-dim host tensor holding `v`, flagged as a wrapped number.
Tensor wrap_scalar(const Scalar& v, DType dtype);

struct TraceHooks;  // core/trace_hooks.h
namespace detail {
extern thread_local const TraceHooks* t_trace_hooks;
}
void note_host_read(const Tensor& t, const char* what, const std::source_location& where);

// Raw host access. Only for CPU tensors.
template <class T>
T* Tensor::data_ptr(std::source_location where) const {
  EMBER_CHECK(defined(), "data_ptr: undefined tensor");
  if (detail::t_trace_hooks) note_host_read(*this, "data_ptr", where);
  EMBER_CHECK(DTypeOf<T>::value == dtype(), "data_ptr: tensor is ", dtype_name(dtype()),
              ", asked for ", dtype_name(DTypeOf<T>::value));
  return reinterpret_cast<T*>(raw_data());
}

}  // namespace ember
