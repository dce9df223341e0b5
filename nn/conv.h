#pragma once
// Convolutions and pooling over 2-D (and, through them, 1-D) inputs [N, C, H, W], with
// PyTorch's semantics and parameter names: conv1d/conv2d (stride, padding or "same", dilation,
// groups, bias), max_pool2d (ceil_mode), avg_pool2d (count_include_pad, ceil_mode),
// adaptive_avg_pool2d; the modules Conv1d, Conv2d, MaxPool2d, AvgPool2d, AdaptiveAvgPool2d.
//
// Built from public ops, so autograd, the JIT and both devices take them as they are: the input
// is flattened per sample with one padding element appended, the windows are gathered with one
// index_select (im2col; positions in the padding read that element: 0, or -inf for max
// pooling), and a convolution is then one matmul with the weight per group; pooling is an
// amax, sum or mean over the window. The index is made on the host from the shapes. Gradients
// come from index_select's and matmul's formulas. This is the correctness-first path: cuDNN and
// oneDNN kernels are to replace the gather and the product where they are faster.
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

// Sizes of one or two entries (one applies to both dims, as PyTorch's int arguments do).
struct ConvArgs {
  std::vector<int64_t> stride{1}, padding{0}, dilation{1};
  int64_t groups = 1;
  bool same = false;  // padding="same": output size = input size (stride 1 only)
};
// x [N, C, H, W], weight [OC, C / groups, kH, kW], bias [OC] or undefined.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = {},
              const ConvArgs& args = {});
// x [N, C, L], weight [OC, C / groups, k].
Tensor conv1d(const Tensor& x, const Tensor& weight, const Tensor& bias = {},
              const ConvArgs& args = {});

struct PoolArgs {
  std::vector<int64_t> kernel_size{};
  std::vector<int64_t> stride{};  // empty: the kernel size
  std::vector<int64_t> padding{0};
  std::vector<int64_t> dilation{1};  // max_pool2d only
  bool ceil_mode = false;
  bool count_include_pad = true;  // avg_pool2d only
};
Tensor max_pool2d(const Tensor& x, const PoolArgs& args);
Tensor avg_pool2d(const Tensor& x, const PoolArgs& args);
// Output [N, C, oh, ow]: window i spans [floor(i H / oh), ceil((i + 1) H / oh)).
Tensor adaptive_avg_pool2d(const Tensor& x, const std::vector<int64_t>& output_size);

std::string str(const std::vector<int64_t>& sizes);  // "(3, 3)", for messages and printing

}  // namespace functional

struct ConvOptions {
  ConvOptions(int64_t in_channels, int64_t out_channels, std::vector<int64_t> kernel_size)
      : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size) {}
  EMBER_ARG(int64_t, in_channels);
  EMBER_ARG(int64_t, out_channels);
  EMBER_ARG(std::vector<int64_t>, kernel_size);
  EMBER_ARG(std::vector<int64_t>, stride) = {1};
  EMBER_ARG(std::vector<int64_t>, padding) = {0};
  EMBER_ARG(bool, padding_same) = false;
  EMBER_ARG(std::vector<int64_t>, dilation) = {1};
  EMBER_ARG(int64_t, groups) = 1;
  EMBER_ARG(bool, bias) = true;
};

// Conv2d and Conv1d (Dims 2 or 1): weight [out, in / groups, *kernel], bias [out]; PyTorch's
// init (kaiming_uniform with a = sqrt(5); bias uniform in +-1/sqrt(fan_in)).
template <int Dims>
class ConvImpl : public Module {
 public:
  explicit ConvImpl(const ConvOptions& options);
  ConvImpl(int64_t in, int64_t out, int64_t kernel) : ConvImpl(ConvOptions(in, out, {kernel})) {}
  Tensor forward(const Tensor& x);
  void reset_parameters();
  void pretty_print(std::ostream& os) const override;

  ConvOptions options;
  Tensor weight, bias;
};
using Conv2dImpl = ConvImpl<2>;
using Conv1dImpl = ConvImpl<1>;
EMBER_MODULE(Conv2d);
EMBER_MODULE(Conv1d);

// MaxPool2d (Max = true) and AvgPool2d.
template <bool Max>
class Pool2dImpl : public Module {
 public:
  explicit Pool2dImpl(functional::PoolArgs args) : args(std::move(args)) {}
  explicit Pool2dImpl(int64_t kernel) : Pool2dImpl(functional::PoolArgs{{kernel}}) {}
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;
  functional::PoolArgs args;
};
using MaxPool2dImpl = Pool2dImpl<true>;
using AvgPool2dImpl = Pool2dImpl<false>;
EMBER_MODULE(MaxPool2d);
EMBER_MODULE(AvgPool2d);

class AdaptiveAvgPool2dImpl : public Module {
 public:
  explicit AdaptiveAvgPool2dImpl(std::vector<int64_t> output_size)
      : output_size(std::move(output_size)) {}
  Tensor forward(const Tensor& x);
  void pretty_print(std::ostream& os) const override;
  std::vector<int64_t> output_size;
};
EMBER_MODULE(AdaptiveAvgPool2d);

}  // namespace ember::nn
