#pragma once
// Optimizer state (momentum buffers, step counters, hyperparameters) in a safetensors file,
// so training resumes exactly where it stopped. The file's tensors are Optimizer::state_dict()'s;
// its metadata names the optimizer and the group layout.
#include <string>

#include "optim/optimizer.h"

namespace ember::optim {

void save(const Optimizer& optimizer, const std::string& path);
// Restores state saved from an optimizer of the same kind over the same parameter layout;
// anything else is an ember::Error naming the file, and the optimizer is left unchanged.
void load(Optimizer& optimizer, const std::string& path);

}  // namespace ember::optim
