#include "nn/conv.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <sstream>

#include "core/autocast.h"
#include "core/cuda_runtime.h"
#include "core/dispatch.h"
#include "core/error.h"
#include "core/factory.h"
#include "core/ops.h"
#include "nn/init.h"

namespace ember::nn {
namespace functional {

std::string str(const std::vector<int64_t>& v) {
  std::ostringstream os;
  os << "(";
  for (size_t i = 0; i < v.size(); ++i) os << (i ? ", " : "") << v[i];
  os << ")";
  return os.str();
}

namespace {

// A size argument of one or two entries as (height, width).
std::pair<int64_t, int64_t> pair_of(const std::vector<int64_t>& v, const char* who,
                                    const char* what) {
  EMBER_CHECK(v.size() == 1 || v.size() == 2, who, ": ", what, " takes 1 or 2 values, got ",
              v.size());
  return {v[0], v.size() == 2 ? v[1] : v[0]};
}

// The windows of a sliding operation over an H x W plane: for each of the K window positions
// and L = oh * ow outputs, the flat source h * W + w, or -1 in the padding.
struct Windows {
  int64_t oh = 0, ow = 0, k = 0;
  std::vector<int64_t> src;  // [k][oh * ow]
};

struct Sliding {
  int64_t kh, kw, sh, sw, dh, dw, pad_top, pad_left, oh, ow;
};

Windows sliding(const Sliding& s, int64_t H, int64_t W) {
  Windows w;
  w.oh = s.oh;
  w.ow = s.ow;
  w.k = s.kh * s.kw;
  const int64_t L = s.oh * s.ow;
  w.src.assign(static_cast<size_t>(w.k * L), -1);
  for (int64_t i = 0; i < s.kh; ++i)
    for (int64_t j = 0; j < s.kw; ++j)
      for (int64_t y = 0; y < s.oh; ++y)
        for (int64_t x = 0; x < s.ow; ++x) {
          const int64_t h = y * s.sh - s.pad_top + i * s.dh, c = x * s.sw - s.pad_left + j * s.dw;
          if (h >= 0 && h < H && c >= 0 && c < W)
            w.src[static_cast<size_t>((i * s.kw + j) * L + y * s.ow + x)] = h * W + c;
        }
  return w;
}

// x [N, C, H, W] -> [N, C, K, L]: each channel's windows, padding reading `pad_value`.
Tensor gather_windows(const Tensor& x, const Windows& w, double pad_value) {
  const int64_t N = x.size(0), C = x.size(1), HW = x.size(2) * x.size(3);
  const int64_t L = w.oh * w.ow;
  std::vector<int64_t> idx;
  idx.reserve(static_cast<size_t>(C * w.k * L));
  for (int64_t c = 0; c < C; ++c)
    for (int64_t e : w.src) idx.push_back(e >= 0 ? c * HW + e : C * HW);
  const Tensor index =
      from_vector<int64_t>(idx, {static_cast<int64_t>(idx.size())}, TensorOptions(kInt64))
          .to(x.device());
  const Tensor pad = full({N, 1}, pad_value, TensorOptions(x.dtype()).device(x.device()));
  const Tensor flat = cat({x.reshape({N, C * HW}), pad}, 1);
  return index_select(flat, 1, index).view({N, C, w.k, L});
}

void check_input(const Tensor& x, const char* who) {
  EMBER_CHECK(x.defined(), who, ": input is an undefined tensor");
  EMBER_CHECK(x.dim() == 4, who, ": expected a 4-D input [N, C, H, W], got shape ", x.sizes());
  EMBER_CHECK(is_floating(x.dtype()), who, ": expected a floating input, got ",
              dtype_name(x.dtype()));
}

// Output size of a sliding window, PyTorch's formula; ceil_mode drops a last window that
// would start in the right padding.
int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t d, int64_t pad_total, int64_t pad_left,
                 bool ceil_mode) {
  const int64_t span = in + pad_total - d * (k - 1) - 1;
  int64_t o = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  if (ceil_mode && (o - 1) * s >= in + pad_left) --o;
  return o;
}

}  // namespace

Tensor conv2d(const Tensor& x_in, const Tensor& w_in, const Tensor& b_in, const ConvArgs& a) {
  const char* who = "conv2d";
  check_input(x_in, who);
  EMBER_CHECK(w_in.defined() && w_in.dim() == 4, who,
              ": weight must be 4-D [out_channels, in_channels / groups, kH, kW], got ",
              w_in.defined() ? w_in.sizes() : Shape{});
  // One autocast op in PyTorch (lower list): input, weight and bias in the low dtype.
  const Tensor x = autocast_lower(x_in), w = autocast_lower(w_in), b = autocast_lower(b_in);
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t OC = w.size(0), Cg = w.size(1), kh = w.size(2), kw = w.size(3), G = a.groups;
  EMBER_CHECK(G >= 1, who, ": groups must be positive, got ", G);
  EMBER_CHECK(C % G == 0 && OC % G == 0, who, ": ", C, " input and ", OC,
              " output channels must both be divisible by groups = ", G);
  EMBER_CHECK(Cg * G == C, who, ": input of shape ", x.sizes(), " has ", C,
              " channels, but weight ", w.sizes(), " with groups = ", G, " expects ", Cg * G);
  EMBER_CHECK(x.dtype() == w.dtype() && x.device() == w.device(), who, ": input is ",
              dtype_name(x.dtype()), " on ", x.device().str(), " but weight ",
              dtype_name(w.dtype()), " on ", w.device().str());
  if (b.defined())
    EMBER_CHECK(b.dim() == 1 && b.size(0) == OC && b.dtype() == w.dtype(), who,
                ": bias must be [", OC, "] of the weight's dtype, got ", dtype_name(b.dtype()),
                " ", b.sizes());
  const auto [sh, sw] = pair_of(a.stride, who, "stride");
  const auto [dh, dw] = pair_of(a.dilation, who, "dilation");
  EMBER_CHECK(sh >= 1 && sw >= 1 && dh >= 1 && dw >= 1, who,
              ": stride and dilation must be positive, got ", str(a.stride), " and ",
              str(a.dilation));
  int64_t pt, pb, pl, pr;
  if (a.same) {
    EMBER_CHECK(sh == 1 && sw == 1, who, ": padding='same' needs stride 1, got ", str(a.stride));
    // PyTorch's split: the extra row or column (odd total) goes to the bottom / right.
    pt = dh * (kh - 1) / 2;
    pb = dh * (kh - 1) - pt;
    pl = dw * (kw - 1) / 2;
    pr = dw * (kw - 1) - pl;
  } else {
    const auto [ph, pw] = pair_of(a.padding, who, "padding");
    EMBER_CHECK(ph >= 0 && pw >= 0, who, ": padding must be non-negative, got ", str(a.padding));
    pt = pb = ph;
    pl = pr = pw;
  }
  EMBER_CHECK(H + pt + pb >= dh * (kh - 1) + 1 && W + pl + pr >= dw * (kw - 1) + 1, who,
              ": kernel ", kh, "x", kw, " (dilation ", str(a.dilation),
              ") is larger than the padded input ", H + pt + pb, "x", W + pl + pr, " (input ",
              x.sizes(), ")");
  if (x.device().is_cuda() && !cuda::has_cudnn()) {
    // A CUDA build without cuDNN: windows gathered by index_select, then one batched product
    // per group (slow, but every part of it has a CUDA kernel).
    const Sliding s{kh, kw, sh, sw, dh, dw, pt, pl,
                    out_size(H, kh, sh, dh, pt + pb, pt, false),
                    out_size(W, kw, sw, dw, pl + pr, pl, false)};
    const Windows win = sliding(s, H, W);
    const int64_t L = win.oh * win.ow, K = win.k;
    // [N, G, Cg K, L] against [G, OC / G, Cg K].
    const Tensor cols = gather_windows(x, win, 0.0).view({N, G, Cg * K, L});
    const Tensor wg = w.reshape({G, OC / G, Cg * K});
    Tensor y = matmul(wg, cols).view({N, OC, win.oh, win.ow});
    if (b.defined()) y = add(y, b.view({1, OC, 1, 1}));
    return y;
  }
  // The conv2d row takes one padding for both sides (as cuDNN does). An uneven 'same' pads
  // both sides by the larger amount and drops the extra first rows / columns of the result.
  Attrs ca;
  ca.conv_stride = {sh, sw};
  ca.conv_padding = {std::max(pt, pb), std::max(pl, pr)};
  ca.conv_dilation = {dh, dw};
  ca.groups = G;
  Tensor y = dispatch(OpId::conv2d, {x.contiguous(), w.contiguous()}, ca);
  if (pb > pt) y = y.slice(2, pb - pt, y.size(2));
  if (pr > pl) y = y.slice(3, pr - pl, y.size(3));
  if (b.defined()) y = add(y, b.view({1, OC, 1, 1}));
  return y;
}

Tensor conv1d(const Tensor& x, const Tensor& w, const Tensor& b, const ConvArgs& a) {
  EMBER_CHECK(x.defined() && x.dim() == 3, "conv1d: expected a 3-D input [N, C, L], got shape ",
              x.defined() ? x.sizes() : Shape{});
  EMBER_CHECK(w.defined() && w.dim() == 3, "conv1d: weight must be 3-D [out, in / groups, k], got ",
              w.defined() ? w.sizes() : Shape{});
  auto one = [](const std::vector<int64_t>& v, int64_t h) {
    EMBER_CHECK(v.size() == 1, "conv1d: sizes take one value, got ", v.size());
    return std::vector<int64_t>{h, v[0]};
  };
  ConvArgs a2 = a;
  a2.stride = one(a.stride, 1);
  a2.padding = one(a.padding, 0);
  a2.dilation = one(a.dilation, 1);
  const Tensor y = conv2d(x.unsqueeze(2), w.unsqueeze(2), b, a2);
  return y.squeeze(2);
}

namespace {

struct PoolPlan {
  Sliding s;
  Windows win;
  int64_t ph, pw;
};

// gathered: also the window list gather_windows reads (avg_pool2d; max_pool2d has a kernel).
PoolPlan pool_plan(const Tensor& x, const PoolArgs& a, const char* who, bool dilated,
                   bool gathered) {
  check_input(x, who);
  const auto [kh, kw] = pair_of(a.kernel_size, who, "kernel_size");
  const auto [sh, sw] = a.stride.empty() ? std::pair{kh, kw} : pair_of(a.stride, who, "stride");
  const auto [ph, pw] = pair_of(a.padding, who, "padding");
  const auto [dh, dw] = dilated ? pair_of(a.dilation, who, "dilation") : std::pair<int64_t, int64_t>{1, 1};
  EMBER_CHECK(kh >= 1 && kw >= 1 && sh >= 1 && sw >= 1 && dh >= 1 && dw >= 1, who,
              ": kernel_size, stride and dilation must be positive");
  EMBER_CHECK(ph >= 0 && pw >= 0 && 2 * ph <= kh && 2 * pw <= kw, who,
              ": padding ", str(a.padding), " must be at most half the kernel ",
              str(a.kernel_size));
  const int64_t H = x.size(2), W = x.size(3);
  EMBER_CHECK(H + 2 * ph >= dh * (kh - 1) + 1 && W + 2 * pw >= dw * (kw - 1) + 1, who,
              ": kernel ", kh, "x", kw, " is larger than the padded input ", H + 2 * ph, "x",
              W + 2 * pw, " (input ", x.sizes(), ")");
  PoolPlan p;
  p.s = {kh, kw, sh, sw, dh, dw, ph, pw, out_size(H, kh, sh, dh, 2 * ph, ph, a.ceil_mode),
         out_size(W, kw, sw, dw, 2 * pw, pw, a.ceil_mode)};
  if (gathered) p.win = sliding(p.s, H, W);
  p.ph = ph;
  p.pw = pw;
  return p;
}

}  // namespace

Tensor max_pool2d(const Tensor& x_in, const PoolArgs& a) {
  const Tensor& x = x_in;
  const PoolPlan p = pool_plan(x, a, "max_pool2d", true, false);
  Attrs pa;
  pa.window = {p.s.kh, p.s.kw};
  pa.conv_stride = {p.s.sh, p.s.sw};
  pa.conv_padding = {p.ph, p.pw};
  pa.conv_dilation = {p.s.dh, p.s.dw};
  pa.ceil_mode = a.ceil_mode;
  return dispatch(OpId::max_pool2d, {x.contiguous()}, pa);
}

Tensor avg_pool2d(const Tensor& x, const PoolArgs& a) {
  const PoolPlan p = pool_plan(x, a, "avg_pool2d", false, true);
  const int64_t H = x.size(2), W = x.size(3), L = p.win.oh * p.win.ow;
  // PyTorch's divisor: the window clipped to the padded input (count_include_pad) or to the
  // input itself.
  std::vector<double> counts(static_cast<size_t>(L));
  for (int64_t y = 0; y < p.win.oh; ++y)
    for (int64_t c = 0; c < p.win.ow; ++c) {
      int64_t h0 = y * p.s.sh - p.ph, w0 = c * p.s.sw - p.pw;
      int64_t h1 = std::min(h0 + p.s.kh, H + p.ph), w1 = std::min(w0 + p.s.kw, W + p.pw);
      if (!a.count_include_pad) {
        h0 = std::max<int64_t>(h0, 0);
        w0 = std::max<int64_t>(w0, 0);
        h1 = std::min(h1, H);
        w1 = std::min(w1, W);
      }
      counts[static_cast<size_t>(y * p.win.ow + c)] = static_cast<double>((h1 - h0) * (w1 - w0));
    }
  const Tensor divisor = from_vector<double>(counts, {L}, TensorOptions(kFloat64))
                             .to(x.dtype())
                             .to(x.device());
  const Tensor cols = gather_windows(x, p.win, 0.0);
  // (sum is on autocast's float32 list; the pooled result keeps the input's dtype.)
  return div(sum(cols, {2}), divisor).to(x.dtype()).view({x.size(0), x.size(1), p.win.oh, p.win.ow});
}

Tensor adaptive_avg_pool2d(const Tensor& x, const std::vector<int64_t>& output_size) {
  const char* who = "adaptive_avg_pool2d";
  check_input(x, who);
  const auto [oh, ow] = pair_of(output_size, who, "output_size");
  EMBER_CHECK(oh >= 1 && ow >= 1, who, ": output_size must be positive, got ", str(output_size));
  const int64_t H = x.size(2), W = x.size(3);
  EMBER_CHECK(H >= 1 && W >= 1, who, ": empty input plane, shape ", x.sizes());
  // Global average pooling: one mean over the plane (a fused reduction in the JIT).
  if (oh == 1 && ow == 1) return mean(x, {2, 3}, /*keepdim=*/true);
  auto start = [](int64_t i, int64_t in, int64_t out) { return (i * in) / out; };
  auto stop = [](int64_t i, int64_t in, int64_t out) { return ((i + 1) * in + out - 1) / out; };
  int64_t kh = 0, kw = 0;
  for (int64_t i = 0; i < oh; ++i) kh = std::max(kh, stop(i, H, oh) - start(i, H, oh));
  for (int64_t j = 0; j < ow; ++j) kw = std::max(kw, stop(j, W, ow) - start(j, W, ow));
  // Windows of different sizes, padded to the largest with the zero element.
  Windows win;
  win.oh = oh;
  win.ow = ow;
  win.k = kh * kw;
  const int64_t L = oh * ow;
  win.src.assign(static_cast<size_t>(win.k * L), -1);
  std::vector<double> counts(static_cast<size_t>(L));
  for (int64_t y = 0; y < oh; ++y)
    for (int64_t c = 0; c < ow; ++c) {
      const int64_t h0 = start(y, H, oh), h1 = stop(y, H, oh);
      const int64_t w0 = start(c, W, ow), w1 = stop(c, W, ow);
      counts[static_cast<size_t>(y * ow + c)] = static_cast<double>((h1 - h0) * (w1 - w0));
      for (int64_t h = h0; h < h1; ++h)
        for (int64_t w = w0; w < w1; ++w)
          win.src[static_cast<size_t>(((h - h0) * kw + (w - w0)) * L + y * ow + c)] = h * W + w;
    }
  const Tensor divisor =
      from_vector<double>(counts, {L}, TensorOptions(kFloat64)).to(x.dtype()).to(x.device());
  const Tensor cols = gather_windows(x, win, 0.0);
  return div(sum(cols, {2}), divisor).to(x.dtype()).view({x.size(0), x.size(1), oh, ow});
}

}  // namespace functional

// ---- modules ---------------------------------------------------------------------------------

template <int Dims>
ConvImpl<Dims>::ConvImpl(const ConvOptions& o) : options(o) {
  const char* who = Dims == 2 ? "Conv2d" : "Conv1d";
  EMBER_CHECK(o.in_channels() > 0 && o.out_channels() > 0, who,
              ": in_channels and out_channels must be positive, got ", o.in_channels(), " and ",
              o.out_channels());
  EMBER_CHECK(o.groups() >= 1 && o.in_channels() % o.groups() == 0 &&
                  o.out_channels() % o.groups() == 0,
              who, ": in_channels ", o.in_channels(), " and out_channels ", o.out_channels(),
              " must be divisible by groups ", o.groups());
  const std::vector<int64_t>& k = o.kernel_size();
  EMBER_CHECK(!k.empty() && static_cast<int>(k.size()) <= Dims, who, ": kernel_size takes 1",
              Dims == 2 ? " or 2 values" : " value", ", got ", k.size());
  Shape shape = {o.out_channels(), o.in_channels() / o.groups()};
  for (int d = 0; d < Dims; ++d) {
    const int64_t kd = k.size() == 1 ? k[0] : k[static_cast<size_t>(d)];
    EMBER_CHECK(kd >= 1, who, ": kernel_size must be positive, got ", kd);
    shape.push_back(kd);
  }
  weight = register_parameter("weight", empty(shape));
  if (o.bias()) bias = register_parameter("bias", empty({o.out_channels()}));
  reset_parameters();
}

template <int Dims>
void ConvImpl<Dims>::reset_parameters() {
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias.defined()) {
    const int64_t fan_in = init::calculate_fan_in_and_fan_out(weight).first;
    const double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
    init::uniform_(bias, -bound, bound);
  }
}

template <int Dims>
Tensor ConvImpl<Dims>::forward(const Tensor& x) {
  functional::ConvArgs a;
  a.stride = options.stride();
  a.padding = options.padding();
  a.dilation = options.dilation();
  a.groups = options.groups();
  a.same = options.padding_same();
  return Dims == 2 ? functional::conv2d(x, weight, bias, a) : functional::conv1d(x, weight, bias, a);
}

template <int Dims>
void ConvImpl<Dims>::pretty_print(std::ostream& os) const {
  os << (Dims == 2 ? "Conv2d(" : "Conv1d(") << options.in_channels() << ", "
     << options.out_channels() << ", kernel_size=" << functional::str(options.kernel_size())
     << ", stride=" << functional::str(options.stride());
  if (options.padding_same())
    os << ", padding='same'";
  else
    os << ", padding=" << functional::str(options.padding());
  if (options.groups() != 1) os << ", groups=" << options.groups();
  if (!options.bias()) os << ", bias=false";
  os << ")";
}

template class ConvImpl<1>;
template class ConvImpl<2>;

template <bool Max>
Tensor Pool2dImpl<Max>::forward(const Tensor& x) {
  return Max ? functional::max_pool2d(x, args) : functional::avg_pool2d(x, args);
}

template <bool Max>
void Pool2dImpl<Max>::pretty_print(std::ostream& os) const {
  os << (Max ? "MaxPool2d(kernel_size=" : "AvgPool2d(kernel_size=")
     << functional::str(args.kernel_size)
     << ", stride=" << functional::str(args.stride.empty() ? args.kernel_size : args.stride)
     << ", padding=" << functional::str(args.padding) << ")";
}

template class Pool2dImpl<true>;
template class Pool2dImpl<false>;

Tensor AdaptiveAvgPool2dImpl::forward(const Tensor& x) {
  return functional::adaptive_avg_pool2d(x, output_size);
}

void AdaptiveAvgPool2dImpl::pretty_print(std::ostream& os) const {
  os << "AdaptiveAvgPool2d(output_size=" << functional::str(output_size) << ")";
}

}  // namespace ember::nn
