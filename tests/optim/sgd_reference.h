#pragma once
// PyTorch's SGD step (torch.optim.sgd._single_tensor_sgd) written out in float64 for tests,
// independent of the library: parameters and gradients are plain vectors, a parameter without
// a gradient is skipped, and a momentum buffer starts as a copy of the first d_p it sees.
#include <cstddef>
#include <optional>
#include <random>
#include <vector>

namespace ember::test {

using Vec = std::vector<double>;

struct RefSGD {
  double lr = 0, momentum = 0, dampening = 0, weight_decay = 0;
  bool nesterov = false, maximize = false;
  std::vector<std::optional<Vec>> buffers;

  void step(std::vector<Vec>& params, const std::vector<std::optional<Vec>>& grads) {
    buffers.resize(params.size());
    for (size_t i = 0; i < params.size(); ++i) {
      if (!grads[i]) continue;
      Vec& p = params[i];
      Vec d = *grads[i];
      for (size_t k = 0; k < d.size(); ++k) {
        if (maximize) d[k] = -d[k];
        if (weight_decay != 0) d[k] += weight_decay * p[k];
      }
      if (momentum != 0) {
        if (!buffers[i]) {
          buffers[i] = d;
        } else {
          Vec& b = *buffers[i];
          for (size_t k = 0; k < d.size(); ++k) b[k] = momentum * b[k] + (1 - dampening) * d[k];
        }
        const Vec& b = *buffers[i];
        for (size_t k = 0; k < d.size(); ++k) d[k] = nesterov ? d[k] + momentum * b[k] : b[k];
      }
      for (size_t k = 0; k < d.size(); ++k) p[k] -= lr * d[k];
    }
  }
};

inline Vec random_vec(std::mt19937& rng, size_t n, double scale = 1.0) {
  std::normal_distribution<double> dist(0.0, scale);
  Vec v(n);
  for (double& x : v) x = dist(rng);
  return v;
}

}  // namespace ember::test
