#pragma once
// Ember's umbrella header: `#include <ember/ember.h>` gives the whole public API.
// Later layers (autograd, nn, optim, jit) add their headers here as they land.

#include "core/cuda_runtime.h"
#include "core/factory.h"
#include "core/generator.h"
#include "core/ops.h"
#include "core/tensor.h"
