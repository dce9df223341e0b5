#include "optim/serialize.h"

#include "core/error.h"
#include "nn/serialize.h"

namespace ember::optim {

void save(const Optimizer& optimizer, const std::string& path) {
  const OptimizerState state = optimizer.state_dict();
  nn::save_tensors(state.tensors, path, state.metadata);
}

void load(Optimizer& optimizer, const std::string& path) {
  nn::TensorFile file = nn::load_tensor_file(path);
  OptimizerState state{std::move(file.tensors), std::move(file.metadata)};
  try {
    optimizer.load_state_dict(state);
  } catch (const Error& e) {
    throw Error(std::string("optim::load: ") + path + ": " + e.what());
  }
}

namespace {
template <class S>
void save_state(const S& s, const std::string& path) {
  const OptimizerState state = s.state_dict();
  nn::save_tensors(state.tensors, path, state.metadata);
}
template <class S>
void load_state(S& s, const std::string& path) {
  nn::TensorFile file = nn::load_tensor_file(path);
  OptimizerState state{std::move(file.tensors), std::move(file.metadata)};
  try {
    s.load_state_dict(state);
  } catch (const Error& e) {
    throw Error(std::string("optim::load: ") + path + ": " + e.what());
  }
}
}  // namespace

void save(const LRScheduler& s, const std::string& path) { save_state(s, path); }
void load(LRScheduler& s, const std::string& path) { load_state(s, path); }
void save(const ReduceLROnPlateau& s, const std::string& path) { save_state(s, path); }
void load(ReduceLROnPlateau& s, const std::string& path) { load_state(s, path); }

}  // namespace ember::optim
