// ember_bench: the training-step benchmark a user runs first. For every (workload, batch, mode):
// step time, time to the first step (cold and warm compile cache), peak device memory, GPU
// operations per step, the loss after N steps against eager, and the physical floor of the step
// against the device's measured peak. Writes bench/schema/bench.schema.json and prints a table.
//   ember_bench [run] [--device auto|cpu|cuda[:N]] [--workloads mlp,deep_mlp] [--batches ...]
//               [--modes eager,default,reduce-overhead,max-autotune,dynamic] [--json out.json]
//   ember_bench report out.json [--torch torch.json] [--svg chart.svg] [--markdown table.md]
// `probe` (hidden) is the child process the first-step figures come from.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "bench/kernel_counter.h"
#include "bench/machine.h"
#include "bench/measure.h"
#include "bench/report.h"
#include "bench/workloads.h"

#ifndef EMBER_VERSION_STRING
#define EMBER_VERSION_STRING "unknown"
#endif

using nlohmann::json;
using namespace ember;
using namespace ember::bench;

namespace {

struct RunOptions {
  std::string device = "auto";
  std::vector<std::string> workloads = {"mlp", "deep_mlp"};
  std::vector<int64_t> batches;  // default per device
  std::vector<std::string> modes = all_modes();
  int warmup = 0, steps = 0, repeats = 0, loss_steps = 0;  // defaults per device
  uint64_t seed = 0;
  bool tf32 = false;
  bool nondeterministic = false;
  std::string json_path;
  bool no_first_step = false;
  bool no_kernel_count = false;
  int threads = 0;  // 0: the intra-op pool's default (EMBER_NUM_THREADS or every core)
  std::string optimizer = "sgd";
  std::string amp = "none";
  bool ddp = false;
};

struct ProbeOptions {
  std::string device = "cpu", workload, mode;
  int64_t batch = 0;
  uint64_t seed = 0;
  bool tf32 = false;
  std::string optimizer = "sgd";
  std::string amp = "none";
};

Device pick_device(const std::string& name) {
  if (name == "auto") return cuda::is_available() ? Device::cuda(0) : Device::cpu();
  const Device d = Device::parse(name);
  EMBER_CHECK(!d.is_cuda() || cuda::is_available(), "ember_bench: --device ", name,
              " asked for, but no CUDA device is available (built without CUDA, or no GPU)");
  EMBER_CHECK(!d.is_cuda() || d.index < cuda::device_count(), "ember_bench: --device ", name,
              ": only ", cuda::device_count(), " CUDA device(s)");
  return d;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// argv as one line a shell would take back (arguments with odd characters single-quoted).
std::string command_line(int argc, char** argv) {
  std::string out;
  for (int i = 0; i < argc; ++i) {
    const std::string a = argv[i];
    if (i) out += ' ';
    const bool plain = !a.empty() && a.find_first_not_of(
                                         "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLM"
                                         "NOPQRSTUVWXYZ0123456789-_./:=,+@%") == std::string::npos;
    if (plain) {
      out += a;
      continue;
    }
    out += '\'';
    for (char c : a) {
      if (c == '\'')
        out.append("'\\''");
      else
        out += c;
    }
    out += '\'';
  }
  return out;
}

// The progress line on stderr: rewritten in place on a terminal, one line per update elsewhere.
class Progress {
 public:
  // `quiet`: nothing at all (the ranks of a data-parallel run but rank 0).
  explicit Progress(size_t total, bool quiet = false)
      : total_(total), tty_(::isatty(STDERR_FILENO) == 1), quiet_(quiet) {}
  void show(size_t index, const std::string& what, const std::string& phase) {
    if (quiet_) return;
    std::ostringstream os;
    os << "[" << index << "/" << total_ << "] " << what << " ... " << phase;
    if (tty_)
      std::fprintf(stderr, "\r%s\x1b[K", os.str().c_str());
    else
      std::fprintf(stderr, "%s\n", os.str().c_str());
    std::fflush(stderr);
  }
  void note(const std::string& line) {  // a warning that must stay on screen
    if (quiet_) return;
    std::fprintf(stderr, "%s%s\n", tty_ ? "\r\x1b[K" : "", line.c_str());
  }
  void done() {
    if (tty_ && !quiet_) std::fprintf(stderr, "\r\x1b[K");
  }

 private:
  size_t total_;
  bool tty_;
  bool quiet_;
};

// --ddp: the process group of the ranks a launcher (ember-run, torchrun) started, NCCL on the
// GPU of LOCAL_RANK or Gloo on the CPU; returns the device this rank trains on.
Device join_data_parallel(const std::string& device) {
  EMBER_CHECK(std::getenv("WORLD_SIZE") && std::getenv("RANK"),
              "ember_bench --ddp: RANK and WORLD_SIZE are not set; start it under a launcher, "
              "e.g. `ember-run --nproc-per-node 2 ember_bench run --ddp ...`");
  const Device dev = pick_device(device);
  distributed::init_process_group(
      {.backend = dev.is_cuda() ? distributed::Backend::Nccl : distributed::Backend::Gloo});
  // The group's own device: NCCL picks each rank's GPU (LOCAL_RANK's).
  return distributed::default_group().device();
}

// The floor of one step at `batch`; a dynamic row's is the mean over its schedule, the batches
// its timed steps cycle through (bench/check_bench_json.py and torch_mlp.py do the same).
json floor_json(const Workload& w, int64_t batch, bool dynamic, const Peak& peak,
                double us_per_step) {
  StepFloor f;
  const std::vector<int64_t> batches = dynamic ? dynamic_schedule(batch) : std::vector{batch};
  for (int64_t b : batches) {
    const StepFloor one = step_floor(w, b);
    f.flops += one.flops / static_cast<double>(batches.size());
    f.bytes += one.bytes / static_cast<double>(batches.size());
  }
  const double us = 1e6 * std::max(f.flops / peak.flops_per_s, f.bytes / peak.bytes_per_s);
  return {{"flops", f.flops}, {"bytes", f.bytes}, {"us", us}, {"share", us / us_per_step}};
}

// Cold and warm first-step figures, each from a new process; cold with an empty cache
// directory, warm with the directory the cold one filled.
json first_step_json(const Workload& w, const std::string& mode, int64_t batch, const Settings& s,
                     Progress& progress) {
  json out = {{"cold", nullptr}, {"warm", nullptr}};
  const TempDir dir;
  const std::string cache = dir.path() + "/cache";
  for (const char* which : {"cold", "warm"}) {
    std::string error;
    const std::optional<double> ms = first_step_ms_child(w, mode, batch, s, cache, error);
    if (!ms) {
      std::ostringstream os;
      os << "warning: " << w.name << " batch " << batch << " " << mode << ": no " << which
         << " first step: " << error;
      progress.note(os.str());
      break;  // warm means nothing without cold
    }
    out[which] = *ms;
  }
  return out;
}

std::vector<std::string> workload_names() {
  std::vector<std::string> names;
  for (const Workload& w : all_workloads()) names.push_back(w.name);
  return names;
}

int cmd_run(RunOptions o, const std::string& command) {
  const Device dev = o.ddp ? join_data_parallel(o.device) : pick_device(o.device);
  const int world = o.ddp ? distributed::get_world_size() : 1;
  const bool lead = !o.ddp || distributed::get_rank() == 0;  // the rank that reports
  if (o.ddp) {
    // The child processes of those figures would not be ranks of the group.
    o.no_first_step = true;
    o.no_kernel_count = true;
  }
  // The CPU is ~100x slower per step: smaller sweeps keep a default run to minutes there.
  const bool gpu = dev.is_cuda();
  if (o.batches.empty())
    o.batches = gpu ? std::vector<int64_t>{64, 1024, 8192} : std::vector<int64_t>{64, 1024};
  if (o.warmup < 0) o.warmup = gpu ? 50 : 3;
  if (o.steps <= 0) o.steps = gpu ? 100 : 10;
  if (o.repeats <= 0) o.repeats = gpu ? 11 : 5;
  if (o.loss_steps <= 0) o.loss_steps = gpu ? 100 : 20;
  for (int64_t b : o.batches)
    EMBER_CHECK(b > 0, "ember_bench: batch sizes must be positive, got ", b);
  // A (workload, batch, mode) appears once in the results.
  const auto no_repeats = [](auto v, const char* what) {
    std::sort(v.begin(), v.end());
    EMBER_CHECK(std::adjacent_find(v.begin(), v.end()) == v.end(), "ember_bench: --", what,
                " lists a value twice");
  };
  no_repeats(o.batches, "batches");
  no_repeats(o.modes, "modes");
  no_repeats(o.workloads, "workloads");
  std::vector<Workload> selected;
  for (const std::string& name : o.workloads)
    selected.push_back(with_amp(with_optimizer(find_workload(name), o.optimizer), o.amp));
  std::vector<const Workload*> workloads;
  for (const Workload& w : selected) workloads.push_back(&w);
  set_allow_tf32(o.tf32);
  set_deterministic_algorithms(!o.nondeterministic);
  if (o.threads > 0) set_num_threads(o.threads);

  Settings s;
  s.dev = dev;
  s.warmup = o.warmup;
  s.steps = o.steps;
  s.repeats = o.repeats;
  s.loss_steps = o.loss_steps;
  s.seed = o.seed;
  s.tf32 = o.tf32;
  s.ddp = o.ddp;
  bool count_kernels = gpu && !o.no_kernel_count && KernelCounter::available();

  if (lead)
    std::fprintf(stderr, "ember_bench %s on %s (%s): measuring the device's peak ...\n",
                 EMBER_VERSION_STRING, dev.str().c_str(), device_name(dev).c_str());
  const Peak peak = measure_peak(dev);

  json doc = {{"schema_version", 1},
              {"framework", "ember"},
              {"framework_version", EMBER_VERSION_STRING},
              {"created", utc_now()},
              {"command", command},
              {"machine", describe_machine(dev, peak)},
              {"config",
               {{"warmup", s.warmup},
                {"steps", s.steps},
                {"repeats", s.repeats},
                {"seed", s.seed},
                {"tf32", s.tf32},
                {"deterministic", deterministic_algorithms()},
                {"loss_steps", s.loss_steps},
                {"threads", get_num_threads()}}},
              {"timing",
               "host wall clock (steady_clock) around each whole step: batch drawn on the device, "
               "zero_grad, forward, loss, backward, SGD step, loss.item(); after `warmup` untimed "
               "steps (compiled modes then run on until a whole cycle of batches replays from "
               "compiled code), `repeats` samples of `steps` steps; sample = mean step time, "
               "reported = median of the samples, min/max = fastest/slowest sample"},
              {"workloads", json::object()},
              {"results", json::array()}};
  for (const Workload* w : workloads) doc["workloads"][w->name] = describe(*w);
  if (o.ddp) doc["config"]["world_size"] = world;

  // Eager losses after N steps, by (workload, schedule): the reference of every mode's loss.
  std::map<std::pair<std::string, std::vector<int64_t>>, std::optional<float>> eager_loss;
  auto reference = [&](const Workload& w, const std::vector<int64_t>& schedule) {
    auto key = std::make_pair(w.name, schedule);
    auto it = eager_loss.find(key);
    if (it != eager_loss.end()) return it->second;
    std::optional<float> v;
    try {
      v = loss_after(w, "eager", schedule, s);
    } catch (const std::exception&) {
      // The eager row reports the error; the other rows go without a reference.
    }
    return eager_loss[key] = v;
  };

  const size_t total = workloads.size() * o.batches.size() * o.modes.size();
  Progress progress(total, !lead);
  size_t index = 0;
  for (const Workload* wp : workloads) {
    const Workload& w = *wp;
    for (int64_t batch : o.batches) {
      for (const std::string& mode : o.modes) {
        ++index;
        const std::string what = w.name + " batch " + std::to_string(batch) + " " + mode;
        const std::vector<int64_t> schedule = schedule_for(mode, batch);
        json row = {{"workload", w.name}, {"batch", batch}, {"mode", mode}, {"amp", w.amp}};
        try {
          progress.show(index, what, "timing");
          const Timing t = time_steps(w, mode, schedule, s);
          progress.show(index, what, "loss after " + std::to_string(s.loss_steps) + " steps");
          const std::optional<float> ref = reference(w, schedule);
          const float loss = mode == "eager" && ref ? *ref : loss_after(w, mode, schedule, s);
          EMBER_CHECK(std::isfinite(loss), "ember_bench: the loss after ", s.loss_steps,
                      " steps is ", loss);
          std::optional<double> kernels;
          if (count_kernels) {
            progress.show(index, what, "kernels per step (new process)");
            std::string error;
            kernels = kernels_per_step_child(w, mode, batch, s, error);
            if (!kernels) {
              // Most likely the profiler itself (no permission, no CUPTI for this driver):
              // the later rows would fail alike.
              progress.note("warning: " + what + ": kernels not counted, and no further: " + error);
              count_kernels = false;
            }
          }
          json first = {{"cold", nullptr}, {"warm", nullptr}};
          if (!o.no_first_step) {
            progress.show(index, what, "first step (new processes)");
            first = first_step_json(w, mode, batch, s, progress);
          }
          row["status"] = "ok";
          row["us_per_step"] = t.us_median;
          row["steps_per_s"] = 1e6 / t.us_median;
          row["us_per_step_min"] = t.us_min;
          row["us_per_step_max"] = t.us_max;
          row["first_step_ms"] = first;
          row["peak_memory_bytes"] =
              t.peak_memory_bytes ? json(*t.peak_memory_bytes) : json(nullptr);
          row["kernels_per_step"] = kernels ? json(*kernels) : json(nullptr);
          row["loss"] = loss;
          row["loss_steps"] = s.loss_steps;
          row["loss_rel_diff_vs_eager"] =
              ref && *ref != 0 ? json(std::fabs(static_cast<double>(loss) - *ref) / std::fabs(*ref))
                               : json(nullptr);
          row["recompiles"] = is_compiled(mode) ? json(t.recompiles) : json(nullptr);
          if (o.ddp) {
            row["samples_per_s"] = static_cast<double>(world * batch) * 1e6 / t.us_median;
            row["ranks_identical"] = t.ranks_identical.value_or(false);
            if (!t.ranks_identical.value_or(false))
              progress.note("error: " + what + ": the ranks' parameters differ after the run");
          }
          if (mode == "dynamic") row["batches"] = schedule;
          row["floor"] = floor_json(w, batch, mode == "dynamic", peak, t.us_median);
          if (mode == "dynamic" && t.recompiles != 0)
            progress.note("warning: " + what + ": " + std::to_string(t.recompiles) +
                          " recompiles over the timed steps (expected 0)");
        } catch (const std::exception& e) {
          row = {{"workload", w.name},
                 {"batch", batch},
                 {"mode", mode},
                 {"status", "error"},
                 {"error", e.what()}};
          progress.note("error: " + what + ": " + e.what());
        }
        doc["results"].push_back(row);
      }
    }
  }
  progress.done();
  if (!lead) {
    distributed::destroy_process_group();
    return 0;
  }

  if (!o.json_path.empty()) {
    std::ofstream f(o.json_path);
    f << doc.dump(2) << "\n";
    f.close();
    EMBER_CHECK(f.good(), "ember_bench: cannot write ", o.json_path);
    std::fprintf(stderr, "wrote %s\n", o.json_path.c_str());
  }
  std::cout << format_table(doc) << std::flush;
  if (o.ddp) {
    // The table is per rank's step; across the ranks, per second:
    for (const json& r : doc["results"])
      if (r["status"] == "ok")
        std::cout << "ddp " << r["workload"].get<std::string>() << " batch " << r["batch"]
                  << " per rank x " << world << " ranks, " << r["mode"].get<std::string>() << ": "
                  << r["samples_per_s"].get<double>() / 1e6 << " M samples/s, parameters "
                  << (r["ranks_identical"].get<bool>() ? "identical" : "DIFFERENT")
                  << " across ranks\n";
    std::cout << std::flush;
    distributed::destroy_process_group();
  }
  return 0;
}

// The hidden child commands: one figure of one (workload, batch, mode), printed alone.
int cmd_child(const ProbeOptions& p, bool count_kernels) {
  set_allow_tf32(p.tf32);
  EMBER_CHECK(p.batch > 0, "ember_bench: --batch must be positive");
  Settings s;
  s.dev = pick_device(p.device);
  s.seed = p.seed;
  s.tf32 = p.tf32;
  const Workload w = with_amp(with_optimizer(find_workload(p.workload), p.optimizer), p.amp);
  const std::vector<int64_t> schedule = schedule_for(p.mode, p.batch);
  const double v = count_kernels ? kernels_per_step_here(w, p.mode, schedule, s)
                                 : first_step_ms_here(w, p.mode, schedule, s);
  std::printf("%.9g\n", v);
  return 0;
}

// "run" is the default subcommand: `ember_bench --device cpu` means `ember_bench run --device cpu`.
std::vector<char*> with_default_subcommand(int argc, char** argv, std::string& run_word) {
  std::vector<char*> out(argv, argv + argc);
  const bool needs_run = argc == 1 || (argv[1][0] == '-' && std::string(argv[1]) != "-h" &&
                                       std::string(argv[1]) != "--help");
  if (needs_run) out.insert(out.begin() + 1, run_word.data());
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Ember training-step benchmark: eager vs every compiled mode (see bench/NOTES.md)"};
  app.require_subcommand(1);

  RunOptions ro;
  ro.warmup = -1;
  CLI::App* run = app.add_subcommand("run", "run the benchmark (the default subcommand)");
  run->add_option("--device", ro.device, "auto (GPU if present), cpu, cuda or cuda:N")
      ->capture_default_str();
  run->add_option("--workloads", ro.workloads, "mlp, deep_mlp")
      ->delimiter(',')
      ->check(CLI::IsMember(workload_names()))
      ->capture_default_str();
  run->add_option("--batches", ro.batches, "batch sizes (default GPU 64,1024,8192; CPU 64,1024)")
      ->delimiter(',');
  run->add_option("--modes", ro.modes, "eager, default, reduce-overhead, max-autotune, dynamic")
      ->delimiter(',')
      ->check(CLI::IsMember(all_modes()))
      ->capture_default_str();
  run->add_option("--warmup", ro.warmup, "untimed steps (default GPU 50, CPU 3)")
      ->check(CLI::NonNegativeNumber);
  run->add_option("--steps", ro.steps, "steps per timed sample (default GPU 100, CPU 10)")
      ->check(CLI::PositiveNumber);
  run->add_option("--repeats", ro.repeats, "timed samples, median reported (default GPU 11, CPU 5)")
      ->check(CLI::PositiveNumber);
  run->add_option("--loss-steps", ro.loss_steps,
                  "N: the loss is reported after N steps from the seed (default GPU 100, CPU 20)")
      ->check(CLI::PositiveNumber);
  run->add_option("--seed", ro.seed, "seed of the default generator")->capture_default_str();
  run->add_flag("--tf32", ro.tf32, "allow TF32 in float32 GEMMs on the GPU");
  run->add_flag("--nondeterministic", ro.nondeterministic,
                "allow convolution algorithms that sum in a varying order (PyTorch's default)");
  run->add_option(
         "--optimizer", ro.optimizer,
         "sgd (each workload's own) or adamw (AdamW, PyTorch's defaults) for every workload")
      ->check(CLI::IsMember({"sgd", "adamw"}))
      ->capture_default_str();
  run->add_option("--amp", ro.amp,
                  "none, bf16 (autocast) or fp16 (autocast and a GradScaler) for every workload")
      ->check(CLI::IsMember({"none", "bf16", "fp16"}))
      ->capture_default_str();
  run->add_option("--json", ro.json_path, "write every figure to this JSON file (bench/schema)");
  run->add_flag("--no-first-step", ro.no_first_step,
                "skip the first-step figures (each takes two new processes)");
  run->add_flag("--no-kernel-count", ro.no_kernel_count, "skip counting GPU kernels with CUPTI");
  run->add_flag("--ddp", ro.ddp,
                "data-parallel over the ranks a launcher started (ember-run --nproc-per-node N): "
                "NCCL on the GPU of LOCAL_RANK, or Gloo on the CPU; the batch is per rank, rank "
                "0 reports (no first-step or kernel-count figures)");
  run->add_option("--threads", ro.threads,
                  "CPU intra-op threads (default EMBER_NUM_THREADS, else every core)")
      ->check(CLI::PositiveNumber);

  // Hidden: the child processes of `run` (see measure.h).
  ProbeOptions po;
  auto add_child = [&](const char* name, const char* what) {
    CLI::App* sub = app.add_subcommand(name, what);
    sub->group("");
    sub->add_option("--device", po.device)->required();
    sub->add_option("--workload", po.workload)->required();
    sub->add_option("--batch", po.batch)->required();
    sub->add_option("--mode", po.mode)->required()->check(CLI::IsMember(all_modes()));
    sub->add_option("--seed", po.seed);
    sub->add_flag("--tf32", po.tf32);
    sub->add_option("--optimizer", po.optimizer);
    sub->add_option("--amp", po.amp);
    return sub;
  };
  CLI::App* probe = add_child("probe", "time the first step in this new process");
  CLI::App* count = add_child("count-kernels", "count GPU operations per step with CUPTI");

  add_report_command(app);

  std::string run_word = "run";
  std::vector<char*> args = with_default_subcommand(argc, argv, run_word);
  try {
    app.parse(static_cast<int>(args.size()), args.data());
    if (run->parsed()) return cmd_run(ro, command_line(argc, argv));
    if (probe->parsed()) return cmd_child(po, false);
    if (count->parsed()) return cmd_child(po, true);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
  return 0;
}
