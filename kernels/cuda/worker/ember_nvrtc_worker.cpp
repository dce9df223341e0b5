// ember-nvrtc-worker: compiles generated kernels for a parent process's precompile()
// (kernels/cuda/nvrtc_workers.h has why and how). Not meant to be run by hand.
#include "kernels/cuda/nvrtc_workers.h"

int main(int argc, char** argv) { return ember::kernels::cuda::nvrtc::worker_main(argc, argv); }
