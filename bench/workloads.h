#pragma once
// The benchmark's workloads (the same on the PyTorch side, bench/torch_mlp.py): their
// definitions, the model each one builds, and the physical floor of one training step.
#include <ember/ember.h>

#include <cstdint>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace ember::bench {

struct Workload {
  std::string name;
  std::vector<int64_t> layers;  // feature sizes, input first: {784, 512, 10}
  std::string activation;       // "relu" or "gelu" (exact, erf), between the Linear layers
  double lr = 0.01;
  double momentum = 0;
  // "sgd" (lr, momentum above) or "adamw" (PyTorch's defaults: lr 1e-3, betas (0.9, 0.999),
  // eps 1e-8, weight_decay 1e-2); the same on the PyTorch side (bench/torch_mlp.py).
  std::string optimizer = "sgd";
  double weight_decay = 0;
  // "none", or the autocast dtype of the forward and loss: "bf16", or "fp16" with a GradScaler
  // (init_scale 65536, PyTorch's defaults); the same on the PyTorch side.
  std::string amp = "none";
};

// Every workload, in the order a run takes them.
const std::vector<Workload>& all_workloads();
// The workload of that name; an ember::Error naming the known ones otherwise.
const Workload& find_workload(const std::string& name);

// `w` trained by `optimizer` ("sgd": as defined; "adamw": AdamW with PyTorch's defaults); an
// ember::Error naming the known ones otherwise.
Workload with_optimizer(const Workload& w, const std::string& optimizer);
// `w` under autocast `amp` ("none", "bf16", "fp16"); an ember::Error naming them otherwise.
Workload with_amp(const Workload& w, const std::string& amp);
// The workload's optimizer over `params`.
std::unique_ptr<optim::Optimizer> make_optimizer(const Workload& w, std::vector<Tensor> params);

// The schema's description of a workload ("workloads" entry).
nlohmann::json describe(const Workload& w);

// Linear, activation, Linear, ..., Linear (no activation after the last), parameters drawn
// from the default generator.
nn::Sequential build_model(const Workload& w);

int64_t parameter_count(const Workload& w);

// The minimum work of one step at batch B (the formula in bench/schema and the README):
//   flops = 6*B*sum(in*out) - 2*B*layers[0]*layers[1]   (no gradient for the input)
//   bytes = 4*(P*(5 + 2m) + B*(2*layers[0] + 5*sum(hidden widths) + 4*layers.back()))
// P the parameter count, m the optimizer's state tensors per parameter (SGD with momentum 1,
// AdamW 2: each read and written once).
struct StepFloor {
  double flops = 0;
  double bytes = 0;
};
StepFloor step_floor(const Workload& w, int64_t batch);

// Mode "dynamic": the batch sizes the steps cycle through, from the largest one B:
// B, 3B/4, B/2, 3B/4 + 1 (each at least 1). A static mode uses {B}.
std::vector<int64_t> dynamic_schedule(int64_t batch);

}  // namespace ember::bench
