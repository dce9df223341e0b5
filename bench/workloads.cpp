#include "workloads.h"

#include <algorithm>
#include <sstream>

namespace ember::bench {

const std::vector<Workload>& all_workloads() {
  static const std::vector<Workload> list = {
      // The seed step of DESIGN.md and examples/mlp.cpp.
      {"mlp", {784, 512, 10}, "relu", 0.01, 0.0},
      // Deeper and wider: four hidden layers of 1024, GELU, momentum SGD (keeps a buffer each).
      {"deep_mlp", {784, 1024, 1024, 1024, 1024, 10}, "gelu", 0.01, 0.9},
  };
  return list;
}

const Workload& find_workload(const std::string& name) {
  for (const Workload& w : all_workloads())
    if (w.name == name) return w;
  std::ostringstream known;
  for (const Workload& w : all_workloads()) known << (known.tellp() > 0 ? ", " : "") << w.name;
  EMBER_FAIL("ember_bench: unknown workload '", name, "' (known: ", known.str(), ")");
}

Workload with_optimizer(const Workload& w, const std::string& optimizer) {
  Workload out = w;
  if (optimizer == "sgd") return out;
  EMBER_CHECK(optimizer == "adamw", "ember_bench: unknown optimizer '", optimizer,
              "' (known: sgd, adamw)");
  out.optimizer = "adamw";
  out.lr = 1e-3;
  out.momentum = 0;
  out.weight_decay = 1e-2;
  return out;
}

Workload with_amp(const Workload& w, const std::string& amp) {
  EMBER_CHECK(amp == "none" || amp == "bf16" || amp == "fp16", "ember_bench: unknown amp '", amp,
              "' (known: none, bf16, fp16)");
  Workload out = w;
  out.amp = amp;
  return out;
}

std::unique_ptr<optim::Optimizer> make_optimizer(const Workload& w, std::vector<Tensor> params) {
  if (w.optimizer == "adamw")
    return std::make_unique<optim::AdamW>(
        std::move(params), optim::AdamWOptions(w.lr).weight_decay(w.weight_decay));
  return std::make_unique<optim::SGD>(std::move(params),
                                      optim::SGDOptions(w.lr).momentum(w.momentum));
}

nlohmann::json describe(const Workload& w) {
  nlohmann::json o = {{"name", w.optimizer}, {"lr", w.lr}, {"momentum", w.momentum}};
  if (w.optimizer == "adamw") {
    o["weight_decay"] = w.weight_decay;
    o["betas"] = {0.9, 0.999};
    o["eps"] = 1e-8;
  }
  return {{"layers", w.layers},
          {"activation", w.activation},
          {"loss", "cross_entropy"},
          {"optimizer", o}};
}

nn::Sequential build_model(const Workload& w) {
  EMBER_CHECK(w.layers.size() >= 2, "ember_bench: workload ", w.name, " needs two layer sizes");
  nn::Sequential seq;
  for (size_t i = 0; i + 1 < w.layers.size(); ++i) {
    seq->push_back(nn::Linear(w.layers[i], w.layers[i + 1]));
    if (i + 2 == w.layers.size()) break;  // logits go straight to the loss
    if (w.activation == "relu")
      seq->push_back(nn::ReLU());
    else
      seq->push_back(nn::GELU());  // approximate "none": the exact erf form
  }
  return seq;
}

int64_t parameter_count(const Workload& w) {
  int64_t p = 0;
  for (size_t i = 0; i + 1 < w.layers.size(); ++i)
    p += w.layers[i] * w.layers[i + 1] + w.layers[i + 1];
  return p;
}

StepFloor step_floor(const Workload& w, int64_t batch) {
  const auto b = static_cast<double>(batch);
  const std::vector<int64_t>& l = w.layers;
  double mac = 0;  // sum of in*out over the Linear layers
  for (size_t i = 0; i + 1 < l.size(); ++i)
    mac += static_cast<double>(l[i]) * static_cast<double>(l[i + 1]);
  double hidden = 0;  // widths between the input and the logits
  for (size_t i = 1; i + 1 < l.size(); ++i) hidden += static_cast<double>(l[i]);
  const double m = w.optimizer == "adamw" ? 2 : w.momentum > 0 ? 1 : 0;
  StepFloor f;
  // Forward, grad of the activations and grad of the weights: 2 FLOP per MAC each; the first
  // layer's input needs no gradient.
  f.flops = 6 * b * mac - 2 * b * static_cast<double>(l[0]) * static_cast<double>(l[1]);
  // Parameters: read forward, gradient written and read, weight read and written by the update
  // (5 passes), plus the momentum buffer read and written. Per sample: the input read twice,
  // each hidden activation touched about five times, the logits four times.
  f.bytes =
      4 * (static_cast<double>(parameter_count(w)) * (5 + 2 * m) +
           b * (2 * static_cast<double>(l[0]) + 5 * hidden + 4 * static_cast<double>(l.back())));
  return f;
}

std::vector<int64_t> dynamic_schedule(int64_t batch) {
  std::vector<int64_t> s = {batch, batch * 3 / 4, batch / 2, batch * 3 / 4 + 1};
  for (int64_t& b : s) b = std::max<int64_t>(b, 1);
  return s;
}

}  // namespace ember::bench
