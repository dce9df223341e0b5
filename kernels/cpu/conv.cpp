// conv2d and its two backward rows on the CPU: im2col + GEMM.
//
// For each sample and group the input's windows are unrolled into cols [Cg kH kW, OH OW] (zero
// in the padding), so the convolution is one GEMM with the weight [OC/G, Cg kH kW]; a 1x1
// convolution with stride 1 and no padding reads the input as cols without a copy. The input's
// gradient is the transposed product folded back (col2im), the weight's gradient a sum of
// products over the samples.
//
// Threads: forward and input gradient run samples in parallel, each GEMM serial; the weight
// gradient unrolls a chunk of samples in parallel, then runs slabs of the weight's rows in
// parallel, each adding the chunk's samples in order. Every output element is therefore summed in
// one order whatever the thread count. float16/bfloat16 compute in float and round once.
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "core/parallel.h"
#include "kernels/cpu/cpu_kernels.h"

namespace ember::kernels::cpu {
namespace {

struct Geometry {
  int64_t N, C, H, W;       // input
  int64_t OC, kh, kw;       // weight [OC, C / G, kh, kw]
  int64_t OH, OW;           // output
  int64_t sh, sw, ph, pw, dh, dw, G;
  int64_t Cg, OCg, K, L;    // channels per group, the unrolled window K = Cg kh kw, L = OH OW
  bool direct() const {     // cols is the input itself
    return kh == 1 && kw == 1 && sh == 1 && sw == 1 && ph == 0 && pw == 0;
  }
};

Geometry geometry(const Shape& x, const Shape& w, const Attrs& a) {
  Geometry g{};
  g.N = x[0];
  g.C = x[1];
  g.H = x[2];
  g.W = x[3];
  g.OC = w[0];
  g.kh = w[2];
  g.kw = w[3];
  g.sh = a.conv_stride[0];
  g.sw = a.conv_stride[1];
  g.ph = a.conv_padding[0];
  g.pw = a.conv_padding[1];
  g.dh = a.conv_dilation[0];
  g.dw = a.conv_dilation[1];
  g.G = a.groups;
  g.OH = (g.H + 2 * g.ph - g.dh * (g.kh - 1) - 1) / g.sh + 1;
  g.OW = (g.W + 2 * g.pw - g.dw * (g.kw - 1) - 1) / g.sw + 1;
  g.Cg = g.C / g.G;
  g.OCg = g.OC / g.G;
  g.K = g.Cg * g.kh * g.kw;
  g.L = g.OH * g.OW;
  return g;
}

// cols[(c, i, j), (oy, ox)] = x[c, oy sh - ph + i dh, ox sw - pw + j dw], 0 outside; x is one
// group's [Cg, H, W].
template <class T>
void im2col(const T* x, const Geometry& g, T* cols) {
  for (int64_t c = 0; c < g.Cg; ++c)
    for (int64_t i = 0; i < g.kh; ++i)
      for (int64_t j = 0; j < g.kw; ++j) {
        T* row = cols + ((c * g.kh + i) * g.kw + j) * g.L;
        const T* plane = x + c * g.H * g.W;
        for (int64_t oy = 0; oy < g.OH; ++oy) {
          const int64_t y = oy * g.sh - g.ph + i * g.dh;
          T* out = row + oy * g.OW;
          if (y < 0 || y >= g.H) {
            std::fill(out, out + g.OW, T(0));
            continue;
          }
          const T* src = plane + y * g.W;
          for (int64_t ox = 0; ox < g.OW; ++ox) {
            const int64_t xx = ox * g.sw - g.pw + j * g.dw;
            out[ox] = xx >= 0 && xx < g.W ? src[xx] : T(0);
          }
        }
      }
}

// The adjoint of im2col: dx[c, y, x] += every cols entry that read it.
template <class T>
void col2im_add(const T* cols, const Geometry& g, T* dx) {
  for (int64_t c = 0; c < g.Cg; ++c)
    for (int64_t i = 0; i < g.kh; ++i)
      for (int64_t j = 0; j < g.kw; ++j) {
        const T* row = cols + ((c * g.kh + i) * g.kw + j) * g.L;
        T* plane = dx + c * g.H * g.W;
        for (int64_t oy = 0; oy < g.OH; ++oy) {
          const int64_t y = oy * g.sh - g.ph + i * g.dh;
          if (y < 0 || y >= g.H) continue;
          const T* in = row + oy * g.OW;
          T* dst = plane + y * g.W;
          for (int64_t ox = 0; ox < g.OW; ++ox) {
            const int64_t xx = ox * g.sw - g.pw + j * g.dw;
            if (xx >= 0 && xx < g.W) dst[xx] += in[ox];
          }
        }
      }
}

// y [N, OC, L] = W_g [OCg, K] cols_g [K, L] per sample and group.
template <class T>
void forward(const T* x, const T* w, T* y, const Geometry& g) {
  parallel_for(g.N, 1, [&](int64_t n0, int64_t n1) {
    std::vector<T> cols(g.direct() ? 0 : static_cast<size_t>(g.K * g.L));
    for (int64_t n = n0; n < n1; ++n)
      for (int64_t grp = 0; grp < g.G; ++grp) {
        const T* xg = x + (n * g.C + grp * g.Cg) * g.H * g.W;
        const T* c = xg;
        if (!g.direct()) {
          im2col(xg, g, cols.data());
          c = cols.data();
        }
        gemm_serial<T>(false, false, g.OCg, g.L, g.K, w + grp * g.OCg * g.K, g.K, c, g.L,
                       y + (n * g.OC + grp * g.OCg) * g.L, g.L, false);
      }
  });
}

// dx: dcols_g [K, L] = W_g^T g_g [OCg, L], folded back per sample and group.
template <class T>
void backward_input(const T* gy, const T* w, T* dx, const Geometry& g) {
  parallel_for(g.N, 1, [&](int64_t n0, int64_t n1) {
    std::vector<T> cols(g.direct() ? 0 : static_cast<size_t>(g.K * g.L));
    for (int64_t n = n0; n < n1; ++n)
      for (int64_t grp = 0; grp < g.G; ++grp) {
        T* dxg = dx + (n * g.C + grp * g.Cg) * g.H * g.W;
        T* c = g.direct() ? dxg : cols.data();
        gemm_serial<T>(true, false, g.K, g.L, g.OCg, w + grp * g.OCg * g.K, g.K,
                       gy + (n * g.OC + grp * g.OCg) * g.L, g.L, c, g.L, false);
        if (!g.direct()) {
          std::fill(dxg, dxg + g.Cg * g.H * g.W, T(0));
          col2im_add(cols.data(), g, dxg);
        }
      }
  });
}

constexpr int64_t kChunkElements = int64_t{1} << 23;  // unrolled samples kept at once
constexpr int64_t kRowSlab = 8;                       // weight rows per parallel task

// dW_g [OCg, K] = sum over samples of g_g [OCg, L] cols_g^T [L, K], samples in order.
template <class T>
void backward_weight(const T* gy, const T* x, T* dw, const Geometry& g) {
  std::fill(dw, dw + g.OC * g.K, T(0));
  if (g.N == 0) return;  // an empty batch: a zero gradient
  const int64_t per_sample = g.direct() ? 0 : g.G * g.K * g.L;
  const int64_t chunk =
      per_sample == 0 ? g.N : std::clamp<int64_t>(kChunkElements / per_sample, 1, g.N);
  std::vector<T> cols(static_cast<size_t>(chunk * per_sample));
  const int64_t slabs_per_group = (g.OCg + kRowSlab - 1) / kRowSlab;
  for (int64_t n0 = 0; n0 < g.N; n0 += chunk) {
    const int64_t n1 = std::min(g.N, n0 + chunk);
    if (!g.direct())
      parallel_for(n1 - n0, 1, [&](int64_t s0, int64_t s1) {
        for (int64_t s = s0; s < s1; ++s)
          for (int64_t grp = 0; grp < g.G; ++grp)
            im2col(x + ((n0 + s) * g.C + grp * g.Cg) * g.H * g.W, g,
                   cols.data() + (s * g.G + grp) * g.K * g.L);
      });
    parallel_for(g.G * slabs_per_group, 1, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) {
        const int64_t grp = t / slabs_per_group, r0 = (t % slabs_per_group) * kRowSlab;
        const int64_t rows = std::min(kRowSlab, g.OCg - r0);
        for (int64_t n = n0; n < n1; ++n) {
          const T* c = g.direct() ? x + (n * g.C + grp * g.Cg) * g.H * g.W
                                  : cols.data() + ((n - n0) * g.G + grp) * g.K * g.L;
          gemm_serial<T>(false, true, rows, g.K, g.L, gy + (n * g.OC + grp * g.OCg + r0) * g.L,
                         g.L, c, g.L, dw + (grp * g.OCg + r0) * g.K, g.K, true);
        }
      }
    });
  }
}

template <class T>
void run(OpId op, const T* a, const T* b, T* out, const Geometry& g) {
  if (op == OpId::conv2d) return forward(a, b, out, g);
  if (op == OpId::conv2d_backward_input) return backward_input(a, b, out, g);
  backward_weight(a, b, out, g);
}

template <class S>
std::vector<float> widen(const Tensor& t) {
  const S* p = static_cast<const S*>(t.raw_data());
  std::vector<float> v(static_cast<size_t>(t.numel()));
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(p[i]);
  return v;
}

}  // namespace

void conv(const KernelCall& call) {
  const std::string_view name = op_name(call.op);
  const Tensor &a = call.inputs[0], &b = call.inputs[1], &out = call.out;
  EMBER_CHECK(a.is_contiguous() && b.is_contiguous() && out.is_contiguous(), name,
              ": the CPU kernel takes contiguous tensors");
  const Shape& xs = call.op == OpId::conv2d                  ? a.sizes()
                    : call.op == OpId::conv2d_backward_input ? out.sizes()
                                                             : b.sizes();
  const Shape& ws = call.op == OpId::conv2d_backward_weight ? out.sizes() : b.sizes();
  const Geometry g = geometry(xs, ws, call.attrs);
  if (out.numel() == 0) return;
  visit_dtype(a.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
      run<T>(call.op, static_cast<const T*>(a.raw_data()), static_cast<const T*>(b.raw_data()),
             static_cast<T*>(out.raw_data()), g);
    } else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      const std::vector<float> af = widen<T>(a), bf = widen<T>(b);
      std::vector<float> of(static_cast<size_t>(out.numel()));
      run<float>(call.op, af.data(), bf.data(), of.data(), g);
      T* o = static_cast<T*>(out.raw_data());
      for (size_t i = 0; i < of.size(); ++i) o[i] = T(of[i]);
    } else {
      EMBER_FAIL(name, ": unsupported dtype ", dtype_name(a.dtype()));
    }
  });
}

}  // namespace ember::kernels::cpu
