#pragma once
/// \file
/// Grad mode: whether ops record a graph for backward, and RAII guards that switch it.
///
/// Grad mode is thread-local and on by default in every thread, like PyTorch's.

namespace ember {

/// The calling thread's grad mode, like `torch.is_grad_enabled()` / `torch.set_grad_enabled()`.
///
/// While it is off, ops on tensors that require grad record no backward node: their results do
/// not require grad. Prefer the scoped NoGradGuard / EnableGradGuard to calling set_enabled.
class GradMode {
 public:
  /// Whether ops in this thread currently record a graph (true unless switched off).
  static bool is_enabled();
  /// Switches recording on or off for this thread.
  static void set_enabled(bool on);
};

/// Disables gradient recording for its scope (optimizer updates, evaluation), like
/// `torch::NoGradGuard` / `with torch.no_grad()`.
///
/// Restores the previous mode on destruction, so guards nest. Needed, for example, to update a
/// leaf that requires grad in place: that throws ember::Error while grad mode is on.
/// \code
/// {
///   NoGradGuard no_grad;
///   Tensor pred = model(x);  // pred.requires_grad() is false
/// }
/// \endcode
class NoGradGuard {
 public:
  /// Saves the current mode and turns recording off.
  NoGradGuard() : prev_(GradMode::is_enabled()) { GradMode::set_enabled(false); }
  /// Restores the mode saved by the constructor.
  ~NoGradGuard() { GradMode::set_enabled(prev_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool prev_;
};

/// Enables gradient recording for its scope, even inside a NoGradGuard, like
/// `with torch.enable_grad()`. Restores the previous mode on destruction.
class EnableGradGuard {
 public:
  /// Saves the current mode and turns recording on.
  EnableGradGuard() : prev_(GradMode::is_enabled()) { GradMode::set_enabled(true); }
  /// Restores the mode saved by the constructor.
  ~EnableGradGuard() { GradMode::set_enabled(prev_); }
  EnableGradGuard(const EnableGradGuard&) = delete;
  EnableGradGuard& operator=(const EnableGradGuard&) = delete;

 private:
  bool prev_;
};

}  // namespace ember
