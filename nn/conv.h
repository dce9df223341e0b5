#pragma once
/// \file
/// Convolutions and pooling over 2-D (and, through them, 1-D) inputs [N, C, H, W], with
/// PyTorch's semantics and parameter names.
///
/// Functions: conv1d/conv2d (stride, padding or "same", dilation, groups, bias), max_pool2d
/// (dilation, ceil_mode), avg_pool2d (count_include_pad, ceil_mode), adaptive_avg_pool2d.
/// Modules: Conv1d, Conv2d, MaxPool2d, AvgPool2d, AdaptiveAvgPool2d. Inputs must be batched
/// (4-D, or 3-D for conv1d) and floating point; all of them are differentiable and traceable.
///
/// conv2d (CPU: im2col + GEMM; CUDA: cuDNN) and max_pool2d are ops of the table. avg_pool2d,
/// adaptive_avg_pool2d, and conv2d on a CUDA build without cuDNN, gather the windows with one
/// index_select and reduce them (or multiply them with the weight) with public ops.
///
/// Every output size follows PyTorch's formula, per spatial dim:
/// `out = floor((in + 2 * padding - dilation * (kernel - 1) - 1) / stride) + 1`
/// (`ceil` instead of `floor` with ceil_mode, dropping a last window that would start in the
/// right padding). Bad shapes, dtypes or arguments throw ember::Error.
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "nn/holder.h"
#include "nn/module.h"
#include "nn/options.h"

namespace ember::nn {

namespace functional {

/// Arguments of conv2d and conv1d. Sizes take one or two entries for conv2d (one applies to
/// both dims, as PyTorch's int arguments do) and exactly one for conv1d.
struct ConvArgs {
  /// Step between windows (positive).
  std::vector<int64_t> stride{1}, padding{0}, dilation{1};
  /// \var padding
  /// Zeros added on both sides of each spatial dim (ignored when `same`).
  /// \var dilation
  /// Spacing between kernel elements (positive).
  int64_t groups = 1;  ///< channels split into this many groups (divides C and OC)
  /// padding="same": output size = input size (stride 1 only); an odd total padding puts the
  /// extra row / column at the bottom / right, as PyTorch does.
  bool same = false;
};
/// 2-D convolution (cross-correlation), like `torch.nn.functional.conv2d`.
/// \param x input [N, C, H, W].
/// \param weight [OC, C / groups, kH, kW], of the input's dtype and device.
/// \param bias [OC] of the weight's dtype, or undefined for none.
/// \param args stride, padding, dilation, groups.
/// \return [N, OC, OH, OW]. Under autocast the inputs run in the low dtype.
/// \throws ember::Error on a non-4-D or non-floating input, mismatched shapes, dtypes or
///   devices, channels not divisible by groups, or a kernel larger than the padded input.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = {},
              const ConvArgs& args = {});
/// 1-D convolution, like `torch.nn.functional.conv1d`: conv2d over a height of 1.
/// \param x input [N, C, L].
/// \param weight [OC, C / groups, k].
/// \param bias [OC], or undefined for none.
/// \param args as for conv2d, each size with exactly one entry.
/// \return [N, OC, L_out].
Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias = {},
              const ConvArgs& args = {});

/// Arguments of max_pool2d and avg_pool2d; sizes take one or two entries (height, width).
struct PoolArgs {
  std::vector<int64_t> kernel_size{};  ///< the window (required)
  std::vector<int64_t> stride{};       ///< step between windows; empty: the kernel size
  std::vector<int64_t> padding{0};     ///< added on both sides; at most half the kernel
  std::vector<int64_t> dilation{1};    ///< spacing inside the window; max_pool2d only
  bool ceil_mode = false;              ///< round the output size up instead of down
  /// avg_pool2d only: divide by the window clipped to the padded input (true) or to the input
  /// itself (false).
  bool count_include_pad = true;
};
/// 2-D max pooling, like `torch.nn.functional.max_pool2d` (without indices): [N, C, H, W] ->
/// [N, C, OH, OW]. The padding never wins; a NaN in a window does, and the gradient goes to the
/// window's first maximum.
Tensor max_pool2d(const Tensor& x, const PoolArgs& args);
/// 2-D average pooling, like `torch.nn.functional.avg_pool2d`: [N, C, H, W] ->
/// [N, C, OH, OW]; the padding counts as zeros.
Tensor avg_pool2d(const Tensor& x, const PoolArgs& args);
/// Adaptive average pooling, like `torch.nn.functional.adaptive_avg_pool2d`.
/// \param x input [N, C, H, W].
/// \param output_size (oh, ow), or one value for both.
/// \return [N, C, oh, ow]: output row i averages the rows [floor(i H / oh),
///   ceil((i + 1) H / oh)), and likewise for the columns; (1, 1) is a global mean.
Tensor adaptive_avg_pool2d(const Tensor& x, const std::vector<int64_t>& output_size);

/// Formats sizes as `"(3, 3)"`, for messages and printing.
std::string str(const std::vector<int64_t>& sizes);

}  // namespace functional

/// Options of Conv2d and Conv1d, like `torch::nn::ConvOptions`: chainable setters, e.g.
/// `ConvOptions(3, 16, {3}).padding({1}).bias(false)`. Sizes take one entry, or for Conv2d two
/// (height, width).
struct ConvOptions {
  /// The three required options.
  ConvOptions(int64_t in_channels, int64_t out_channels, std::vector<int64_t> kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}
  /// Channels of the input, C.
  EMBER_ARG(int64_t, in_channels);
  /// Channels of the output, OC.
  EMBER_ARG(int64_t, out_channels);
  /// Size of the kernel.
  EMBER_ARG(std::vector<int64_t>, kernel_size);
  /// Step between windows (default 1).
  EMBER_ARG(std::vector<int64_t>, stride) = {1};
  /// Zeros added on both sides of each spatial dim (default 0).
  EMBER_ARG(std::vector<int64_t>, padding) = {0};
  /// PyTorch's padding="same": the output keeps the input's size (stride 1 only); overrides
  /// padding.
  EMBER_ARG(bool, padding_same) = false;
  /// Spacing between kernel elements (default 1).
  EMBER_ARG(std::vector<int64_t>, dilation) = {1};
  /// Blocked connections: input and output channels are split into this many groups, which
  /// must divide both (default 1).
  EMBER_ARG(int64_t, groups) = 1;
  /// Whether to learn an additive bias (default true).
  EMBER_ARG(bool, bias) = true;
};

/// Conv2d and Conv1d (Dims 2 or 1), like `torch.nn.Conv2d` / `torch.nn.Conv1d`.
///
/// forward takes [N, C, H, W] (Conv1d: [N, C, L]) and returns [N, OC, OH, OW] (Conv1d:
/// [N, OC, L_out]); see functional::conv2d. Parameters: weight [out, in / groups, *kernel],
/// bias [out]; PyTorch's init (kaiming_uniform with a = sqrt(5); bias uniform in
/// +-1/sqrt(fan_in)), created as float32 on the CPU (move them with `to()`).
/// \throws ember::Error from the constructor on non-positive channels or kernel sizes, or
///   channels not divisible by groups.
template <int Dims>
class ConvImpl : public Module {
 public:
  /// Builds the layer and initializes its parameters.
  explicit ConvImpl(const ConvOptions& options);
  /// A layer with a square (Conv1d: length-`kernel`) kernel and default options.
  ConvImpl(int64_t in, int64_t out, int64_t kernel) : ConvImpl(ConvOptions(in, out, {kernel})) {}
  /// Convolves `x` with weight and adds bias.
  Tensor forward(const Tensor& x);
  /// Re-draws weight and bias with the initialization above.
  void reset_parameters();
  /// Prints e.g. `Conv2d(3, 16, kernel_size=(3), stride=(1), padding=(1))`.
  void pretty_print(std::ostream& os) const override;

  ConvOptions options;  ///< the options the layer was built with
  /// The kernel, [out_channels, in_channels / groups, *kernel_size].
  Tensor weight, bias;
  /// \var bias
  /// The bias, [out_channels]; undefined when options.bias() is false.
};
/// The implementation of Conv2d.
using Conv2dImpl = ConvImpl<2>;
/// The implementation of Conv1d.
using Conv1dImpl = ConvImpl<1>;
/// The module holder of Conv2dImpl: a 2-D convolution layer, like `torch::nn::Conv2d`.
EMBER_MODULE(Conv2d);
/// The module holder of Conv1dImpl: a 1-D convolution layer, like `torch::nn::Conv1d`.
EMBER_MODULE(Conv1d);

/// MaxPool2d (Max = true) and AvgPool2d, like `torch.nn.MaxPool2d` / `torch.nn.AvgPool2d`:
/// [N, C, H, W] -> [N, C, OH, OW], see functional::max_pool2d and functional::avg_pool2d. No
/// parameters.
template <bool Max>
class Pool2dImpl : public Module {
 public:
  /// A pooling layer with the given arguments.
  explicit Pool2dImpl(functional::PoolArgs args) : args(std::move(args)) {}
  /// A square `kernel` window with stride = kernel and no padding.
  explicit Pool2dImpl(int64_t kernel) : Pool2dImpl(functional::PoolArgs{{kernel}}) {}
  /// Pools `x`.
  Tensor forward(const Tensor& x);
  /// Prints e.g. `MaxPool2d(kernel_size=(2), stride=(2), padding=(0))`.
  void pretty_print(std::ostream& os) const override;
  functional::PoolArgs args;  ///< the pooling arguments
};
/// The implementation of MaxPool2d.
using MaxPool2dImpl = Pool2dImpl<true>;
/// The implementation of AvgPool2d.
using AvgPool2dImpl = Pool2dImpl<false>;
/// The module holder of MaxPool2dImpl, like `torch::nn::MaxPool2d`.
EMBER_MODULE(MaxPool2d);
/// The module holder of AvgPool2dImpl, like `torch::nn::AvgPool2d`.
EMBER_MODULE(AvgPool2d);

/// Adaptive average pooling to a fixed output size, like `torch.nn.AdaptiveAvgPool2d`:
/// [N, C, H, W] -> [N, C, oh, ow], see functional::adaptive_avg_pool2d. No parameters.
class AdaptiveAvgPool2dImpl : public Module {
 public:
  /// Pools to `output_size`: (oh, ow), or one value for both.
  explicit AdaptiveAvgPool2dImpl(std::vector<int64_t> output_size)
      : output_size(std::move(output_size)) {}
  /// Pools `x`.
  Tensor forward(const Tensor& x);
  /// Prints e.g. `AdaptiveAvgPool2d(output_size=(1, 1))`.
  void pretty_print(std::ostream& os) const override;
  std::vector<int64_t> output_size;  ///< (oh, ow), or one value for both
};
/// The module holder of AdaptiveAvgPool2dImpl, like `torch::nn::AdaptiveAvgPool2d`.
EMBER_MODULE(AdaptiveAvgPool2d);

}  // namespace ember::nn
