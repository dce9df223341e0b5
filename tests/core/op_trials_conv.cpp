// Trials of conv2d and its backward rows against a direct float64 convolution written out
// here (seven nested loops), over odd sizes, strides, padding, dilation and groups.
#include <cmath>

#include "core/dispatch.h"
#include "core/op_table_harness.h"

namespace ember::test::optable {
namespace {

struct ConvCase {
  int64_t n, c, h, w, oc, kh, kw;
  int64_t sh, sw, ph, pw, dh, dw, groups;
  Layout lx, lw;
};

const std::vector<ConvCase>& conv_cases() {
  using L = Layout;
  static const std::vector<ConvCase> k = {
      {2, 3, 5, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, L::Contiguous, L::Contiguous},
      {1, 4, 7, 5, 6, 3, 2, 2, 2, 1, 0, 1, 1, 2, L::Strided, L::Contiguous},
      {2, 2, 6, 6, 2, 2, 2, 1, 1, 0, 0, 2, 2, 1, L::Contiguous, L::Transposed},
      {3, 3, 4, 4, 3, 1, 1, 1, 1, 0, 0, 1, 1, 3, L::Contiguous, L::Contiguous},
      {2, 2, 3, 3, 5, 3, 3, 1, 1, 2, 2, 1, 1, 1, L::Expanded, L::Contiguous},
      {1, 2, 9, 8, 3, 1, 1, 3, 2, 0, 1, 1, 1, 1, L::Contiguous, L::Contiguous},
      // More taps per output (channels / groups x kernel): 72, 54 in two groups, 32, and a
      // 1-channel first layer over a larger plane.
      {2, 8, 6, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, L::Contiguous, L::Contiguous},
      {1, 12, 7, 7, 4, 3, 3, 2, 2, 1, 1, 1, 1, 2, L::Contiguous, L::Contiguous},
      {2, 2, 9, 9, 3, 4, 4, 1, 1, 2, 1, 1, 1, 1, L::Contiguous, L::Contiguous},
      {3, 1, 20, 20, 5, 3, 3, 1, 1, 1, 1, 1, 1, 1, L::Contiguous, L::Contiguous},
  };
  return k;
}

int64_t out_dim(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d) {
  return (in + 2 * p - d * (k - 1) - 1) / s + 1;
}

Attrs conv_attrs(const ConvCase& k) {
  Attrs a;
  a.conv_stride = {k.sh, k.sw};
  a.conv_padding = {k.ph, k.pw};
  a.conv_dilation = {k.dh, k.dw};
  a.groups = k.groups;
  return a;
}

// Calls f(x index, w index, y index) for every term of the convolution sum.
template <class F>
void each_term(const ConvCase& k, F f) {
  const int64_t oh = out_dim(k.h, k.kh, k.sh, k.ph, k.dh),
                ow = out_dim(k.w, k.kw, k.sw, k.pw, k.dw);
  const int64_t cg = k.c / k.groups, ocg = k.oc / k.groups;
  for (int64_t n = 0; n < k.n; ++n)
    for (int64_t o = 0; o < k.oc; ++o)
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t x = 0; x < ow; ++x)
          for (int64_t c = 0; c < cg; ++c)
            for (int64_t i = 0; i < k.kh; ++i)
              for (int64_t j = 0; j < k.kw; ++j) {
                const int64_t yy = y * k.sh - k.ph + i * k.dh, xx = x * k.sw - k.pw + j * k.dw;
                if (yy < 0 || yy >= k.h || xx < 0 || xx >= k.w) continue;
                const int64_t ci = (o / ocg) * cg + c;
                f(((n * k.c + ci) * k.h + yy) * k.w + xx, ((o * cg + c) * k.kh + i) * k.kw + j,
                  ((n * k.oc + o) * oh + y) * ow + x);
              }
}

std::string conv_what(const char* name, const ConvCase& k, const Trial& t) {
  return std::string(name) + "(" + t.inputs[0].str() + ", " + t.inputs[1].str() + ", stride (" +
         std::to_string(k.sh) + "," + std::to_string(k.sw) + ") pad (" + std::to_string(k.ph) +
         "," + std::to_string(k.pw) + ") dilation (" + std::to_string(k.dh) + "," +
         std::to_string(k.dw) + ") groups " + std::to_string(k.groups) + ")";
}

Call conv_call(OpId op, Attrs a) {
  return [op, a](const std::vector<Tensor>& in, Device) {
    return dispatch(op, {in[0].contiguous(), in[1].contiguous()}, a);
  };
}

}  // namespace

void conv2d_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out) {
  for (const ConvCase& k : conv_cases()) {
    Trial t;
    Vec x, w;
    t.inputs.push_back(make_input({k.n, k.c, k.h, k.w}, k.lx, dt, c.domain, r, x));
    t.inputs.push_back(make_input({k.oc, k.c / k.groups, k.kh, k.kw}, k.lw, dt, c.domain, r, w));
    t.what = conv_what("conv2d", k, t);
    t.call = conv_call(OpId::conv2d, conv_attrs(k));
    const int64_t oh = out_dim(k.h, k.kh, k.sh, k.ph, k.dh),
                  ow = out_dim(k.w, k.kw, k.sw, k.pw, k.dw);
    t.expect.shape = {k.n, k.oc, oh, ow};
    t.expect.dtype = dt;
    t.expect.v.assign(static_cast<size_t>(k.n * k.oc * oh * ow), 0.0);
    t.expect.scale = t.expect.v;
    each_term(k, [&](int64_t xi, int64_t wi, int64_t yi) {
      const double term = x[xi] * w[wi];
      t.expect.v[yi] += term;
      t.expect.scale[yi] += std::fabs(term);
    });
    out.push_back(std::move(t));
  }
}

void conv2d_backward_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out) {
  const bool input = c.op == OpId::conv2d_backward_input;
  for (const ConvCase& k : conv_cases()) {
    const int64_t oh = out_dim(k.h, k.kh, k.sh, k.ph, k.dh),
                  ow = out_dim(k.w, k.kw, k.sw, k.pw, k.dw);
    const Shape xs{k.n, k.c, k.h, k.w}, ws{k.oc, k.c / k.groups, k.kh, k.kw};
    Trial t;
    Vec g, other;
    t.inputs.push_back(make_input({k.n, k.oc, oh, ow}, k.lx, dt, c.domain, r, g));
    t.inputs.push_back(make_input(input ? ws : xs, k.lw, dt, c.domain, r, other));
    t.what = conv_what(input ? "conv2d_backward_input" : "conv2d_backward_weight", k, t);
    Attrs a = conv_attrs(k);
    a.shape = input ? xs : ws;
    t.call = conv_call(c.op, a);
    t.expect.shape = a.shape;
    t.expect.dtype = dt;
    t.expect.v.assign(static_cast<size_t>(numel_of(a.shape)), 0.0);
    t.expect.scale = t.expect.v;
    each_term(k, [&](int64_t xi, int64_t wi, int64_t yi) {
      const double term = g[yi] * other[input ? wi : xi];
      const int64_t at = input ? xi : wi;
      t.expect.v[at] += term;
      t.expect.scale[at] += std::fabs(term);
    });
    out.push_back(std::move(t));
  }
}

namespace {

struct PoolCase {
  int64_t n, c, h, w, kh, kw, sh, sw, ph, pw, dh, dw;
  bool ceil;
  Layout lx;
};

const std::vector<PoolCase>& pool_cases() {
  using L = Layout;
  static const std::vector<PoolCase> k = {
      {2, 3, 6, 6, 2, 2, 2, 2, 0, 0, 1, 1, false, L::Contiguous},
      {1, 2, 7, 5, 3, 3, 2, 2, 1, 1, 1, 1, false, L::Strided},
      {2, 1, 5, 7, 3, 2, 1, 1, 0, 1, 1, 1, false, L::Contiguous},  // overlapping windows
      {1, 2, 7, 7, 2, 2, 2, 2, 0, 0, 1, 1, true, L::Expanded},     // a last partial window
      {1, 1, 7, 6, 2, 2, 1, 2, 0, 0, 2, 2, false, L::Contiguous},  // dilation
      {1, 2, 9, 8, 4, 3, 2, 2, 1, 1, 1, 1, false, L::Contiguous},  // past the held 3x3 window
  };
  return k;
}

int64_t pool_out(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil) {
  const int64_t span = in + 2 * p - d * (k - 1) - 1;
  int64_t o = (ceil ? (span + s - 1) / s : span / s) + 1;
  if (ceil && (o - 1) * s >= in + p) --o;
  return o;
}

Attrs pool_attrs(const PoolCase& k) {
  Attrs a;
  a.window = {k.kh, k.kw};
  a.conv_stride = {k.sh, k.sw};
  a.conv_padding = {k.ph, k.pw};
  a.conv_dilation = {k.dh, k.dw};
  a.ceil_mode = k.ceil;
  return a;
}

// The winner of each window (first maximum in row-major order, NaN wins): flat input indices.
std::vector<int64_t> pool_winners(const PoolCase& k, const Vec& x, int64_t oh, int64_t ow) {
  std::vector<int64_t> win;
  for (int64_t p = 0; p < k.n * k.c; ++p)
    for (int64_t oy = 0; oy < oh; ++oy)
      for (int64_t ox = 0; ox < ow; ++ox) {
        int64_t best = -1;
        for (int64_t i = 0; i < k.kh; ++i)
          for (int64_t j = 0; j < k.kw; ++j) {
            const int64_t y = oy * k.sh - k.ph + i * k.dh, xx = ox * k.sw - k.pw + j * k.dw;
            if (y < 0 || y >= k.h || xx < 0 || xx >= k.w) continue;
            const int64_t at = (p * k.h + y) * k.w + xx;
            if (best < 0 || x[at] > x[best] || (std::isnan(x[at]) && !std::isnan(x[best])))
              best = at;
          }
        win.push_back(best);
      }
  return win;
}

}  // namespace

void max_pool2d_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out) {
  const bool backward = c.op == OpId::max_pool2d_backward;
  for (const PoolCase& k : pool_cases()) {
    const int64_t oh = pool_out(k.h, k.kh, k.sh, k.ph, k.dh, k.ceil),
                  ow = pool_out(k.w, k.kw, k.sw, k.pw, k.dw, k.ceil);
    Trial t;
    Vec x, g;
    if (backward)
      t.inputs.push_back(make_input({k.n, k.c, oh, ow}, Layout::Contiguous, dt, c.domain, r, g));
    t.inputs.push_back(make_input({k.n, k.c, k.h, k.w}, k.lx, dt, c.domain, r, x));
    const Attrs a = pool_attrs(k);
    t.what = std::string(backward ? "max_pool2d_backward(" : "max_pool2d(") +
             t.inputs.back().str() + ", window " + std::to_string(k.kh) + "x" +
             std::to_string(k.kw) + (k.ceil ? ", ceil_mode)" : ")");
    const OpId op = c.op;
    t.call = [op, a, backward](const std::vector<Tensor>& in, Device) {
      if (backward) return dispatch(op, {in[0].contiguous(), in[1].contiguous()}, a);
      return dispatch(op, {in[0].contiguous()}, a);
    };
    t.expect.dtype = dt;
    const std::vector<int64_t> win = pool_winners(k, x, oh, ow);
    if (!backward) {
      t.expect.shape = {k.n, k.c, oh, ow};
      for (int64_t at : win) t.expect.v.push_back(x[at]);
    } else {
      t.expect.shape = {k.n, k.c, k.h, k.w};
      t.expect.v.assign(x.size(), 0.0);
      t.expect.scale.assign(x.size(), 0.0);
      for (size_t o = 0; o < win.size(); ++o) {
        t.expect.v[win[o]] += g[o];
        t.expect.scale[win[o]] += std::fabs(g[o]);
      }
    }
    out.push_back(std::move(t));
  }
}

}  // namespace ember::test::optable
