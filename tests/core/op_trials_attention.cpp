// Trials of the fused attention rows against softmax(q k^T * scale) v and its gradients written
// out here in float64 (scores, row maxima and sums, per element), causal or not, with one or
// two batch dims, an expanded (stride 0) batch, and interleaved results.
#include <cmath>
#include <limits>

#include "core/dispatch.h"
#include "core/op_table_harness.h"

namespace ember::test::optable {
namespace {

struct AttentionCase {
  int64_t b1, b2, L, S, E;  // b1 == 0: 3-D inputs [b2, len, E]
  bool causal, interleaved;
  Layout lk;  // the keys' layout (the last dim stays contiguous, as the rows require)
};

const std::vector<AttentionCase>& attention_cases() {
  using L = Layout;
  static const std::vector<AttentionCase> k = {
      {0, 2, 5, 7, 4, false, false, L::Contiguous}, {1, 2, 6, 6, 3, true, false, L::Contiguous},
      {0, 3, 4, 6, 5, true, false, L::Expanded},    {2, 2, 3, 5, 2, false, true, L::Contiguous},
      {0, 1, 7, 3, 3, true, false, L::Contiguous},
  };
  return k;
}

Shape shape_of(const AttentionCase& k, int64_t rows) {
  return k.b1 == 0 ? Shape{k.b2, rows, k.E} : Shape{k.b1, k.b2, rows, k.E};
}

}  // namespace

void attention_trials(const Coverage& c, DType dt, Rng& r, std::vector<Trial>& out) {
  const OpId op = c.op;
  const DType stats = dt == kFloat64 ? kFloat64 : kFloat32;
  for (const AttentionCase& k : attention_cases()) {
    const int64_t B = (k.b1 == 0 ? 1 : k.b1) * k.b2, L = k.L, S = k.S, E = k.E;
    const double scale = 0.7;
    Trial t;
    Vec q, kk, v, g;
    const bool backward = op == OpId::attention_backward_query || op == OpId::attention_backward_kv;
    Input gi;
    if (backward) gi = make_input(shape_of(k, L), Layout::Contiguous, dt, c.domain, r, g);
    Input qi = make_input(shape_of(k, L), Layout::Contiguous, dt, c.domain, r, q);
    Input ki = make_input(shape_of(k, S), k.lk, dt, c.domain, r, kk);
    Input vi = make_input(shape_of(k, S), Layout::Contiguous, dt, c.domain, r, v);
    // The reference: P (probabilities), out, lse, dP and delta, per batch entry and row.
    auto at = [](const Vec& x, int64_t b, int64_t i, int64_t e, int64_t rows, int64_t E) {
      return x[static_cast<size_t>((b * rows + i) * E + e)];
    };
    Vec P(static_cast<size_t>(B * L * S), 0.0), O(static_cast<size_t>(B * L * E), 0.0);
    Vec lse(static_cast<size_t>(B * L)), delta(static_cast<size_t>(B * L), 0.0);
    Vec dP(static_cast<size_t>(B * L * S), 0.0);
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < L; ++i) {
        const int64_t n = k.causal ? std::min(i + 1, S) : S;
        double m = -std::numeric_limits<double>::infinity(), l = 0;
        Vec s(static_cast<size_t>(n));
        for (int64_t j = 0; j < n; ++j) {
          double d = 0;
          for (int64_t e = 0; e < E; ++e) d += at(q, b, i, e, L, E) * at(kk, b, j, e, S, E);
          s[j] = scale * d;
          m = std::max(m, s[j]);
        }
        for (int64_t j = 0; j < n; ++j) l += std::exp(s[j] - m);
        lse[b * L + i] = m + std::log(l);
        for (int64_t j = 0; j < n; ++j) {
          const double p = std::exp(s[j] - m) / l;
          P[(b * L + i) * S + j] = p;
          for (int64_t e = 0; e < E; ++e) O[(b * L + i) * E + e] += p * at(v, b, j, e, S, E);
          if (backward) {
            double d = 0;
            for (int64_t e = 0; e < E; ++e) d += at(g, b, i, e, L, E) * at(v, b, j, e, S, E);
            dP[(b * L + i) * S + j] = d;
          }
        }
        if (backward)
          for (int64_t e = 0; e < E; ++e)
            delta[b * L + i] += at(g, b, i, e, L, E) * O[(b * L + i) * E + e];
      }
    // dS = P (dP - delta), and the size of its terms, which the error is relative to.
    Vec dS(P.size(), 0.0), dS_mag(P.size(), 0.0);
    for (size_t x = 0; x < P.size(); ++x) {
      const double d = delta[x / static_cast<size_t>(S)];
      dS[x] = P[x] * (dP[x] - d);
      dS_mag[x] = P[x] * (std::fabs(dP[x]) + std::fabs(d));
    }
    Attrs a;
    a.attn_scale = scale;
    a.causal = k.causal;
    a.interleaved = k.interleaved && op != OpId::attention_lse;
    // Where result row r of batch entry b lands (interleaved: [b1, rows, b2, E]).
    auto row_at = [&](int64_t b, int64_t rr, int64_t rows) {
      return a.interleaved ? ((b / k.b2) * rows + rr) * k.b2 + b % k.b2 : b * rows + rr;
    };
    auto laid_out = [&](Shape s) {
      if (a.interleaved) std::swap(s[1], s[2]);
      return s;
    };
    t.inputs = backward ? std::vector<Input>{gi, qi, ki, vi} : std::vector<Input>{qi, ki, vi};
    if (op == OpId::attention_lse) t.inputs.pop_back();
    if (backward) {
      Vec lv, dv;
      const Shape rows = k.b1 == 0 ? Shape{k.b2, L} : Shape{k.b1, k.b2, L};
      t.inputs.push_back(make_input(
          rows, Layout::Contiguous, stats, [&](int64_t) { return lse; }, lv));
      t.inputs.push_back(make_input(
          rows, Layout::Contiguous, stats, [&](int64_t) { return delta; }, dv));
    }
    t.what = std::string(op_name(op)) + "(" + qi.str() + ", keys " + ki.str() +
             (k.causal ? ", causal" : "") + (a.interleaved ? ", interleaved" : "") + ")";
    t.call = [op, a](const std::vector<Tensor>& in, Device) { return dispatch(op, in, a); };
    t.expect.dtype = op == OpId::attention_lse ? stats : dt;
    switch (op) {
      case OpId::attention:
        t.expect.shape = laid_out(shape_of(k, L));
        t.expect.v.assign(O.size(), 0.0);
        t.expect.scale.assign(O.size(), 0.0);
        for (int64_t b = 0; b < B; ++b)
          for (int64_t i = 0; i < L; ++i)
            for (int64_t e = 0; e < E; ++e) {
              const size_t to = static_cast<size_t>(row_at(b, i, L) * E + e);
              t.expect.v[to] = O[(b * L + i) * E + e];
              for (int64_t j = 0; j < S; ++j)
                t.expect.scale[to] += P[(b * L + i) * S + j] * std::fabs(at(v, b, j, e, S, E));
            }
        break;
      case OpId::attention_lse:
        t.expect.shape = k.b1 == 0 ? Shape{k.b2, L} : Shape{k.b1, k.b2, L};
        t.expect.v = lse;
        for (double x : lse) t.expect.scale.push_back(std::max(1.0, std::fabs(x)));
        break;
      case OpId::attention_backward_query:
        t.expect.shape = laid_out(shape_of(k, L));
        t.expect.v.assign(O.size(), 0.0);
        t.expect.scale.assign(O.size(), 0.0);
        for (int64_t b = 0; b < B; ++b)
          for (int64_t i = 0; i < L; ++i)
            for (int64_t j = 0; j < S; ++j) {
              const double ds = dS[(b * L + i) * S + j], mag = dS_mag[(b * L + i) * S + j];
              for (int64_t e = 0; e < E; ++e) {
                const size_t to = static_cast<size_t>(row_at(b, i, L) * E + e);
                t.expect.v[to] += scale * ds * at(kk, b, j, e, S, E);
                t.expect.scale[to] += scale * mag * std::fabs(at(kk, b, j, e, S, E));
              }
            }
        break;
      default: {  // attention_backward_kv: dk, then dv
        Shape s = laid_out(shape_of(k, S));
        s.insert(0, 2);
        t.expect.shape = s;
        const size_t half = static_cast<size_t>(B * S * E);
        t.expect.v.assign(2 * half, 0.0);
        t.expect.scale.assign(2 * half, 0.0);
        for (int64_t b = 0; b < B; ++b)
          for (int64_t i = 0; i < L; ++i)
            for (int64_t j = 0; j < S; ++j) {
              const size_t x = static_cast<size_t>((b * L + i) * S + j);
              const double p = P[x], ds = dS[x], mag = dS_mag[x];
              for (int64_t e = 0; e < E; ++e) {
                const size_t to = static_cast<size_t>(row_at(b, j, S) * E + e);
                t.expect.v[to] += scale * ds * at(q, b, i, e, L, E);
                t.expect.scale[to] += scale * mag * std::fabs(at(q, b, i, e, L, E));
                t.expect.v[half + to] += p * at(g, b, i, e, L, E);
                t.expect.scale[half + to] += p * std::fabs(at(g, b, i, e, L, E));
              }
            }
        break;
      }
    }
    out.push_back(std::move(t));
  }
}

}  // namespace ember::test::optable
