#pragma once
/// \file
/// Ember's umbrella header: `#include <ember/ember.h>` gives the whole public API.
///
/// Every header it includes, and every header those include from this project, is public and
/// documented in the API reference (tools/public_headers.py lists them for Doxygen).

#include "autograd/autograd.h"
#include "core/allocator.h"
#include "core/autocast.h"
#include "core/cuda_runtime.h"
#include "core/factory.h"
#include "core/generator.h"
#include "core/ops.h"
#include "core/parallel.h"
#include "core/tensor.h"
#include "data/dataloader.h"
#include "data/dataset.h"
#include "data/readers.h"
#include "data/sampler.h"
#include "distributed/process_group.h"
#include "jit/compile.h"
#include "jit/log.h"
#include "nn/activation.h"
#include "nn/batch_norm.h"
#include "nn/clip_grad.h"
#include "nn/conv.h"
#include "nn/rnn.h"
#include "nn/attention.h"
#include "nn/transformer.h"
#include "nn/dropout.h"
#include "nn/embedding.h"
#include "nn/flatten.h"
#include "nn/functional.h"
#include "nn/holder.h"
#include "nn/init.h"
#include "nn/layer_norm.h"
#include "nn/linear.h"
#include "nn/loss.h"
#include "nn/module.h"
#include "nn/module_list.h"
#include "nn/options.h"
#include "nn/parallel/distributed.h"
#include "nn/sequential.h"
#include "nn/serialize.h"
#include "optim/adagrad.h"
#include "optim/adam.h"
#include "optim/grad_scaler.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"
#include "optim/rmsprop.h"
#include "optim/schedulers.h"
#include "optim/serialize.h"
#include "optim/sgd.h"

/// Ember: tensors, their ops and factories, devices and dtypes (like libtorch's `torch::`).
namespace ember {
/// Reverse-mode automatic differentiation: the backward graph, its engine, grad modes and
/// gradcheck (like `torch::autograd`).
namespace autograd {}
/// The CPU device's host memory and its allocator.
namespace cpu {}
/// The CUDA device: availability, streams, synchronization and memory statistics.
namespace cuda {}
/// Datasets, samplers, the DataLoader and readers of data files (like `torch::data`).
namespace data {}
/// The tracing JIT: `jit::compile` of a whole training step, `jit::explain`, and its logs.
namespace jit {}
/// Neural-network modules, their options and the functional forms (like `torch::nn`).
namespace nn {
/// Stateless functions of the modules' computations (like `torch::nn::functional`).
namespace functional {}
/// Parameter initializers (like `torch::nn::init`).
namespace init {}
/// Utilities over a module's parameters, such as gradient clipping (like `torch::nn::utils`).
namespace utils {}
}  // namespace nn
/// Optimizers, learning-rate schedulers and the gradient scaler (like `torch::optim`).
namespace optim {}
}  // namespace ember
