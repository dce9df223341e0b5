#include "kernels/cuda/nvrtc_workers.h"

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>

#include "core/error.h"

extern char** environ;

namespace ember::kernels::cuda::nvrtc {
namespace {

namespace fs = std::filesystem;

bool executable(const std::string& path) { return !path.empty() && ::access(path.c_str(), X_OK) == 0; }

std::optional<std::string> read_file(const fs::path& p) {
  std::ifstream f(p, std::ios::binary);
  if (!f) return std::nullopt;
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (f.bad()) return std::nullopt;
  return s;
}

bool write_file(const fs::path& p, std::string_view bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  f.close();
  return static_cast<bool>(f);
}

// A private directory for one batch of jobs, removed on every path out.
struct ScratchDir {
  fs::path path;
  ScratchDir() {
    const char* t = std::getenv("TMPDIR");
    std::string pattern = std::string(t && *t ? t : "/tmp") + "/ember-nvrtc-XXXXXX";
    if (::mkdtemp(pattern.data())) path = pattern;
  }
  ~ScratchDir() {
    std::error_code ec;
    if (!path.empty()) fs::remove_all(path, ec);
  }
};

// A worker compiling one of the generated kernels peaks at about 80 MB resident; allow 256 MiB
// each, so that on a machine of many cores and little free memory the workers never push it
// into swap (they would then be slower than threads).
size_t workers_memory_allows() {
  const long pages = ::sysconf(_SC_AVPHYS_PAGES), page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return 1;
  constexpr double kPerWorker = 256.0 * 1024 * 1024;
  return std::max<size_t>(1, static_cast<size_t>(static_cast<double>(pages) *
                                                 static_cast<double>(page) / kPerWorker));
}

}  // namespace

const std::string& worker_path() {
  static const std::string path = [] {
    if (const char* env = std::getenv("EMBER_NVRTC_WORKER")) {
      const std::string p(env);
      if (p == "none") return std::string();
      EMBER_CHECK(executable(p), "EMBER_NVRTC_WORKER: \"", p,
                  "\" is not an executable program (the path of ember-nvrtc-worker, or none)");
      return p;
    }
#if defined(EMBER_NVRTC_WORKER_BUILD_PATH)
    if (executable(EMBER_NVRTC_WORKER_BUILD_PATH)) return std::string(EMBER_NVRTC_WORKER_BUILD_PATH);
#endif
#if defined(EMBER_NVRTC_WORKER_INSTALL_PATH)
    if (executable(EMBER_NVRTC_WORKER_INSTALL_PATH))
      return std::string(EMBER_NVRTC_WORKER_INSTALL_PATH);
#endif
    return std::string();
  }();
  return path;
}

std::vector<std::optional<Binary>> compile_in_workers(std::span<const WorkerJob> jobs, int arch,
                                                      unsigned processes,
                                                      const std::string& worker) {
  std::vector<std::optional<Binary>> out(jobs.size());
  if (jobs.empty() || processes == 0 || !executable(worker)) return out;
  ScratchDir dir;
  if (dir.path.empty()) return out;
  const bool ptx = compiles_to_ptx(arch);
  std::vector<fs::path> results(jobs.size());
  for (size_t i = 0; i < jobs.size(); ++i) {
    const fs::path src = dir.path / (std::to_string(i) + ".cu");
    results[i] = dir.path / (std::to_string(i) + ".bin");
    if (!write_file(src, jobs[i].source)) return out;
  }
  const unsigned n = static_cast<unsigned>(
      std::min<size_t>({processes, jobs.size(), workers_memory_allows()}));
  std::vector<pid_t> children;
  for (unsigned w = 0; w < n; ++w) {
    std::vector<std::string> args = {worker, std::to_string(arch)};
    for (size_t i = w; i < jobs.size(); i += n) {
      args.push_back(jobs[i].name);
      args.push_back((dir.path / (std::to_string(i) + ".cu")).string());
      args.push_back(results[i].string());
    }
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    if (::posix_spawn(&pid, worker.c_str(), nullptr, nullptr, argv.data(), environ) == 0)
      children.push_back(pid);
  }
  for (pid_t pid : children) {
    int status = 0;
    while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
  }
  // A result file exists only once its worker has written all of it (written, then renamed).
  for (size_t i = 0; i < jobs.size(); ++i)
    if (std::optional<std::string> bytes = read_file(results[i]); bytes && !bytes->empty())
      out[i] = Binary{std::move(*bytes), ptx};
  return out;
}

int worker_main(int argc, char** argv) {
  if (argc < 2 || (argc - 2) % 3 != 0) return 2;
  char* end = nullptr;
  const long arch = std::strtol(argv[1], &end, 10);
  if (end == argv[1] || *end != '\0' || arch <= 0) return 2;
  int failed = 0;
  for (int i = 2; i + 2 < argc; i += 3) {
    const std::string name = argv[i];
    const fs::path src = argv[i + 1], dst = argv[i + 2];
    try {
      const std::optional<std::string> source = read_file(src);
      if (!source) {
        ++failed;
        continue;
      }
      const Binary b = compile(*source, static_cast<int>(arch), name);
      fs::path part = dst;
      part += ".part";
      if (!write_file(part, b.bytes)) {
        ++failed;
        continue;
      }
      fs::rename(part, dst);
    } catch (const std::exception&) {
      ++failed;  // the parent compiles it again in-process and reports NVRTC's log there
    }
  }
  return failed ? 1 : 0;
}

}  // namespace ember::kernels::cuda::nvrtc
