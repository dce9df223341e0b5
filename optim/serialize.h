#pragma once
/// \file
/// Optimizer and scheduler state (momentum buffers, step counters, hyperparameters) in a
/// safetensors file, so training resumes exactly where it stopped.
///
/// The file's tensors are Optimizer::state_dict()'s; its metadata names the optimizer and the
/// group layout.
/// \code
/// nn::save(*model, "ckpt/model.safetensors");
/// optim::save(opt, "ckpt/optim.safetensors");
/// optim::save(sched, "ckpt/sched.safetensors");
/// // later, after building the same model, optimizer and scheduler:
/// optim::load(opt, "ckpt/optim.safetensors");
/// optim::load(sched, "ckpt/sched.safetensors");
/// \endcode
#include <string>

#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"
#include "optim/schedulers.h"

namespace ember::optim {

/// Writes Optimizer::state_dict() to a safetensors file at `path`.
void save(const Optimizer& optimizer, const std::string& path);
/// Restores state saved from an optimizer of the same kind over the same parameter layout
/// (Optimizer::load_state_dict()).
/// \throws ember::Error naming the file if it cannot be read or its state does not fit; the
///         optimizer is then unchanged.
void load(Optimizer& optimizer, const std::string& path);

/// Writes a schedule's state (its epoch, base rates and counters; see
/// LRScheduler::state_dict()), so a resumed run continues the schedule.
void save(const LRScheduler& scheduler, const std::string& path);
/// Restores a schedule saved by save(const LRScheduler&, const std::string&) into a scheduler
/// of the same kind. Loading checks everything first.
/// \throws ember::Error naming the file on any mismatch; the scheduler is then unchanged.
void load(LRScheduler& scheduler, const std::string& path);
/// Writes ReduceLROnPlateau::state_dict() to a safetensors file at `path`.
void save(const ReduceLROnPlateau& scheduler, const std::string& path);
/// Restores a ReduceLROnPlateau saved by save(const ReduceLROnPlateau&, const std::string&).
/// \throws ember::Error naming the file on any mismatch; the scheduler is then unchanged.
void load(ReduceLROnPlateau& scheduler, const std::string& path);

}  // namespace ember::optim
