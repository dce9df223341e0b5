#include "machine.h"

#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#ifdef EMBER_WITH_CUDA
#include <cuda_runtime.h>
#endif

namespace ember::bench {
namespace {

// The value of the first "key<spaces>: value" line of /proc/cpuinfo.
std::string cpuinfo_field(const std::string& key) {
  std::ifstream f("/proc/cpuinfo");
  for (std::string line; std::getline(f, line);) {
    if (line.rfind(key, 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string v = line.substr(colon + 1);
    v.erase(0, v.find_first_not_of(" \t"));
    return v;
  }
  return {};
}

std::string cpu_model() {
  std::string m = cpuinfo_field("model name");
  if (m.empty()) m = cpuinfo_field("Hardware");  // some ARM kernels
  if (m.empty()) {
    utsname u{};
    m = uname(&u) == 0 ? u.machine : "unknown";
  }
  std::ostringstream os;
  os << m << ", " << std::thread::hardware_concurrency() << " logical CPUs";
  return os.str();
}

// PRETTY_NAME from /etc/os-release, with the kernel release from uname.
std::string os_name() {
  std::string pretty;
  std::ifstream f("/etc/os-release");
  for (std::string line; std::getline(f, line);) {
    if (line.rfind("PRETTY_NAME=", 0) != 0) continue;
    pretty = line.substr(12);
    if (pretty.size() >= 2 && (pretty.front() == '"' || pretty.front() == '\''))
      pretty = pretty.substr(1, pretty.size() - 2);
  }
  utsname u{};
  const bool have_uname = uname(&u) == 0;
  std::string out = pretty;
  if (have_uname) {
    std::string kernel = std::string(u.sysname) + " " + u.release;
    out = out.empty() ? kernel : out.append(", ").append(kernel);
  }
  return out.empty() ? "unknown" : out;
}

std::string hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

std::string compiler() {
#if defined(__clang__)
  return std::string("clang ") + __clang_version__;
#elif defined(__GNUC__)
  return std::string("GCC ") + __VERSION__;
#else
  return "unknown";
#endif
}

#ifdef EMBER_WITH_CUDA
// 12040 -> "12.4"
std::string cuda_version_string(int v) {
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

// The kernel module's version ("550.54.15") from /proc/driver/nvidia/version, if readable: the
// first word after "Kernel Module" made of digits and dots. The line reads "... Kernel Module
// 550.54.15 ..." or, for the open modules, "... Open Kernel Module for x86_64  580.159.04 ...".
std::string nvidia_module_version() {
  std::ifstream f("/proc/driver/nvidia/version");
  std::string line;
  if (!std::getline(f, line)) return {};
  const std::string tag = "Kernel Module";
  const size_t at = line.find(tag);
  if (at == std::string::npos) return {};
  std::istringstream rest(line.substr(at + tag.size()));
  for (std::string word; rest >> word;) {
    const bool version = std::isdigit(static_cast<unsigned char>(word[0])) &&
                         word.find_first_not_of("0123456789.") == std::string::npos;
    if (version) return word;
  }
  return {};
}
#endif

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void sync(Device dev) {
  if (dev.is_cuda()) cuda::synchronize(dev.index);
}

// Best (shortest) time of `reps` runs of fn, after one untimed run.
template <class F>
double best_seconds(Device dev, int reps, F&& fn) {
  fn();
  sync(dev);
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    sync(dev);
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    sync(dev);
    best = std::min(best, seconds_since(t0));
  }
  return best;
}

}  // namespace

std::string device_name(Device dev) {
#ifdef EMBER_WITH_CUDA
  if (dev.is_cuda()) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, dev.index) == cudaSuccess) return p.name;
    return dev.str();
  }
#endif
  std::string m = cpuinfo_field("model name");
  return m.empty() ? "cpu" : m;
}

Peak measure_peak(Device dev) {
  const bool gpu = dev.is_cuda();
  const int64_t n = gpu ? 4096 : 1024;
  const int64_t copy_bytes = (gpu ? int64_t{256} : int64_t{64}) << 20;
  constexpr int kReps = 5;
  Peak p;
  {
    const Tensor a = randn({n, n}, dev), b = randn({n, n}, dev);
    Tensor c;
    const double s = best_seconds(dev, kReps, [&] { c = matmul(a, b); });
    p.flops_per_s =
        2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) / s;
  }
  {
    const Tensor src = randn({copy_bytes / 4}, dev);
    Tensor dst = empty({copy_bytes / 4}, TensorOptions(dev));
    const double s = best_seconds(dev, kReps, [&] { dst.copy_(src); });
    p.bytes_per_s = 2.0 * static_cast<double>(copy_bytes) / s;
  }
  std::ostringstream how;
  how << "Ember ops on " << dev.str() << ", best of " << kReps
      << " after one untimed run: fp32 matmul " << n << "x" << n << "x" << n << " (TF32 "
      << (allow_tf32() ? "on" : "off") << "), 2*n^3 FLOP; copy_ of " << (copy_bytes >> 20)
      << " MiB, bytes read + written";
  p.how = how.str();
  return p;
}

nlohmann::json describe_machine(Device dev, const Peak& peak) {
  nlohmann::json m = {
      {"hostname", hostname()},
      {"os", os_name()},
      {"cpu", cpu_model()},
      {"device", dev.str()},
      {"device_name", device_name(dev)},
      {"driver_version", nullptr},
      {"cuda_version", nullptr},
      {"compiler", compiler()},
      {"peak",
       {{"flops_per_s", peak.flops_per_s}, {"bytes_per_s", peak.bytes_per_s}, {"how", peak.how}}}};
#ifdef EMBER_WITH_CUDA
  if (dev.is_cuda()) {
    int drv = 0, rt = 0;
    if (cudaDriverGetVersion(&drv) == cudaSuccess) {
      // The driver's own version when /proc shows it, with the CUDA version it supports.
      const std::string module = nvidia_module_version();
      const std::string api = "CUDA " + cuda_version_string(drv);
      m["driver_version"] = module.empty() ? api : module + " (" + api + ")";
    }
    if (cudaRuntimeGetVersion(&rt) == cudaSuccess) m["cuda_version"] = cuda_version_string(rt);
  }
#endif
  return m;
}

}  // namespace ember::bench
