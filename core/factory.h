#pragma once
/// \file
/// Tensor factories (empty, zeros, ones, full, arange, from_vector, rand, randn, randint, ...)
/// and TensorOptions, the small chainable struct that says their dtype and device.
///
/// Every factory returns a new contiguous tensor that does not require grad. A shape with a
/// negative size, or an element or byte count past int64, throws ember::Error; so does a CUDA
/// device that does not exist.
#include <vector>

#include "core/generator.h"
#include "core/tensor.h"

namespace ember {

/// The dtype and device of a new tensor, like libtorch's `torch::TensorOptions`.
///
/// Converts implicitly from a DType or a Device, and chains:
/// \code
/// Tensor a = zeros({2, 3}, kInt64);
/// Tensor b = ones({2, 3}, Device::cuda(0));
/// Tensor c = empty({2, 3}, TensorOptions(kBFloat16).device(Device::cuda(0)));
/// \endcode
struct TensorOptions {
  DType dtype_ = kFloat32;         ///< The dtype (float32 unless set).
  Device device_ = Device::cpu();  ///< The device (the CPU unless set).
  /// float32 on the CPU.
  TensorOptions() = default;
  /// dtype `t` on the CPU.
  TensorOptions(DType t) : dtype_(t) {}  // NOLINT
  /// float32 on device `d`.
  TensorOptions(Device d) : device_(d) {}  // NOLINT
  /// A copy with dtype `t`.
  TensorOptions dtype(DType t) const {
    auto o = *this;
    o.dtype_ = t;
    return o;
  }
  /// A copy on device `d`.
  TensorOptions device(Device d) const {
    auto o = *this;
    o.device_ = d;
    return o;
  }
};

/// A tensor of `shape` with uninitialised contents, like `torch.empty`.
Tensor empty(const Shape& shape, TensorOptions opts = {});
/// A tensor of `shape` filled with 0, like `torch.zeros`.
Tensor zeros(const Shape& shape, TensorOptions opts = {});
/// A tensor of `shape` filled with 1, like `torch.ones`.
Tensor ones(const Shape& shape, TensorOptions opts = {});
/// A tensor of `shape` filled with `value` (converted to the dtype), like `torch.full`. Unlike
/// PyTorch the dtype does not follow the value: it is the options' (float32 unless set).
Tensor full(const Shape& shape, const Scalar& value, TensorOptions opts = {});
/// An uninitialised tensor with `t`'s shape, dtype and device (contiguous whatever `t`'s
/// strides), like `torch.empty_like`.
Tensor empty_like(const Tensor& t);
/// Zeros with `t`'s shape, dtype and device, like `torch.zeros_like`.
Tensor zeros_like(const Tensor& t);
/// Ones with `t`'s shape, dtype and device, like `torch.ones_like`.
Tensor ones_like(const Tensor& t);
/// The 1-D tensor 0, 1, ... below `end` with the options' dtype (float32 unless set), like
/// `torch.arange(end, dtype=...)`.
Tensor arange(const Scalar& end, TensorOptions opts);
/// The 1-D tensor start, start + step, ... up to but excluding `end` (ceil((end - start) / step)
/// values) on the CPU, like `torch.arange`. The dtype is int64 if all three are integers, else
/// float32. Throws ember::Error when a bound or the step is not finite, the step is 0, or it
/// leads away from `end`.
Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step = 1);
/// arange(start, end, step) with the dtype and device of `opts`.
Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step, TensorOptions opts);
/// 0, 1, ... below `end` on the CPU: int64 for an integer `end`, else float32.
Tensor arange(const Scalar& end);
/// Copies host data into a new tensor of `shape` (data.size() must equal its numel, else
/// ember::Error), converted to the options' dtype and moved to their device, like
/// `torch.tensor(data).reshape(shape)`.
template <class T>
Tensor from_vector(const std::vector<T>& data, const Shape& shape, TensorOptions opts);
/// from_vector with the dtype of `T` (float -> float32, int64_t -> int64, bool -> bool, ...) on
/// the CPU; `T` must be one of the types of DTypeOf.
/// \code
/// Tensor x = from_vector<float>({1, 2, 3, 4, 5, 6}, {2, 3});
/// \endcode
template <class T>
Tensor from_vector(const std::vector<T>& data, const Shape& shape) {
  return from_vector(data, shape, TensorOptions(DTypeOf<T>::value));
}
/// A new tensor of `shape` and `dtype` on `device` holding a copy of the numel * element size
/// bytes at host pointer `data` (read as that dtype; the caller keeps ownership). Like
/// `torch.from_blob(...).clone()`.
Tensor from_blob_copy(const void* data, const Shape& shape, DType dtype, Device device);
/// A 0-dim tensor holding `v` (converted to the options' dtype, float32 unless set), like
/// `torch.scalar_tensor`.
Tensor scalar_tensor(const Scalar& v, TensorOptions opts = {});

/// Uniform draws in [0, 1) of a floating dtype, like `torch.rand`, from `gen` (the default
/// generator when null). An integer or bool dtype throws ember::Error. The same seed gives the
/// same values on CPU and CUDA.
Tensor rand(const Shape& shape, TensorOptions opts = {}, Generator* gen = nullptr);
/// Standard normal draws (mean 0, variance 1) of a floating dtype, like `torch.randn`, from
/// `gen` (the default generator when null). An integer or bool dtype throws ember::Error.
Tensor randn(const Shape& shape, TensorOptions opts = {}, Generator* gen = nullptr);
/// Uniform integers in [low, high), int64 unless the options say otherwise (any dtype but bool),
/// like `torch.randint`, from `gen` (the default generator when null). Throws ember::Error when
/// low >= high.
Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions opts = kInt64,
               Generator* gen = nullptr);
/// randn of float32 on device `d`: the device-first spelling of the examples,
/// `randn({64, 784}, dev)`.
inline Tensor randn(const Shape& s, Device d) { return randn(s, TensorOptions(d)); }
/// rand of float32 on device `d`.
inline Tensor rand(const Shape& s, Device d) { return rand(s, TensorOptions(d)); }
/// randint of int64 on device `d`, e.g. `randint(0, 10, {64}, dev)`.
inline Tensor randint(int64_t lo, int64_t hi, const Shape& s, Device d) {
  return randint(lo, hi, s, TensorOptions(kInt64).device(d));
}

template <class T>
Tensor from_vector(const std::vector<T>& data, const Shape& shape, TensorOptions opts) {
  EMBER_CHECK(static_cast<int64_t>(data.size()) == checked_numel(shape, "from_vector"),
              "from_vector: ", data.size(), " values for shape ", shape);
  Tensor host = from_blob_copy(data.data(), shape, DTypeOf<T>::value, Device::cpu());
  if (opts.dtype_ != host.dtype()) host = host.to(opts.dtype_);
  return opts.device_.is_cpu() ? host : host.to(opts.device_);
}
/// from_vector for `std::vector<bool>` (packed bits, so it cannot be copied as bytes).
template <>
Tensor from_vector<bool>(const std::vector<bool>& data, const Shape& shape, TensorOptions opts);

}  // namespace ember
