#pragma once
/// \file
/// The public op API: elementwise math, comparisons, reductions, matrix products, softmax and
/// cross entropy, indexing and joining, casts and moves (like the `torch` / `at` functions).
///
/// Type promotion and casts happen here, so every dispatched primitive sees inputs of one dtype;
/// composites (matmul, linear, stack, split, tril, ...) are built here too. Rules shared by the
/// ops below:
///
/// - **Results** are new tensors unless an op says it returns views (split, chunk).
/// - **Broadcasting**: elementwise ops broadcast their operands (NumPy / PyTorch rules);
///   incompatible shapes throw ember::Error.
/// - **Type promotion** follows PyTorch (see result_type()): operands promote to a common dtype,
///   but a 0-dim tensor or a number does not widen a dimensioned tensor of its own category
///   (bool < integer < floating): `half_tensor * 2.0` stays float16. Ops on floating math (exp,
///   div, sigmoid, ...) compute integer and bool inputs in float32, like `torch.exp(int_tensor)`.
///   An input dtype an op does not support (e.g. bool for add, an integer for mean) throws
///   ember::Error naming the op and the dtype.
/// - **Devices**: all tensor operands must be on one device, except that a 0-dim CPU tensor may
///   join an op on any device; otherwise ember::Error.
/// - **Autograd**: ops on tensors that require grad record a backward node (not comparisons,
///   argmax or one_hot, which have no gradient). An undefined operand throws ember::Error.
/// - **Number operands**: the Tensor-Scalar forms (add, sub, mul, div, maximum, minimum, eq, ne,
///   lt, le, gt, ge, each with the number on either side; see EMBER_SCALAR_OVERLOADS) and the
///   operators take a plain C++ number as a Scalar.
///
/// The ops of core/ops.yaml rows with `api: true` (silu, leaky_relu, elu, softplus, hardtanh,
/// ...) are declared in the generated core/generated/ops_api.h, included at the end.
#include <optional>
#include <span>
#include <vector>

#include "core/op.h"
#include "core/tensor.h"

namespace ember {

// ---- Elementwise

/// -a, like `torch.neg`. Numeric dtypes (bool throws).
Tensor neg(const Tensor& a);
/// |a|, like `torch.abs`. Numeric dtypes.
Tensor abs(const Tensor& a);
/// max(a, 0), like `torch.relu`. Numeric dtypes.
Tensor relu(const Tensor& a);
/// e^a, like `torch.exp`; integer and bool inputs give float32.
Tensor exp(const Tensor& a);
/// The natural logarithm, like `torch.log`; integer and bool inputs give float32.
Tensor log(const Tensor& a);
/// The square root, like `torch.sqrt`; integer and bool inputs give float32.
Tensor sqrt(const Tensor& a);
/// 1 / sqrt(a), like `torch.rsqrt`; integer and bool inputs give float32.
Tensor rsqrt(const Tensor& a);
/// 1 / (1 + e^-a), like `torch.sigmoid`; integer and bool inputs give float32.
Tensor sigmoid(const Tensor& a);
/// The hyperbolic tangent, like `torch.tanh`; integer and bool inputs give float32.
Tensor tanh(const Tensor& a);
/// The Gaussian error linear unit, like `torch.nn.functional.gelu`: exact (erf) by default, the
/// tanh approximation (`approximate='tanh'`) when `approximate_tanh`. Integer and bool inputs
/// give float32.
Tensor gelu(const Tensor& a, bool approximate_tanh = false);
/// a limited to [lo, hi], like `torch.clamp`; either bound may be absent, not both (that throws
/// ember::Error). NaN stays NaN. A floating bound on an integer tensor gives float32. Numeric
/// dtypes.
Tensor clamp(const Tensor& a, std::optional<Scalar> lo, std::optional<Scalar> hi);
/// min(max(a, 0), 6), like `torch.nn.functional.relu6`: hardtanh(a, 0, 6) (integer inputs give
/// float32).
Tensor relu6(const Tensor& a);

/// a + b, like `torch.add`. Numeric dtypes (bool throws).
Tensor add(const Tensor& a, const Tensor& b);
/// a - b, like `torch.sub`. Numeric dtypes.
Tensor sub(const Tensor& a, const Tensor& b);
/// a * b, like `torch.mul`. Numeric dtypes.
Tensor mul(const Tensor& a, const Tensor& b);
/// a / b, true division like `torch.div`: integer and bool operands give float32.
Tensor div(const Tensor& a, const Tensor& b);
/// a to the power b, elementwise, like `torch.pow`; integer and bool operands give float32.
Tensor pow(const Tensor& a, const Tensor& b);
/// a to the power of the number b, like `torch.pow(a, 2.0)`: the gradient needs no log of a
/// (and is 0 for b == 0, even at a == 0). Integer and bool inputs give float32.
Tensor pow(const Tensor& a, const Scalar& b);
/// The elementwise maximum, like `torch.maximum` (a NaN in either operand wins). Numeric dtypes.
Tensor maximum(const Tensor& a, const Tensor& b);
/// The elementwise minimum, like `torch.minimum` (a NaN in either operand wins). Numeric dtypes.
Tensor minimum(const Tensor& a, const Tensor& b);
/// a == b as a bool tensor, like `torch.eq`. Any dtypes (compared after promotion).
Tensor eq(const Tensor& a, const Tensor& b);
/// a != b as a bool tensor, like `torch.ne`. Any dtypes.
Tensor ne(const Tensor& a, const Tensor& b);
/// a < b as a bool tensor, like `torch.lt`. Numeric dtypes.
Tensor lt(const Tensor& a, const Tensor& b);
/// a <= b as a bool tensor, like `torch.le`. Numeric dtypes.
Tensor le(const Tensor& a, const Tensor& b);
/// a > b as a bool tensor, like `torch.gt`. Numeric dtypes.
Tensor gt(const Tensor& a, const Tensor& b);
/// a >= b as a bool tensor, like `torch.ge`. Numeric dtypes.
Tensor ge(const Tensor& a, const Tensor& b);
/// `a` where the bool `cond` is true, `b` elsewhere, like `torch.where`. The three broadcast
/// together; a and b promote to their result type. A non-bool `cond` throws ember::Error.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

namespace detail {
// A unary pointwise op on `a`, promoted by its row's rule (the generated API calls this).
Tensor unary_op(OpId op, const Tensor& a, const Attrs& attrs);
}  // namespace detail

/// Declares the two Tensor-Scalar forms of op `fn`, `fn(const Tensor&, const Scalar&)` and
/// `fn(const Scalar&, const Tensor&)`, for add, sub, mul, div, maximum, minimum, eq, ne, lt, le,
/// gt and ge; undefined again after them.
///
/// The forms behave as the Tensor-Tensor op with the number as a wrapped 0-dim tensor: it does
/// not widen the tensor's dtype within a category (`int32_tensor + 1` stays int32,
/// `half_tensor * 0.5` stays float16), but a float number with an integer tensor gives float32.
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
/// `a` where `cond` is true, the number `b` elsewhere (the number as in the Tensor-Scalar ops:
/// `where(c, half_tensor, 0.0)` stays float16).
Tensor where(const Tensor& cond, const Tensor& a, const Scalar& b);
/// The number `a` where `cond` is true, `b` elsewhere.
Tensor where(const Tensor& cond, const Scalar& a, const Tensor& b);

/// -a: neg().
Tensor operator-(const Tensor& a);
/// a + b: add().
Tensor operator+(const Tensor& a, const Tensor& b);
/// a - b: sub().
Tensor operator-(const Tensor& a, const Tensor& b);
/// a * b: mul().
Tensor operator*(const Tensor& a, const Tensor& b);
/// a / b: div() (true division).
Tensor operator/(const Tensor& a, const Tensor& b);
/// a + number: add().
Tensor operator+(const Tensor& a, const Scalar& b);
/// a - number: sub().
Tensor operator-(const Tensor& a, const Scalar& b);
/// a * number: mul().
Tensor operator*(const Tensor& a, const Scalar& b);
/// a / number: div().
Tensor operator/(const Tensor& a, const Scalar& b);
/// number + b: add().
Tensor operator+(const Scalar& a, const Tensor& b);
/// number - b: sub().
Tensor operator-(const Scalar& a, const Tensor& b);
/// number * b: mul().
Tensor operator*(const Scalar& a, const Tensor& b);
/// number / b: div().
Tensor operator/(const Scalar& a, const Tensor& b);
/// Elementwise a == b as a bool tensor (eq()), not a whole-tensor comparison: see equal().
Tensor operator==(const Tensor& a, const Tensor& b);
/// Elementwise a != b as a bool tensor: ne().
Tensor operator!=(const Tensor& a, const Tensor& b);
/// Elementwise a < b as a bool tensor: lt().
Tensor operator<(const Tensor& a, const Tensor& b);
/// Elementwise a <= b as a bool tensor: le().
Tensor operator<=(const Tensor& a, const Tensor& b);
/// Elementwise a > b as a bool tensor: gt().
Tensor operator>(const Tensor& a, const Tensor& b);
/// Elementwise a >= b as a bool tensor: ge().
Tensor operator>=(const Tensor& a, const Tensor& b);
/// Elementwise a == number as a bool tensor: eq().
Tensor operator==(const Tensor& a, const Scalar& b);
/// Elementwise a != number as a bool tensor: ne().
Tensor operator!=(const Tensor& a, const Scalar& b);
/// Elementwise a < number as a bool tensor: lt().
Tensor operator<(const Tensor& a, const Scalar& b);
/// Elementwise a <= number as a bool tensor: le().
Tensor operator<=(const Tensor& a, const Scalar& b);
/// Elementwise a > number as a bool tensor: gt().
Tensor operator>(const Tensor& a, const Scalar& b);
/// Elementwise a >= number as a bool tensor: ge().
Tensor operator>=(const Tensor& a, const Scalar& b);

/// The dtype an op combining these operands computes in, like `torch.result_type`.
///
/// Dimensioned tensors, 0-dim tensors and wrapped numbers form three tiers, each promoted with
/// promote_types(); a lower tier only changes the result when it is of a higher category
/// (bool < integer < floating). A wrapped float counts as float32, a wrapped integer as int64.
/// No operands throws ember::Error.
DType result_type(std::span<const Tensor> operands);

// ---- Reductions. Empty `dims` reduces everything; dims may be negative, repeating one throws
// ember::Error. `keepdim` keeps each reduced dim with size 1. A 0-dim input reduces as a
// one-element vector.

/// The sum over `dims` (all when empty), like `torch.sum`. Integer and bool inputs sum to int64.
Tensor sum(const Tensor& a, const Dims& dims = {}, bool keepdim = false);
/// The mean over `dims` (all when empty), like `torch.mean`. Floating dtypes only (an integer
/// input throws ember::Error, as in PyTorch); the mean of zero elements is NaN.
Tensor mean(const Tensor& a, const Dims& dims = {}, bool keepdim = false);
/// The maximum over `dims` (all when empty), like `torch.amax`. Numeric dtypes; reducing zero
/// elements throws ember::Error.
Tensor amax(const Tensor& a, const Dims& dims = {}, bool keepdim = false);
/// The minimum over `dims` (all when empty), like `torch.amin`. Numeric dtypes; reducing zero
/// elements throws ember::Error.
Tensor amin(const Tensor& a, const Dims& dims = {}, bool keepdim = false);
/// The largest element as a 0-dim tensor, like `torch.max(a)` (amax over all dims).
Tensor max(const Tensor& a);
/// The smallest element as a 0-dim tensor, like `torch.min(a)` (amin over all dims).
Tensor min(const Tensor& a);
/// The int64 index of the largest element in the flattened tensor, 0-dim, like `torch.argmax(a)`.
Tensor argmax(const Tensor& a);
/// The int64 indices of the largest elements along `dim`, like `torch.argmax(a, dim, keepdim)`.
Tensor argmax(const Tensor& a, int64_t dim, bool keepdim = false);
/// log(sum(exp(a))) over `dims`, computed stably, like `torch.logsumexp`; integer and bool inputs
/// give float32.
Tensor logsumexp(const Tensor& a, const Dims& dims, bool keepdim = false);

// ---- Matrix products. They do not promote: both operands must share a dtype (a float64 input
// on float32 weights is more often a mistake than a request), else ember::Error. Numeric dtypes.

/// The matrix product of [M, K] and [K, N], like `torch.mm`; other shapes throw ember::Error.
Tensor mm(const Tensor& a, const Tensor& b);
/// The batched matrix product of [B, M, K] and [B, K, N] into [B, M, N], like `torch.bmm` (no
/// broadcasting of B).
Tensor bmm(const Tensor& a, const Tensor& b);
/// The matrix product with NumPy semantics, like `torch.matmul`: two vectors give their dot
/// product (0-dim), a 1-D operand is a row (left) or column (right) vector whose dim is dropped
/// from the result, and batch dims broadcast ([..., M, K] x [..., K, N]). Throws ember::Error
/// for 0-dim operands or mismatched inner sizes.
Tensor matmul(const Tensor& a, const Tensor& b);
/// x W^T + b, like `torch.nn.functional.linear`: `x` [..., in], `weight` [out, in], `bias` [out]
/// or undefined (no bias). One autocast op (`lower` policy): under autocast all three are cast
/// to the low dtype. A weight that is not 2-D, or an input of another dtype, throws ember::Error.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = {});
/// Lets float32 GEMMs and convolutions on the GPU use TF32 tensor cores: off unless turned on,
/// like `torch.backends.cuda.matmul.allow_tf32`. Process-wide.
void set_allow_tf32(bool on);
/// Whether float32 GPU GEMMs and convolutions may use TF32 (false by default).
bool allow_tf32();
/// With `on` (the default) convolutions avoid algorithms whose sums run in a varying order
/// (atomics: cuDNN's fastest weight gradients of strided and 1x1 convolutions, often several
/// times faster), so two runs, and an eager and a compiled step, agree bit for bit; `false`
/// allows them. PyTorch allows them unless `torch.backends.cudnn.deterministic` is set.
void set_deterministic_algorithms(bool on);
/// Whether only deterministic convolution algorithms are used (true by default).
bool deterministic_algorithms();
/// PyTorch's `torch.set_float32_matmul_precision`: "highest" (float32 products, the default) or
/// "high" (TF32 tensor cores: set_allow_tf32(true)). "medium" asks PyTorch for bfloat16 products
/// where it can; Ember takes it as "high". Anything else is an ember::Error.
void set_float32_matmul_precision(std::string_view precision);
/// "highest" or "high", as allow_tf32() says, like `torch.get_float32_matmul_precision()`.
std::string_view float32_matmul_precision();

// ---- Normalisers and losses

/// exp(a) / sum(exp(a)) along `dim`, computed stably, like `torch.softmax`. Floating dtypes
/// only.
Tensor softmax(const Tensor& a, int64_t dim);
/// log(softmax(a, dim)), computed stably, like `torch.log_softmax`. Floating dtypes only.
Tensor log_softmax(const Tensor& a, int64_t dim);
/// Per-sample cross entropy [N] of floating logits [N, C] against int64 class indices [N], like
/// `torch.nn.functional.cross_entropy(..., reduction="none")`. Samples whose target equals
/// `ignore_index` get 0. With `label_smoothing` e in [0, 1] the target distribution is
/// (1 - e) one_hot + e / C. Wrong shapes or dtypes, or e outside [0, 1], throw ember::Error; so
/// does an out-of-range target (on CUDA at the next synchronization or host read).
Tensor cross_entropy_per_sample(const Tensor& logits, const Tensor& target,
                                int64_t ignore_index = -100, double label_smoothing = 0);
/// The same losses reduced in one op: None gives [N] (as above), Mean the sum over the samples
/// whose target is not ignore_index divided by their count (NaN when there are none), Sum their
/// sum; Mean and Sum give one value [] (like PyTorch's reduction "mean" / "sum").
Tensor cross_entropy_reduced(const Tensor& logits, const Tensor& target, int64_t ignore_index,
                             double label_smoothing, LossReduction reduction);

// ---- Indexing and joining. Index tensors may be int32 or int64; an index out of range throws
// ember::Error (on CUDA at the next synchronization or host read).

/// out[i][j][k] = a[index[i][j][k]][j][k] for dim 0 (and likewise for the other dims), like
/// `torch.gather`. `index` has a's number of dims and no larger size than `a` outside `dim`; the
/// result has index's shape and a's dtype.
Tensor gather(const Tensor& a, int64_t dim, const Tensor& index);
/// The entries of `a` at the positions of the 1-D `index` along `dim`, like
/// `torch.index_select` (a copy: size index.numel() at `dim`).
Tensor index_select(const Tensor& a, int64_t dim, const Tensor& index);
/// int64 one-hot rows [..., num_classes] for integer class indices, like
/// `torch.nn.functional.one_hot`. With num_classes -1 it is the largest index + 1 (a host read:
/// a sync on CUDA, a graph break under jit::compile; an empty input then throws ember::Error).
Tensor one_hot(const Tensor& index, int64_t num_classes = -1);
/// Concatenates non-empty `tensors` along `dim`, like `torch.cat`: the same number of dims
/// (not 0) and the same sizes outside `dim`, on one device; dtypes promote to their result type.
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
/// Stacks tensors of one shape along a new dim `dim` (in [-(d+1), d]), like `torch.stack`:
/// cat of their unsqueeze(dim).
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
/// The p-norm of each tensor, stacked into a vector [n], like `torch.stack(torch._foreach_norm(
/// tensors, p))`, in one kernel launch per 64 tensors: (sum |x|^p)^(1/p) summed in float64, or
/// max |x| for p = inf (a NaN propagates); an empty tensor's norm is 0. Floating tensors of any
/// dtypes and shapes on one device; the result is float32, float64 if any tensor is. p below 1
/// throws ember::Error. Not differentiable.
Tensor multi_norm(const std::vector<Tensor>& tensors, double p = 2);
/// Views of consecutive pieces of `size` along `dim`, the last possibly shorter, like
/// `torch.split(a, size, dim)`. A size below 1 (except 0 for an empty dim) throws ember::Error.
std::vector<Tensor> split(const Tensor& a, int64_t size, int64_t dim = 0);
/// Views of consecutive pieces of the given `sizes` along `dim`, like `torch.split(a, sizes, dim)`;
/// sizes that do not sum to the dim's size throw ember::Error.
std::vector<Tensor> split(const Tensor& a, const std::vector<int64_t>& sizes, int64_t dim = 0);
/// Views of at most `chunks` consecutive pieces of ceil(size / chunks) along `dim`, the last
/// possibly shorter, like `torch.chunk`. `chunks` below 1 throws ember::Error.
std::vector<Tensor> chunk(const Tensor& a, int64_t chunks, int64_t dim = 0);
/// `value` where the bool `mask` (broadcast to a's shape) is true, `a` elsewhere, like
/// `torch.masked_fill` (out of place): where(mask, value, a), so the result dtype is where's
/// (a float `value` on an integer `a` gives float32). A non-bool mask, or one that does not
/// broadcast to a's shape, throws ember::Error.
Tensor masked_fill(const Tensor& a, const Tensor& mask, const Scalar& value);
/// The lower triangle of the last two dims, zeros elsewhere, like `torch.tril`: element (i, j)
/// kept when j - i <= diagonal. Needs at least 2 dims; the leading dims are a batch.
Tensor tril(const Tensor& a, int64_t diagonal = 0);
/// The upper triangle of the last two dims, zeros elsewhere, like `torch.triu`: element (i, j)
/// kept when j - i >= diagonal. Needs at least 2 dims; the leading dims are a batch.
Tensor triu(const Tensor& a, int64_t diagonal = 0);

// ---- Casting and moving

/// A contiguous copy of `a` converted to `dtype` (always a new tensor, even for the same dtype;
/// Tensor::to(DType) returns `a` itself then). The gradient flows back converted to a's dtype.
Tensor cast(const Tensor& a, DType dtype);
/// A copy of `a` on `device`, like `torch.Tensor.to(device)` (Tensor::to(Device) returns `a`
/// itself when it is already there). A CUDA device that does not exist, or CUDA being
/// unavailable, throws ember::Error. Moving to the host is a graph break under jit::compile.
Tensor to_device(const Tensor& a, Device device);

/// Whether |a - b| <= atol + rtol |b| everywhere (broadcast), like `torch.allclose` with
/// equal_nan false: a NaN is never close, equal infinities are. Compares on the host in double,
/// so CUDA tensors are copied (a sync).
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);
/// Whether a and b have the same shape and identical values (compared as double; the dtypes may
/// differ), like `torch.equal`. A NaN makes it false. Reads both on the host.
bool equal(const Tensor& a, const Tensor& b);

}  // namespace ember

// The ops of core/ops.yaml rows with `api: true` (silu, leaky_relu, elu, softplus, ...).
#include "core/generated/ops_api.h"
