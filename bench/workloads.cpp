#include "workloads.h"

#include <algorithm>
#include <sstream>

namespace ember::bench {

namespace {

Workload conv_net(std::string name, std::string arch, std::vector<int64_t> input,
                  std::vector<int64_t> layers, double momentum) {
  Workload w{std::move(name), std::move(layers), "relu", 0.01, momentum};
  w.arch = std::move(arch);
  w.input = std::move(input);
  return w;
}

// A residual block: conv-BN-ReLU, conv-BN, plus the input (through a 1x1 conv-BN when the shape
// changes), ReLU.
class ResidualBlockImpl : public nn::Module {
 public:
  ResidualBlockImpl(int64_t in, int64_t out, int64_t stride) {
    conv1 = register_module(
        "conv1",
        nn::Conv2d(nn::ConvOptions(in, out, {3}).stride({stride}).padding({1}).bias(false)));
    bn1 = register_module("bn1", nn::BatchNorm2d(out));
    conv2 = register_module("conv2",
                            nn::Conv2d(nn::ConvOptions(out, out, {3}).padding({1}).bias(false)));
    bn2 = register_module("bn2", nn::BatchNorm2d(out));
    if (stride != 1 || in != out)
      skip = register_module(
          "downsample",
          nn::Sequential(nn::Conv2d(nn::ConvOptions(in, out, {1}).stride({stride}).bias(false)),
                         nn::BatchNorm2d(out)));
  }
  Tensor forward(const Tensor& x) {
    const Tensor y = bn2(conv2(relu(bn1(conv1(x)))));
    return relu(add(y, skip ? skip(x) : x));
  }

 private:
  nn::Conv2d conv1{nullptr}, conv2{nullptr};
  nn::BatchNorm2d bn1{nullptr}, bn2{nullptr};
  nn::Sequential skip{nullptr};
};
EMBER_MODULE(ResidualBlock);

// A recurrent layer over [B, T, features] (batch_first) whose last step's output goes on.
class LastStepImpl : public nn::Module {
 public:
  LastStepImpl(const std::string& arch, int64_t features, int64_t hidden) {
    if (arch == "lstm")
      lstm = register_module("rnn", nn::LSTM(nn::LSTMOptions(features, hidden).batch_first(true)));
    else
      gru = register_module(
          "rnn", nn::GRU(nn::GRUOptions(features, hidden).num_layers(2).batch_first(true)));
  }
  Tensor forward(const Tensor& x) {
    const Tensor out = lstm ? std::get<0>(lstm->forward(x)) : std::get<0>(gru->forward(x));
    return out.select(1, out.size(1) - 1);
  }

 private:
  nn::LSTM lstm{nullptr};
  nn::GRU gru{nullptr};
};
EMBER_MODULE(LastStep);

// The gpt workloads' model: token and position embeddings, pre-norm causal blocks, a final
// LayerNorm, the output layer tied to the token embedding; [B, T] tokens -> [B * T, V] logits.
class GPTImpl : public nn::Module {
 public:
  GPTImpl(int64_t d, int64_t vocab, int64_t context, int64_t depth, int64_t heads) : vocab_(vocab) {
    tok = register_module("tok", nn::Embedding(vocab, d));
    pos = register_module("pos", nn::Embedding(context, d));
    for (int64_t l = 0; l < depth; ++l)
      blocks.push_back(
          register_module("h" + std::to_string(l),
                          nn::TransformerEncoderLayer(nn::TransformerEncoderLayerOptions(d, heads)
                                                          .dim_feedforward(4 * d)
                                                          .dropout(0.0)
                                                          .activation("gelu")
                                                          .batch_first(true)
                                                          .norm_first(true))));
    ln_f = register_module("ln_f", nn::LayerNorm(d));
    head = register_module("head", nn::Linear(nn::LinearOptions(d, vocab).bias(false)));
    head->weight = head->tie_parameter("weight", tok->weight);
    nn::init::normal_(tok->weight, 0.0, 0.02);
    nn::init::normal_(pos->weight, 0.0, 0.02);
  }
  Tensor forward(const Tensor& idx) {
    const Tensor positions = arange(idx.size(1), TensorOptions(kInt64).device(idx.device()));
    Tensor x = add(tok->forward(idx), pos->forward(positions));
    for (auto& b : blocks) x = b->forward(x, {}, {}, true);
    return head->forward(ln_f->forward(x)).reshape({-1, vocab_});
  }

 private:
  int64_t vocab_;
  nn::Embedding tok{nullptr}, pos{nullptr};
  std::vector<nn::TransformerEncoderLayer> blocks;
  nn::LayerNorm ln_f{nullptr};
  nn::Linear head{nullptr};
};
EMBER_MODULE(GPT);

Workload gpt(std::string name, int64_t d, int64_t context, int64_t depth, int64_t heads) {
  Workload w{std::move(name), {d, 256}, "gelu", 1e-3, 0.0};
  w.arch = "gpt";
  w.input = {context};
  w.depth = depth;
  w.heads = heads;
  w.optimizer = "adamw";
  w.weight_decay = 1e-2;
  w.clip_norm = 1.0;
  return w;
}

// The resnet's blocks: (in, out, stride).
constexpr int64_t kResnetBlocks[3][3] = {{16, 16, 1}, {16, 32, 2}, {32, 64, 2}};

// One convolution's share of the cost: k x k, `cin` -> `cout` channels, on an `h` x `w` input.
void add_conv(WorkloadCost& c, int64_t cin, int64_t cout, int64_t k, int64_t stride, int64_t pad,
              int64_t& h, int64_t& w, bool bias, bool batch_norm) {
  h = (h + 2 * pad - k) / stride + 1;
  w = (w + 2 * pad - k) / stride + 1;
  const double out = static_cast<double>(cout * h * w);
  c.macs.push_back(out * static_cast<double>(cin * k * k));
  c.activations += out;
  c.params +=
      static_cast<double>(cout * cin * k * k) + (bias ? cout : 0) + (batch_norm ? 2 * cout : 0);
}

void add_linear(WorkloadCost& c, int64_t in, int64_t out, bool hidden) {
  c.macs.push_back(static_cast<double>(in * out));
  c.params += static_cast<double>(in * out + out);
  if (hidden) c.activations += static_cast<double>(out);
}

}  // namespace

const std::vector<Workload>& all_workloads() {
  static const std::vector<Workload> list = {
      // The seed step of DESIGN.md and examples/mlp.cpp.
      {"mlp", {784, 512, 10}, "relu", 0.01, 0.0},
      // Deeper and wider: four hidden layers of 1024, GELU, momentum SGD (keeps a buffer each).
      {"deep_mlp", {784, 1024, 1024, 1024, 1024, 10}, "gelu", 0.01, 0.9},
      // Two convolutions and a max-pool on 28x28 images, then two Linear layers.
      conv_net("cnn", "cnn", {1, 28, 28}, {12544, 128, 10}, 0.0),
      // Conv-BN-ReLU with skip connections on 32x32 colour images, momentum SGD.
      conv_net("resnet", "resnet", {3, 32, 32}, {64, 10}, 0.9),
      // Sequences of 32 steps of 64 features: an LSTM of 256, or two GRU layers of 256; the last
      // step's output -> Linear 10.
      conv_net("lstm", "lstm", {32, 64}, {256, 10}, 0.0),
      conv_net("gru2", "gru2", {32, 64}, {256, 10}, 0.0),
      // Causal transformers over byte tokens (AdamW, clip_grad_norm_ 1.0): 4 blocks of d 128
      // with 4 heads over 128 tokens, and 6 blocks of d 384 with 6 heads over 256.
      gpt("gpt_small", 128, 128, 4, 4),
      gpt("gpt_base", 384, 256, 6, 6),
  };
  return list;
}

WorkloadCost workload_cost(const Workload& w) {
  WorkloadCost c;
  c.classes = static_cast<double>(w.layers.back());
  if (w.arch == "mlp") {
    c.input = static_cast<double>(w.layers.front());
    for (size_t i = 0; i + 1 < w.layers.size(); ++i)
      add_linear(c, w.layers[i], w.layers[i + 1], i + 2 < w.layers.size());
    return c;
  }
  if (w.arch == "gpt") {
    // Per sequence of T tokens and per block: the q, k, v and output projections (4 d^2 per
    // token), the feed-forward (8 d^2), the scores and the weighted values (T d each, per
    // token); then the tied output layer (d V per token). Activations: per token and block
    // about 16 d (projections, norms, the feed-forward's 4 d twice) and the H T attention
    // weights; the embedding lookup reads nothing to differentiate.
    const int64_t d = w.layers[0], V = w.layers[1], T = w.input[0];
    c.input = static_cast<double>(T);
    for (int64_t l = 0; l < w.depth; ++l) {
      c.macs.push_back(static_cast<double>(T * 4 * d * d));
      c.macs.push_back(static_cast<double>(2 * T * T * d));
      c.macs.push_back(static_cast<double>(T * 8 * d * d));
      c.activations += static_cast<double>(T * 16 * d + w.heads * T * T);
      c.params += static_cast<double>(12 * d * d + 13 * d);
    }
    c.macs.push_back(static_cast<double>(T * d * V));
    c.params += static_cast<double>(V * d + T * d + 2 * d);
    c.classes = static_cast<double>(T * V);
    return c;
  }
  if (w.arch == "lstm" || w.arch == "gru2") {
    // Per layer: the input projection and the recurrent product of every step; the gates and
    // the states (h, and c for the LSTM) of every step as activations.
    const int64_t T = w.input[0], H = w.layers.front(), G = w.arch == "lstm" ? 4 : 3;
    const int64_t L = w.arch == "lstm" ? 1 : 2;
    c.input = static_cast<double>(T * w.input[1]);
    for (int64_t l = 0; l < L; ++l) {
      const int64_t in = l == 0 ? w.input[1] : H;
      c.macs.push_back(static_cast<double>(T * G * H * in));
      c.macs.push_back(static_cast<double>(T * G * H * H));
      c.activations += static_cast<double>(T * (G * H + (G == 4 ? 2 : 1) * H));
      c.params += static_cast<double>(G * H * (in + H) + 2 * G * H);
    }
    for (size_t i = 0; i + 1 < w.layers.size(); ++i)
      add_linear(c, w.layers[i], w.layers[i + 1], i + 2 < w.layers.size());
    return c;
  }
  c.input = static_cast<double>(w.input[0] * w.input[1] * w.input[2]);
  int64_t h = w.input[1], wd = w.input[2];
  if (w.arch == "cnn") {
    add_conv(c, w.input[0], 32, 3, 1, 1, h, wd, true, false);
    add_conv(c, 32, 64, 3, 1, 1, h, wd, true, false);
    c.activations += static_cast<double>(64 * (h / 2) * (wd / 2));  // the pooled features
  } else {
    add_conv(c, w.input[0], 16, 3, 1, 1, h, wd, false, true);
    for (const auto& b : kResnetBlocks) {
      int64_t h1 = h, w1 = wd;
      add_conv(c, b[0], b[1], 3, b[2], 1, h1, w1, false, true);
      add_conv(c, b[1], b[1], 3, 1, 1, h1, w1, false, true);
      if (b[2] != 1 || b[0] != b[1]) {
        int64_t h2 = h, w2 = wd;
        add_conv(c, b[0], b[1], 1, b[2], 0, h2, w2, false, true);
      }
      h = h1;
      wd = w1;
    }
  }
  for (size_t i = 0; i + 1 < w.layers.size(); ++i)
    add_linear(c, w.layers[i], w.layers[i + 1], i + 2 < w.layers.size());
  return c;
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
    return std::make_unique<optim::AdamW>(std::move(params),
                                          optim::AdamWOptions(w.lr).weight_decay(w.weight_decay));
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
  nlohmann::json d = {{"layers", w.layers},
                      {"activation", w.activation},
                      {"loss", "cross_entropy"},
                      {"optimizer", o}};
  if (w.arch != "mlp") {
    const WorkloadCost c = workload_cost(w);
    d["arch"] = w.arch;
    d["input"] = w.input;
    d["macs"] = c.macs;
    d["activations"] = c.activations;
    d["params"] = c.params;
  }
  if (w.arch == "gpt") {
    d["depth"] = w.depth;
    d["heads"] = w.heads;
  }
  if (w.clip_norm > 0) d["clip_norm"] = w.clip_norm;
  return d;
}

nn::Sequential build_model(const Workload& w) {
  EMBER_CHECK(w.layers.size() >= 2, "ember_bench: workload ", w.name, " needs two layer sizes");
  nn::Sequential seq;
  auto act = [&] {
    if (w.activation == "relu")
      seq->push_back(nn::ReLU());
    else
      seq->push_back(nn::GELU());  // approximate "none": the exact erf form
  };
  if (w.arch == "cnn") {
    seq->push_back(nn::Conv2d(nn::ConvOptions(w.input[0], 32, {3}).padding({1})));
    act();
    seq->push_back(nn::Conv2d(nn::ConvOptions(32, 64, {3}).padding({1})));
    act();
    seq->push_back(nn::MaxPool2d(2));
    seq->push_back(nn::Flatten());
  } else if (w.arch == "lstm" || w.arch == "gru2") {
    seq->push_back(LastStep(w.arch, w.input[1], w.layers.front()));
  } else if (w.arch == "gpt") {
    seq->push_back(GPT(w.layers[0], w.layers[1], w.input[0], w.depth, w.heads));
    return seq;  // its output layer is the model's
  } else if (w.arch == "resnet") {
    seq->push_back(nn::Conv2d(nn::ConvOptions(w.input[0], 16, {3}).padding({1}).bias(false)));
    seq->push_back(nn::BatchNorm2d(16));
    act();
    for (const auto& b : kResnetBlocks) seq->push_back(ResidualBlock(b[0], b[1], b[2]));
    seq->push_back(nn::AdaptiveAvgPool2d(std::vector<int64_t>{1, 1}));
    seq->push_back(nn::Flatten());
  }
  for (size_t i = 0; i + 1 < w.layers.size(); ++i) {
    seq->push_back(nn::Linear(w.layers[i], w.layers[i + 1]));
    if (i + 2 == w.layers.size()) break;  // logits go straight to the loss
    act();
  }
  return seq;
}

int64_t parameter_count(const Workload& w) { return static_cast<int64_t>(workload_cost(w).params); }

StepFloor step_floor(const Workload& w, int64_t batch) {
  const auto b = static_cast<double>(batch);
  const WorkloadCost c = workload_cost(w);
  double macs = 0;
  for (double m : c.macs) macs += m;
  const double m = w.optimizer == "adamw" ? 2 : w.momentum > 0 ? 1 : 0;
  StepFloor f;
  // Forward, grad of the activations and grad of the weights: 2 FLOP per MAC each; the first
  // layer's input needs no gradient.
  // (A gpt's first product reads the embeddings, which do need their gradient.)
  f.flops = 6 * b * macs - (w.arch == "gpt" ? 0 : 2 * b * c.macs.front());
  // Parameters: read forward, gradient written and read, weight read and written by the update
  // (5 passes), plus each optimizer state read and written. Per sample: the input read twice,
  // each activation touched about five times, the logits four times.
  f.bytes = 4 * (c.params * (5 + 2 * m) + b * (2 * c.input + 5 * c.activations + 4 * c.classes));
  return f;
}

std::vector<int64_t> dynamic_schedule(int64_t batch) {
  std::vector<int64_t> s = {batch, batch * 3 / 4, batch / 2, batch * 3 / 4 + 1};
  for (int64_t& b : s) b = std::max<int64_t>(b, 1);
  return s;
}

}  // namespace ember::bench
