#!/usr/bin/env python3
"""Converts a PyTorch optimizer's state_dict into Ember's optimizer state file, so that training
started in PyTorch resumes in Ember with identical steps (optim::load, optim/serialize.h).

    python3 tools/torch_optim_state.py state.pt out.safetensors --optimizer AdamW

`state.pt` is `torch.save(optimizer.state_dict())` of torch.optim.Adam, AdamW, RMSprop or
Adagrad. The mapping (optim/foreach_optimizer.h has Ember's side):

  PyTorch                                     Ember
  param_groups[g]["params"] (global indices)  parameter i of group g, in the same order
  state[index]["exp_avg"], ...                "state.<g>.<i>.exp_avg", same names
  state[index]["step"] (per parameter)        "param_groups.<g>.step" (float32): one count per
                                              group; differing counts within a group are an error
  param_groups[g] lr, betas, eps, ...         "param_groups.<g>.options" (float64, ORDER below)
  amsgrad / centered / maximize               metadata "param_groups.<g>.<flag>" = true|false

A parameter without state (it never had a gradient) gets no state tensors; the group's step
count then comes from the parameters that have one.
"""

import argparse
import json
import math

import torch

# Ember's option_values() order per optimizer and its flags.
ORDER = {
    "Adam": (lambda g: [g["lr"], g["betas"][0], g["betas"][1], g["eps"], g["weight_decay"]],
             ["amsgrad", "maximize"]),
    "AdamW": (lambda g: [g["lr"], g["betas"][0], g["betas"][1], g["eps"], g["weight_decay"]],
              ["amsgrad", "maximize"]),
    "RMSprop": (lambda g: [g["lr"], g["alpha"], g["eps"], g["weight_decay"], g["momentum"]],
                ["centered", "maximize"]),
    "Adagrad": (lambda g: [g["lr"], g["lr_decay"], g["weight_decay"], g["eps"],
                           g["initial_accumulator_value"]], ["maximize"]),
}
STATES = {"Adam": ["exp_avg", "exp_avg_sq", "max_exp_avg_sq"],
          "AdamW": ["exp_avg", "exp_avg_sq", "max_exp_avg_sq"],
          "RMSprop": ["square_avg", "momentum_buffer", "grad_avg"],
          "Adagrad": ["sum"]}


def state_dict_to_ember(sd, kind):
    """`sd`: an optimizer state_dict; returns {"tensors": {...}, "metadata": {...}}."""
    if kind not in ORDER:
        raise ValueError(f"unsupported optimizer {kind!r}; expected one of {sorted(ORDER)}")
    values_of, flags = ORDER[kind]
    tensors, meta = {}, {"optimizer": kind, "param_groups": str(len(sd["param_groups"]))}
    for g, group in enumerate(sd["param_groups"]):
        meta[f"param_groups.{g}.params"] = str(len(group["params"]))
        for f in flags:
            meta[f"param_groups.{g}.{f}"] = "true" if group.get(f, False) else "false"
        tensors[f"param_groups.{g}.options"] = torch.tensor(values_of(group), dtype=torch.float64)
        steps = set()
        for i, index in enumerate(group["params"]):
            st = sd["state"].get(index)
            if not st:
                continue
            steps.add(float(st["step"]))
            for name in STATES[kind]:
                if name in st and torch.is_tensor(st[name]):
                    # A copy: a state_dict aliases the optimizer's live tensors.
                    tensors[f"state.{g}.{i}.{name}"] = st[name].detach().to("cpu").clone()
        if len(steps) > 1:
            raise ValueError(f"group {g}: parameters have different step counts {sorted(steps)};"
                             " Ember counts steps per group")
        step = steps.pop() if steps else 0.0
        assert step == math.floor(step) and step < 2 ** 24
        tensors[f"param_groups.{g}.step"] = torch.tensor(step, dtype=torch.float32)
    return {"tensors": tensors, "metadata": meta}


def to_ember(optimizer, kind=None):
    return state_dict_to_ember(optimizer.state_dict(), kind or type(optimizer).__name__)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("state", help="torch.save(optimizer.state_dict()) file")
    ap.add_argument("out", help="the Ember safetensors file to write")
    ap.add_argument("--optimizer", required=True, choices=sorted(ORDER))
    args = ap.parse_args()
    st = state_dict_to_ember(torch.load(args.state, map_location="cpu"), args.optimizer)
    import make_parity_fixtures as mpf  # the safetensors writer (or the safetensors package)
    mpf.save(st["tensors"], args.out, st["metadata"])
    print(json.dumps(st["metadata"], indent=1))


if __name__ == "__main__":
    main()
