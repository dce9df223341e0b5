#!/usr/bin/env python3
"""Makes the PyTorch fixtures of mixed-precision training (autocast and GradScaler) that Ember's
autocast / GradScaler parity tests check it against.

Run it where PyTorch is installed, from anywhere:

    python3 tools/make_amp_fixtures.py [--out tests/fixtures]

and commit the files it writes. It reuses tools/make_parity_fixtures.py's seed MLP start
(tests/fixtures/mlp_inputs.safetensors: the init on the bfloat16 grid and 20 batches of 16) and
trains 64 steps on the CPU, single-threaded, batch `step % 20` at each step, as
tools/make_optim_fixtures.py does.

What is emulated: PyTorch's CUDA autocast (the CPU build this runs on, 1.13, has no float16
autocast and no CPU GradScaler), in float32 arithmetic with explicit roundings to the low dtype
L (bfloat16 or float16), so every rounding is where CUDA autocast puts it:
  - the parameters stay float32 (the optimizer updates float32 weights with float32 gradients);
  - each Linear rounds its input, weight and bias to L, accumulates the product and the bias
    add in float32 and rounds the result to L once (what cuBLAS's addmm does with L operands);
  - ReLU runs on L values (exact);
  - cross entropy casts the L logits to float32 and runs in float32 (autocast's fp32 list);
  - backward: every gradient of an L tensor is an L tensor. The gradient of the logits is
    rounded to L where it leaves the float32 cast; a Linear's input, weight and bias gradients
    are computed in float32 from L operands (the product; the bias's sum) and rounded to L; the
    cast back to the float32 parameters turns the L gradient into float32 (exact).
One helper, `Low` (round to L forward, round the incoming gradient to L backward), placed on
every cast and on every Linear output, gives exactly these roundings. For the bfloat16 run
the script also runs torch 1.13's real torch.autocast("cpu", dtype=torch.bfloat16) and prints
(does not store) how far its losses are from the emulation.

GradScaler (torch.cuda.amp.GradScaler's documented algorithm): the float32 loss times the
float32 scale is backpropagated; unscale: every gradient *= float32(1 / double(scale)), found_inf
= any non-finite gradient; a step with found_inf skips optimizer.step() entirely (no state
change, the step counters do not advance); update: found_inf: scale *= backoff_factor, growth
tracker = 0; otherwise tracker += 1 and at growth_interval scale *= growth_factor (kept only if
finite) and tracker = 0. The scaler: init_scale 2**20, growth_factor 2, backoff_factor 0.5,
growth_interval 8. 2**20 overflows float16 at once (the logits' gradient alone reaches
2**20 / 16 = 65536 > 65504), so steps 0 and 1 are skipped while the scale backs off to 2**18;
after 8 good steps it grows to 2**19, which overflows again (at steps 10, 19, ...): the natural
trajectory skips steps after step 10, so no input is scaled ("input_scale_at": null).
  fp16_scaler_sgd    skipped 0, 1, 10, 19, 30, 39, 50, 59; the scale 2**20 (step 0), 2**19 (1),
                     2**18 (2), then 2**19 at 10, 19, 28-30, 39, 48-50, 59 and 2**18 between
  fp16_scaler_adamw  skipped 0, 1, 10, 19, 28, 30, 50; 2**20, 2**19, 2**18, 2**19 (10), 2**18,
                     2**19 (19), 2**18, 2**19 (28), 2**18 (29-30, 30 skipped), 2**17 (31-38),
                     2**18 (39-46), 2**19 (47-50), 2**18 (51-58), 2**19 (59-63)
The overflows are not marginal: the steps that stay finite peak at 0.96 of float16's largest
value (65504) in some gradient, the skipped ones exceed it by 1.5 % or more (before rounding).

Files:
  amp_<run>.safetensors     one training run each (RUNS below)
      loss [64]             F32, each step's loss (unscaled: the float32 cross entropy of the
                            forward, before that step's update; skipped steps have one too)
      scale [64]            F32, the scale that multiplied that step's loss (runs with a
                            scaler only)
      found_inf [64]        F32, 1 where that step's unscaled gradients held an inf or NaN and
                            the optimizer step was skipped, else 0 (runs with a scaler only)
      final.* (as make_parity_fixtures.py: fc1.bias, fc2.weight, fc2.bias in full, fc1.weight
                            every 13th element ("final.fc1.weight.every13") and its float64 row
                            and column sums ("final.fc1.weight.row_sum", ".col_sum"))
    metadata: "config" (JSON: amp_dtype, optimizer, optimizer_options, grad_scaler (its four
    options) or null, input_scale_at (null: no input was scaled)), "optimizer", "amp_dtype"
    ("bfloat16" / "float16"), "steps", "sample_stride", "loss_tol" (JSON: rtol, atol,
    early_steps, early_rtol: below), "torch_version", "generator".

Runs:
  bf16_sgd            autocast bfloat16, SGD(lr 0.05, momentum 0.9), no scaler
  fp16_scaler_sgd     autocast float16, GradScaler, SGD(lr 0.05, momentum 0.9)
  fp16_scaler_adamw   autocast float16, GradScaler, AdamW(lr 1e-3, weight_decay 1e-2)
(all with foreach=False, the per-parameter loops.)

Conditioning (make_optim_fixtures.py's PERTURBED_LOSS_RTOL idea): each run is repeated "ulp",
from the init with every weight moved by up to one float32 ulp, and "acc64", with every
Linear's products (forward and backward) summed in float64 instead of float32 before the
rounding to L (another summation order, as Ember's or cuBLAS's GEMM has). Both must give the
identical found_inf / scale trajectory (they do). The losses' largest relative spread,
measured here (torch 1.13 CPU), whole run / first 8 steps:
  bf16_sgd            ulp 5.9e-2 / 1.6e-4   acc64 2.3e-2 / 1.0e-7
  fp16_scaler_sgd     ulp 4.9e-3 / 1.3e-5   acc64 1.7e-3 / 9.2e-7
  fp16_scaler_adamw   ulp 3.9e-4 / 1.3e-5   acc64 3.3e-4 / 2.2e-6
(the whole-run maxima of the SGD runs are at steps whose loss is below 1e-2: lr 0.05 with
momentum 0.9 fits the 20 batches and is chaotic; the largest absolute spreads are 3.4e-3 bf16,
6.4e-4 and 2.2e-4 float16). torch.autocast("cpu", bfloat16) of torch 1.13, run for comparison,
differs from the bfloat16 emulation by 3.3e-6 in the first 8 steps (0 in the first 5) and by
up to 4.8e-2 relative (1.6e-3 absolute) over the run.
So Ember must match the losses within rtol * |ref| + atol at every step (metadata "loss_tol":
atol 1e-3, rtol 5e-2 bf16_sgd, 1e-2 fp16_scaler_sgd, 2e-3 fp16_scaler_adamw; the variants use
at most 0.38, 0.16 and 0.06 of it) and within 1e-5 relative in the first 8 steps (3x or more
the acc64 spread: Ember starts from the same init, so early on it differs only in summation
order; the ulp variant moves every weight and is not a model of that). The dtype's rounding
is why: it turns a last-bit difference of the float32 accumulation, now and then, into a whole
L ulp (2**-8 bfloat16, 2**-11 float16) that training carries on. The early tolerance still tells the
roundings apart: training in float32 instead differs from bf16_sgd by 2e-5 to 2e-4 in steps
0 to 7, leaving the gradients unrounded by 3.6e-5 at step 1 (float16: 6e-4, and it changes
the found_inf trajectory). found_inf and scale must match exactly. The final parameters are
as chaotic as the late losses (bf16_sgd: one ulp of init moves final.fc1.weight.row_sum by up
to 0.26 of values up to 2.0, acc64 by 3.5e-3): compare them loosely, if at all.
"""

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_parity_fixtures as mpf  # noqa: E402

STEPS = 64
SCALER = dict(init_scale=2.0 ** 20, growth_factor=2.0, backoff_factor=0.5, growth_interval=8)
# The loss tolerances a fixture states (metadata "loss_tol", see the docstring): every step
# within rtol * |ref| + atol, the first `early_steps` steps within early_rtol * |ref|.
EARLY_STEPS = 8
EARLY_RTOL = 1e-5
LOSS_ATOL = 1e-3
# The conditioning check refuses a run whose own spread uses more than this share of them.
TOL_SHARE = 0.5
EARLY_TOL_SHARE = 1 / 3

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16}

# name -> (low dtype, optimizer class, options, scaler or None)
RUNS = {
    "bf16_sgd": ("bfloat16", "SGD", dict(lr=0.05, momentum=0.9), None),
    "fp16_scaler_sgd": ("float16", "SGD", dict(lr=0.05, momentum=0.9), SCALER),
    "fp16_scaler_adamw": ("float16", "AdamW", dict(lr=1e-3, weight_decay=1e-2), SCALER),
}
# name -> the whole-run loss rtol (with LOSS_ATOL), from the measured spreads (docstring)
LOSS_RTOL = {"bf16_sgd": 5e-2, "fp16_scaler_sgd": 1e-2, "fp16_scaler_adamw": 2e-3}


# --------------------------------------------------------------------------------------------
# The autocast emulation


def rounded(t, low):
    """t (float32) rounded to the low dtype and back: an L value held in float32. Overflow
    gives inf as a real cast does."""
    return t.to(low).to(torch.float32)


class Low(torch.autograd.Function):
    """A float32 tensor becomes an L tensor: forward rounds it to L; backward rounds the
    gradient that arrives to L (a gradient of an L tensor is an L tensor)."""

    peak = 0.0  # the largest finite |gradient| before its rounding since the last reset

    @staticmethod
    def forward(ctx, x, low):
        ctx.low = low
        return rounded(x, low)

    @staticmethod
    def backward(ctx, g):
        finite = g[torch.isfinite(g)]
        if finite.numel():
            Low.peak = max(Low.peak, float(finite.abs().max()))
        return rounded(g, ctx.low), None


class Linear64(torch.autograd.Function):
    """addmm(b, x, w.t()) with the products summed in float64 (forward and backward), then
    rounded to float32: the conditioning check's other summation."""

    @staticmethod
    def forward(ctx, b, x, w):
        ctx.save_for_backward(x, w)
        return torch.addmm(b.double(), x.double(), w.double().t()).float()

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        g64 = g.double()
        return g64.sum(0).float(), (g64 @ w.double()).float(), (g64.t() @ x.double()).float()


def linear_low(x, w, b, low, acc64=False):
    """nn.Linear under autocast to `low`: L operands, float32 accumulation, one rounding."""
    xl, wl, bl = Low.apply(x, low), Low.apply(w, low), Low.apply(b, low)
    y = Linear64.apply(bl, xl, wl) if acc64 else torch.addmm(bl, xl, wl.t())
    return Low.apply(y, low)


def forward_low(net, x, low, acc64=False):
    h = torch.relu(linear_low(x, net.fc1.weight, net.fc1.bias, low, acc64))  # exact on L
    return linear_low(h, net.fc2.weight, net.fc2.bias, low, acc64)  # L logits (float32-held)


# --------------------------------------------------------------------------------------------
# GradScaler


class Scaler:
    """torch.cuda.amp.GradScaler's algorithm on float32 CPU tensors."""

    def __init__(self, init_scale, growth_factor, backoff_factor, growth_interval):
        self.scale = torch.tensor(init_scale, dtype=torch.float32)
        self.growth = growth_factor
        self.backoff = backoff_factor
        self.interval = growth_interval
        self.tracker = 0

    def unscale(self, params):
        """Unscales the gradients in place; True when any is inf or NaN."""
        inv = self.scale.double().reciprocal().float()
        found = False
        for p in params:
            if p.grad is not None:
                found |= not bool(torch.isfinite(p.grad).all())
                p.grad.mul_(inv)
        return found

    def update(self, found_inf):
        if found_inf:
            self.scale = self.scale * self.backoff
            self.tracker = 0
            return
        self.tracker += 1
        if self.tracker == self.interval:
            grown = self.scale * self.growth
            if bool(torch.isfinite(grown)):
                self.scale = grown
            self.tracker = 0


# --------------------------------------------------------------------------------------------
# Training


def make_net(inputs):
    torch.manual_seed(0)
    net = mpf.Net()
    with torch.no_grad():
        for name, p in net.named_parameters():
            p.copy_(inputs["init." + name].to(torch.float32))
    return net


def make_optimizer(net, kind, options):
    return getattr(torch.optim, kind)(net.parameters(), foreach=False, **options)


def train(inputs, dtype_name, kind, options, scaler_cfg, acc64=False):
    low = DTYPES[dtype_name]
    net = make_net(inputs)
    opt = make_optimizer(net, kind, options)
    scaler = Scaler(**scaler_cfg) if scaler_cfg else None
    criterion = torch.nn.CrossEntropyLoss()
    xs, ys = inputs["batch.x"].to(torch.float32), inputs["batch.y"]
    losses, scales, found, peaks = [], [], [], []
    for step in range(STEPS):
        opt.zero_grad()
        logits = forward_low(net, xs[step % xs.shape[0]], low, acc64)
        loss = criterion(logits, ys[step % ys.shape[0]])  # float32 (the cast of L is exact)
        losses.append(loss.item())
        if scaler is None:
            loss.backward()
            opt.step()
            continue
        scales.append(scaler.scale.item())
        Low.peak = 0.0
        (loss * scaler.scale).backward()
        peaks.append(Low.peak)
        inf = scaler.unscale(net.parameters())
        found.append(1.0 if inf else 0.0)
        if not inf:
            opt.step()
        scaler.update(inf)
    params = {name: p.detach().clone() for name, p in net.named_parameters()}
    w1 = params["fc1.weight"]
    out = {
        "loss": torch.tensor(losses, dtype=torch.float32),
        "final.fc1.bias": params["fc1.bias"],
        "final.fc2.weight": params["fc2.weight"],
        "final.fc2.bias": params["fc2.bias"],
        "final.fc1.weight.every13": w1.reshape(-1)[::mpf.SAMPLE_STRIDE].clone(),
        "final.fc1.weight.row_sum": w1.double().sum(1),
        "final.fc1.weight.col_sum": w1.double().sum(0),
    }
    if scaler is not None:
        out["scale"] = torch.tensor(scales, dtype=torch.float32)
        out["found_inf"] = torch.tensor(found, dtype=torch.float32)
        out["peak_grad"] = peaks  # diagnostics, not stored
    return out


def train_real_autocast_bf16(inputs, kind, options):
    """torch 1.13's own CPU autocast to bfloat16, for comparison only (its CPU kernels differ
    from cuBLAS in where they round, so it is a sanity check, not the reference)."""
    net = make_net(inputs)
    opt = make_optimizer(net, kind, options)
    criterion = torch.nn.CrossEntropyLoss()
    xs, ys = inputs["batch.x"].to(torch.float32), inputs["batch.y"]
    losses = []
    for step in range(STEPS):
        opt.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logits = net(xs[step % xs.shape[0]])
            loss = criterion(logits.float(), ys[step % ys.shape[0]])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return torch.tensor(losses, dtype=torch.float32)


def perturbed(inputs, seed=5):
    """The init with each weight moved by -1, 0 or +1 float32 ulp (about)."""
    g = torch.Generator().manual_seed(seed)
    out = dict(inputs)
    for k, t in inputs.items():
        if k.startswith("init."):
            t = t.to(torch.float32)
            out[k] = t * (1 + 1.2e-7 * torch.randint(-1, 2, t.shape, generator=g).float())
    return out


def rel_spread(a, b):
    return float(((a - b).abs() / b.abs()).max())


def loss_tol(name):
    return dict(rtol=LOSS_RTOL[name], atol=LOSS_ATOL, early_steps=EARLY_STEPS,
                early_rtol=EARLY_RTOL)


def check_conditioning(name, inputs, run, out):
    """How far PyTorch's own losses move under a one-ulp init change ("ulp") and under
    float64 products ("acc64"), as shares of the stated tolerance; the found_inf / scale
    trajectory must not move at all. Returns {variant: (whole-run relative spread, spread of
    the first EARLY_STEPS, share of rtol * |ref| + atol used)}."""
    tol, ref = loss_tol(name), out["loss"]
    spreads = {}
    for label, other in (("ulp", train(perturbed(inputs), *run)),
                         ("acc64", train(inputs, *run, acc64=True))):
        for key in ("scale", "found_inf"):
            if key in out:
                assert torch.equal(other[key], out[key]), (
                    f"{name}: the {key} trajectory moves under the {label} variant: "
                    f"{out[key].tolist()} vs {other[key].tolist()}")
        d = (other["loss"] - ref).abs()
        share = float((d / (tol["rtol"] * ref.abs() + tol["atol"])).max())
        spreads[label] = (rel_spread(other["loss"], ref),
                          rel_spread(other["loss"][:EARLY_STEPS], ref[:EARLY_STEPS]), share)
        assert share <= TOL_SHARE, (
            f"{name}: under the {label} variant PyTorch's own losses use {share:.2f} of the "
            f"stated tolerance (more than {TOL_SHARE}); pick a better-conditioned "
            "configuration or a looser tolerance")
    # Ember starts from the identical init: its early steps differ only by summation order.
    early = spreads["acc64"][1]
    assert early <= EARLY_RTOL * EARLY_TOL_SHARE, (
        f"{name}: the first {EARLY_STEPS} losses move by {early:.1e} with float64 products")
    return spreads


def describe_scaler(out):
    scale, found = out["scale"].tolist(), out["found_inf"].tolist()
    skipped = [i for i, f in enumerate(found) if f]
    changes, prev = [], None
    for i, s in enumerate(scale):
        if s != prev:
            changes.append(f"{i}:2^{int(torch.tensor(s).log2().item())}")
            prev = s
    return skipped, changes


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests",
                                                  "fixtures"))
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    inputs, _ = mpf._read_back(os.path.join(args.out, "mlp_inputs.safetensors"))
    for name, run in RUNS.items():
        dtype_name, kind, options, scaler_cfg = run
        out = train(inputs, *run)
        assert torch.isfinite(out["loss"]).all(), f"{name}: a loss is not finite"
        spreads = check_conditioning(name, inputs, run, out)
        print(f"{name}: loss {out['loss'][0]:.6f} -> {out['loss'][-1]:.6f}; stated tolerance "
              f"{json.dumps(loss_tol(name), sort_keys=True)}")
        for label, what in (("ulp", "a one-ulp change of the init"),
                            ("acc64", "float64 products")):
            whole, early, share = spreads[label]
            print(f"  under {what}: losses move by {whole:.1e} relative ({early:.1e} in the "
                  f"first {EARLY_STEPS} steps), {share:.2f} of rtol*|ref|+atol")
        if dtype_name == "bfloat16":
            real = train_real_autocast_bf16(inputs, kind, options)
            print(f"  torch.autocast('cpu', bfloat16) vs the emulation: losses differ by up to "
                  f"{rel_spread(real, out['loss']):.1e} relative ("
                  f"{rel_spread(real[:EARLY_STEPS], out['loss'][:EARLY_STEPS]):.1e} in the "
                  f"first {EARLY_STEPS} steps, max |diff| "
                  f"{float((real - out['loss']).abs().max()):.1e}); not stored")
        if scaler_cfg is not None:
            skipped, changes = describe_scaler(out)
            assert skipped and skipped[0] == 0, f"{name}: the init scale must overflow at once"
            assert any(s > 10 for s in skipped), f"{name}: no step after 10 is skipped"
            scale = out["scale"].tolist()
            assert any(b > a for a, b in zip(scale, scale[1:])), f"{name}: the scale never grows"
            print(f"  skipped steps {skipped}; scale (step:value) {' '.join(changes)}")
            peaks = out.pop("peak_grad")
            fmax = float(torch.finfo(torch.float16).max)
            kept = max(p for p, f in zip(peaks, out["found_inf"].tolist()) if not f) / fmax
            over = min(p for p, f in zip(peaks, out["found_inf"].tolist()) if f) / fmax
            print(f"  largest |gradient| before rounding to float16 / 65504: steps kept "
                  f"{kept:.3f} at most, steps skipped {over:.3f} at least")
        config = {"amp_dtype": dtype_name, "optimizer": kind, "optimizer_options": options,
                  "grad_scaler": scaler_cfg, "input_scale_at": None}
        meta = {"config": json.dumps(config, sort_keys=True), "optimizer": kind,
                "amp_dtype": dtype_name, "steps": str(STEPS),
                "sample_stride": str(mpf.SAMPLE_STRIDE),
                "loss_tol": json.dumps(loss_tol(name), sort_keys=True),
                "torch_version": torch.__version__, "generator": "tools/make_amp_fixtures.py"}
        mpf.save(out, os.path.join(args.out, f"amp_{name}.safetensors"), meta)


if __name__ == "__main__":
    main()
