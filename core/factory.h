#pragma once
// Tensor factories. Options are a small chainable struct, like libtorch's TensorOptions.
#include <vector>

#include "core/generator.h"
#include "core/tensor.h"

namespace ember {

struct TensorOptions {
  DType dtype_ = kFloat32;
  Device device_ = Device::cpu();
  TensorOptions() = default;
  TensorOptions(DType t) : dtype_(t) {}    // NOLINT
  TensorOptions(Device d) : device_(d) {}  // NOLINT
  TensorOptions dtype(DType t) const {
    auto o = *this;
    o.dtype_ = t;
    return o;
  }
  TensorOptions device(Device d) const {
    auto o = *this;
    o.device_ = d;
    return o;
  }
};

Tensor empty(const Shape& shape, TensorOptions opts = {});
Tensor zeros(const Shape& shape, TensorOptions opts = {});
Tensor ones(const Shape& shape, TensorOptions opts = {});
Tensor full(const Shape& shape, const Scalar& value, TensorOptions opts = {});
Tensor empty_like(const Tensor& t);
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
// Values start, start+step, ... below end. Default dtype: int64 if all three are integers.
Tensor arange(const Scalar& end, TensorOptions opts);
Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step = 1);
Tensor arange(const Scalar& start, const Scalar& end, const Scalar& step, TensorOptions opts);
Tensor arange(const Scalar& end);
// Copies host data into a new tensor of the given shape (numel must match). Without options the
// dtype is T's (float -> float32, int64_t -> int64, bool -> bool, ...) on the CPU.
template <class T>
Tensor from_vector(const std::vector<T>& data, const Shape& shape, TensorOptions opts);
template <class T>
Tensor from_vector(const std::vector<T>& data, const Shape& shape) {
  return from_vector(data, shape, TensorOptions(DTypeOf<T>::value));
}
Tensor from_blob_copy(const void* data, const Shape& shape, DType dtype, Device device);
Tensor scalar_tensor(const Scalar& v, TensorOptions opts = {});

// Random draws from a generator (the default one unless given).
Tensor rand(const Shape& shape, TensorOptions opts = {}, Generator* gen = nullptr);
Tensor randn(const Shape& shape, TensorOptions opts = {}, Generator* gen = nullptr);
Tensor randint(int64_t low, int64_t high, const Shape& shape, TensorOptions opts = kInt64,
               Generator* gen = nullptr);
// Device-first spellings used in examples: randn({64, 784}, dev).
inline Tensor randn(const Shape& s, Device d) { return randn(s, TensorOptions(d)); }
inline Tensor rand(const Shape& s, Device d) { return rand(s, TensorOptions(d)); }
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
template <>
Tensor from_vector<bool>(const std::vector<bool>& data, const Shape& shape, TensorOptions opts);

}  // namespace ember
