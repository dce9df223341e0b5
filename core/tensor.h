#pragma once
/// \file
/// Tensor: a cheap refcounted handle to (storage, shape, strides, offset, dtype, device), like
/// `torch::Tensor`, with its metadata, host reads, views, in-place ops and autograd methods.
///
/// Copying a Tensor copies the handle, not the data: both name the same tensor. Views share
/// their base's storage. Errors (an undefined tensor, bad dims, shapes, dtypes) throw
/// ember::Error. Free-function ops live in core/ops.h, factories in core/factory.h.
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

/// The state a Tensor handle points to (like `c10::TensorImpl`). Users go through Tensor's
/// accessors; ops, kernels and the JIT read these fields directly.
struct TensorImpl {
  StoragePtr storage;      ///< The memory, shared with every view of it.
  Shape sizes;             ///< The shape.
  Strides strides;         ///< Per-dim strides, in elements.
  int64_t offset = 0;      ///< Position of the first element in the storage, in elements.
  DType dtype = kFloat32;  ///< The element type.
  Device device;           ///< Where the storage lives.
  /// A host number wrapped as a 0-dim tensor: it does not decide the result dtype of an op
  /// against dimensioned tensors of the same category (like PyTorch's wrapped numbers).
  bool wrapped_number = false;
  bool is_view = false;  ///< Made by a view op: shares another tensor's storage.
  /// Gradient state (requires_grad, grad, grad_fn); null until autograd needs it.
  std::shared_ptr<AutogradMeta> autograd;

  /// The element count.
  int64_t numel() const { return numel_of(sizes); }
  /// Row-major with no gaps (size-1 dims may have any stride).
  bool is_contiguous() const;
  /// The first element's address (a device pointer for CUDA).
  char* data() const { return static_cast<char*>(storage->data) + offset * element_size(dtype); }
};

/// An n-dimensional array on a device, like `torch::Tensor`: a cheap refcounted handle.
///
/// A default-constructed Tensor is undefined (holds nothing); the metadata accessors and ops
/// throw ember::Error on it. Copies of a Tensor are the same tensor (is_same()); clone() copies
/// the data. Methods that take a dim accept negative dims counted from the end (-1 is the last),
/// like PyTorch; one out of range throws ember::Error.
///
/// Methods that read values on the host (item, to_vector, data_ptr, to(cpu)) take a
/// `std::source_location` defaulted to the call site: inside a jit::compile'd function they are
/// graph breaks, and the break's report names that site.
class Tensor {
 public:
  /// An undefined tensor (defined() is false), like a default `torch::Tensor`.
  Tensor() = default;
  /// A handle to `impl` (for ops and kernels that build tensors themselves).
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  /// Whether this handle holds a tensor, like `torch::Tensor::defined`.
  bool defined() const { return impl_ != nullptr; }
  /// The shared state (null when undefined).
  TensorImpl* impl() const { return impl_.get(); }
  /// The owning pointer to the shared state.
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  /// Whether both handles name the same tensor (not merely equal values), like
  /// `torch::Tensor::is_same`.
  bool is_same(const Tensor& o) const { return impl_ == o.impl_; }

  // Metadata. On an undefined tensor these throw ("undefined tensor") instead of reading
  // through a null handle; the check is one compare on the hot path.

  /// The number of dims, like `torch.Tensor.dim()`.
  int dim() const { return checked("dim").sizes.size(); }
  /// The shape, like `torch.Tensor.size()`.
  const Shape& sizes() const { return checked("sizes").sizes; }
  /// The strides, in elements, like `torch.Tensor.stride()`.
  const Strides& strides() const { return checked("strides").strides; }
  /// The size of dim `d` (negative counts from the end).
  int64_t size(int64_t d) const;
  /// The stride of dim `d` in elements (negative counts from the end).
  int64_t stride(int64_t d) const;
  /// The element count, like `torch.Tensor.numel()`.
  int64_t numel() const { return checked("numel").numel(); }
  /// The first element's position in the storage, in elements, like
  /// `torch.Tensor.storage_offset()`.
  int64_t storage_offset() const { return checked("storage_offset").offset; }
  /// The element type.
  DType dtype() const { return checked("dtype").dtype; }
  /// The device the data lives on.
  Device device() const { return checked("device").device; }
  /// Whether the data lives on a CUDA device.
  bool is_cuda() const { return device().is_cuda(); }
  /// Whether the elements are laid out row-major with no gaps (size-1 dims may have any stride),
  /// like `torch.Tensor.is_contiguous()`.
  bool is_contiguous() const { return checked("is_contiguous").is_contiguous(); }
  /// Bytes per element.
  int64_t element_size() const { return ember::element_size(dtype()); }
  /// numel() * element_size(): the bytes the elements take (not the storage's size).
  int64_t nbytes() const { return numel() * element_size(); }
  /// Raw pointer to the first element (a device pointer for CUDA tensors); no checks, no graph
  /// break.
  void* raw_data() const { return checked("raw_data").data(); }
  /// Typed pointer to the first element, like `torch::Tensor::data_ptr<T>()`; `T` must be the
  /// tensor's host type exactly (DTypeOf), else ember::Error. The pointer follows the tensor's
  /// strides and offset (call contiguous() first for a flat array). Meant for CPU tensors: for a
  /// CUDA tensor it is a device pointer. A graph break under jit::compile.
  template <class T>
  T* data_ptr(std::source_location where = std::source_location::current()) const;

  // Host reads. item() copies one element to the host (a sync for CUDA tensors). Inside a
  // jit::compile'd function these are graph breaks; the call site names them.

  /// The value of a one-element tensor converted to `T` (float, double, int32_t, int64_t, Half,
  /// BFloat16 or bool), like `torch::Tensor::item<T>()`. A sync for CUDA tensors. Throws
  /// ember::Error when numel() is not 1.
  template <class T>
  T item(std::source_location where = std::source_location::current()) const;
  /// The value of a one-element tensor as a Scalar of its category (a float for floating dtypes,
  /// a bool for bool, an int otherwise), like `torch.Tensor.item()`.
  Scalar item(std::source_location where = std::source_location::current()) const;
  /// All elements in row-major order, converted to `T` (one of item's types), copied to the
  /// host, like `torch.Tensor.tolist()` flattened. For `bool`, nonzero elements are true.
  template <class T>
  std::vector<T> to_vector(std::source_location where = std::source_location::current()) const;

  // Conversions and copies.

  /// This tensor on device `d`, like `torch.Tensor.to(device)`: itself when already there,
  /// else a copy. Throws ember::Error for a CUDA device that does not exist. To the host it is
  /// a graph break under jit::compile.
  Tensor to(Device d, std::source_location where = std::source_location::current()) const;
  /// This tensor as dtype `t`, like `torch.Tensor.to(dtype)`: itself when it already is, else a
  /// converted contiguous copy (recorded by autograd).
  Tensor to(DType t) const;
  /// to(Device::cpu()), like `torch.Tensor.cpu()`.
  Tensor cpu(std::source_location where = std::source_location::current()) const {
    return to(Device::cpu(), where);
  }
  /// to(Device::cuda(index)), like `torch.Tensor.cuda()`.
  Tensor cuda(int index = 0) const { return to(Device::cuda(index)); }
  /// Itself when contiguous, else a contiguous copy, like `torch.Tensor.contiguous()`.
  Tensor contiguous() const;
  /// A contiguous copy with its own storage, recorded by autograd (the gradient flows back),
  /// like `torch.Tensor.clone()` (which keeps strides; this one is always contiguous).
  Tensor clone() const;

  // Views (share storage): writes through a view change the base, and the other way round.

  /// The same data seen with `shape`, like `torch.Tensor.view`: one size may be -1 (inferred).
  /// The element count must match, and the strides must allow it without a copy (else
  /// ember::Error: use reshape()).
  Tensor view(const Shape& shape) const;
  /// Like view() when the strides allow it, else a view of a contiguous copy, like
  /// `torch.Tensor.reshape`. One size may be -1.
  Tensor reshape(const Shape& shape) const;
  /// Dims `start_dim` to `end_dim` merged into one, through reshape() (so a copy when the strides
  /// require it), like `torch.Tensor.flatten`. A 0-dim tensor gives shape [1].
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  /// A view with dims `a` and `b` swapped, like `torch.Tensor.transpose`.
  Tensor transpose(int64_t a, int64_t b) const;
  /// The transpose of a matrix (a 0- or 1-D tensor is returned as is), like `torch.Tensor.t`;
  /// more than 2 dims throws ember::Error.
  Tensor t() const;
  /// A view with the dims reordered: dim i of the result is dim order[i], like
  /// `torch.Tensor.permute`. `order` must be a permutation of the dims.
  Tensor permute(const Dims& order) const;
  /// A view of `[start:end:step]` along `dim`, like Python slicing `a[start:end:step]`: negative
  /// bounds count from the end and bounds are clamped to the dim; `step` must be positive.
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  /// A view of `length` elements from `start` (negative counts from the end) along `dim`, like
  /// `torch.Tensor.narrow`; a range outside the dim throws ember::Error.
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  /// A view of entry `index` (negative counts from the end) along `dim`, with that dim removed,
  /// like `torch.Tensor.select` / `a[index]`.
  Tensor select(int64_t dim, int64_t index) const;
  /// A view broadcast to `shape` (size-1 dims repeat with stride 0; new leading dims may be
  /// added; -1 keeps a size), like `torch.Tensor.expand`. No data is copied.
  Tensor expand(const Shape& shape) const;
  /// expand(other.sizes()), like `torch.Tensor.expand_as`.
  Tensor expand_as(const Tensor& other) const { return expand(other.sizes()); }
  /// A view with every size-1 dim removed, like `torch.Tensor.squeeze()`.
  Tensor squeeze() const;
  /// A view with dim `dim` removed if its size is 1 (else the tensor itself), like
  /// `torch.Tensor.squeeze(dim)`.
  Tensor squeeze(int64_t dim) const;
  /// A view with a size-1 dim inserted at `dim` (in [-(dim()+1), dim()]), like
  /// `torch.Tensor.unsqueeze`; a tensor of kMaxDims dims throws ember::Error.
  Tensor unsqueeze(int64_t dim) const;

  // In place (bump the storage version). On a leaf that requires grad they throw ember::Error
  // while grad mode is on (use NoGradGuard); on a view of a tensor that requires grad too.

  /// Copies `src` into this tensor, like `torch.Tensor.copy_`: `src` broadcasts to this shape,
  /// converts to this dtype and moves from its device. Returns `*this`.
  Tensor& copy_(const Tensor& src);
  /// Sets every element to `v` (converted to the dtype), like `torch.Tensor.fill_`.
  Tensor& fill_(const Scalar& v);
  /// Sets every element to 0, like `torch.Tensor.zero_`.
  Tensor& zero_();
  /// this += other, like `torch.Tensor.add_`. `other` must broadcast to this shape, and the
  /// result type must convert to this dtype within PyTorch's rules (no float into an integer
  /// tensor, nothing but bool into a bool one), else ember::Error.
  Tensor& add_(const Tensor& other);
  /// this += number (same rules as add_(const Tensor&)).
  Tensor& add_(const Scalar& other);
  /// this *= other, like `torch.Tensor.mul_` (same rules as add_).
  Tensor& mul_(const Tensor& other);
  /// this *= number (same rules as add_).
  Tensor& mul_(const Scalar& other);

  // Reductions and common ops as methods (see core/ops.h).

  /// ember::sum() over all elements: a 0-dim tensor.
  Tensor sum() const;
  /// ember::sum() over `dims`.
  Tensor sum(const Dims& dims, bool keepdim = false) const;
  /// ember::mean() over all elements: a 0-dim tensor.
  Tensor mean() const;
  /// ember::mean() over `dims`.
  Tensor mean(const Dims& dims, bool keepdim = false) const;
  /// The largest element, 0-dim: ember::max().
  Tensor max() const;
  /// The smallest element, 0-dim: ember::min().
  Tensor min() const;
  /// The flat index of the largest element: ember::argmax().
  Tensor argmax() const;
  /// The indices of the largest elements along `dim`: ember::argmax().
  Tensor argmax(int64_t dim, bool keepdim = false) const;
  /// ember::exp().
  Tensor exp() const;
  /// ember::log().
  Tensor log() const;
  /// ember::relu().
  Tensor relu() const;
  /// ember::matmul(*this, other).
  Tensor matmul(const Tensor& other) const;

  /// The tensor printed like PyTorch: `tensor([...], device='cuda:0', dtype=...)` (large tensors
  /// summarised). Reads the values on the host.
  std::string str() const;

  // Autograd (implemented in autograd/variable.cpp).

  /// Whether ops on this tensor record a graph for backward, like `torch.Tensor.requires_grad`.
  bool requires_grad() const;
  /// Marks a leaf as needing gradients (floating dtypes only, else ember::Error), like
  /// `torch.Tensor.requires_grad_`. Turning it off is allowed on leaves only (use detach() for
  /// the others). Returns `*this`.
  Tensor& requires_grad_(bool on = true);
  /// True when there is no grad_fn: created by the user, not by a recorded op (like
  /// `torch.Tensor.is_leaf`).
  bool is_leaf() const;
  /// The accumulated gradient, undefined until backward reaches this leaf, like
  /// `torch.Tensor.grad`.
  Tensor grad() const;
  /// Replaces the gradient; `g` must match this tensor's shape, dtype and device (else
  /// ember::Error). An undefined tensor clears it.
  void set_grad(const Tensor& g);
  /// The backward node that made this tensor (null for leaves), like `torch.Tensor.grad_fn`.
  std::shared_ptr<autograd::Node> grad_fn() const;
  /// Backpropagates from this tensor, accumulating into `.grad()` of the leaves it depends on,
  /// like `torch.Tensor.backward`: autograd::backward({*this}, {gradient}, retain_graph).
  /// \param gradient the gradient of some scalar with respect to this tensor (same shape); may
  ///   be omitted for a one-element tensor (ones).
  /// \param retain_graph keep the saved tensors so the graph can be backpropagated again.
  void backward(const Tensor& gradient = {}, bool retain_graph = false) const;
  /// A tensor sharing this one's storage, cut from the graph (requires_grad false), like
  /// `torch.Tensor.detach`.
  Tensor detach() const;
  /// The storage's version counter, bumped by every in-place write through any view (like
  /// `torch.Tensor._version`).
  uint32_t version() const { return checked("version").storage->version; }

 private:
  const TensorImpl& checked(const char* accessor) const {
    if (__builtin_expect(impl_ == nullptr, 0)) throw_undefined(accessor);
    return *impl_;
  }
  [[noreturn]] static void throw_undefined(const char* accessor);

  std::shared_ptr<TensorImpl> impl_;
};

/// Writes t.str(), like printing a `torch::Tensor`.
std::ostream& operator<<(std::ostream& os, const Tensor& t);

/// Makes a fresh tensor with contiguous layout (no kernel; contents uninitialised). A negative
/// size, or an element or byte count past int64, is an ember::Error naming `op` and the shape.
Tensor make_empty(const Shape& shape, DType dtype, Device device, const char* op = "empty");
/// A 0-dim host tensor holding `v` converted to `dtype`, flagged as a wrapped number (it then
/// promotes like a plain number, see result_type()).
Tensor wrap_scalar(const Scalar& v, DType dtype);

struct TraceHooks;  // core/trace_hooks.h
namespace detail {
extern thread_local const TraceHooks* t_trace_hooks;
}
/// Tells an active JIT tracer that `t` is read on the host (`what`: "item", "data_ptr", ...) at
/// `where`: a graph break. No effect outside tracing.
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
