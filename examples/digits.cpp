// A small CNN with BatchNorm trained on real data: the 8x8 handwritten digits (1797 images, 10
// classes) that Debian's python3-sklearn ships; scripts/get_digits.sh fetches the file without
// Python. 80 % train / 20 % held out (random_split from the seed), a DataLoader with shuffling,
// SGD with momentum, held-out accuracy after every epoch, the model saved at the end.
//   digits [--data FILE] [--epochs 12] [--mode eager|compiled|both] [--device auto|cpu|cuda]
//          [--batch 32] [--lr 0.05] [--seed 0] [--subset N] [--min-accuracy A] [--save FILE]
//          [--plot losses.svg]
// --mode both trains eagerly, then compiled, from the same seed (the same init, splits and
// batch order), and --plot draws both runs' loss per step with their relative difference.
// Exits 77 (a skip, for ctest) when the data file is missing, and 1 when --min-accuracy is not
// reached.
#include <ember/ember.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "examples/support/loss_plot.h"

using namespace ember;

namespace {

nn::Sequential make_cnn() {
  return nn::Sequential(nn::Conv2d(nn::ConvOptions(1, 16, {3}).padding({1})), nn::BatchNorm2d(16),
                        nn::ReLU(), nn::Conv2d(nn::ConvOptions(16, 32, {3}).padding({1})),
                        nn::BatchNorm2d(32), nn::ReLU(), nn::MaxPool2d(2), nn::Flatten(),
                        nn::Linear(32 * 4 * 4, 10));
}

std::string default_data() {
  const char* d = std::getenv("EMBER_DATA_DIR");
  if (d && *d) return std::string(d) + "/digits.csv.gz";
  const char* home = std::getenv("HOME");
  return std::string(home ? home : ".") + "/.cache/ember/digits.csv.gz";
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Train a small CNN on the 8x8 digits set"};
  std::string data_path = default_data(), mode = "compiled", device = "auto", save_path, plot_path;
  int64_t epochs = 12, batch = 32, subset = 0;
  double lr = 0.05, min_accuracy = 0;
  uint64_t seed = 0;
  app.add_option("--data", data_path, "digits.csv.gz (scripts/get_digits.sh fetches it)");
  app.add_option("--epochs", epochs)->check(CLI::PositiveNumber);
  app.add_option("--batch", batch)->check(CLI::PositiveNumber);
  app.add_option("--lr", lr)->check(CLI::PositiveNumber);
  app.add_option("--seed", seed);
  app.add_option("--mode", mode, "eager, compiled, or both (eager then compiled, one seed)")
      ->check(CLI::IsMember({"eager", "compiled", "both"}));
  app.add_option("--device", device, "auto (GPU if present), cpu, cuda or cuda:N");
  app.add_option("--subset", subset, "train on the first N training samples only (0: all)");
  app.add_option("--min-accuracy", min_accuracy, "exit 1 if the final held-out accuracy is lower");
  app.add_option("--save", save_path, "write the trained model here (safetensors)");
  app.add_option("--plot", plot_path,
                 "write the loss per step as an SVG (with --mode both: eager and compiled "
                 "overlaid, and their relative difference)");
  CLI11_PARSE(app, argc, argv);
  try {
    if (!std::filesystem::exists(data_path)) {
      std::fprintf(stderr, "digits: %s not found; run scripts/get_digits.sh\n", data_path.c_str());
      return 77;
    }
    const Device dev = device == "auto" ? (cuda::is_available() ? Device::cuda(0) : Device::cpu())
                                        : Device::parse(device);
    // One training run from the seed: the same init, split and batch order in either mode.
    auto run = [&](bool compiled_mode, std::vector<double>& losses) {
      manual_seed(seed);
      // 64 pixel values in 0..16, then the label.
      const Tensor table = data::read_csv(data_path);
      EMBER_CHECK(table.dim() == 2 && table.size(1) == 65, "digits: expected 65 columns, got ",
                  table.sizes());
      const int64_t n = table.size(0);
      const Tensor x = div(table.slice(1, 0, 64), 16.0).contiguous().view({n, 1, 8, 8});
      const Tensor y = table.slice(1, 64, 65).contiguous().view({n}).to(kInt64);
      auto all = std::make_shared<data::TensorDataset>(std::vector<Tensor>{x, y});
      const int64_t n_test = n / 5;
      auto parts = data::random_split(all, std::vector<int64_t>{n - n_test, n_test});
      std::shared_ptr<const data::Dataset> train = parts[0];
      if (subset > 0 && subset < train->size()) {
        std::vector<int64_t> first(static_cast<size_t>(subset));
        for (int64_t i = 0; i < subset; ++i) first[static_cast<size_t>(i)] = i;
        train = std::make_shared<data::Subset>(train, first);
      }
      std::vector<int64_t> held_out(static_cast<size_t>(n_test));
      for (int64_t i = 0; i < n_test; ++i) held_out[static_cast<size_t>(i)] = i;
      const std::vector<Tensor> test = parts[1]->get_batch(held_out);
      const Tensor test_x = test[0].to(dev), test_y = test[1].to(dev);
      data::DataLoader loader(train, {.batch_size = batch, .shuffle = true, .device = dev});

      nn::Sequential net = make_cnn();
      net->to(dev);
      optim::SGD opt(net->parameters(), optim::SGDOptions(lr).momentum(0.9));
      nn::CrossEntropyLoss criterion;
      auto step = [&](const Tensor& bx, const Tensor& by) {
        opt.zero_grad();
        Tensor loss = criterion(net->forward(bx), by);
        loss.backward();
        opt.step();
        return loss;
      };
      auto compiled = jit::compile(step, {.dynamic = true});  // the last batch is short
      std::printf("digits: %lld train / %lld held out, %s on %s\n",
                  static_cast<long long>(train->size()), static_cast<long long>(n_test),
                  compiled_mode ? "compiled" : "eager", dev.str().c_str());
      double accuracy = 0;
      const auto t0 = std::chrono::steady_clock::now();
      for (int64_t e = 1; e <= epochs; ++e) {
        net->train();
        double total = 0;
        int64_t batches = 0;
        for (const std::vector<Tensor>& b : loader) {
          const Tensor loss = compiled_mode ? compiled(b[0], b[1]) : step(b[0], b[1]);
          const float l = loss.item<float>();
          losses.push_back(l);
          total += l;
          ++batches;
        }
        net->eval();
        {
          NoGradGuard no_grad;
          const Tensor pred = argmax(net->forward(test_x), 1);
          accuracy =
              sum(eq(pred, test_y)).to(kFloat64).item<double>() / static_cast<double>(n_test);
        }
        const double secs =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::printf("epoch %2lld  loss %.4f  held-out accuracy %.2f %%  %.1f s\n",
                    static_cast<long long>(e), total / static_cast<double>(batches), 100 * accuracy,
                    secs);
        std::fflush(stdout);
      }
      if (!save_path.empty()) {
        nn::save(*net, save_path);
        std::printf("saved %s\n", save_path.c_str());
      }
      return accuracy;
    };
    std::vector<double> eager_losses, compiled_losses;
    double accuracy = 0;
    if (mode != "compiled") accuracy = run(false, eager_losses);
    if (mode != "eager") accuracy = run(true, compiled_losses);
    if (mode == "both") {
      bool same = eager_losses == compiled_losses;
      std::printf("eager and compiled losses %s over %zu steps\n", same ? "bit-equal" : "differ",
                  eager_losses.size());
    }
    if (!plot_path.empty()) {
      examples::write_loss_svg(plot_path, {.title = "digits CNN, batch " + std::to_string(batch) +
                                                    ", seed " + std::to_string(seed),
                                           .eager = eager_losses,
                                           .compiled = compiled_losses});
      std::printf("loss curves written to %s\n", plot_path.c_str());
    }
    if (accuracy < min_accuracy) {
      std::fprintf(stderr, "digits: held-out accuracy %.4f is below --min-accuracy %.4f\n",
                   accuracy, min_accuracy);
      return 1;
    }
    return 0;
  } catch (const Error& e) {
    std::fprintf(stderr, "digits: %s\n", e.what());
    return 2;
  }
}
