// ember-run: starts the N ranks of a data-parallel program on this node, torchrun-style.
//
//   ember-run [--nproc-per-node N] [--master-addr A] [--master-port P] [--grace-s S] [--]
//             PROG [ARGS...]
//
// Each rank finds its place in the job from its environment (RANK, WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT, ... as torchrun sets them), so the same program runs under either launcher.
//
// Why the launcher watches the ranks instead of just starting them: a rank that dies leaves
// the others blocked in a collective, waiting for it forever. So the first rank to fail takes
// the job down: the others get SIGTERM, then SIGKILL once the grace period is over, and
// ember-run exits with the failed rank's code, which is what a scheduler or CI job sees.
//
// Each rank runs in a session (and process group) of its own and every signal goes to that
// whole group, so a rank's helpers (a `sh -c` wrapper's commands, data loader workers) stop
// with it. Same reason torchrun starts its workers with start_new_session. It also means a
// Ctrl-C at the terminal reaches the ranks once, forwarded by ember-run, not twice.
//
// Signal handlers only set an atomic flag and write a byte to a pipe; the main loop polls that
// pipe (with the grace period as timeout) and does the forwarding and reaping itself, so no
// signal can slip in between "check" and "wait".
//
// Standalone on purpose (POSIX only, no ember library): it must start even when the library's
// build or a rank's runtime is what is broken.

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

extern char** environ;

namespace {

constexpr const char* kUsage =
    "usage: ember-run [--nproc-per-node N] [--master-addr A] [--master-port P] [--grace-s S] "
    "[--] PROG [ARGS...]\n";

constexpr const char* kHelp =
    "\n"
    "Starts N ranks of PROG on this node. Each gets the launcher's environment plus RANK,\n"
    "LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, GROUP_RANK,\n"
    "GROUP_WORLD_SIZE, ROLE_RANK and ROLE_WORLD_SIZE, as torchrun sets them.\n"
    "\n"
    "  --nproc-per-node N  ranks to start, 1..1024 (default 1)\n"
    "  --master-addr A     address of rank 0's store (default 127.0.0.1)\n"
    "  --master-port P     its port, 0 picks a free one (default 29500)\n"
    "  --grace-s S         seconds from SIGTERM to SIGKILL when stopping ranks (default 10)\n"
    "  -h, --help          this help\n"
    "\n"
    "Options take `--opt value` or `--opt=value`; the first argument that is not an option, or\n"
    "everything after `--`, is PROG and its arguments. SIGINT, SIGTERM, SIGHUP and SIGQUIT are\n"
    "forwarded to every rank. When a rank fails, the others get SIGTERM, then SIGKILL after S\n"
    "seconds. Exit code: 0 when every rank exits 0; else the first failed rank's code (128 +\n"
    "signal number when a signal killed it), 128 + the signal when ember-run got one first,\n"
    "2 on bad usage, 127 when PROG cannot be run.\n";

constexpr int kUsageExitCode = 2;
constexpr int kLaunchFailedExitCode = 1;
constexpr int kCannotExecExitCode = 127;
constexpr int kMaxRanks = 1024;

// What ember-run passes on to the ranks. SIGQUIT too (torchrun forwards it as well): Ctrl-\ would
// otherwise kill the launcher alone and leave the ranks running.
constexpr int kForwardedSignals[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT};

// The variables ember-run sets; the launcher's own values of these are dropped, not duplicated.
constexpr std::string_view kRankVariables[] = {
    "RANK",        "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
    "MASTER_PORT", "GROUP_RANK", "ROLE_RANK",  "GROUP_WORLD_SIZE", "ROLE_WORLD_SIZE",
};

struct Options {
  int nproc_per_node = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  int grace_s = 10;
  // PROG and its arguments: a null-terminated tail of argv, ready for execvp.
  char** program_argv = nullptr;
};

// --- signals ------------------------------------------------------------------------------------

// Written by the handlers, consumed by the main loop. Lock-free atomics are what a handler may
// touch besides write(2).
std::atomic<bool> g_signal_pending[NSIG];
static_assert(std::atomic<bool>::is_always_lock_free);
int g_wakeup_write_fd = -1;

void OnSignal(int signal_number) {
  const int saved_errno = errno;
  if (signal_number != SIGCHLD) g_signal_pending[signal_number].store(true);
  const char byte = 0;
  // A full pipe already holds a wake-up, so a failed write loses nothing.
  const ssize_t ignored = write(g_wakeup_write_fd, &byte, 1);
  (void)ignored;
  errno = saved_errno;
}

// The signals ember-run handles, with the dispositions it found, so that a rank starts with
// exactly the ones it would have had without the launcher (an ignored SIGHUP under nohup stays
// ignored, and is then not forwarded either: the ranks ignore it themselves).
struct SignalSetup {
  struct Entry {
    int signal_number;
    struct sigaction original;
    bool handled;
  };
  std::vector<Entry> entries;
  sigset_t handled_set;
  int wakeup_read_fd = -1;
};

bool SetNonBlockingCloseOnExec(int fd) {
  const int status_flags = fcntl(fd, F_GETFL);
  const int fd_flags = fcntl(fd, F_GETFD);
  return status_flags != -1 && fd_flags != -1 &&
         fcntl(fd, F_SETFL, status_flags | O_NONBLOCK) != -1 &&
         fcntl(fd, F_SETFD, fd_flags | FD_CLOEXEC) != -1;
}

// Installs the handlers; they stay blocked until the caller unblocks `handled_set`.
bool SetUpSignals(SignalSetup* setup) {
  int wakeup_pipe[2];
  if (pipe(wakeup_pipe) != 0 || !SetNonBlockingCloseOnExec(wakeup_pipe[0]) ||
      !SetNonBlockingCloseOnExec(wakeup_pipe[1])) {
    std::fprintf(stderr, "ember-run: cannot create a pipe: %s\n", std::strerror(errno));
    return false;
  }
  setup->wakeup_read_fd = wakeup_pipe[0];
  g_wakeup_write_fd = wakeup_pipe[1];

  sigemptyset(&setup->handled_set);
  std::vector<int> signal_numbers(std::begin(kForwardedSignals), std::end(kForwardedSignals));
  signal_numbers.push_back(SIGCHLD);
  for (int signal_number : signal_numbers) sigaddset(&setup->handled_set, signal_number);
  if (sigprocmask(SIG_BLOCK, &setup->handled_set, nullptr) != 0) return false;

  for (int signal_number : signal_numbers) {
    SignalSetup::Entry entry{signal_number, {}, false};
    sigaction(signal_number, nullptr, &entry.original);
    if (signal_number == SIGCHLD || entry.original.sa_handler != SIG_IGN) {
      struct sigaction action {};
      action.sa_handler = OnSignal;
      action.sa_mask = setup->handled_set;
      action.sa_flags = SA_RESTART | (signal_number == SIGCHLD ? SA_NOCLDSTOP : 0);
      if (sigaction(signal_number, &action, nullptr) != 0) {
        std::fprintf(stderr, "ember-run: cannot handle signal %d: %s\n", signal_number,
                     std::strerror(errno));
        return false;
      }
      entry.handled = true;
    }
    setup->entries.push_back(entry);
  }
  return true;
}

std::string DescribeSignal(int signal_number) {
  static constexpr struct {
    int number;
    const char* name;
  } kNames[] = {
      {SIGHUP, "SIGHUP"},   {SIGINT, "SIGINT"},   {SIGQUIT, "SIGQUIT"}, {SIGILL, "SIGILL"},
      {SIGTRAP, "SIGTRAP"}, {SIGABRT, "SIGABRT"}, {SIGBUS, "SIGBUS"},   {SIGFPE, "SIGFPE"},
      {SIGKILL, "SIGKILL"}, {SIGUSR1, "SIGUSR1"}, {SIGSEGV, "SIGSEGV"}, {SIGUSR2, "SIGUSR2"},
      {SIGPIPE, "SIGPIPE"}, {SIGALRM, "SIGALRM"}, {SIGTERM, "SIGTERM"}, {SIGCHLD, "SIGCHLD"},
      {SIGCONT, "SIGCONT"}, {SIGSTOP, "SIGSTOP"}, {SIGTSTP, "SIGTSTP"}, {SIGXCPU, "SIGXCPU"},
      {SIGXFSZ, "SIGXFSZ"}, {SIGSYS, "SIGSYS"},
  };
  for (const auto& entry : kNames) {
    if (entry.number == signal_number) {
      return std::string(entry.name) + " (" + std::to_string(signal_number) + ")";
    }
  }
  return std::to_string(signal_number);
}

// --- command line -------------------------------------------------------------------------------

[[noreturn]] void UsageError(const std::string& message) {
  std::fprintf(stderr, "ember-run: %s\n%s", message.c_str(), kUsage);
  std::exit(kUsageExitCode);
}

int ParseIntegerOption(const std::string& option, std::string_view value, long long min,
                       long long max) {
  long long parsed = 0;
  const char* end = value.data() + value.size();
  const auto [stop, error] = std::from_chars(value.data(), end, parsed);
  if (value.empty() || error == std::errc::invalid_argument || stop != end) {
    UsageError("option " + option + " needs an integer, got '" + std::string(value) + "'");
  }
  if (error == std::errc::result_out_of_range || parsed < min || parsed > max) {
    UsageError("option " + option + " must be in " + std::to_string(min) + ".." +
               std::to_string(max) + ", got '" + std::string(value) + "'");
  }
  return static_cast<int>(parsed);
}

Options ParseCommandLine(int argc, char** argv) {
  Options options;
  int index = 1;
  while (index < argc) {
    const std::string_view argument = argv[index];
    if (argument == "--") {
      ++index;
      break;
    }
    // "-" alone is not an option; as PROG it fails like any program that is not found.
    if (argument.size() < 2 || argument[0] != '-') break;
    if (argument == "-h" || argument == "--help") {
      std::fputs(kUsage, stdout);
      std::fputs(kHelp, stdout);
      std::exit(0);
    }

    const size_t equals = argument.find('=');
    const std::string option(argument.substr(0, equals));
    // torchrun takes --nproc_per_node as well as --nproc-per-node.
    std::string canonical = option;
    std::replace(canonical.begin(), canonical.end(), '_', '-');
    const bool known = canonical == "--nproc-per-node" || canonical == "--master-addr" ||
                       canonical == "--master-port" || canonical == "--grace-s";
    if (!known) UsageError("unknown option '" + option + "'");

    std::string_view value;
    if (equals != std::string_view::npos) {
      value = argument.substr(equals + 1);
    } else if (index + 1 < argc) {
      value = argv[++index];
    } else {
      UsageError("option " + option + " needs a value");
    }
    ++index;

    if (canonical == "--nproc-per-node") {
      options.nproc_per_node = ParseIntegerOption(option, value, 1, kMaxRanks);
    } else if (canonical == "--master-addr") {
      if (value.empty()) UsageError("option " + option + " needs a non-empty address");
      options.master_addr = value;
    } else if (canonical == "--master-port") {
      options.master_port = ParseIntegerOption(option, value, 0, 65535);
    } else {
      options.grace_s = ParseIntegerOption(option, value, 0, INT_MAX);
    }
  }
  if (index >= argc) UsageError("no program given (PROG)");
  options.program_argv = argv + index;
  return options;
}

// --- master port --------------------------------------------------------------------------------

// A port nobody listens on right now: the kernel's pick for a socket bound to port 0 on
// `address`. Another process may take it before rank 0 binds it; that race is inherent to
// picking a port for someone else (torchrun has it too).
std::optional<int> PickFreePort(const std::string& address) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* candidates = nullptr;
  const int lookup_error = getaddrinfo(address.c_str(), "0", &hints, &candidates);
  if (lookup_error != 0) {
    std::fprintf(stderr, "ember-run: cannot resolve --master-addr '%s': %s\n", address.c_str(),
                 gai_strerror(lookup_error));
    return std::nullopt;
  }
  std::optional<int> port;
  int last_errno = 0;
  for (addrinfo* candidate = candidates; candidate != nullptr && !port;
       candidate = candidate->ai_next) {
    const int fd = socket(candidate->ai_family, candidate->ai_socktype, candidate->ai_protocol);
    if (fd < 0) {
      last_errno = errno;
      continue;
    }
    sockaddr_storage bound{};
    socklen_t bound_size = sizeof(bound);
    if (bind(fd, candidate->ai_addr, candidate->ai_addrlen) == 0 &&
        getsockname(fd, reinterpret_cast<sockaddr*>(&bound), &bound_size) == 0) {
      if (bound.ss_family == AF_INET) {
        port = ntohs(reinterpret_cast<const sockaddr_in*>(&bound)->sin_port);
      } else if (bound.ss_family == AF_INET6) {
        port = ntohs(reinterpret_cast<const sockaddr_in6*>(&bound)->sin6_port);
      }
    } else {
      last_errno = errno;
    }
    close(fd);
  }
  freeaddrinfo(candidates);
  if (!port) {
    std::fprintf(stderr, "ember-run: cannot pick a free port on '%s': %s\n", address.c_str(),
                 std::strerror(last_errno));
  }
  return port;
}

// --- ranks --------------------------------------------------------------------------------------

bool IsRankVariable(std::string_view entry) {
  const std::string_view name = entry.substr(0, entry.find('='));
  return std::find(std::begin(kRankVariables), std::end(kRankVariables), name) !=
         std::end(kRankVariables);
}

std::vector<std::string> RankEnvironment(const std::vector<std::string>& inherited, int rank,
                                         const Options& options, int master_port) {
  std::vector<std::string> environment = inherited;
  const std::string world_size = std::to_string(options.nproc_per_node);
  const std::string rank_text = std::to_string(rank);
  environment.push_back("RANK=" + rank_text);
  environment.push_back("LOCAL_RANK=" + rank_text);
  environment.push_back("WORLD_SIZE=" + world_size);
  environment.push_back("LOCAL_WORLD_SIZE=" + world_size);
  environment.push_back("MASTER_ADDR=" + options.master_addr);
  environment.push_back("MASTER_PORT=" + std::to_string(master_port));
  // One node, one role: the group is this node and the role is every rank.
  environment.push_back("GROUP_RANK=0");
  environment.push_back("GROUP_WORLD_SIZE=1");
  environment.push_back("ROLE_RANK=" + rank_text);
  environment.push_back("ROLE_WORLD_SIZE=" + world_size);
  return environment;
}

// Forks and execs one rank; the parent gets the pid (or -1, errno set). Everything the child
// needs is prepared before fork, so between fork and exec it only makes system calls.
pid_t StartRank(const Options& options, char** environment, const SignalSetup& signals,
                const sigset_t& original_mask, pid_t launcher_pid) {
  const pid_t pid = fork();
  if (pid != 0) return pid;

  setsid();
#ifdef __linux__
  // Should the launcher itself be SIGKILLed (nothing to forward then), the rank goes too instead
  // of training on alone. The check covers a launcher that died before prctl.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != launcher_pid) _exit(kLaunchFailedExitCode);
#else
  (void)launcher_pid;
#endif
  for (const SignalSetup::Entry& entry : signals.entries) {
    if (entry.handled) sigaction(entry.signal_number, &entry.original, nullptr);
  }
  sigprocmask(SIG_SETMASK, &original_mask, nullptr);
  environ = environment;
  execvp(options.program_argv[0], options.program_argv);

  char message[4096];
  const int length = std::snprintf(message, sizeof(message), "ember-run: cannot run %s: %s\n",
                                   options.program_argv[0], std::strerror(errno));
  if (length > 0) {
    const ssize_t ignored =
        write(STDERR_FILENO, message, std::min<size_t>(length, sizeof(message) - 1));
    (void)ignored;
  }
  _exit(kCannotExecExitCode);
}

class RankSupervisor {
 public:
  using Clock = std::chrono::steady_clock;

  RankSupervisor(const Options& options, const SignalSetup& signals)
      : grace_(std::chrono::seconds(options.grace_s)), signals_(signals) {}

  void Add(pid_t pid) {
    ranks_.push_back(Rank{pid, true});
    ++live_count_;
  }

  // Stops the job for a reason that is not a rank's: ember-run could not start them all.
  void Fail(int exit_code) {
    if (!exit_code_) exit_code_ = exit_code;
    StopRanks(SIGTERM);
  }

  // Until every rank has been reaped; returns ember-run's exit code.
  int Run() {
    while (live_count_ > 0) {
      WaitForWakeup();
      ForwardPendingSignals();
      ReapExitedRanks();
      KillIfGraceIsOver();
    }
    return exit_code_.value_or(0);
  }

 private:
  struct Rank {
    pid_t pid;
    bool running;
  };

  void WaitForWakeup() {
    int timeout_ms = -1;
    if (grace_deadline_ && !killed_) {
      const auto left =
          std::chrono::ceil<std::chrono::milliseconds>(*grace_deadline_ - Clock::now());
      timeout_ms = static_cast<int>(std::clamp<long long>(left.count(), 0, INT_MAX));
    }
    pollfd wakeup{signals_.wakeup_read_fd, POLLIN, 0};
    if (poll(&wakeup, 1, timeout_ms) > 0) {
      char drained[256];
      while (read(signals_.wakeup_read_fd, drained, sizeof(drained)) > 0) {
      }
    }
    // poll's EINTR and timeout need nothing: the steps after it look at the state themselves.
  }

  void ForwardPendingSignals() {
    for (int signal_number : kForwardedSignals) {
      if (!g_signal_pending[signal_number].exchange(false)) continue;
      std::fprintf(stderr, "ember-run: got %s, forwarding it to %d running rank(s)\n",
                   DescribeSignal(signal_number).c_str(), live_count_);
      if (!exit_code_) exit_code_ = 128 + signal_number;
      StopRanks(signal_number);
    }
  }

  void ReapExitedRanks() {
    while (true) {
      int status = 0;
      const pid_t pid = waitpid(-1, &status, WNOHANG);
      if (pid == 0) return;
      if (pid < 0) {
        if (errno == EINTR) continue;
        // ECHILD: nothing left to wait for, whatever the books say.
        if (errno == ECHILD) live_count_ = 0;
        return;
      }
      const auto rank = std::find_if(ranks_.begin(), ranks_.end(),
                                     [pid](const Rank& rank) { return rank.pid == pid; });
      // Not a rank: a child the process had before it exec'd ember-run. Reaped, nothing more.
      if (rank == ranks_.end() || !rank->running) continue;
      rank->running = false;
      --live_count_;
      const bool succeeded = WIFEXITED(status) && WEXITSTATUS(status) == 0;
      // Once the job is stopping, deaths are expected, and only the first failure is the cause.
      if (succeeded || exit_code_) continue;
      const int rank_index = static_cast<int>(rank - ranks_.begin());
      if (WIFSIGNALED(status)) {
        std::fprintf(stderr, "ember-run: rank %d (pid %ld) was killed by signal %s\n", rank_index,
                     static_cast<long>(pid), DescribeSignal(WTERMSIG(status)).c_str());
        exit_code_ = 128 + WTERMSIG(status);
      } else {
        std::fprintf(stderr, "ember-run: rank %d (pid %ld) exited with code %d\n", rank_index,
                     static_cast<long>(pid), WEXITSTATUS(status));
        exit_code_ = WEXITSTATUS(status);
      }
      if (live_count_ > 0) {
        std::fprintf(stderr, "ember-run: stopping the other %d rank(s)\n", live_count_);
      }
      StopRanks(SIGTERM);
    }
  }

  void KillIfGraceIsOver() {
    if (live_count_ == 0 || killed_ || !grace_deadline_ || Clock::now() < *grace_deadline_) {
      return;
    }
    std::fprintf(stderr,
                 "ember-run: %d rank(s) still running %lld s after being told to stop, "
                 "sending SIGKILL\n",
                 live_count_, static_cast<long long>(grace_.count()));
    SignalRunningRanks(SIGKILL);
    killed_ = true;
  }

  // Sends `signal_number` and starts the grace period (if not started yet).
  void StopRanks(int signal_number) {
    SignalRunningRanks(signal_number);
    if (!grace_deadline_) grace_deadline_ = Clock::now() + grace_;
  }

  void SignalRunningRanks(int signal_number) {
    for (const Rank& rank : ranks_) {
      // The group does not exist yet while a just-forked rank has not reached setsid; its
      // signals are still blocked then, so the one sent to the process waits for exec.
      if (rank.running && kill(-rank.pid, signal_number) != 0 && errno == ESRCH) {
        kill(rank.pid, signal_number);
      }
    }
  }

  std::chrono::seconds grace_;
  const SignalSetup& signals_;
  std::vector<Rank> ranks_;
  int live_count_ = 0;
  std::optional<int> exit_code_;
  std::optional<Clock::time_point> grace_deadline_;
  bool killed_ = false;
};

}  // namespace

int main(int argc, char** argv) {
  const Options options = ParseCommandLine(argc, argv);

  int master_port = options.master_port;
  if (master_port == 0) {
    const std::optional<int> picked = PickFreePort(options.master_addr);
    if (!picked) return kLaunchFailedExitCode;
    master_port = *picked;
  }

  sigset_t original_mask;
  sigprocmask(SIG_SETMASK, nullptr, &original_mask);
  SignalSetup signals;
  if (!SetUpSignals(&signals)) return kLaunchFailedExitCode;

  std::vector<std::string> inherited;
  for (char** entry = environ; *entry != nullptr; ++entry) {
    if (!IsRankVariable(*entry)) inherited.emplace_back(*entry);
  }

  // Signals stay blocked while the ranks start: one that arrives now is forwarded to all of
  // them once they exist, not to some.
  RankSupervisor supervisor(options, signals);
  const pid_t launcher_pid = getpid();
  for (int rank = 0; rank < options.nproc_per_node; ++rank) {
    std::vector<std::string> environment = RankEnvironment(inherited, rank, options, master_port);
    std::vector<char*> environment_pointers;
    for (std::string& entry : environment) environment_pointers.push_back(entry.data());
    environment_pointers.push_back(nullptr);

    const pid_t pid =
        StartRank(options, environment_pointers.data(), signals, original_mask, launcher_pid);
    if (pid < 0) {
      std::fprintf(stderr, "ember-run: cannot start rank %d: %s\n", rank, std::strerror(errno));
      supervisor.Fail(kLaunchFailedExitCode);
      break;
    }
    supervisor.Add(pid);
  }
  sigprocmask(SIG_UNBLOCK, &signals.handled_set, nullptr);

  return supervisor.Run();
}
