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
  // "mlp": the Linear layers above. "cnn" and "resnet": convolutional nets on images of shape
  // `input` (one sample, [C, H, W]); `layers` is then their classifier's feature sizes, the
  // flattened features first. "lstm" and "gru2": a recurrent layer (an LSTM, or two GRU layers)
  // over sequences of shape `input` ([T, features]), its last step -> the Linear `layers` (the
  // hidden size first).
  // "gpt": a causal transformer over byte tokens: layers = {d_model, vocabulary}, input =
  // {context}, `depth` pre-norm blocks of `heads` heads (TransformerEncoderLayer, GELU, feed-
  // forward 4 d_model, no dropout), a final LayerNorm and an output layer tied to the token
  // embedding; a sample is a sequence, the loss the mean over its tokens.
  std::string arch = "mlp";
  std::vector<int64_t> input{};  // mlp: unused (the sample is {layers[0]})
  int64_t depth = 0, heads = 0;  // gpt only
  double clip_norm = 0;          // > 0: clip_grad_norm_ before the optimizer step
};

// What the floor counts for a workload, per sample: the multiply-adds of each GEMM-like layer
// (convolutions and Linear, input side first), the elements of the activations between the
// input and the logits, and the parameters. For an MLP these follow from `layers`; the JSON
// carries them for the conv nets (bench/schema) so the checkers need no model code.
struct WorkloadCost {
  std::vector<double> macs;
  double activations = 0;
  double params = 0;
  double input = 0, classes = 0;
};
WorkloadCost workload_cost(const Workload& w);

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

// mlp: Linear, activation, Linear, ..., Linear (no activation after the last). cnn: conv 32 3x3
// pad 1, ReLU, conv 64 3x3 pad 1, ReLU, max-pool 2, flatten, Linear 12544->128, ReLU, Linear 10.
// resnet: a conv-BN-ReLU stem of 16 channels, three residual blocks (16, 32 stride 2, 64 stride
// 2; two 3x3 conv-BN each, a 1x1 conv-BN on a skip that changes shape), global average pool,
// Linear 64->10. Parameters drawn from the default generator.
nn::Sequential build_model(const Workload& w);

int64_t parameter_count(const Workload& w);

// The minimum work of one step at batch B (the formula in bench/schema and the README), from
// workload_cost (an MLP: macs = in*out per layer, activations = the hidden widths):
//   flops = 6*B*sum(macs) - 2*B*macs[0]   (no gradient for the input)
//   bytes = 4*(P*(5 + 2m) + B*(2*input + 5*activations + 4*classes))
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
