#pragma once
// Optimizer state (momentum buffers, step counters, hyperparameters) in a safetensors file,
// so training resumes exactly where it stopped. The file's tensors are Optimizer::state_dict()'s;
// its metadata names the optimizer and the group layout.
#include <string>

#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"
#include "optim/schedulers.h"

namespace ember::optim {

void save(const Optimizer& optimizer, const std::string& path);
// Restores state saved from an optimizer of the same kind over the same parameter layout;
// anything else is an ember::Error naming the file, and the optimizer is left unchanged.
void load(Optimizer& optimizer, const std::string& path);

// A schedule's state (its epoch, base rates and counters; see LRScheduler::state_dict), so a
// resumed run continues the schedule. Loading checks everything first: an error changes nothing.
void save(const LRScheduler& scheduler, const std::string& path);
void load(LRScheduler& scheduler, const std::string& path);
void save(const ReduceLROnPlateau& scheduler, const std::string& path);
void load(ReduceLROnPlateau& scheduler, const std::string& path);

}  // namespace ember::optim
