// Compiling with NVRTC: the options, the cache key and compile() itself. Apart from loading and
// launching (nvrtc.cpp), so that the worker program (kernels/cuda/nvrtc_workers.h) links only
// this and NVRTC, not the CUDA runtime's users, and starts in milliseconds.
#include <nvrtc.h>

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/cuda/embedded_headers.h"
#include "kernels/cuda/key_hash.h"
#include "kernels/cuda/nvrtc.h"

namespace ember::kernels::cuda::nvrtc {
namespace {

void check(nvrtcResult r, const char* call) {
  if (r != NVRTC_SUCCESS) EMBER_FAIL("nvrtc: ", call, " failed: ", nvrtcGetErrorString(r));
}

// What NVRTC compiles for when asked for `arch`: that architecture as a cubin when NVRTC knows
// it, else PTX for the newest virtual architecture below it (a GPU newer than this NVRTC).
struct Target {
  int arch = 0;
  bool ptx = false;
};

const std::vector<int>& supported_archs() {
  static const std::vector<int> archs = [] {
    int n = 0;
    check(nvrtcGetNumSupportedArchs(&n), "nvrtcGetNumSupportedArchs");
    std::vector<int> v(static_cast<size_t>(n));
    if (n > 0) check(nvrtcGetSupportedArchs(v.data()), "nvrtcGetSupportedArchs");
    return v;
  }();
  return archs;
}

Target target_for(int arch) {
  const std::vector<int>& archs = supported_archs();
  if (std::find(archs.begin(), archs.end(), arch) != archs.end()) return {arch, false};
  int best = -1;
  for (int a : archs)
    if (a <= arch) best = std::max(best, a);
  EMBER_CHECK(best > 0, "nvrtc: this NVRTC (", version() / 1000, ".", version() % 1000 / 10,
              ") cannot compile for sm_", arch);
  return {best, true};
}

class Program {
 public:
  Program(std::string_view source, std::string_view name) {
    const std::span<const EmbeddedHeader> headers = embedded_headers();
    std::vector<const char*> texts, names;
    for (const EmbeddedHeader& h : headers) {
      texts.push_back(h.text);
      names.push_back(h.name);
    }
    const std::string src(source), label(name);
    check(nvrtcCreateProgram(&prog_, src.c_str(), label.c_str(), static_cast<int>(headers.size()),
                             texts.data(), names.data()),
          "nvrtcCreateProgram");
  }
  ~Program() { (void)nvrtcDestroyProgram(&prog_); }
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;
  nvrtcProgram get() const { return prog_; }

  std::string log() const {
    size_t n = 0;
    if (nvrtcGetProgramLogSize(prog_, &n) != NVRTC_SUCCESS || n == 0) return {};
    std::string s(n, '\0');
    if (nvrtcGetProgramLog(prog_, s.data()) != NVRTC_SUCCESS) return {};
    while (!s.empty() && (s.back() == '\0' || s.back() == '\n')) s.pop_back();
    return s;
  }

 private:
  nvrtcProgram prog_ = nullptr;
};

}  // namespace

int version() {
  int major = 0, minor = 0;
  check(nvrtcVersion(&major, &minor), "nvrtcVersion");
  return major * 1000 + minor * 10;
}

bool compiles_to_ptx(int arch) { return target_for(arch).ptx; }

std::vector<std::string> compile_options(int arch) {
  const Target t = target_for(arch);
  const std::string a = std::to_string(t.arch);
  // Spelled out although they are NVRTC's defaults: these are nvcc's defaults too, which the
  // eager kernels are built with, and equal results depend on them.
  std::vector<std::string> opts = {
      t.ptx ? "--gpu-architecture=compute_" + a : "--gpu-architecture=sm_" + a,
      "-std=c++17",
      "--fmad=true",
      "--ftz=false",
      "--prec-div=true",
      "--prec-sqrt=true"};
  // The fused kernels use no textures, device-side launches or runtime API types, which is
  // what --minimal leaves out of NVRTC's implicit declarations: the same cubin, compiled in
  // less time (bench/NOTES.md). NVRTC knows the option from CUDA 12.4.
  if (version() >= 12040) opts.emplace_back("--minimal");
  return opts;
}

Binary compile(std::string_view source, int arch, std::string_view name) {
  const Target t = target_for(arch);
  const std::vector<std::string> opts = compile_options(arch);
  std::vector<const char*> argv;
  for (const std::string& o : opts) argv.push_back(o.c_str());
  Program prog(source, name);
  const nvrtcResult r = nvrtcCompileProgram(prog.get(), static_cast<int>(argv.size()), argv.data());
  if (r != NVRTC_SUCCESS)
    EMBER_FAIL("nvrtc: ", name, " does not compile for ", t.ptx ? "compute_" : "sm_", t.arch, " (",
               nvrtcGetErrorString(r), "):\n", prog.log());
  Binary b;
  b.ptx = t.ptx;
  size_t n = 0;
  if (t.ptx) {
    check(nvrtcGetPTXSize(prog.get(), &n), "nvrtcGetPTXSize");
    b.bytes.resize(n);
    check(nvrtcGetPTX(prog.get(), b.bytes.data()), "nvrtcGetPTX");
    while (!b.bytes.empty() && b.bytes.back() == '\0') b.bytes.pop_back();
  } else {
    check(nvrtcGetCUBINSize(prog.get(), &n), "nvrtcGetCUBINSize");
    b.bytes.resize(n);
    check(nvrtcGetCUBIN(prog.get(), b.bytes.data()), "nvrtcGetCUBIN");
  }
  EMBER_CHECK(!b.bytes.empty(), "nvrtc: ", name, " compiled to nothing");
  return b;
}

std::string cache_key(std::string_view source, int arch, std::string_view tag) {
  KeyHash h;
  h.add("ember nvrtc key v1");
  h.add(source);
  for (const EmbeddedHeader& e : embedded_headers()) {
    h.add(e.name);
    h.add(e.digest);
  }
  h.add(static_cast<uint64_t>(version()));
  const Target t = target_for(arch);
  h.add(static_cast<uint64_t>(t.arch));
  h.add(static_cast<uint64_t>(t.ptx));
  for (const std::string& o : compile_options(arch)) h.add(o);
  h.add(tag);
  return h.hex();
}

}  // namespace ember::kernels::cuda::nvrtc
