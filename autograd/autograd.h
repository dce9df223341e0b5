#pragma once
/// \file
/// Umbrella header of autograd: grad mode, the backward engine, gradcheck and the graph nodes.
///
/// Tensor's autograd methods (`requires_grad_`, `backward`, `grad`, `grad_fn`, `detach`) are
/// declared in core/tensor.h.
#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "autograd/gradcheck.h"
#include "autograd/node.h"
