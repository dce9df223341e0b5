#include "measure.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string_view>

#include "core/allocator.h"
#include "kernel_counter.h"

extern char** environ;

namespace ember::bench {

const std::vector<std::string>& all_modes() {
  static const std::vector<std::string> m = {"eager", "default", "reduce-overhead", "max-autotune",
                                             "dynamic"};
  return m;
}

bool is_compiled(const std::string& mode) { return mode != "eager"; }

std::vector<int64_t> schedule_for(const std::string& mode, int64_t batch) {
  return mode == "dynamic" ? dynamic_schedule(batch) : std::vector<int64_t>{batch};
}

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

jit::Options options_for(const std::string& mode) {
  jit::Options o;
  o.fullgraph = true;  // a graph break is an error, not a silent eager fallback
  o.name = "bench_step";
  if (mode == "reduce-overhead") o.mode = jit::Mode::ReduceOverhead;
  if (mode == "max-autotune") o.mode = jit::Mode::MaxAutotune;
  if (mode == "dynamic") o.dynamic = true;  // one executable for every batch size
  return o;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void sync(Device dev) {
  if (dev.is_cuda()) cuda::synchronize(dev.index);
}

// The model on the device and its optimizer; built in this order so the optimizer holds the
// parameters after the move.
struct State {
  nn::Sequential model;
  std::unique_ptr<optim::Optimizer> opt;
  nn::CrossEntropyLoss criterion;
  Device dev;
  double clip_norm = 0;
  std::vector<Tensor> params;  // what clip_grad_norm_ clips, listed once
  bool amp = false;
  DType amp_dtype = kBFloat16;
  std::unique_ptr<optim::GradScaler> scaler;  // fp16 only
  // Data-parallel: averages the gradients over the ranks in every backward (and made every
  // rank's parameters rank 0's).
  std::unique_ptr<nn::parallel::DistributedDataParallel> ddp;
  State(const Workload& w, Device d, bool data_parallel)
      : model(on_device(build_model(w), d)),
        opt(make_optimizer(w, model->parameters())),
        dev(d),
        clip_norm(w.clip_norm),
        params(model->parameters()) {
    amp = w.amp != "none";
    amp_dtype = w.amp == "fp16" ? kFloat16 : kBFloat16;
    if (w.amp == "fp16") scaler = std::make_unique<optim::GradScaler>(dev);
    if (data_parallel) ddp = std::make_unique<nn::parallel::DistributedDataParallel>(model);
  }
  static nn::Sequential on_device(nn::Sequential m, Device dev) {
    m->to(dev);
    return m;
  }
};

// The whole training step, the function jit::compile wraps. The loss comes back as a tensor:
// item() is the caller's, outside the compiled function.
struct StepFn {
  State* s;
  Tensor operator()(const Tensor& x, const Tensor& y) const {
    s->opt->zero_grad();
    if (!s->amp) {
      Tensor loss = s->criterion(s->model(x), y);
      loss.backward();
      if (s->clip_norm > 0) nn::utils::clip_grad_norm_(s->params, s->clip_norm);
      s->opt->step();
      return loss;
    }
    Tensor loss;
    {
      AutocastGuard autocast(s->dev.type, s->amp_dtype);
      loss = s->criterion(s->model(x), y);
    }
    if (s->scaler) {
      s->scaler->scale(loss).backward();
      if (s->clip_norm > 0) {  // clip the true gradients, as PyTorch's recipe does
        s->scaler->unscale_(*s->opt);
        nn::utils::clip_grad_norm_(s->params, s->clip_norm);
      }
      s->scaler->step(*s->opt);
      s->scaler->update();
    } else {
      loss.backward();
      if (s->clip_norm > 0) nn::utils::clip_grad_norm_(s->params, s->clip_norm);
      s->opt->step();
    }
    return loss;
  }
};

}  // namespace

struct Trainer::Impl {
  Device dev;
  Shape sample;  // one input sample's shape
  int64_t classes = 0;
  bool tokens = false;  // gpt: int64 token inputs, one target per token
  std::vector<int64_t> schedule;
  size_t next = 0;  // index into schedule of the next step's batch
  std::unique_ptr<State> state;
  StepFn fn{nullptr};
  std::optional<jit::Compiled<StepFn>> compiled;
};

Trainer::Trainer(const Workload& w, const std::string& mode, std::vector<int64_t> schedule,
                 Device dev, uint64_t seed, bool ddp)
    : impl_(std::make_unique<Impl>()) {
  EMBER_CHECK(!schedule.empty(), "ember_bench: empty batch schedule");
  Impl& m = *impl_;
  m.dev = dev;
  m.sample = w.arch == "mlp" ? Shape{w.layers.front()} : Shape(w.input);
  m.classes = w.layers.back();
  m.tokens = w.arch == "gpt";
  m.schedule = std::move(schedule);
  manual_seed(seed);  // the weights, then every batch, come from the seed
  m.state = std::make_unique<State>(w, dev, ddp);
  // Data-parallel: the same weights everywhere (rank 0's), but each rank its own batches.
  if (ddp) manual_seed(seed + 1 + static_cast<uint64_t>(distributed::get_rank()));
  m.fn = StepFn{m.state.get()};
  if (is_compiled(mode)) m.compiled.emplace(m.fn, options_for(mode));
}

Trainer::~Trainer() = default;
Trainer::Trainer(Trainer&&) noexcept = default;
Trainer& Trainer::operator=(Trainer&&) noexcept = default;

float Trainer::step() {
  Impl& m = *impl_;
  const int64_t b = m.schedule[m.next];
  m.next = (m.next + 1) % m.schedule.size();
  Shape xs = m.sample;
  xs.insert(0, b);
  const Tensor x = m.tokens ? randint(0, m.classes, xs, m.dev) : randn(xs, m.dev);
  const Tensor y = randint(0, m.classes, {m.tokens ? numel_of(xs) : b}, m.dev);
  if (!m.compiled) {
    last_compiled_ = true;
    return m.fn(x, y).item<float>();
  }
  const int replays = m.compiled->stats().replays;
  const float loss = (*m.compiled)(x, y).item<float>();
  last_compiled_ = m.compiled->stats().replays > replays;
  return loss;
}

std::vector<Tensor> Trainer::parameters() const { return impl_->state->params; }

jit::CompileStats Trainer::stats() const {
  return impl_->compiled ? impl_->compiled->stats() : jit::CompileStats{};
}

void Trainer::warm_up(int min_steps) {
  for (int i = 0; i < min_steps; ++i) step();
  if (!impl_->compiled) return;
  // A compiled step replays from its 4th call (3 traced calls); a dynamic schedule may need a
  // cycle more before every size is served. 64 extra steps is far beyond either.
  const size_t cycle = impl_->schedule.size();
  size_t in_a_row = 0;
  for (int i = 0; i < 64 && in_a_row < cycle; ++i) {
    step();
    in_a_row = last_step_compiled() ? in_a_row + 1 : 0;
  }
  // Start timing at the start of a cycle, so each sample sees the same mix of sizes.
  while (impl_->next != 0) step();
  const jit::CompileStats st = stats();
  EMBER_CHECK(in_a_row >= cycle,
              "ember_bench: the compiled step does not run from compiled code "
              "after warm-up (",
              st.traces, " traces, ", st.replays, " replays, ", st.recompiles, " recompiles, ",
              st.graph_breaks, " graph breaks)");
}

bool parameters_identical_across_ranks(const std::vector<Tensor>& params) {
  // Each rank compares its parameters with rank 0's, bit for bit; then the ranks agree on
  // whether any differed.
  int64_t differ = 0;
  for (const Tensor& p : params) {
    const Tensor root = p.detach().clone();
    distributed::broadcast(root, 0);
    differ += !equal(root, p.detach());
  }
  const Tensor count =
      full({1}, static_cast<double>(differ),
           TensorOptions(kFloat32).device(params.empty() ? Device::cpu() : params[0].device()));
  distributed::all_reduce(count);
  return count.item<float>() == 0;
}

Timing time_steps(const Workload& w, const std::string& mode, const std::vector<int64_t>& schedule,
                  const Settings& s) {
  // The high-water mark of this run alone: earlier rows' tensors are gone by now. On the CPU,
  // the host cache's (every host tensor goes through it, as every device tensor goes through
  // the device's).
  if (s.dev.is_cuda()) {
    cuda::synchronize(s.dev.index);
    cuda::reset_peak_memory_stats(s.dev.index);
  } else {
    cpu::reset_peak_memory_stats();
  }
  Trainer t(w, mode, schedule, s.dev, s.seed, s.ddp);
  t.warm_up(s.warmup);
  const int recompiles_before = t.stats().recompiles;
  std::vector<double> samples;
  float loss = 0;
  for (int r = 0; r < s.repeats; ++r) {
    double total_us = 0;
    for (int i = 0; i < s.steps; ++i) {
      const auto t0 = Clock::now();
      loss = t.step();
      total_us += 1e3 * ms_since(t0);
    }
    if (s.dev.is_cuda()) {
      // item() may return before its step's device work has ended (a graph replay's loss is
      // read as soon as it exists): the sample ends when the device is done with its steps.
      const auto t0 = Clock::now();
      cuda::synchronize(s.dev.index);
      total_us += 1e3 * ms_since(t0);
    }
    samples.push_back(total_us / s.steps);
  }
  EMBER_CHECK(std::isfinite(loss), "ember_bench: the loss became ", loss);
  Timing out;
  out.us_median = median(samples);
  out.us_min = *std::min_element(samples.begin(), samples.end());
  out.us_max = *std::max_element(samples.begin(), samples.end());
  out.recompiles = t.stats().recompiles - recompiles_before;
  if (s.dev.is_cuda())
    out.peak_memory_bytes = cuda::memory_stats(s.dev.index).peak_allocated;
  else if (cpu::caches_memory())
    out.peak_memory_bytes = cpu::memory_stats().peak_allocated;
  if (s.ddp) out.ranks_identical = parameters_identical_across_ranks(t.parameters());
  return out;
}

float loss_after(const Workload& w, const std::string& mode, const std::vector<int64_t>& schedule,
                 const Settings& s) {
  Trainer t(w, mode, schedule, s.dev, s.seed, s.ddp);
  float loss = 0;
  for (int i = 0; i < s.loss_steps; ++i) loss = t.step();
  return loss;
}

double kernels_per_step_here(const Workload& w, const std::string& mode,
                             const std::vector<int64_t>& schedule, const Settings& s) {
  EMBER_CHECK(s.dev.is_cuda(), "ember_bench: kernels are counted on a CUDA device only");
  KernelCounter counter;  // before the trainer: see the header
  Trainer t(w, mode, schedule, s.dev, s.seed);
  t.warm_up(2);
  sync(s.dev);
  counter.reset();
  const int n = 20 * static_cast<int>(schedule.size());  // whole cycles of the schedule
  for (int i = 0; i < n; ++i) t.step();
  sync(s.dev);
  return static_cast<double>(counter.count()) / n;
}

double first_step_ms_here(const Workload& w, const std::string& mode,
                          const std::vector<int64_t>& schedule, const Settings& s) {
  Trainer t(w, mode, schedule, s.dev, s.seed);
  const auto t0 = Clock::now();
  for (int i = 0; i < 64; ++i) {
    t.step();
    if (t.last_step_compiled()) return ms_since(t0);
  }
  EMBER_FAIL("ember_bench: the step never ran from compiled code in 64 calls");
}

namespace {

// Closes a file descriptor on every path out.
struct Fd {
  int fd = -1;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

// The program's path, for the child's argv[0] only.
std::string self_exe() {
  std::vector<char> buf(4096);
  const ssize_t n = ::readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  return n > 0 ? std::string(buf.data(), static_cast<size_t>(n)) : std::string("ember_bench");
}

std::string last_line_of(const std::string& path) {
  std::ifstream f(path);
  std::string line, last;
  while (std::getline(f, line))
    if (!line.empty()) last = line;
  return last;
}

std::string temp_root() {
  const char* t = std::getenv("TMPDIR");
  return t && *t ? t : "/tmp";
}

// Runs this program with `args`, the environment changed by `env`, and reads the one number it
// prints on stdout. Its stderr goes to a file in `scratch`, for the error message.
std::optional<double> run_self(const std::vector<std::string>& args,
                               const std::vector<std::string>& env, const std::string& scratch,
                               std::string& error) {
  // Exec'd through /proc/self/exe: the running binary even if a rebuild replaced the file.
  const char* exe = "/proc/self/exe";
  std::vector<std::string> argv_store = {self_exe()};
  argv_store.insert(argv_store.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_store) argv.push_back(a.data());
  argv.push_back(nullptr);

  // Built here: nothing may call setenv between fork and exec.
  std::vector<std::string> env_store;
  for (char** e = environ; *e; ++e) {
    const std::string_view entry(*e);
    bool replaced = false;
    for (const std::string& x : env)
      replaced = replaced || entry.substr(0, x.find('=') + 1) == x.substr(0, x.find('=') + 1);
    if (!replaced) env_store.emplace_back(entry);
  }
  env_store.insert(env_store.end(), env.begin(), env.end());
  std::vector<char*> envp;
  for (std::string& e : env_store) envp.push_back(e.data());
  envp.push_back(nullptr);

  int fds[2];
  EMBER_CHECK(::pipe2(fds, O_CLOEXEC) == 0, "ember_bench: pipe: ", std::strerror(errno));
  Fd read_end{fds[0]}, write_end{fds[1]};
  const std::string err_path = scratch + "/child.stderr";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, write_end.fd, STDOUT_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, err_path.c_str(),
                                   O_WRONLY | O_CREAT | O_TRUNC, 0644);
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, exe, &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  EMBER_CHECK(rc == 0, "ember_bench: cannot start ", argv_store.front(), ": ", std::strerror(rc));
  ::close(write_end.fd);
  write_end.fd = -1;

  std::string out;
  char buf[512];
  for (ssize_t n; (n = ::read(read_end.fd, buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  const std::string err_line = last_line_of(err_path);
  std::ostringstream os;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    os << args.front() << " child failed (";
    if (WIFEXITED(status))
      os << "exit " << WEXITSTATUS(status);
    else
      os << "signal " << WTERMSIG(status);
    os << ")";
    if (!err_line.empty()) os << ": " << err_line;
    error = os.str();
    return std::nullopt;
  }
  char* end = nullptr;
  const double v = std::strtod(out.c_str(), &end);
  if (end == out.c_str() || !std::isfinite(v) || v < 0) {
    os << args.front() << " child printed no number: '" << out << "'";
    error = os.str();
    return std::nullopt;
  }
  return v;
}

std::vector<std::string> child_args(const char* command, const Workload& w, const std::string& mode,
                                    int64_t batch, const Settings& s) {
  std::vector<std::string> a = {command,
                                "--device",
                                s.dev.str(),
                                "--workload",
                                w.name,
                                "--batch",
                                std::to_string(batch),
                                "--mode",
                                mode,
                                "--seed",
                                std::to_string(s.seed),
                                "--optimizer",
                                w.optimizer,
                                "--amp",
                                w.amp};
  if (s.tf32) a.emplace_back("--tf32");
  return a;
}

}  // namespace

TempDir::TempDir() {
  std::string tmpl = temp_root() + "/ember_bench_XXXXXX";
  EMBER_CHECK(::mkdtemp(tmpl.data()) != nullptr, "ember_bench: mkdtemp ", tmpl, ": ",
              std::strerror(errno));
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;  // best effort: a leftover directory is not worth an exception
  std::filesystem::remove_all(path_, ec);
}

std::optional<double> kernels_per_step_child(const Workload& w, const std::string& mode,
                                             int64_t batch, const Settings& s, std::string& error) {
  const TempDir scratch;
  return run_self(child_args("count-kernels", w, mode, batch, s), {}, scratch.path(), error);
}

std::optional<double> first_step_ms_child(const Workload& w, const std::string& mode, int64_t batch,
                                          const Settings& s, const std::string& cache_dir,
                                          std::string& error) {
  const TempDir scratch;
  return run_self(child_args("probe", w, mode, batch, s), {"EMBER_CACHE_DIR=" + cache_dir},
                  scratch.path(), error);
}

}  // namespace ember::bench
