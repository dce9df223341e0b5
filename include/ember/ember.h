#pragma once
// Ember's umbrella header: `#include <ember/ember.h>` gives the whole public API.
// Later layers (autograd, nn, optim, jit) add their headers here as they land.

#include "core/cuda_runtime.h"
#include "core/factory.h"
#include "core/generator.h"
#include "core/ops.h"
#include "core/tensor.h"
#include "nn/activation.h"
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
#include "nn/sequential.h"
