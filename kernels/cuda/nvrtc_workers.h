#pragma once
// Compiling generated kernels in child processes. NVRTC serializes compiles that run on several
// threads of one process (bench/NOTES.md: a step's 48 kernels took as long on 16 threads as on
// one), while separate processes compile side by side. So precompile() hands its sources to a
// small worker program, ember-nvrtc-worker, which compiles each with compile() itself — the same
// options, the same embedded headers, the same NVRTC — and writes the binaries to files.
//
// The worker is found through EMBER_NVRTC_WORKER (a path, or "none" to compile on threads
// instead), else where this build put it, else where it is installed. Needs no GPU.
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "kernels/cuda/nvrtc.h"

namespace ember::kernels::cuda::nvrtc {

// The worker program's path, or "" when there is none to run (or EMBER_NVRTC_WORKER=none).
const std::string& worker_path();

// One program to compile: its source and the name NVRTC's log calls it by.
struct WorkerJob {
  std::string_view source;
  std::string name;
};

// Compiles each job for `arch` in up to `processes` workers started from `worker` side by side
// (jobs dealt out in turn; fewer where the free memory would not hold them, 256 MiB each). Returns one entry per job: its binary, or nullopt where it did not
// compile (the caller compiles it again in-process to report the error) — or nullopt for all
// when no worker could be started. Never throws for a job's failure.
std::vector<std::optional<Binary>> compile_in_workers(std::span<const WorkerJob> jobs, int arch,
                                                      unsigned processes,
                                                      const std::string& worker);

// The worker's main: `arch` then triples of (name, source file, binary file). Writes each binary
// it compiles (to a temporary name, then renamed, so a half-written file is never read) and skips
// the ones that fail. Returns the process's exit status.
int worker_main(int argc, char** argv);

}  // namespace ember::kernels::cuda::nvrtc
