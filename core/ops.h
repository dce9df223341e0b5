#pragma once
// The public op API. Type promotion and casts happen here, so every dispatched primitive sees
// inputs of one dtype; composites (sub-free ones like matmul, linear, stack) are built here too.
#include <optional>
#include <span>
#include <vector>

#include "core/op.h"
#include "core/tensor.h"

namespace ember {

// Elementwise
Tensor neg(const Tensor& a);
Tensor abs(const Tensor& a);
Tensor relu(const Tensor& a);
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor sqrt(const Tensor& a);
Tensor rsqrt(const Tensor& a);
Tensor sigmoid(const Tensor& a);
Tensor tanh(const Tensor& a);
Tensor gelu(const Tensor& a, bool approximate_tanh = false);
Tensor clamp(const Tensor& a, std::optional<Scalar> lo, std::optional<Scalar> hi);
Tensor relu6(const Tensor& a);  // hardtanh(a, 0, 6)

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Tensor& b);
Tensor pow(const Tensor& a, const Scalar& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

namespace detail {
// A unary pointwise op on `a`, promoted by its row's rule (the generated API calls this).
Tensor unary_op(OpId op, const Tensor& a, const Attrs& attrs);
}  // namespace detail

// Tensor-scalar forms wrap the scalar (it does not widen the tensor's dtype within a category).
#define EMBER_SCALAR_OVERLOADS(fn)             \
  Tensor fn(const Tensor& a, const Scalar& b); \
  Tensor fn(const Scalar& a, const Tensor& b);
EMBER_SCALAR_OVERLOADS(add)
EMBER_SCALAR_OVERLOADS(sub)
EMBER_SCALAR_OVERLOADS(mul)
EMBER_SCALAR_OVERLOADS(div)
EMBER_SCALAR_OVERLOADS(maximum)
EMBER_SCALAR_OVERLOADS(minimum)
EMBER_SCALAR_OVERLOADS(eq)
EMBER_SCALAR_OVERLOADS(ne)
EMBER_SCALAR_OVERLOADS(lt)
EMBER_SCALAR_OVERLOADS(le)
EMBER_SCALAR_OVERLOADS(gt)
EMBER_SCALAR_OVERLOADS(ge)
#undef EMBER_SCALAR_OVERLOADS
Tensor where(const Tensor& cond, const Tensor& a, const Scalar& b);
Tensor where(const Tensor& cond, const Scalar& a, const Tensor& b);

Tensor operator-(const Tensor& a);
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, const Scalar& b);
Tensor operator-(const Tensor& a, const Scalar& b);
Tensor operator*(const Tensor& a, const Scalar& b);
Tensor operator/(const Tensor& a, const Scalar& b);
Tensor operator+(const Scalar& a, const Tensor& b);
Tensor operator-(const Scalar& a, const Tensor& b);
Tensor operator*(const Scalar& a, const Tensor& b);
Tensor operator/(const Scalar& a, const Tensor& b);
Tensor operator==(const Tensor& a, const Tensor& b);
Tensor operator!=(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor operator==(const Tensor& a, const Scalar& b);
Tensor operator!=(const Tensor& a, const Scalar& b);
Tensor operator<(const Tensor& a, const Scalar& b);
Tensor operator<=(const Tensor& a, const Scalar& b);
Tensor operator>(const Tensor& a, const Scalar& b);
Tensor operator>=(const Tensor& a, const Scalar& b);

// Result dtype of combining these operands (torch.result_type).
DType result_type(std::span<const Tensor> operands);

// Reductions. Empty `dims` reduces everything.
Tensor sum(const Tensor& a, const Dims& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& a, const Dims& dims = {}, bool keepdim = false);
Tensor amax(const Tensor& a, const Dims& dims = {}, bool keepdim = false);
Tensor amin(const Tensor& a, const Dims& dims = {}, bool keepdim = false);
Tensor max(const Tensor& a);  // all elements
Tensor min(const Tensor& a);
Tensor argmax(const Tensor& a);  // index into the flattened tensor
Tensor argmax(const Tensor& a, int64_t dim, bool keepdim = false);
Tensor logsumexp(const Tensor& a, const Dims& dims, bool keepdim = false);

// Matrix products
Tensor mm(const Tensor& a, const Tensor& b);
Tensor bmm(const Tensor& a, const Tensor& b);
Tensor matmul(const Tensor& a, const Tensor& b);  // numpy semantics, batch broadcasting
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});  // x W^T + b
// TF32 for float32 GEMMs on the GPU: off unless turned on (like torch.backends.cuda.matmul).
void set_allow_tf32(bool on);
bool allow_tf32();
// Convolution algorithms whose sums run in a varying order (atomics: cuDNN's fastest weight
// gradients of strided and 1x1 convolutions, often several times faster): off by default, so two
// runs, and an eager and a compiled step, agree bit for bit. PyTorch allows them unless
// torch.backends.cudnn.deterministic is set.
void set_deterministic_algorithms(bool on);
bool deterministic_algorithms();
// PyTorch's torch.set_float32_matmul_precision: "highest" (float32 products, the default) or
// "high" (TF32 tensor cores: set_allow_tf32(true)). "medium" asks PyTorch for bfloat16 products
// where it can; Ember takes it as "high". Anything else is an ember::Error.
void set_float32_matmul_precision(std::string_view precision);
std::string_view float32_matmul_precision();  // "highest" or "high"

// Normalisers and losses
Tensor softmax(const Tensor& a, int64_t dim);
Tensor log_softmax(const Tensor& a, int64_t dim);
// Per-sample cross entropy of logits [N, C] against int64 class indices [N]; samples whose
// target equals ignore_index get 0. Out-of-range targets raise ember::Error. With
// label_smoothing e in [0, 1] the target distribution is (1 - e) one_hot + e / C.
Tensor cross_entropy_per_sample(const Tensor& logits, const Tensor& target,
                                int64_t ignore_index = -100, double label_smoothing = 0);
// The same losses reduced in one op: None gives [N] (as above), Mean the sum over the samples
// whose target is not ignore_index divided by their count (NaN when there are none), Sum their
// sum; Mean and Sum give one value [].
Tensor cross_entropy_reduced(const Tensor& logits, const Tensor& target, int64_t ignore_index,
                             double label_smoothing, LossReduction reduction);

// Indexing and joining
Tensor gather(const Tensor& a, int64_t dim, const Tensor& index);
Tensor index_select(const Tensor& a, int64_t dim, const Tensor& index);
Tensor one_hot(const Tensor& index, int64_t num_classes = -1);
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
// Views of consecutive pieces along `dim` (core/composite_ops.cpp), as torch.split / chunk:
// split into pieces of `size` (the last may be shorter) or of the given sizes (summing to the
// dim's size); chunk into at most `chunks` pieces of ceil(size / chunks).
std::vector<Tensor> split(const Tensor& a, int64_t size, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& a, const std::vector<int64_t>& sizes, int64_t dim = 0);
std::vector<Tensor> chunk(const Tensor& a, int64_t chunks, int64_t dim = 0);
// `value` where the bool `mask` (broadcast to a's shape) is true, a elsewhere.
Tensor masked_fill(const Tensor& a, const Tensor& mask, const Scalar& value);
// The lower (tril) or upper (triu) triangle of the last two dims, zeros elsewhere: element
// (i, j) kept when j - i <= diagonal (tril) or j - i >= diagonal (triu).
Tensor tril(const Tensor& a, int64_t diagonal = 0);
Tensor triu(const Tensor& a, int64_t diagonal = 0);

// Casting and moving
Tensor cast(const Tensor& a, DType dtype);
Tensor to_device(const Tensor& a, Device device);

bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);
bool equal(const Tensor& a, const Tensor& b);  // same shape and identical values

}  // namespace ember

// The ops of core/ops.yaml rows with `api: true` (silu, leaky_relu, elu, softplus, ...).
#include "core/generated/ops_api.h"
