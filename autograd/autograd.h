#pragma once
// Autograd: grad mode, the backward engine and gradcheck. Tensor's autograd methods
// (requires_grad_, backward, grad, detach) are declared in core/tensor.h.
#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/gradcheck.h"
#include "autograd/node.h"
