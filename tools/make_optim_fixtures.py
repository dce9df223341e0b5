#!/usr/bin/env python3
"""Makes the PyTorch fixtures of the Adam-family optimizers, gradient clipping and learning-rate
schedules that tests/optim/test_optim_parity.cpp and test_schedulers.cpp check Ember against.

Run it where PyTorch is installed, from anywhere:

    python3 tools/make_optim_fixtures.py [--out tests/fixtures]

and commit the files it writes. It reuses tools/make_parity_fixtures.py's seed MLP start
(tests/fixtures/mlp_inputs.safetensors: the init on the bfloat16 grid and 20 batches of 16) and
trains 64 steps on the CPU, single-threaded, batch `step % 20` at each step.

Files:
  optim_<run>.safetensors   one training run each (RUNS below: the optimizer, its options as
                            JSON in metadata "config", the schedule and the clipping)
      loss [64]             F32, each step's loss (before that step's update)
      clip_norm [64]        F32, what clip_grad_norm_ returned (runs that clip by norm)
      lr [64]               F64, group 0's lr used by each step's update
      final.* (as make_parity_fixtures.py: fc1.bias, fc2.weight, fc2.bias in full, fc1.weight
                            every 13th element and its float64 row and column sums)
    The "resume" run (784 -> 6 -> 10: the seed init's first 6 hidden units) also holds the state after step 32, converted to Ember's names by
    tools/torch_optim_state.py ("resume.state.*"/"resume.param_groups.*", metadata
    "resume.meta" as JSON), and the weights then ("resume.weight.<name>"): Ember loads both and
    trains steps 33..64.
  optim_schedules.safetensors   lr sequences of the schedulers ("<case>" F64 [epochs], group
                            0's lr after construction and after each step()), each case's
                            configuration in metadata "<case>"; ReduceLROnPlateau's metrics
                            are "<case>.metric".
"""

import argparse
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_parity_fixtures as mpf  # noqa: E402
import torch_optim_state  # noqa: E402

STEPS = 64
RESUME_AT = 32
RESUME_HIDDEN = 6
ONECYCLE_MAX_LR = 1e-3
# A run is a fixture only if PyTorch itself lands within this of its own losses when every
# initial weight moves by up to one float32 ulp: Ember's gradients differ from PyTorch's in the
# last bits, so a chaotic configuration (plain Adam at lr 1e-3, eps 1e-8 is one here: 3e-4
# apart after 9 steps) could not be compared at 1e-5.
PERTURBED_LOSS_RTOL = 2e-6
NORM_CLIP = 0.25  # below most steps' gradient norms (0.06 to 3.9 here): clipping engages

# name -> (optimizer class, options or [(group param names, options)...], extras)
RUNS = {
    "adam": ("Adam", dict(lr=5e-4), {}),
    "adam_amsgrad_wd": ("Adam", dict(lr=2e-3, betas=(0.8, 0.99), eps=1e-7, weight_decay=1e-2,
                                     amsgrad=True), {}),
    "adamw": ("AdamW", dict(lr=1e-3, weight_decay=1e-2), {}),
    "adamw_amsgrad": ("AdamW", dict(lr=1e-3, weight_decay=0.1, amsgrad=True), {}),
    "adamw_groups": ("AdamW", [(["fc1.weight", "fc2.weight"], dict(lr=1e-3, weight_decay=0.05)),
                               (["fc1.bias", "fc2.bias"],
                                dict(lr=3e-3, weight_decay=0.0, betas=(0.85, 0.995)))], {}),
    "adamw_warmup_cosine_clip": ("AdamW", dict(lr=2e-3, weight_decay=1e-2),
                                 dict(schedule="warmup_cosine", clip_norm=NORM_CLIP)),
    "adam_onecycle_clipinf": ("Adam", dict(lr=1e-3, eps=1e-6),
                              dict(schedule="onecycle", clip_norm=0.05, norm_type="inf")),
    "adam_clip_value": ("Adam", dict(lr=1e-3), dict(clip_value=0.01)),
    "rmsprop": ("RMSprop", dict(lr=5e-4, eps=1e-6), {}),
    "rmsprop_centered_momentum": ("RMSprop", dict(lr=1e-3, alpha=0.9, eps=1e-6, weight_decay=1e-3,
                                                  momentum=0.5, centered=True), {}),
    "adagrad": ("Adagrad", dict(lr=0.05, lr_decay=1e-3, weight_decay=1e-4,
                                initial_accumulator_value=0.1, eps=1e-10), {}),
    # On a narrow MLP (784 -> 6 -> 10, the seed init's first rows), to keep the saved state
    # small; the name mapping and the resumed steps are what it checks.
    "resume": ("AdamW", dict(lr=1e-3, weight_decay=1e-2, amsgrad=True),
               dict(resume=True, hidden=RESUME_HIDDEN)),
}


def make_schedule(name, opt):
    S = torch.optim.lr_scheduler
    if name == "warmup_cosine":
        warm = S.LinearLR(opt, start_factor=0.1, end_factor=1.0, total_iters=8)
        cos = S.CosineAnnealingLR(opt, T_max=STEPS - 8, eta_min=1e-5)
        return S.SequentialLR(opt, [warm, cos], milestones=[8])
    if name == "onecycle":
        return S.OneCycleLR(opt, max_lr=ONECYCLE_MAX_LR, total_steps=STEPS, cycle_momentum=False)
    raise ValueError(name)


def perturbed(inputs, seed=5):
    """The init with each weight moved by -1, 0 or +1 float32 ulp (about)."""
    g = torch.Generator().manual_seed(seed)
    out = dict(inputs)
    for k, t in inputs.items():
        if k.startswith("init."):
            t = t.to(torch.float32)
            out[k] = t * (1 + 1.2e-7 * torch.randint(-1, 2, t.shape, generator=g).float())
    return out


def check_conditioning(name, inputs, kind, options, extras, losses):
    other = train(perturbed(inputs), kind, options, extras)["loss"]
    rel = float(((other - losses).abs() / losses.abs()).max())
    assert rel <= PERTURBED_LOSS_RTOL, (
        f"{name}: a one-ulp change of the init moves PyTorch's losses by {rel:.2e} "
        f"(more than {PERTURBED_LOSS_RTOL}); pick a better-conditioned configuration")
    return rel


def train(inputs, kind, options, extras):
    torch.manual_seed(0)
    net = mpf.Net()
    hidden = extras.get("hidden")
    if hidden:
        net.fc1 = torch.nn.Linear(mpf.MLP_IN, hidden)
        net.fc2 = torch.nn.Linear(hidden, mpf.MLP_OUT)
    with torch.no_grad():
        for name, p in net.named_parameters():
            init = inputs["init." + name].to(torch.float32)
            if hidden:  # the first `hidden` units of the seed init
                if name.startswith("fc1"):
                    init = init[:hidden]
                elif name == "fc2.weight":
                    init = init[:, :hidden]
            p.copy_(init)
    named = dict(net.named_parameters())
    cls = getattr(torch.optim, kind)
    if isinstance(options, list):
        groups = [dict(params=[named[n] for n in names], **o) for names, o in options]
        opt = cls(groups, foreach=False)
    else:
        opt = cls(net.parameters(), foreach=False, **options)
    sched = make_schedule(extras["schedule"], opt) if "schedule" in extras else None
    criterion = torch.nn.CrossEntropyLoss()
    xs, ys = inputs["batch.x"].to(torch.float32), inputs["batch.y"]
    losses, norms, lrs = [], [], []
    out = {}
    for step in range(STEPS):
        if extras.get("resume") and step == RESUME_AT:
            st = torch_optim_state.to_ember(opt, kind)
            for k, v in st["tensors"].items():
                out["resume." + k] = v
            out["resume.meta"] = st["metadata"]
            for name, p in net.named_parameters():
                out["resume.weight." + name] = p.detach().clone()
        opt.zero_grad()
        b = step % xs.shape[0]
        loss = criterion(net(xs[b]), ys[b])
        loss.backward()
        if "clip_norm" in extras:
            nt = float("inf") if extras.get("norm_type") == "inf" else 2.0
            norms.append(torch.nn.utils.clip_grad_norm_(net.parameters(), extras["clip_norm"],
                                                        norm_type=nt).item())
        if "clip_value" in extras:
            torch.nn.utils.clip_grad_value_(net.parameters(), extras["clip_value"])
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        if sched is not None:
            sched.step()
        losses.append(loss.item())
    params = {name: p.detach().clone() for name, p in net.named_parameters()}
    w1 = params["fc1.weight"]
    out.update({
        "loss": torch.tensor(losses, dtype=torch.float32),
        "lr": torch.tensor(lrs, dtype=torch.float64),
        "final.fc1.bias": params["fc1.bias"],
        "final.fc2.weight": params["fc2.weight"],
        "final.fc2.bias": params["fc2.bias"],
        "final.fc1.weight.every13": w1.reshape(-1)[::mpf.SAMPLE_STRIDE].clone(),
        "final.fc1.weight.row_sum": w1.double().sum(1),
        "final.fc1.weight.col_sum": w1.double().sum(0),
    })
    if norms:
        out["clip_norm"] = torch.tensor(norms, dtype=torch.float32)
        engaged = sum(n > extras["clip_norm"] for n in norms)
        assert engaged >= STEPS // 2, f"clipping must engage on most steps: {norms}"
    return out


def schedule_cases():
    """Each case: (config dict, builder(opt) -> scheduler, epochs, metrics or None)."""
    S = torch.optim.lr_scheduler
    cases = {
        "step": (dict(kind="StepLR", step_size=3, gamma=0.5), lambda o: S.StepLR(o, 3, 0.5)),
        "multistep": (dict(kind="MultiStepLR", milestones=[2, 5, 9], gamma=0.3),
                      lambda o: S.MultiStepLR(o, [2, 5, 9], 0.3)),
        "exponential": (dict(kind="ExponentialLR", gamma=0.9), lambda o: S.ExponentialLR(o, 0.9)),
        "cosine": (dict(kind="CosineAnnealingLR", T_max=7, eta_min=0.001),
                   lambda o: S.CosineAnnealingLR(o, 7, 0.001)),
        "linear": (dict(kind="LinearLR", start_factor=0.25, end_factor=0.9, total_iters=5),
                   lambda o: S.LinearLR(o, 0.25, 0.9, 5)),
        "onecycle": (dict(kind="OneCycleLR", max_lr=0.5, total_steps=20, pct_start=0.3,
                          div_factor=25.0, final_div_factor=1e4, anneal_strategy="cos"),
                     lambda o: S.OneCycleLR(o, 0.5, total_steps=20, cycle_momentum=False)),
        "onecycle_linear": (dict(kind="OneCycleLR", max_lr=0.2, total_steps=15, pct_start=0.4,
                                 div_factor=10.0, final_div_factor=100.0,
                                 anneal_strategy="linear"),
                            lambda o: S.OneCycleLR(o, 0.2, total_steps=15, pct_start=0.4,
                                                   div_factor=10.0, final_div_factor=100.0,
                                                   anneal_strategy="linear",
                                                   cycle_momentum=False)),
        "sequential": (dict(kind="SequentialLR", milestones=[4],
                            schedulers=[dict(kind="LinearLR", start_factor=0.1, end_factor=1.0,
                                             total_iters=4),
                                        dict(kind="CosineAnnealingLR", T_max=12, eta_min=0.0)]),
                       lambda o: S.SequentialLR(o, [S.LinearLR(o, 0.1, 1.0, 4),
                                                    S.CosineAnnealingLR(o, 12, 0.0)], [4])),
        "lambda": (dict(kind="LambdaLR", fn="0.95 ** epoch / (1 + epoch)"),
                   lambda o: S.LambdaLR(o, lambda e: 0.95 ** e / (1 + e))),
    }
    metrics = [1.0, 0.9, 0.91, 0.92, 0.93, 0.89, 0.895, 0.9, 0.9, 0.88, 0.9, 0.9, 0.9, 0.9, 0.9,
               0.9, 0.9, 0.9, 0.9, 0.9]
    cases["plateau"] = (dict(kind="ReduceLROnPlateau", mode="min", factor=0.5, patience=2,
                             threshold=1e-2, threshold_mode="rel", cooldown=1, min_lr=0.02),
                        lambda o: S.ReduceLROnPlateau(o, mode="min", factor=0.5, patience=2,
                                                      threshold=1e-2, cooldown=1, min_lr=0.02))
    cases["plateau_max_abs"] = (dict(kind="ReduceLROnPlateau", mode="max", factor=0.1,
                                     patience=1, threshold=0.05, threshold_mode="abs",
                                     cooldown=0, min_lr=0.0),
                                lambda o: S.ReduceLROnPlateau(o, mode="max", factor=0.1,
                                                              patience=1, threshold=0.05,
                                                              threshold_mode="abs"))
    return cases, metrics


def make_schedules():
    cases, metrics = schedule_cases()
    tensors, meta = {}, {}
    for name, (config, build) in cases.items():
        p = torch.nn.Parameter(torch.zeros(1))
        opt = torch.optim.SGD([p], lr=0.1)
        sched = build(opt)
        lrs = [opt.param_groups[0]["lr"]]
        n = config.get("total_steps", 20)
        for e in range(n - 1 if config["kind"] == "OneCycleLR" else n):
            opt.step()
            if config["kind"] == "ReduceLROnPlateau":
                sched.step(metrics[e])
            else:
                sched.step()
            lrs.append(opt.param_groups[0]["lr"])
        tensors[name] = torch.tensor(lrs, dtype=torch.float64)
        meta[name] = json.dumps(config, sort_keys=True)
        if config["kind"] == "ReduceLROnPlateau":
            tensors[name + ".metric"] = torch.tensor(metrics, dtype=torch.float64)
    meta["cases"] = json.dumps(sorted(cases))
    meta["base_lr"] = "0.1"
    return tensors, meta


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests",
                                                  "fixtures"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    inputs_path = os.path.join(args.out, "mlp_inputs.safetensors")
    inputs, _ = mpf._read_back(inputs_path)
    for name, (kind, options, extras) in RUNS.items():
        out = train(inputs, kind, options, extras)
        rel = check_conditioning(name, inputs, kind, options, extras, out["loss"])
        print(f"{name}: losses move by {rel:.1e} under a one-ulp change of the init")
        meta = {"optimizer": kind, "config": json.dumps(options), "extras": json.dumps(extras),
                "steps": str(STEPS), "resume_at": str(RESUME_AT),
                "sample_stride": str(mpf.SAMPLE_STRIDE)}
        if "resume.meta" in out:
            meta["resume.meta"] = json.dumps(out.pop("resume.meta"), sort_keys=True)
        mpf.save(out, os.path.join(args.out, f"optim_{name}.safetensors"), meta)
    tensors, meta = make_schedules()
    mpf.save(tensors, os.path.join(args.out, "optim_schedules.safetensors"), meta)


if __name__ == "__main__":
    main()
