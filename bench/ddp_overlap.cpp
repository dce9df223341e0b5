// ddp_overlap: what DistributedDataParallel's overlap of the gradient all-reduces with backward
// saves. Run under ember-run, e.g.
//   ember-run --nproc-per-node 2 --master-port 0 bench/ddp_overlap --layers 8 --width 1024
// Each rank trains the same MLP on fresh random batches; per step it times forward + backward +
// the optimizer step, the ranks aligned by a barrier first and the step's time the slowest
// rank's. Four variants, in one run: compute only (no_sync: no communication), communication
// only (the buckets' all-reduces alone), DDP reducing after backward, DDP overlapping. The
// overlap can hide at most the communication's time: (after - overlap) / comm says how much of
// it it did.
#include <ember/ember.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

using namespace ember;
namespace dist = ember::distributed;

namespace {

struct Config {
  int layers = 8;
  int64_t width = 1024;
  int64_t batch = 64;
  int steps = 20;
  int warmup = 3;
  double bucket_mb = 1.0;
  std::string backend = "gloo";
  std::string json;
};

double now_ms() {
  return std::chrono::duration<double, std::milli>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void sync(Device dev) {
  if (dev.is_cuda()) cuda::synchronize(dev.index);
}

// The slowest rank's time for one step.
double slowest(double ms, Device dev) {
  Tensor t = full({1}, ms, TensorOptions(kFloat64).device(dev));
  dist::all_reduce(t, ReduceOp::Max);
  return t.cpu().item<double>();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

nn::Sequential make_model(const Config& c, Device dev) {
  nn::Sequential m;
  for (int i = 0; i < c.layers; ++i) {
    m->push_back(nn::Linear(c.width, c.width));
    m->push_back(nn::ReLU());
  }
  m->push_back(nn::Linear(c.width, 10));
  m->to(dev);
  return m;
}

enum class Variant { ComputeOnly, CommOnly, After, Overlap };

double run(const Config& c, Variant v, Device dev, bool compiled = false) {
  manual_seed(1);
  nn::Sequential model = make_model(c, dev);
  nn::parallel::DistributedDataParallel ddp(
      model, {.bucket_cap_mb = c.bucket_mb, .overlap_backward = v != Variant::After});
  optim::SGD opt(model->parameters(), optim::SGDOptions(0.01));
  nn::CrossEntropyLoss crit;
  // Communication only: one flat tensor per bucket, all-reduced as DDP would.
  std::vector<Tensor> buckets;
  if (v == Variant::CommOnly) {
    const auto params = model->named_parameters();
    for (const auto& names : ddp.buckets()) {
      int64_t n = 0;
      for (const auto& name : names)
        for (const auto& [pn, p] : params)
          if (pn == name) n += p.numel();
      buckets.push_back(zeros({n}, TensorOptions(kFloat32).device(dev)));
    }
  }
  auto body = [&](const Tensor& x, const Tensor& y) {
    opt.zero_grad();
    Tensor loss = crit(model->forward(x), y);
    loss.backward();
    opt.step();
    return loss;
  };
  auto step =
      jit::compile(body, {.mode = dev.is_cuda() ? jit::Mode::ReduceOverhead : jit::Mode::Default});
  std::vector<double> times;
  for (int s = 0; s < c.warmup + c.steps; ++s) {
    const Tensor x = randn({c.batch, c.width}, dev);
    const Tensor y = randint(0, 10, {c.batch}, dev);
    sync(dev);
    dist::barrier();
    const double t0 = now_ms();
    if (v == Variant::CommOnly) {
      for (const Tensor& b : buckets) dist::all_reduce(b, ReduceOp::Avg);
    } else {
      if (v == Variant::ComputeOnly) {
        opt.zero_grad();
        auto guard = ddp.no_sync();
        crit(model->forward(x), y).backward();
        opt.step();
      } else if (compiled) {
        step(x, y);
      } else {
        body(x, y);
      }
    }
    sync(dev);
    const double ms = slowest(now_ms() - t0, dev);
    if (s >= c.warmup) times.push_back(ms);
  }
  return median(times);
}

}  // namespace

int main(int argc, char** argv) {
  Config c;
  CLI::App app{"DDP: the all-reduces overlapped with backward, against after it"};
  app.add_option("--layers", c.layers, "hidden Linear+ReLU layers")->check(CLI::PositiveNumber);
  app.add_option("--width", c.width, "hidden width")->check(CLI::PositiveNumber);
  app.add_option("--batch", c.batch, "samples per rank per step")->check(CLI::PositiveNumber);
  app.add_option("--steps", c.steps, "timed steps")->check(CLI::PositiveNumber);
  app.add_option("--warmup", c.warmup, "untimed steps first");
  app.add_option("--bucket-mb", c.bucket_mb, "DDP bucket cap")->check(CLI::PositiveNumber);
  app.add_option("--backend", c.backend, "gloo or nccl")->check(CLI::IsMember({"gloo", "nccl"}));
  app.add_option("--json", c.json, "write the figures here (rank 0)");
  CLI11_PARSE(app, argc, argv);
  try {
    const bool nccl = c.backend == "nccl";
    dist::init_process_group({.backend = nccl ? dist::Backend::Nccl : dist::Backend::Gloo});
    const int rank = dist::get_rank(), world = dist::get_world_size();
    const char* local = std::getenv("LOCAL_RANK");
    const Device dev = nccl ? Device::cuda(local ? std::atoi(local) : rank) : Device::cpu();
    const double params = c.layers * (c.width * c.width + c.width) + c.width * 10 + 10;
    const double compute = run(c, Variant::ComputeOnly, dev);
    const double comm = run(c, Variant::CommOnly, dev);
    const double after = run(c, Variant::After, dev);
    const double overlap = run(c, Variant::Overlap, dev);
    const double after_compiled = run(c, Variant::After, dev, true);
    const double overlap_compiled = run(c, Variant::Overlap, dev, true);
    if (rank == 0) {
      std::printf(
          "ddp_overlap: %s, %d ranks, %d x Linear(%lld) + ReLU, batch %lld per rank, "
          "%.1f M parameters (%.1f MB of gradients), buckets of %.1f MB, %d threads per "
          "rank\n",
          c.backend.c_str(), world, c.layers, static_cast<long long>(c.width),
          static_cast<long long>(c.batch), params / 1e6, params * 4 / 1e6, c.bucket_mb,
          get_num_threads());
      std::printf("  median step of the slowest rank over %d steps:\n", c.steps);
      std::printf("    compute only (no_sync)        %8.2f ms\n", compute);
      std::printf("    all-reduces only              %8.2f ms\n", comm);
      std::printf("    DDP, reduced after backward   %8.2f ms\n", after);
      std::printf("    DDP, overlapped               %8.2f ms\n", overlap);
      std::printf("    compiled, reduced after       %8.2f ms\n", after_compiled);
      std::printf("    compiled, overlapped          %8.2f ms\n", overlap_compiled);
      std::printf(
          "  eager: after / overlapped = %.2fx, communication hidden %.0f%%; compiled: "
          "%.2fx, %.0f%%\n",
          after / overlap, 100 * (after - overlap) / comm, after_compiled / overlap_compiled,
          100 * (after_compiled - overlap_compiled) / comm);
      if (!c.json.empty()) {
        nlohmann::json j = {{"backend", c.backend},
                            {"world_size", world},
                            {"layers", c.layers},
                            {"width", c.width},
                            {"batch_per_rank", c.batch},
                            {"bucket_mb", c.bucket_mb},
                            {"threads_per_rank", get_num_threads()},
                            {"steps", c.steps},
                            {"compute_only_ms", compute},
                            {"comm_only_ms", comm},
                            {"after_backward_ms", after},
                            {"overlapped_ms", overlap},
                            {"compiled_after_backward_ms", after_compiled},
                            {"compiled_overlapped_ms", overlap_compiled}};
        std::ofstream(c.json) << j.dump(2) << "\n";
      }
    }
    dist::destroy_process_group();
  } catch (const std::exception& e) {
    std::cerr << "ddp_overlap: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
