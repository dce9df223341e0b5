#!/usr/bin/env python3
"""Makes the PyTorch fixture of Ember's convolution and pooling layers (nn/conv.h) that
tests/nn/test_conv_parity.cpp checks Ember against, on the CPU and on CUDA.

    /usr/bin/python3 tools/make_conv_fixtures.py [--out tests/fixtures]

Writes conv_layers.safetensors. Each case <c> holds, in float64:
  <c>.x, <c>.weight, <c>.bias (convolutions; bias absent without one), <c>.grad_out: inputs
  <c>.out: the layer's output
  <c>.grad_x, <c>.grad_weight, <c>.grad_bias: gradients of sum(out * grad_out)
  batch norm (training): <c>.running_mean, <c>.running_var before, <c>.running_mean.after,
  <c>.running_var.after, and <c>.out_eval (eval mode with the updated statistics)
and metadata "<c>" holds the case's arguments as JSON (op, stride, padding, dilation, groups,
kernel_size, ceil_mode, count_include_pad, output_size, momentum, eps).
"""

import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_parity_fixtures as mpf  # noqa: E402

CASES = {
    # odd sizes, stride 2, padding, dilation, groups, no bias, 'same' with an even kernel
    "conv_basic": dict(op="conv2d", x=(2, 3, 7, 6), w=(4, 3, 3, 3), stride=[1, 1], padding=[1, 1],
                       dilation=[1, 1], groups=1, bias=True),
    "conv_stride2": dict(op="conv2d", x=(2, 3, 9, 8), w=(5, 3, 3, 2), stride=[2, 2],
                         padding=[1, 0], dilation=[1, 1], groups=1, bias=True),
    "conv_dilated_groups": dict(op="conv2d", x=(1, 6, 8, 7), w=(6, 2, 3, 3), stride=[1, 2],
                                padding=[2, 1], dilation=[2, 1], groups=3, bias=False),
    "conv_same": dict(op="conv2d", x=(1, 2, 6, 5), w=(3, 2, 4, 3), stride=[1, 1],
                      padding="same", dilation=[1, 1], groups=1, bias=True),
    "conv1d": dict(op="conv1d", x=(2, 3, 11), w=(4, 3, 3), stride=[2], padding=[1],
                   dilation=[1], groups=1, bias=True),
    "max_pool": dict(op="max_pool2d", x=(2, 3, 7, 8), kernel_size=[3, 2], stride=[2, 2],
                     padding=[1, 1], dilation=[1, 1], ceil_mode=False),
    "max_pool_ceil": dict(op="max_pool2d", x=(1, 2, 7, 7), kernel_size=[2, 2], stride=[2, 2],
                          padding=[0, 0], dilation=[1, 1], ceil_mode=True),
    "avg_pool": dict(op="avg_pool2d", x=(2, 3, 7, 8), kernel_size=[3, 3], stride=[2, 2],
                     padding=[1, 1], ceil_mode=True, count_include_pad=False),
    "adaptive_avg": dict(op="adaptive_avg_pool2d", x=(2, 3, 7, 9), output_size=[3, 4]),
    # training: batch statistics, the running ones updated (running_mean/var.after); then eval
    # with the updated running statistics (out_eval)
    "batch_norm2d": dict(op="batch_norm", x=(3, 4, 5, 3), momentum=0.1, eps=1e-5),
    "batch_norm1d": dict(op="batch_norm", x=(6, 5), momentum=0.3, eps=1e-3),
}


def run(case, gen):
    x = torch.randn(case["x"], dtype=torch.float64, generator=gen).requires_grad_()
    out_t = {"x": x}
    op = case["op"]
    if op in ("conv2d", "conv1d"):
        w = torch.randn(case["w"], dtype=torch.float64, generator=gen).requires_grad_()
        b = (torch.randn(case["w"][0], dtype=torch.float64, generator=gen).requires_grad_()
             if case["bias"] else None)
        out_t["weight"] = w
        if b is not None:
            out_t["bias"] = b
        fn = F.conv2d if op == "conv2d" else F.conv1d
        y = fn(x, w, b, stride=case["stride"], padding=case["padding"],
               dilation=case["dilation"], groups=case["groups"])
    elif op == "max_pool2d":
        y = F.max_pool2d(x, case["kernel_size"], case["stride"], case["padding"],
                         case["dilation"], ceil_mode=case["ceil_mode"])
    elif op == "avg_pool2d":
        y = F.avg_pool2d(x, case["kernel_size"], case["stride"], case["padding"],
                         ceil_mode=case["ceil_mode"], count_include_pad=case["count_include_pad"])
    elif op == "batch_norm":
        c = case["x"][1]
        w = torch.randn(c, dtype=torch.float64, generator=gen).requires_grad_()
        b = torch.randn(c, dtype=torch.float64, generator=gen).requires_grad_()
        out_t["weight"], out_t["bias"] = w, b
        rm = torch.randn(c, dtype=torch.float64, generator=gen)
        rv = torch.rand(c, dtype=torch.float64, generator=gen) + 0.5
        extra = {"running_mean": rm.clone(), "running_var": rv.clone()}
        y = F.batch_norm(x, rm, rv, w, b, training=True, momentum=case["momentum"],
                         eps=case["eps"])
        extra["running_mean.after"] = rm.clone()
        extra["running_var.after"] = rv.clone()
        with torch.no_grad():
            extra["out_eval"] = F.batch_norm(x, rm, rv, w, b, training=False, eps=case["eps"])
    else:
        y = F.adaptive_avg_pool2d(x, case["output_size"])
    if op != "batch_norm":
        extra = {}
    g = torch.randn(y.shape, dtype=torch.float64, generator=gen)
    (y * g).sum().backward()
    tensors = {k: v.detach() for k, v in out_t.items()}
    tensors["grad_out"] = g
    tensors["out"] = y.detach()
    for k, v in out_t.items():
        tensors["grad_" + k] = v.grad.detach()
    tensors.update(extra)
    return tensors


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests",
                                                  "fixtures"))
    args = ap.parse_args()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1234)
    tensors, meta = {}, {}
    for name, case in CASES.items():
        for k, v in run(case, gen).items():
            tensors[name + "." + k] = v.contiguous()
        meta[name] = json.dumps({k: v for k, v in case.items() if k not in ("x", "w")})
    meta["torch_version"] = torch.__version__
    meta["generator"] = "tools/make_conv_fixtures.py"
    path = os.path.join(args.out, "conv_layers.safetensors")
    mpf.save(tensors, path, meta)
    print("wrote", path, len(tensors), "tensors")


if __name__ == "__main__":
    main()
