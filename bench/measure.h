#pragma once
// Measuring one (workload, batch, mode): step time, the loss after N steps, peak device memory,
// GPU operations per step, and the time to the first step in a new process.
#include <ember/ember.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "workloads.h"

namespace ember::bench {

// Every mode ember_bench knows, in the order a run takes them.
const std::vector<std::string>& all_modes();
bool is_compiled(const std::string& mode);  // every mode but eager
// The batches a mode's steps cycle through: dynamic_schedule(batch) for "dynamic", else {batch}.
std::vector<int64_t> schedule_for(const std::string& mode, int64_t batch);

struct Settings {
  Device dev = Device::cpu();
  int warmup = 3;
  int steps = 10;
  int repeats = 5;
  int loss_steps = 20;
  uint64_t seed = 0;
  bool tf32 = false;
  // Data-parallel: every trainer wraps its model in DistributedDataParallel over the default
  // process group (which the caller set up), and each rank draws batches of its own.
  bool ddp = false;
};

// A model, its optimizer and the whole training step (zero_grad, forward, loss, backward, SGD
// step), run eagerly or under jit::compile. Built from manual_seed(seed), so two trainers of
// one workload start from the same weights and draw the same batches.
class Trainer {
 public:
  // `schedule`: the batch sizes the steps cycle through ({B} for a fixed batch).
  Trainer(const Workload& w, const std::string& mode, std::vector<int64_t> schedule, Device dev,
          uint64_t seed, bool ddp = false);
  ~Trainer();
  Trainer(Trainer&&) noexcept;
  Trainer& operator=(Trainer&&) noexcept;

  // One step on a fresh batch drawn on the device; returns loss.item() (so it is synchronous).
  float step();
  // Whether the last step ran from compiled code (eager: always).
  bool last_step_compiled() const { return last_compiled_; }
  // Compile statistics (all zero in eager mode).
  jit::CompileStats stats() const;
  // The model's parameters, in module order.
  std::vector<Tensor> parameters() const;
  // Runs the untimed steps: at least `min_steps`, then (compiled) on until a whole cycle of the
  // schedule ran from compiled code, so timed steps never include tracing. An ember::Error when
  // the step never runs from compiled code.
  void warm_up(int min_steps);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
  bool last_compiled_ = false;
};

struct Timing {
  double us_median = 0;                      // median over samples of the sample's mean step time
  double us_min = 0, us_max = 0;             // fastest and slowest sample
  int recompiles = 0;                        // compiles counted over the timed steps
  std::optional<int64_t> peak_memory_bytes;  // CUDA: the allocator's high-water mark
  // Data-parallel runs: whether every rank's parameters equal rank 0's after the timed steps.
  std::optional<bool> ranks_identical;
};
// `warmup` untimed steps (see Trainer::warm_up), then `repeats` samples of `steps` steps, each
// step timed by the host clock.
Timing time_steps(const Workload& w, const std::string& mode, const std::vector<int64_t>& schedule,
                  const Settings& s);

// Data-parallel: whether every rank holds rank 0's values of `params`, bit for bit (a
// collective: every rank calls it).
bool parameters_identical_across_ranks(const std::vector<Tensor>& params);

// The loss after `loss_steps` steps of a fresh trainer.
float loss_after(const Workload& w, const std::string& mode, const std::vector<int64_t>& schedule,
                 const Settings& s);

// In this process: GPU kernels + memcpys + memsets per step, counted with CUPTI over 20 cycles
// of the schedule after a warm-up, recording from before the trainer exists (so any CUDA graph
// is instantiated under the profiler and its kernels are reported). What `count-kernels` prints.
double kernels_per_step_here(const Workload& w, const std::string& mode,
                             const std::vector<int64_t>& schedule, const Settings& s);

// In this process: the wall time in ms from the start of a new trainer's first step to the end
// of its first step that runs from compiled code (eager: the first step). What `probe` prints.
double first_step_ms_here(const Workload& w, const std::string& mode,
                          const std::vector<int64_t>& schedule, const Settings& s);

// The same two, each in a new process of this program (its hidden `count-kernels` / `probe`
// subcommands): the profiler stays attached to a process once used and would slow every later
// step, and a first step is only first in a new process. `env` entries ("NAME=value") replace
// or extend the environment. nullopt with `error` set when the child fails.
std::optional<double> kernels_per_step_child(const Workload& w, const std::string& mode,
                                             int64_t batch, const Settings& s, std::string& error);
std::optional<double> first_step_ms_child(const Workload& w, const std::string& mode, int64_t batch,
                                          const Settings& s, const std::string& cache_dir,
                                          std::string& error);

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it on destruction.
class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace ember::bench
