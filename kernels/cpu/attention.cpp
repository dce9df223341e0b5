// The fused attention rows on the CPU: the definitions, row by row in double, for checking the
// CUDA kernels and the rows' backward formula. nn's scaled_dot_product_attention composes
// matmul-softmax-matmul on the CPU instead (it runs on the BLAS), so speed is not the aim here.
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "core/parallel.h"
#include "kernels/attention_geometry.h"
#include "kernels/cpu/cpu_kernels.h"

namespace ember::kernels::cpu {
namespace {

// One operand: element (b, row, col) of a [batch1, batch2, rows, E] tensor with its strides.
template <class T>
struct Operand {
  const T* p;
  AttentionOperand st;
  int64_t batch2;
  const T* row(int64_t b, int64_t r) const {
    return p + (b / batch2) * st.b1 + (b % batch2) * st.b2 + r * st.row;
  }
};

template <class T>
Operand<T> operand(const Tensor& t, int64_t batch2) {
  return {static_cast<const T*>(t.raw_data()), attention_operand(t), batch2};
}

template <class T>
double dot(const T* a, const T* b, int64_t n) {
  double s = 0;
  for (int64_t e = 0; e < n; ++e) s += static_cast<double>(a[e]) * static_cast<double>(b[e]);
  return s;
}

// The keys query i sees: all of them, or j <= i when causal.
int64_t visible(const AttentionGeometry& g, int64_t i) {
  return g.causal ? std::min(i + 1, g.S) : g.S;
}

template <class T>
void run(const KernelCall& call) {
  using Stat = std::conditional_t<std::is_same_v<T, double>, double, float>;
  const bool backward =
      call.op == OpId::attention_backward_query || call.op == OpId::attention_backward_kv;
  const std::span<const Tensor> in = call.inputs;
  const Tensor& qt = in[backward ? 1 : 0];
  const AttentionGeometry g = attention_geometry(qt, in[backward ? 2 : 1], call.attrs);
  const int64_t E = g.E, L = g.L, S = g.S, B = g.batches();
  const Operand<T> q = operand<T>(qt, g.batch2), k = operand<T>(in[backward ? 2 : 1], g.batch2);
  constexpr double kNegInf = -std::numeric_limits<double>::infinity();
  // The scaled scores of query i against its visible keys, into s; returns their maximum.
  auto scores = [&](int64_t b, int64_t i, std::vector<double>& s) {
    const int64_t n = visible(g, i);
    s.resize(static_cast<size_t>(n));
    double m = kNegInf;
    for (int64_t j = 0; j < n; ++j) {
      s[j] = g.scale * dot(q.row(b, i), k.row(b, j), E);
      m = std::max(m, s[j]);
    }
    return m;
  };
  const int64_t grain = std::max<int64_t>(1, kParallelGrainElements / std::max<int64_t>(1, S * E));
  if (call.op == OpId::attention || call.op == OpId::attention_lse) {
    const bool lse_only = call.op == OpId::attention_lse;
    const Operand<T> v = lse_only ? Operand<T>{} : operand<T>(in[2], g.batch2);
    parallel_for(B * L, grain, [&](int64_t r0, int64_t r1) {
      std::vector<double> s, acc(static_cast<size_t>(E));
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t b = r / L, i = r % L, n = visible(g, i);
        const double m = scores(b, i, s);
        double l = 0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = 0; j < n; ++j) {
          const double p = std::exp(s[j] - m);
          l += p;
          if (!lse_only)
            for (int64_t e = 0; e < E; ++e) acc[e] += p * static_cast<double>(v.row(b, j)[e]);
        }
        if (lse_only) {
          static_cast<Stat*>(call.out.raw_data())[r] =
              static_cast<Stat>(n == 0 ? kNegInf : m + std::log(l));
        } else {
          T* o = static_cast<T*>(call.out.raw_data()) + g.result_row(b, i, L) * E;
          for (int64_t e = 0; e < E; ++e) o[e] = static_cast<T>(n == 0 ? 0.0 : acc[e] / l);
        }
      }
    });
    return;
  }
  const Operand<T> go = operand<T>(in[0], g.batch2), v = operand<T>(in[3], g.batch2);
  const Stat* lse = static_cast<const Stat*>(in[4].raw_data());
  const Stat* delta = static_cast<const Stat*>(in[5].raw_data());
  // dS_ij = P_ij (dO_i . v_j - delta_i), P_ij = exp(s_ij - lse_i).
  auto dscore = [&](int64_t b, int64_t i, int64_t j, double s, double* p_out) {
    const double p = std::exp(s - static_cast<double>(lse[b * L + i]));
    if (p_out) *p_out = p;
    return p * (dot(go.row(b, i), v.row(b, j), E) - static_cast<double>(delta[b * L + i]));
  };
  T* out = static_cast<T*>(call.out.raw_data());
  if (call.op == OpId::attention_backward_query) {
    parallel_for(B * L, grain, [&](int64_t r0, int64_t r1) {
      std::vector<double> s, acc(static_cast<size_t>(E));
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t b = r / L, i = r % L, n = visible(g, i);
        scores(b, i, s);
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t j = 0; j < n; ++j) {
          const double ds = dscore(b, i, j, s[j], nullptr);
          for (int64_t e = 0; e < E; ++e) acc[e] += ds * static_cast<double>(k.row(b, j)[e]);
        }
        const int64_t at = g.result_row(b, i, L) * E;
        for (int64_t e = 0; e < E; ++e) out[at + e] = static_cast<T>(g.scale * acc[e]);
      }
    });
    return;
  }
  // attention_backward_kv: key row j gathers every query that sees it; dk in out[0], dv in
  // out[1].
  parallel_for(B * S, grain, [&](int64_t r0, int64_t r1) {
    std::vector<double> dk(static_cast<size_t>(E)), dv(static_cast<size_t>(E));
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t b = r / S, j = r % S;
      std::fill(dk.begin(), dk.end(), 0.0);
      std::fill(dv.begin(), dv.end(), 0.0);
      for (int64_t i = g.causal ? j : 0; i < L; ++i) {
        const double s = g.scale * dot(q.row(b, i), k.row(b, j), E);
        double p = 0;
        const double ds = dscore(b, i, j, s, &p);
        for (int64_t e = 0; e < E; ++e) {
          dv[e] += p * static_cast<double>(go.row(b, i)[e]);
          dk[e] += ds * static_cast<double>(q.row(b, i)[e]);
        }
      }
      const int64_t at = g.result_row(b, j, S) * E;
      for (int64_t e = 0; e < E; ++e) {
        out[at + e] = static_cast<T>(g.scale * dk[e]);
        out[B * S * E + at + e] = static_cast<T>(dv[e]);
      }
    }
  });
}

}  // namespace

void attention(const KernelCall& call) {
  if (call.out.numel() == 0) return;
  const bool backward =
      call.op == OpId::attention_backward_query || call.op == OpId::attention_backward_kv;
  const DType dt = call.inputs[backward ? 1 : 0].dtype();
  visit_dtype(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> ||
                  std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
      run<T>(call);
    } else {
      EMBER_FAIL(op_name(call.op), ": unsupported dtype ", dtype_name(dt));
    }
  });
}

}  // namespace ember::kernels::cpu
