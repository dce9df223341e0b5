#!/usr/bin/env python3
"""Checks that files Ember writes load in Python's `safetensors` (the other direction of the
parity fixtures, which Python writes and Ember reads).

Make the files with a build of Ember on any machine
(`build/release/tools/write_safetensors_for_python DIR/ember_dtypes.safetensors
DIR/ember_linear.safetensors`), which writes:
    ember_dtypes.safetensors  base = arange(24, f64).view(2,3,4) * 0.25 - 2 as f32/f64/f16/bf16,
                              (base*4) as i32, (base*4) as i64 * 1e9, base > 0, a 0-dim 3.5,
                              base.f32.transpose(0, 2), metadata {"writer": "ember"}
    ember_linear.safetensors  nn::save of an nn::Linear(4, 3)
then, where torch and safetensors are installed:
    python3 tools/check_python_reads_ember.py DIR
"""
import os
import sys

import torch
from safetensors import safe_open
from safetensors.torch import load_file


def main(d):
    t = load_file(os.path.join(d, "ember_dtypes.safetensors"))
    base = torch.arange(24, dtype=torch.float64).view(2, 3, 4) * 0.25 - 2
    want = {
        "f32": base.float(), "f64": base, "f16": base.half(), "bf16": base.bfloat16(),
        "i32": (base * 4).int(), "i64": (base * 4).long() * 1000000000, "bool": base > 0,
        "scalar": torch.tensor(3.5), "strided": base.float().transpose(0, 2).contiguous(),
    }
    assert set(t) == set(want), (sorted(t), sorted(want))
    for k, w in want.items():
        assert t[k].dtype == w.dtype and t[k].shape == w.shape, (k, t[k].dtype, t[k].shape)
        assert torch.equal(t[k], w), (k, t[k], w)
    with safe_open(os.path.join(d, "ember_dtypes.safetensors"), "pt") as f:
        assert f.metadata() == {"writer": "ember"}, f.metadata()
    lin = torch.nn.Linear(4, 3)
    lin.load_state_dict(load_file(os.path.join(d, "ember_linear.safetensors")))
    bound = 1 / 4 ** 0.5
    assert lin.weight.abs().max() <= bound and lin.bias.abs().max() <= bound
    print("python safetensors", __import__("safetensors").__version__, "reads Ember's files: OK")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".pycheck")
