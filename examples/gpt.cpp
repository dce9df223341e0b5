// A character-level GPT (byte tokens) trained on a text every Debian/Ubuntu system has
// (/usr/share/common-licenses/GPL-3 by default): token and position embeddings, pre-norm causal
// transformer blocks (nn::TransformerEncoderLayer), a final LayerNorm and an output layer tied
// to the token embedding. AdamW, linear warmup then cosine decay, gradient clipping, the whole
// step under jit::compile. Prints the loss with a progress line, the held-out loss against the
// text's unigram entropy, saves a checkpoint it resumes from exactly, and samples text
// (temperature, top-k) at the end.
//
//   gpt [--text FILE] [--steps 600] [--layers 4] [--dim 128] [--heads 4] [--context 64]
//       [--batch 16] [--lr 3e-3] [--warmup 60] [--mode compiled|eager] [--device auto|cpu|cuda]
//       [--seed 0] [--save DIR] [--resume DIR] [--sample 300] [--temperature 0.8] [--top-k 20]
//       [--min-gain G] [--check-resume]
// --min-gain G: exit 1 unless the held-out loss is at least G nats below the unigram entropy.
// --check-resume: train half the steps, save, train the rest; then load the checkpoint into a
// fresh model and optimizer and train the rest again; exit 1 unless both end on the same loss.
// Exits 77 (a skip, for ctest) when the text is missing.
#include <ember/ember.h>

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <numbers>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using namespace ember;

namespace {

struct Config {
  std::string text = "/usr/share/common-licenses/GPL-3", mode = "compiled", device = "auto";
  std::string save, resume;
  int64_t steps = 600, layers = 4, dim = 128, heads = 4, context = 64, batch = 16, warmup = 60;
  int64_t sample = 300, top_k = 20;
  double lr = 3e-3, temperature = 0.8, min_gain = -1;
  uint64_t seed = 0;
  bool check_resume = false;
};

constexpr int64_t kVocab = 256;  // bytes

class GPTImpl : public nn::Module {
 public:
  explicit GPTImpl(const Config& c) : context(c.context), dim(c.dim) {
    tok = register_module("tok", nn::Embedding(kVocab, c.dim));
    pos = register_module("pos", nn::Embedding(c.context, c.dim));
    for (int64_t l = 0; l < c.layers; ++l)
      blocks.push_back(register_module(
          "h" + std::to_string(l),
          nn::TransformerEncoderLayer(nn::TransformerEncoderLayerOptions(c.dim, c.heads)
                                          .dim_feedforward(4 * c.dim)
                                          .dropout(0.0)
                                          .activation("gelu")
                                          .batch_first(true)
                                          .norm_first(true))));
    ln_f = register_module("ln_f", nn::LayerNorm(c.dim));
    head = register_module("head", nn::Linear(nn::LinearOptions(c.dim, kVocab).bias(false)));
    head->weight = head->tie_parameter("weight", tok->weight);  // one tensor, one gradient
    // GPT-2's embedding init: with N(0, 1) rows the tied output layer starts with logits of
    // size sqrt(dim) and a loss far above log(256).
    nn::init::normal_(tok->weight, 0.0, 0.02);
    nn::init::normal_(pos->weight, 0.0, 0.02);
  }
  // idx [B, T] (T <= context) -> logits [B, T, 256]; the output layer shares tok's weight.
  Tensor forward(const Tensor& idx) {
    const int64_t T = idx.size(1);
    const Tensor positions = arange(T, TensorOptions(kInt64).device(idx.device()));
    Tensor x = add(tok->forward(idx), pos->forward(positions));
    for (auto& b : blocks) x = b->forward(x, {}, {}, true);
    return head->forward(ln_f->forward(x));
  }
  int64_t context, dim;
  nn::Embedding tok{nullptr}, pos{nullptr};
  std::vector<nn::TransformerEncoderLayer> blocks;
  nn::LayerNorm ln_f{nullptr};
  nn::Linear head{nullptr};
};
EMBER_MODULE(GPT);

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// Everything a run needs, so that a checkpoint restores all of it.
struct Run {
  Run(const Config& c, const Device& dev, const std::vector<int64_t>& train)
      : cfg(c), device(dev), data(train), model(c) {
    model->to(dev);
    params = model->parameters();
    opt = std::make_unique<optim::AdamW>(
        params, optim::AdamWOptions(c.lr).weight_decay(0.1).betas(0.9, 0.95));
    const int64_t warm = std::max<int64_t>(1, c.warmup), total = c.steps;
    sched = std::make_unique<optim::LambdaLR>(*opt, [warm, total](int64_t s) {
      if (s < warm) return static_cast<double>(s + 1) / static_cast<double>(warm);
      const double t =
          static_cast<double>(s - warm) / static_cast<double>(std::max<int64_t>(1, total - warm));
      return 0.1 + 0.9 * 0.5 * (1 + std::cos(std::numbers::pi * std::min(1.0, t)));
    });
    rng.seed(c.seed);
  }

  // A batch of `batch` random windows of the training bytes: inputs and next bytes [B, T].
  std::pair<Tensor, Tensor> batch() {
    const int64_t T = cfg.context, B = cfg.batch;
    std::uniform_int_distribution<int64_t> start(0, static_cast<int64_t>(data.size()) - T - 1);
    std::vector<int64_t> x(static_cast<size_t>(B * T)), y(x.size());
    for (int64_t b = 0; b < B; ++b) {
      const int64_t s = start(rng);
      for (int64_t t = 0; t < T; ++t) {
        x[static_cast<size_t>(b * T + t)] = data[static_cast<size_t>(s + t)];
        y[static_cast<size_t>(b * T + t)] = data[static_cast<size_t>(s + t + 1)];
      }
    }
    return {from_vector(x, {B, T}).to(device), from_vector(y, {B, T}).to(device)};
  }

  Tensor step(const Tensor& x, const Tensor& y) {
    opt->zero_grad();
    const Tensor logits = model->forward(x);
    Tensor loss = criterion(logits.reshape({-1, kVocab}), y.reshape({-1}));
    loss.backward();
    nn::utils::clip_grad_norm_(params, 1.0);
    opt->step();
    return loss;
  }

  // Trains steps [from, to); returns the last loss.
  double train(int64_t from, int64_t to, bool quiet) {
    auto compiled = jit::compile([this](const Tensor& x, const Tensor& y) { return step(x, y); });
    const auto t0 = std::chrono::steady_clock::now();
    double last = 0, total = 0;
    int64_t since = 0;
    for (int64_t s = from; s < to; ++s) {
      auto [x, y] = batch();
      last = (cfg.mode == "compiled" ? compiled(x, y) : step(x, y)).item<float>();
      sched->step();
      total += last;
      ++since;
      if (!quiet && ((s + 1) % 50 == 0 || s + 1 == to)) {
        const double secs = seconds_since(t0);
        std::printf("step %5lld/%lld  loss %.4f  lr %.2e  %.1f ms/step\n",
                    static_cast<long long>(s + 1), static_cast<long long>(cfg.steps),
                    total / static_cast<double>(since), sched->get_last_lr()[0],
                    1000 * secs / static_cast<double>(s + 1 - from));
        std::fflush(stdout);
        total = 0;
        since = 0;
      }
    }
    return last;
  }

  void save(const std::string& dir) const {
    std::filesystem::create_directories(dir);
    nn::save(*model, dir + "/model.safetensors");
    optim::save(*opt, dir + "/optimizer.safetensors");
    optim::save(*sched, dir + "/scheduler.safetensors");
    std::ofstream f(dir + "/rng.txt");
    f << rng << "\n" << default_generator().seed() << " " << default_generator().offset() << "\n";
  }
  void load(const std::string& dir) {
    nn::load(*model, dir + "/model.safetensors");
    optim::load(*opt, dir + "/optimizer.safetensors");
    optim::load(*sched, dir + "/scheduler.safetensors");
    std::ifstream f(dir + "/rng.txt");
    uint64_t seed = 0, offset = 0;
    f >> rng >> seed >> offset;
    EMBER_CHECK(f.good() || f.eof(), "gpt: ", dir, "/rng.txt is unreadable");
    default_generator().manual_seed(seed);
    default_generator().set_offset(offset);
  }

  Config cfg;
  Device device;
  const std::vector<int64_t>& data;
  GPT model;
  std::vector<Tensor> params;
  std::unique_ptr<optim::AdamW> opt;
  std::unique_ptr<optim::LambdaLR> sched;
  nn::CrossEntropyLoss criterion;
  std::mt19937_64 rng;
};

// The mean next-byte loss over the held-out bytes, in windows of the context.
double held_out_loss(GPT& model, const std::vector<int64_t>& ids, int64_t context, Device dev) {
  NoGradGuard no_grad;
  model->eval();
  const int64_t windows = (static_cast<int64_t>(ids.size()) - 1) / context;
  double total = 0;
  int64_t count = 0;
  for (int64_t w0 = 0; w0 < windows; w0 += 32) {
    const int64_t n = std::min<int64_t>(32, windows - w0);
    std::vector<int64_t> x, y;
    for (int64_t w = w0; w < w0 + n; ++w)
      for (int64_t t = 0; t < context; ++t) {
        x.push_back(ids[static_cast<size_t>(w * context + t)]);
        y.push_back(ids[static_cast<size_t>(w * context + t + 1)]);
      }
    const Tensor logits = model->forward(from_vector(x, {n, context}).to(dev));
    total += nn::functional::cross_entropy(
                 logits.reshape({-1, kVocab}), from_vector(y, {n * context}).to(dev),
                 nn::CrossEntropyLossOptions().reduction(nn::Reduction::Sum))
                 .item<float>();
    count += n * context;
  }
  model->train();
  return total / static_cast<double>(count);
}

std::string sample_text(GPT& model, const std::string& prompt, const Config& c, Device dev,
                        std::mt19937_64& rng) {
  NoGradGuard no_grad;
  model->eval();
  std::vector<int64_t> ids;
  for (unsigned char ch : prompt) ids.push_back(ch);
  std::string out = prompt;
  for (int64_t k = 0; k < c.sample; ++k) {
    const int64_t T = std::min<int64_t>(static_cast<int64_t>(ids.size()), c.context);
    const std::vector<int64_t> window(ids.end() - T, ids.end());
    const Tensor logits = model->forward(from_vector(window, {1, T}).to(dev)).select(1, T - 1);
    std::vector<float> p =
        softmax(div(logits, c.temperature), -1).to(Device::cpu()).contiguous().to_vector<float>();
    if (c.top_k > 0 && c.top_k < kVocab) {  // keep the k most likely bytes
      std::vector<float> sorted = p;
      std::nth_element(sorted.begin(), sorted.begin() + (c.top_k - 1), sorted.end(),
                       std::greater<float>());
      const float cut = sorted[static_cast<size_t>(c.top_k - 1)];
      for (float& v : p)
        if (v < cut) v = 0;
    }
    std::discrete_distribution<int64_t> pick(p.begin(), p.end());
    const int64_t next = pick(rng);
    ids.push_back(next);
    out += static_cast<char>(next);
  }
  model->train();
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"A character-level GPT on a license text"};
  Config c;
  app.add_option("--text", c.text, "the text to model (bytes)");
  app.add_option("--steps", c.steps)->check(CLI::PositiveNumber);
  app.add_option("--layers", c.layers)->check(CLI::PositiveNumber);
  app.add_option("--dim", c.dim)->check(CLI::PositiveNumber);
  app.add_option("--heads", c.heads)->check(CLI::PositiveNumber);
  app.add_option("--context", c.context)->check(CLI::PositiveNumber);
  app.add_option("--batch", c.batch)->check(CLI::PositiveNumber);
  app.add_option("--lr", c.lr)->check(CLI::PositiveNumber);
  app.add_option("--warmup", c.warmup)->check(CLI::NonNegativeNumber);
  app.add_option("--mode", c.mode)->check(CLI::IsMember({"eager", "compiled"}));
  app.add_option("--device", c.device, "auto (GPU if present), cpu, cuda or cuda:N");
  app.add_option("--seed", c.seed);
  app.add_option("--save", c.save, "write a checkpoint here at the end (a directory)");
  app.add_option("--resume", c.resume, "continue from this checkpoint (its step count)");
  app.add_option("--sample", c.sample, "bytes to sample at the end")->check(CLI::NonNegativeNumber);
  app.add_option("--temperature", c.temperature)->check(CLI::PositiveNumber);
  app.add_option("--top-k", c.top_k, "sample among the k most likely bytes (0: all)");
  app.add_option("--min-gain", c.min_gain,
                 "exit 1 unless the held-out loss is this many nats below the unigram entropy");
  app.add_flag("--check-resume", c.check_resume,
               "check that a resumed run ends where a straight one does");
  CLI11_PARSE(app, argc, argv);
  try {
    if (!std::filesystem::exists(c.text)) {
      std::fprintf(stderr, "gpt: %s not found\n", c.text.c_str());
      return 77;
    }
    const Device dev = c.device == "auto" ? (cuda::is_available() ? Device::cuda(0) : Device::cpu())
                                          : Device::parse(c.device);
    std::ifstream in(c.text, std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    EMBER_CHECK(static_cast<int64_t>(text.size()) > 20 * c.context, "gpt: ", c.text,
                " is too short for --context ", c.context);
    // 90 % to train on, the last 10 % held out.
    std::vector<int64_t> ids(text.size());
    for (size_t i = 0; i < text.size(); ++i) ids[i] = static_cast<unsigned char>(text[i]);
    const auto split = static_cast<std::ptrdiff_t>(ids.size() * 9 / 10);
    const std::vector<int64_t> train(ids.begin(), ids.begin() + split),
        held(ids.begin() + split, ids.end());
    // The unigram entropy of the held-out bytes under the training bytes' frequencies (add-one
    // smoothed): what a model that ignores context scores.
    std::vector<double> counts(kVocab, 1.0);
    for (int64_t b : train) counts[static_cast<size_t>(b)] += 1;
    const double total = std::accumulate(counts.begin(), counts.end(), 0.0);
    double unigram = 0;
    for (int64_t b : held) unigram -= std::log(counts[static_cast<size_t>(b)] / total);
    unigram /= static_cast<double>(held.size());

    manual_seed(c.seed);
    std::printf(
        "gpt: %s, %zu train / %zu held-out bytes; %lld layers, d %lld, %lld heads, "
        "context %lld, batch %lld; %s on %s\n",
        c.text.c_str(), train.size(), held.size(), static_cast<long long>(c.layers),
        static_cast<long long>(c.dim), static_cast<long long>(c.heads),
        static_cast<long long>(c.context), static_cast<long long>(c.batch), c.mode.c_str(),
        dev.str().c_str());
    Run run(c, dev, train);
    if (c.check_resume) {
      const std::string dir =
          (std::filesystem::temp_directory_path() / ("ember_gpt_" + std::to_string(::getpid())))
              .string();
      const int64_t half = c.steps / 2;
      run.train(0, half, true);
      run.save(dir);
      const double straight = run.train(half, c.steps, true);
      manual_seed(c.seed + 1);  // the fresh run's own init differs; the checkpoint replaces it
      Run again(c, dev, train);
      again.load(dir);
      const double resumed = again.train(half, c.steps, true);
      std::filesystem::remove_all(dir);
      std::printf("loss after %lld steps: straight %.9g, resumed from step %lld %.9g\n",
                  static_cast<long long>(c.steps), straight, static_cast<long long>(half), resumed);
      if (straight != resumed) {
        std::fprintf(stderr, "gpt: the resumed run ended on a different loss\n");
        return 1;
      }
      return 0;
    }
    int64_t first = 0;
    if (!c.resume.empty()) {
      run.load(c.resume);
      first = run.sched->last_epoch();
      std::printf("resumed from %s at step %lld\n", c.resume.c_str(),
                  static_cast<long long>(first));
    }
    const auto t0 = std::chrono::steady_clock::now();
    run.train(first, c.steps, false);
    const double held_loss = held_out_loss(run.model, held, c.context, dev);
    std::printf("held-out loss %.4f nats per byte (unigram entropy %.4f, %.4f below); %.1f s\n",
                held_loss, unigram, unigram - held_loss, seconds_since(t0));
    if (!c.save.empty()) {
      run.save(c.save);
      std::printf("saved %s\n", c.save.c_str());
    }
    if (c.sample > 0) {
      std::mt19937_64 rng(c.seed + 7);
      std::printf("sample:\n%s\n", sample_text(run.model, "This License", c, dev, rng).c_str());
    }
    if (c.min_gain >= 0 && unigram - held_loss < c.min_gain) {
      std::fprintf(stderr, "gpt: held-out loss %.4f is not %.4f below the unigram %.4f\n",
                   held_loss, c.min_gain, unigram);
      return 1;
    }
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "gpt: %s\n", e.what());
    return 2;
  }
}
