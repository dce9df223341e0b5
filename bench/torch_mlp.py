#!/usr/bin/env python3
"""The Ember benchmark's workloads in PyTorch: the same training steps, modes and figures, written
in the same JSON schema (bench/schema/bench.schema.json, framework "pytorch") so that
`ember_bench report` can put both side by side.

    python3 bench/torch_mlp.py --json bench/results/pytorch.json          # the GPU if present
    python3 bench/torch_mlp.py --device cpu --json /tmp/pytorch_cpu.json
    python3 bench/torch_mlp.py --merge a.json b.json --json all.json      # runs made in parts
    python3 bench/check_bench_json.py bench/results/pytorch.json

Workloads, timing, loss, floor and peak follow the brief (notes/issue6_brief.md): a step draws
x = randn(B, 784) and y = randint(0, 10, (B,)) on the device, then zero_grad(set_to_none=True),
forward, CrossEntropyLoss, backward, SGD step, loss.item(); the timed figure is the host wall
clock (time.perf_counter) around `steps` consecutive steps, the median over `repeats` samples
after `warmup` steps. Batches come from a torch.Generator of their own on the device, seeded
with --seed, so no other consumer of the global RNG (Inductor's autotuning draws random inputs)
can shift them between modes.

Modes:
  eager            the step as written.
  default, reduce-overhead, max-autotune
                   torch.compile(step, mode=...) on the whole step function. Dynamo may break
                   the graph at loss.backward() and opt.step(); that is what a user who compiles
                   a training step gets, so it is kept. item() is called outside the compiled
                   function. reduce-overhead and max-autotune use CUDA graph trees, so each step
                   begins with torch.compiler.cudagraph_mark_step_begin().
  dynamic          torch.compile(step, dynamic=True) while the batch cycles through
                   [B, B*3/4, B/2, B*3/4+1] (integer division, clamped >= 1).
  cuda-graph       the whole step captured by hand as one torch.cuda.CUDAGraph: static x/y
                   buffers (zeros), three warm-up steps on a side stream as in PyTorch's "whole
                   network capture" example, then the parameters (and SGD momentum buffers) are
                   restored to their values before the warm-up, so the trajectory is the eager
                   one; each step copies the fresh batch into the static buffers, replays and
                   reads the static loss. SGD needs no `capturable` flag (it keeps no step
                   counter on the device and has no capture check).
On the CPU only eager, default and dynamic run; the other modes get status "skipped".

Mixed precision (--amp, every workload and mode; each row carries "amp": "none", "bf16" or
"fp16", as Ember's benchmark defines it; bench/schema/bench.schema.json must list that row
property for check_bench_json.py to accept the files):
  none             float32 throughout (the default).
  bf16             torch.autocast(device, dtype=torch.bfloat16) around forward + loss; backward and
                   the optimizer step outside it, as PyTorch's AMP recipe has it. The CPU uses
                   torch.autocast("cpu", torch.bfloat16) (PyTorch 1.13 has it).
  fp16             torch.autocast(device, dtype=torch.float16) likewise, and a GradScaler
                   (torch.amp.GradScaler, torch.cuda.amp.GradScaler before 2.3; its defaults:
                   init_scale 65536, growth_factor 2, backoff_factor 0.5, growth_interval 2000):
                   scaler.scale(loss).backward(), scaler.step(opt), scaler.update(). CUDA only:
                   --device cpu --amp fp16 is refused (CPU autocast takes only bfloat16 in
                   PyTorch 1.13, and the scaler here is the CUDA one).
                   cuda-graph: GradScaler.step reads found_inf on the host (a sync, which a capture
                   cannot hold) unless the optimizer applies the scaling itself
                   (_step_supports_amp_scaling: fused AdamW, --optimizer adamw-fused, which takes
                   grad_scale / found_inf on the device and skips the update in its kernel); so
                   cuda-graph fp16 rows are run with --optimizer adamw-fused only and are
                   "skipped" (with the reason) otherwise. After the warm-up the scaler's scale and
                   growth tracker are reset with the parameters (private attributes _scale and
                   _growth_tracker), so the replays follow the eager trajectory. (Written
                   without a GPU at hand: that the fused path captures is what PyTorch's
                   GradScaler code implies, not yet measured; a capture that fails makes the row
                   an "error" with the message.)
                   The compiled modes compile the step with the scaler in it; Dynamo breaks the
                   graph at its host sync.
  In cuda-graph mode autocast runs with cache_enabled=False (PyTorch's advice for captured
  regions; each weight is cast once per step either way).

Figures of a row, measured in ONE run of a fresh model from the seed: the first `loss_steps`
steps give `loss` (the value step N returns: its forward's loss, before its update), then
`warmup` steps, then the timed samples, then (CUDA only) PROFILE_STEPS steps under
torch.profiler. So the loss is the same as a separate run from the seed would give, and a mode
compiles once per row (max-autotune compiles are slow).
  loss_rel_diff_vs_eager  |loss - eager| / |eager|, eager = the eager run of the same workload and
                   batch (dynamic: an eager run over the same batch schedule); 0 for eager.
  recompiles       graphs compiled after the first step call, up to the end of the timed steps
                   (torch._dynamo.utils.counters["stats"]["unique_graphs"], which Dynamo bumps
                   for each graph it hands to the backend). That is stricter than "during the
                   timed steps": a recompile the dynamic schedule causes at its 2nd..4th batch
                   size happens before timing and is still counted. Not counted: recompiles of
                   AOTAutograd's lazily compiled backward (not a Dynamo graph). null for eager and
                   cuda-graph (nothing is compiled) and where the counter is missing. The step
                   numbers at which graphs were compiled are printed on stderr.
  kernels_per_step device-side events per step from torch.profiler (ProfilerActivity.CUDA):
                   kernels, memcpy and memset (user annotations excluded), over PROFILE_STEPS
                   steps; includes the batch draw and the item() copy. null on the CPU.
  peak_memory_bytes torch.cuda.max_memory_allocated() after the previous row's objects were freed
                   (torch._dynamo.reset(), gc, empty_cache) and reset_peak_memory_stats(); it
                   includes what persists in the process (cuBLAS workspace). null on the CPU.
  first_step_ms    measured in new processes (this script with --probe): cold with an empty
                   TORCHINDUCTOR_CACHE_DIR=<tmp> and TRITON_CACHE_DIR=<tmp>/triton, warm again
                   with the same dir. From the first step call (torch imported, model on the
                   device, CUDA context up) to the end of the first step that runs in the mode's
                   final form: the first call for eager, default and dynamic; the 3rd call for
                   reduce-overhead and max-autotune (CUDA graph trees run a step to warm up, record
                   on the next and replay from the third); the first call for cuda-graph (it warms
                   up, captures and replays). Eager: cold and warm are two new processes.
                   Modes left out of --first-step-modes (default: all but max-autotune, whose cold
                   compile takes minutes per row) or batches left out of --first-step-batches get
                   null.
  floor            the brief's formula; peak.flops_per_s from the best of 5 torch.mm fp32
                   4096^3 (CPU: 1024^3, TF32 as configured), peak.bytes_per_s = 2 * bytes / time
                   of the best of 5 device copies of 256 MiB (CPU: 64 MiB).
                   --amp bf16/fp16 rows keep this float32 floor (4-byte elements, the fp32 GEMM
                   peak): not dtype-aware, since bench/check_bench_json.py recomputes the same
                   formula and the schema's machine.peak has no low-precision GEMM peak. Their
                   floor share is therefore only comparable with other rows of the same amp.
TF32: off unless --tf32. On PyTorch with the fp32_precision API (2.9+) only that API is set
(torch.backends.cuda.matmul / cudnn fp32_precision = "ieee" or "tf32"): mixing it with the legacy
allow_tf32 flags raises in recent releases; older releases get allow_tf32 and
set_float32_matmul_precision.

Everything that needs torch is imported inside functions, so --help, --merge and the pure
helpers (floor, schedule, rows, document, table) work without it.
"""
import argparse
import copy
import datetime
import gc
import json
import math
import os
import platform
import shlex
import socket
import statistics
import subprocess
import sys
import tempfile
import time

WORKLOADS = {
    "mlp": {"layers": [784, 512, 10], "activation": "relu", "loss": "cross_entropy",
            "optimizer": {"name": "sgd", "lr": 0.01, "momentum": 0.0}},
    "deep_mlp": {"layers": [784, 1024, 1024, 1024, 1024, 10], "activation": "gelu",
                 "loss": "cross_entropy",
                 "optimizer": {"name": "sgd", "lr": 0.01, "momentum": 0.9}},
}
# The conv nets (bench/workloads.h has the same definitions): `layers` is their classifier;
# macs, activations and params per sample are what the floor counts (conv_costs below).
RESNET_BLOCKS = [(16, 16, 1), (16, 32, 2), (32, 64, 2)]


def add_classifier(macs, acts, params, layers):
    """The Linear layers of `layers` added to a net's counts (the floor's macs, activations,
    params per sample)."""
    macs = list(macs)
    for k in range(len(layers) - 1):
        macs.append(layers[k] * layers[k + 1])
        params += layers[k] * layers[k + 1] + layers[k + 1]
        if k < len(layers) - 2:
            acts += layers[k + 1]
    return {"macs": macs, "activations": acts, "params": params}


def conv_costs(arch, inp, layers):
    macs, acts, params = [], 0, 0
    h, w = inp[1], inp[2]

    def conv(cin, cout, k, stride, pad, h, w, bias, bn):
        nonlocal acts, params
        h = (h + 2 * pad - k) // stride + 1
        w = (w + 2 * pad - k) // stride + 1
        macs.append(cout * h * w * cin * k * k)
        acts += cout * h * w
        params += cout * cin * k * k + (cout if bias else 0) + (2 * cout if bn else 0)
        return h, w

    if arch == "cnn":
        h, w = conv(inp[0], 32, 3, 1, 1, h, w, True, False)
        h, w = conv(32, 64, 3, 1, 1, h, w, True, False)
        acts += 64 * (h // 2) * (w // 2)
    else:
        h, w = conv(inp[0], 16, 3, 1, 1, h, w, False, True)
        for cin, cout, stride in RESNET_BLOCKS:
            h1, w1 = conv(cin, cout, 3, stride, 1, h, w, False, True)
            h1, w1 = conv(cout, cout, 3, 1, 1, h1, w1, False, True)
            if stride != 1 or cin != cout:
                conv(cin, cout, 1, stride, 0, h, w, False, True)
            h, w = h1, w1
    return add_classifier(macs, acts, params, layers)


def rnn_costs(arch, inp, layers):
    """bench/workloads.cpp's workload_cost for the recurrent workloads."""
    t, feat, hid = inp[0], inp[1], layers[0]
    g, nl = (4, 1) if arch == "lstm" else (3, 2)
    macs, acts, params = [], 0, 0
    for k in range(nl):
        cin = feat if k == 0 else hid
        macs += [t * g * hid * cin, t * g * hid * hid]
        acts += t * (g * hid + (2 if g == 4 else 1) * hid)
        params += g * hid * (cin + hid) + 2 * g * hid
    return add_classifier(macs, acts, params, layers)


def gpt_costs(d, vocab, t, depth, heads):
    """bench/workloads.cpp's workload_cost for the gpt workloads (per sequence)."""
    macs, acts, params = [], 0, 0
    for _ in range(depth):
        macs += [t * 4 * d * d, 2 * t * t * d, t * 8 * d * d]
        acts += t * 16 * d + heads * t * t
        params += 12 * d * d + 13 * d
    macs.append(t * d * vocab)
    params += vocab * d + t * d + 2 * d
    return {"macs": macs, "activations": acts, "params": params}


for _name, _d, _t, _depth, _heads in [("gpt_small", 128, 128, 4, 4), ("gpt_base", 384, 256, 6, 6)]:
    WORKLOADS[_name] = {"layers": [_d, 256], "activation": "gelu", "loss": "cross_entropy",
                        "optimizer": {"name": "adamw", "lr": 1e-3, "momentum": 0.0,
                                      "weight_decay": 1e-2, "betas": [0.9, 0.999], "eps": 1e-8},
                        "arch": "gpt", "input": [_t], "depth": _depth, "heads": _heads,
                        "clip_norm": 1.0, **gpt_costs(_d, 256, _t, _depth, _heads)}

for _name in ("lstm", "gru2"):
    WORKLOADS[_name] = {"layers": [256, 10], "activation": "relu", "loss": "cross_entropy",
                        "optimizer": {"name": "sgd", "lr": 0.01, "momentum": 0.0},
                        "arch": _name, "input": [32, 64], **rnn_costs(_name, [32, 64], [256, 10])}

for _name, _arch, _inp, _layers, _momentum in [("cnn", "cnn", [1, 28, 28], [12544, 128, 10], 0.0),
                                               ("resnet", "resnet", [3, 32, 32], [64, 10], 0.9)]:
    WORKLOADS[_name] = {"layers": _layers, "activation": "relu", "loss": "cross_entropy",
                        "optimizer": {"name": "sgd", "lr": 0.01, "momentum": _momentum},
                        "arch": _arch, "input": _inp, **conv_costs(_arch, _inp, _layers)}
MODES = ["eager", "default", "reduce-overhead", "max-autotune", "dynamic", "cuda-graph"]
COMPILED_MODES = {"default", "reduce-overhead", "max-autotune", "dynamic"}
GRAPH_TREE_MODES = {"reduce-overhead", "max-autotune"}  # torch.compile modes using CUDA graphs
CPU_MODES = {"eager", "default", "dynamic"}
DEFAULTS = {
    "cuda": {"warmup": 50, "steps": 100, "repeats": 11, "loss_steps": 100,
             "batches": [64, 1024, 8192]},
    "cpu": {"warmup": 3, "steps": 10, "repeats": 5, "loss_steps": 20, "batches": [64, 1024]},
}
DEFAULT_FIRST_STEP_MODES = [m for m in MODES if m != "max-autotune"]
PROFILE_STEPS = 8          # two cycles of the dynamic schedule
CUDA_GRAPH_WARMUP = 3      # side-stream steps before the capture, as in PyTorch's example
PROBE_TIMEOUT_S = 1800
TIMING = ("host wall clock (time.perf_counter) around `steps` consecutive steps, each drawing "
          "its batch on the device and ending in loss.item(); sample = mean step time; "
          "reported: median of `repeats` samples after `warmup` steps (and after the "
          "`loss_steps` steps that give the loss), min/max = fastest/slowest sample")


# ---------------------------------------------------------------------------------------------
# Pure helpers (no torch): floor, schedule, rows, document, merge, table.

def dynamic_schedule(batch):
    """The batch sizes a dynamic run cycles through; the first (largest) is the row's batch."""
    three_q = batch * 3 // 4
    return [max(1, b) for b in (batch, three_q, batch // 2, three_q + 1)]


def with_optimizer(spec, optimizer):
    """The workload trained by `optimizer`: "sgd" as defined; "adamw" / "adamw-fused": AdamW with
    PyTorch's defaults (lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 1e-2), foreach=True
    or fused=True. Ember's ember_bench --optimizer adamw describes the same workload."""
    spec = copy.deepcopy(spec)
    if optimizer == "sgd":
        return spec
    if optimizer not in ("adamw", "adamw-fused"):
        raise ValueError("unknown optimizer {!r}".format(optimizer))
    spec["optimizer"] = {"name": "adamw", "lr": 1e-3, "momentum": 0.0, "weight_decay": 1e-2,
                         "betas": [0.9, 0.999], "eps": 1e-8}
    if optimizer == "adamw-fused":
        spec["optimizer"]["impl"] = "fused"
    return spec


def optimizer_states(optimizer):
    """State tensors per parameter the update reads and writes: AdamW 2, SGD 1 with momentum."""
    if optimizer.get("name") == "adamw":
        return 2
    return 1 if optimizer.get("momentum", 0) > 0 else 0


def workload_cost(spec):
    """(macs per layer, activations, params, input, classes) per sample: the spec's own counts
    (conv nets), else from its Linear layers."""
    layers = spec["layers"]
    if "macs" in spec:
        inp = 1
        for d in spec["input"]:
            inp *= d
        # A gpt sample is a sequence: one set of logits per token.
        classes = layers[-1] * inp if spec.get("arch") == "gpt" else layers[-1]
        return spec["macs"], spec["activations"], spec["params"], inp, classes
    pairs = list(zip(layers[:-1], layers[1:]))
    return ([i * o for i, o in pairs], sum(layers[1:-1]), sum(i * o + o for i, o in pairs),
            layers[0], layers[-1])


def floor_counts(spec, batch, states=None):
    """The brief's floor: GEMM FLOPs per step (no gradient for the input) and minimum bytes.
    `states` (optimizer_states) overrides what the momentum implies."""
    macs, acts, params, inp, classes = workload_cost(spec)
    m = states if states is not None else (1 if spec["optimizer"]["momentum"] > 0 else 0)
    # No gradient for the input's first product, except a gpt's (it reads the embeddings).
    first = 0 if spec.get("arch") == "gpt" else macs[0]
    flops = 6 * batch * sum(macs) - 2 * batch * first
    nbytes = 4 * (params * (5 + 2 * m) + batch * (2 * inp + 5 * acts + 4 * classes))
    return flops, nbytes


def floor_entry(spec, batch, peak, us_per_step, mode=None, states=None):
    """The row's floor; mode dynamic: the mean over the schedule its steps cycle through."""
    batches = dynamic_schedule(batch) if mode == "dynamic" else [batch]
    counts = [floor_counts(spec, b, states) for b in batches]
    flops = sum(c[0] for c in counts) / len(counts)
    nbytes = sum(c[1] for c in counts) / len(counts)
    us = 1e6 * max(flops / peak["flops_per_s"], nbytes / peak["bytes_per_s"])
    return {"flops": flops, "bytes": nbytes, "us": us, "share": us / us_per_step}


def summarize(samples_us):
    """(median, fastest, slowest) of the per-sample mean step times."""
    return statistics.median(samples_us), min(samples_us), max(samples_us)


def rel_diff(loss, reference):
    if reference is None or reference == 0 or not math.isfinite(reference):
        return None
    return abs(loss - reference) / abs(reference)


def ok_row(workload, batch, mode, m, peak, first_step, loss_steps, reference_loss, amp="none"):
    """A measured row. m: the measurements (samples_us, loss, recompiles, peak_memory_bytes,
    kernels_per_step); first_step: (cold_ms, warm_ms), either may be None."""
    spec = WORKLOADS[workload]
    us, fastest, slowest = summarize(m["samples_us"])
    row = {
        "workload": workload, "batch": batch, "mode": mode, "amp": amp, "status": "ok",
        "us_per_step": us, "steps_per_s": 1e6 / us,
        "us_per_step_min": fastest, "us_per_step_max": slowest,
        "first_step_ms": {"cold": first_step[0], "warm": first_step[1]},
        "peak_memory_bytes": m["peak_memory_bytes"],
        "kernels_per_step": m["kernels_per_step"],
        "loss": m["loss"], "loss_steps": loss_steps,
        "loss_rel_diff_vs_eager": 0.0 if mode == "eager" else rel_diff(m["loss"], reference_loss),
        "recompiles": m["recompiles"],
        "floor": floor_entry(spec, batch, peak, us,
                             mode, optimizer_states(spec["optimizer"])),
    }
    if mode == "dynamic":
        row["batches"] = dynamic_schedule(batch)
    return row


def failed_row(workload, batch, mode, status, message, amp="none"):
    row = {"workload": workload, "batch": batch, "mode": mode, "amp": amp, "status": status,
           "error": message}
    if mode == "dynamic":
        row["batches"] = dynamic_schedule(batch)
    return row


def utc_now():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def make_document(framework_version, machine, config, workloads, rows, command, created=None):
    return {
        "schema_version": 1,
        "framework": "pytorch",
        "framework_version": framework_version,
        "created": created or utc_now(),
        "command": command,
        "machine": machine,
        "config": config,
        "timing": TIMING,
        "workloads": {w: copy.deepcopy(WORKLOADS[w]) for w in workloads},
        "results": rows,
    }


def merge_documents(docs):
    """One document from runs made in parts (e.g. one per workload, to stay within a time
    limit). They must share framework, version, device and config; rows must not repeat. The
    first document's machine (and so its measured peak) is kept and every floor is recomputed
    against that peak, so the floors of the merged file are consistent with each other."""
    if not docs:
        raise ValueError("merge: no documents")
    first = docs[0]
    same = [("framework",), ("framework_version",), ("config",), ("machine", "device"),
            ("machine", "device_name")]
    for i, d in enumerate(docs[1:], 1):
        for path in same:
            a, b = first, d
            for k in path:
                a, b = a[k], b[k]
            if a != b:
                raise ValueError("merge: file {} differs in {}: {!r} vs {!r}".format(
                    i + 1, ".".join(path), b, a))
    out = copy.deepcopy(first)
    out["command"] = " ; ".join(d.get("command", "?") for d in docs)
    out["created"] = max(d["created"] for d in docs)
    note = " (merged files: the first file's peak)"
    if not out["machine"]["peak"]["how"].endswith(note):  # merging merged files adds it once
        out["machine"]["peak"]["how"] += note
    peak = out["machine"]["peak"]
    seen = set()
    out["results"] = []
    for d in docs:
        for w, spec in d["workloads"].items():
            if out["workloads"].setdefault(w, spec) != spec:
                raise ValueError("merge: workload {} is defined differently".format(w))
        for row in d["results"]:
            key = (row["workload"], row["batch"], row["mode"], row.get("amp", "none"))
            if key in seen:
                raise ValueError("merge: row {} appears twice".format(key))
            seen.add(key)
            row = copy.deepcopy(row)
            if row["status"] == "ok":
                spec = out["workloads"][row["workload"]]
                row["floor"] = floor_entry(spec, row["batch"], peak, row["us_per_step"], row["mode"],
                                           optimizer_states(spec["optimizer"]))
            out["results"].append(row)
    return out


def _fmt(v, spec):
    return "-" if v is None else format(v, spec)


def format_table(rows):
    head = ("workload", "batch", "mode", "us/step", "steps/s", "1st cold ms", "1st warm ms",
            "peak MiB", "kern/step", "loss", "rel diff", "recomp", "floor %")
    lines = []
    for r in rows:
        mode = r["mode"] if r.get("amp", "none") == "none" else "{} {}".format(r["mode"], r["amp"])
        if r["status"] != "ok":
            lines.append((r["workload"], str(r["batch"]), mode,
                          "{}: {}".format(r["status"], (r["error"].splitlines() or [""])[0][:70])))
            continue
        mem = r["peak_memory_bytes"]
        lines.append((
            r["workload"], str(r["batch"]), mode, _fmt(r["us_per_step"], ".1f"),
            _fmt(r["steps_per_s"], ".0f"), _fmt(r["first_step_ms"]["cold"], ".0f"),
            _fmt(r["first_step_ms"]["warm"], ".0f"),
            _fmt(None if mem is None else mem / 2**20, ".1f"),
            _fmt(r["kernels_per_step"], ".1f"), _fmt(r["loss"], ".5f"),
            _fmt(r["loss_rel_diff_vs_eager"], ".1e"), _fmt(r["recompiles"], "d"),
            _fmt(100 * r["floor"]["share"], ".1f")))
    widths = [max([len(h)] + [len(l[i]) for l in lines if i < 3 or len(l) == len(head)])
              for i, h in enumerate(head)]
    out = ["  ".join(h.rjust(w) for h, w in zip(head, widths))]
    for l in lines:
        if len(l) == len(head):
            out.append("  ".join(c.rjust(w) for c, w in zip(l, widths)))
        else:  # skipped or failed: the message takes the measured columns' place
            out.append("  ".join(c.rjust(w) for c, w in zip(l[:3], widths)) + "  " + l[3])
    return "\n".join(out)


def progress(msg):
    print(msg, file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# Torch side.

def import_torch():
    try:
        import torch
    except ImportError:
        sys.exit("torch_mlp: PyTorch is not installed here (run it where torch imports; "
                 "--help and --merge work without it)")
    return torch


def has_attr(obj, name):
    """hasattr for torch.backends objects, whose __getattr__ raises AssertionError in 1.13."""
    try:
        getattr(obj, name)
        return True
    except (AttributeError, AssertionError):
        return False


def configure_tf32(torch, on):
    mode = "tf32" if on else "ieee"
    matmul = torch.backends.cuda.matmul
    if has_attr(matmul, "fp32_precision"):
        matmul.fp32_precision = mode
        cudnn = torch.backends.cudnn
        for b in (cudnn, getattr(cudnn, "conv", None), getattr(cudnn, "rnn", None)):
            if b is not None and has_attr(b, "fp32_precision"):
                b.fp32_precision = mode
        return
    matmul.allow_tf32 = on
    torch.backends.cudnn.allow_tf32 = on
    torch.set_float32_matmul_precision("high" if on else "highest")


def resolve_device(torch, name):
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        sys.exit("torch_mlp: --device cuda, but torch.cuda.is_available() is False")
    return name


def cpu_name():
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def driver_version(torch):
    """The GPU driver release (e.g. 580.65.06): nvidia-smi, else the kernel module's version
    file; else the CUDA driver API version torch reports, labelled as such; else None."""
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                           capture_output=True, text=True, timeout=30)
        if r.returncode == 0 and r.stdout.strip():
            return r.stdout.strip().splitlines()[0].strip()
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        with open("/proc/driver/nvidia/version", encoding="utf-8") as f:
            for word in f.readline().split():
                if word[:1].isdigit() and "." in word:
                    return word
    except OSError:
        pass
    try:
        v = int(torch._C._cuda_getDriverVersion())
        return "CUDA driver API {}.{}".format(v // 1000, v % 1000 // 10)
    except Exception:
        return None


def measure_peak(torch, device, tf32):
    """The floor's denominators: best of 5 GEMMs and of 5 device copies."""
    cuda = device == "cuda"
    n = 4096 if cuda else 1024
    copy_bytes = (256 if cuda else 64) * 2**20

    def best_of_5(fn):
        fn()  # first call: library handles, heuristics, page faults
        best = math.inf
        for _ in range(5):
            if cuda:
                start = torch.cuda.Event(enable_timing=True)
                end = torch.cuda.Event(enable_timing=True)
                start.record()
                fn()
                end.record()
                end.synchronize()
                best = min(best, start.elapsed_time(end) / 1e3)
            else:
                t0 = time.perf_counter()
                fn()
                best = min(best, time.perf_counter() - t0)
        return best

    a = torch.randn(n, n, device=device)
    b = torch.randn(n, n, device=device)
    c = torch.empty(n, n, device=device)
    t_mm = best_of_5(lambda: torch.mm(a, b, out=c))
    del a, b, c
    src = torch.ones(copy_bytes // 4, device=device)
    dst = torch.empty_like(src)
    t_copy = best_of_5(lambda: dst.copy_(src))
    del src, dst
    how = ("best of 5: torch.mm fp32 {n}x{n}x{n} (TF32 {tf}), {clock}; best of 5 copy_ of "
           "{mib} MiB {where}, bytes read + written").format(
               n=n, tf="on" if tf32 else "off", mib=copy_bytes // 2**20,
               clock="CUDA events" if cuda else "perf_counter",
               where="device to device" if cuda else "in host memory")
    return {"flops_per_s": 2.0 * n**3 / t_mm, "bytes_per_s": 2.0 * copy_bytes / t_copy,
            "how": how}


def machine_info(torch, device, peak):
    cuda = device == "cuda"
    idx = torch.cuda.current_device() if cuda else None
    return {
        "hostname": socket.gethostname(),
        "os": platform.platform(),
        "cpu": cpu_name(),
        "device": "cuda:{}".format(idx) if cuda else "cpu",
        "device_name": torch.cuda.get_device_name(idx) if cuda else cpu_name(),
        "driver_version": driver_version(torch) if cuda else None,
        "cuda_version": torch.version.cuda if cuda else None,
        "compiler": "Python " + platform.python_version(),
        "peak": peak,
    }


AMP_DTYPES = {"bf16": "bfloat16", "fp16": "float16"}


def amp_skip_reason(mode, amp, optimizer):
    """Why a row cannot run with this amp (None: it can)."""
    if amp == "fp16" and mode == "cuda-graph" and optimizer != "adamw-fused":
        return ("fp16 GradScaler.step syncs with the host (found_inf.item()) unless the "
                "optimizer takes the scaling itself: a CUDA graph cannot capture that; run "
                "--optimizer adamw-fused for a capturable fp16 cuda-graph row")
    return None


def make_grad_scaler(torch, device):
    """GradScaler with its defaults (init_scale 65536): torch.amp's, or torch.cuda.amp's on
    releases before 2.3."""
    amp_mod = getattr(torch, "amp", None)
    if amp_mod is not None and hasattr(amp_mod, "GradScaler"):
        return amp_mod.GradScaler(device)
    return torch.cuda.amp.GradScaler()


def conv_layers(nn, spec):
    """The modules before a conv net's classifier (bench/workloads.h describes them)."""
    arch = spec.get("arch", "mlp")
    if arch in ("lstm", "gru2"):
        class LastStep(nn.Module):
            def __init__(self):
                super().__init__()
                feat, hid = spec["input"][1], spec["layers"][0]
                self.rnn = (nn.LSTM(feat, hid, batch_first=True) if arch == "lstm" else
                            nn.GRU(feat, hid, num_layers=2, batch_first=True))

            def forward(self, x):
                return self.rnn(x)[0][:, -1]

        return [LastStep()]
    if arch == "cnn":
        c = spec["input"][0]
        return [nn.Conv2d(c, 32, 3, padding=1), nn.ReLU(), nn.Conv2d(32, 64, 3, padding=1),
                nn.ReLU(), nn.MaxPool2d(2), nn.Flatten()]
    if arch != "resnet":
        return []

    class Block(nn.Module):
        def __init__(self, cin, cout, stride):
            super().__init__()
            self.conv1 = nn.Conv2d(cin, cout, 3, stride=stride, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(cout)
            self.conv2 = nn.Conv2d(cout, cout, 3, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(cout)
            self.downsample = None
            if stride != 1 or cin != cout:
                self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride=stride, bias=False),
                                                nn.BatchNorm2d(cout))

        def forward(self, x):
            y = self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x)))))
            return self.relu(y + (x if self.downsample is None else self.downsample(x)))

        relu = staticmethod(nn.functional.relu)

    mods = [nn.Conv2d(spec["input"][0], 16, 3, padding=1, bias=False), nn.BatchNorm2d(16),
            nn.ReLU()]
    mods += [Block(*b) for b in RESNET_BLOCKS]
    return mods + [nn.AdaptiveAvgPool2d(1), nn.Flatten()]


def gpt_model(torch, spec):
    """bench/workloads.h's gpt: token and position embeddings, pre-norm causal blocks (attention
    through F.scaled_dot_product_attention(is_causal=True) where PyTorch has it), a final
    LayerNorm, the output layer tied to the token embedding; [B, T] -> [B * T, V] logits."""
    nn, F = torch.nn, torch.nn.functional
    d, vocab, t = spec["layers"][0], spec["layers"][1], spec["input"][0]
    heads = spec["heads"]

    def attention(q, k, v):
        if hasattr(F, "scaled_dot_product_attention"):
            return F.scaled_dot_product_attention(q, k, v, is_causal=True)
        scores = (q / q.shape[-1] ** 0.5) @ k.transpose(-2, -1)  # PyTorch before 2.0
        keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
        return torch.softmax(scores.masked_fill(~keep, float("-inf")), -1) @ v

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm1, self.norm2 = nn.LayerNorm(d), nn.LayerNorm(d)
            self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
            self.linear1, self.linear2 = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

        def forward(self, x):
            b, n, _ = x.shape
            q, k, v = self.qkv(self.norm1(x)).split(d, dim=-1)
            split = lambda z: z.view(b, n, heads, d // heads).transpose(1, 2)  # noqa: E731
            a = attention(split(q), split(k), split(v)).transpose(1, 2).reshape(b, n, d)
            x = x + self.proj(a)
            return x + self.linear2(F.gelu(self.linear1(self.norm2(x))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok, self.pos = nn.Embedding(vocab, d), nn.Embedding(t, d)
            nn.init.normal_(self.tok.weight, std=0.02)
            nn.init.normal_(self.pos.weight, std=0.02)
            self.blocks = nn.ModuleList([Block() for _ in range(spec["depth"])])
            self.ln_f = nn.LayerNorm(d)
            self.head = nn.Linear(d, vocab, bias=False)
            self.head.weight = self.tok.weight  # tied

        def forward(self, idx):
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1], device=idx.device))
            for blk in self.blocks:
                x = blk(x)
            return self.head(self.ln_f(x)).reshape(-1, vocab)

    return GPT()


def build_training(torch, spec, device, seed, mode=None, amp="none"):
    """A fresh model from the seed (initialized on the CPU, then moved: the same weights on every
    device and in every mode), its optimizer, and the step function all modes share. AdamW runs
    foreach=True (or fused=True, spec "impl"); captured in a CUDA graph it needs capturable=True
    (the step count then stays on the device). amp "bf16" / "fp16": forward + loss under
    torch.autocast; "fp16" also scales the loss with a GradScaler (the module docstring)."""
    nn = torch.nn
    torch.manual_seed(seed)
    layers = spec["layers"]
    if spec.get("arch") == "gpt":
        model = gpt_model(torch, spec).to(device)
    else:
        mods = conv_layers(nn, spec)
        for k in range(len(layers) - 1):
            mods.append(nn.Linear(layers[k], layers[k + 1]))
            if k < len(layers) - 2:
                # GELU's default is the exact (erf) form, the brief's choice.
                mods.append(nn.ReLU() if spec["activation"] == "relu" else nn.GELU())
        model = nn.Sequential(*mods).to(device)
    if DDP["on"]:
        # Rank 0's weights on every rank (DDP broadcasts them), the gradients averaged.
        model = nn.parallel.DistributedDataParallel(
            model, device_ids=[DDP["local_rank"]] if device == "cuda" else None)
    clip = spec.get("clip_norm", 0)
    o = spec["optimizer"]
    if o["name"] == "adamw":
        impl = {"fused": True} if o.get("impl") == "fused" else {"foreach": True}
        opt = torch.optim.AdamW(model.parameters(), lr=o["lr"], betas=tuple(o["betas"]),
                                eps=o["eps"], weight_decay=o["weight_decay"],
                                capturable=(mode == "cuda-graph"), **impl)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=o["lr"], momentum=o["momentum"])
    loss_fn = nn.CrossEntropyLoss()
    if amp == "none":
        def step(x, y):
            opt.zero_grad(set_to_none=True)
            loss = loss_fn(model(x), y)
            loss.backward()
            if clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            opt.step()
            return loss

        return model, opt, step
    low = getattr(torch, AMP_DTYPES[amp])
    scaler = make_grad_scaler(torch, device) if amp == "fp16" else None
    cache = mode != "cuda-graph"

    def amp_step(x, y):
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device, dtype=low, cache_enabled=cache):
            loss = loss_fn(model(x), y)  # cross entropy: on autocast's float32 list
        if scaler is None:
            loss.backward()
            if clip:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            opt.step()
        else:
            scaler.scale(loss).backward()
            if clip:  # clip the true gradients
                scaler.unscale_(opt)
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            scaler.step(opt)
            scaler.update()
        return loss

    amp_step.scaler = scaler  # CudaGraphStep resets it after its warm-up
    return model, opt, amp_step


def sample_shape(spec):
    """One input sample's shape: [features] of an MLP, [C, H, W] of a conv net."""
    return spec["input"] if "input" in spec else [spec["layers"][0]]


class Batches:
    """Fresh batches on the device from a generator of their own, cycling through a schedule."""

    def __init__(self, torch, device, seed, schedule, features, classes, tokens=False):
        self.torch, self.device, self.schedule = torch, device, schedule
        self.features, self.classes, self.tokens = features, classes, tokens
        self.gen = torch.Generator(device=device)
        self.gen.manual_seed(seed)
        self.i = 0

    def next(self):
        b = self.schedule[self.i % len(self.schedule)]
        self.i += 1
        if self.tokens:  # gpt: token sequences, one target per token
            x = self.torch.randint(0, self.classes, (b, *self.features), device=self.device,
                                   generator=self.gen)
            n = b * self.features[0]
        else:
            x = self.torch.randn(b, *self.features, device=self.device, generator=self.gen)
            n = b
        y = self.torch.randint(0, self.classes, (n,), device=self.device, generator=self.gen)
        return x, y


class CudaGraphStep:
    """The whole step as one hand-captured CUDA graph (see the module docstring)."""

    def __init__(self, torch, model, opt, step):
        self.torch, self.model, self.opt, self.step = torch, model, opt, step
        self.graph = None

    def _capture(self, x, y):
        torch = self.torch
        self.static_x = torch.zeros_like(x)
        self.static_y = torch.zeros_like(y)
        params = list(self.model.parameters())
        start = [p.detach().clone() for p in params]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(CUDA_GRAPH_WARMUP):
                self.step(self.static_x, self.static_y)
        torch.cuda.current_stream().wait_stream(side)
        # Undo the warm-up's updates: the replays then follow the eager trajectory. A zeroed
        # momentum buffer makes the first replay's buf*momentum + grad equal the first eager
        # step's buf = grad exactly.
        with torch.no_grad():
            for p, p0 in zip(params, start):
                p.copy_(p0)
            # AdamW's exp_avg, exp_avg_sq and (capturable) step likewise restart from zero.
            for state in self.opt.state.values():
                for v in state.values():
                    if torch.is_tensor(v):
                        v.zero_()
            # fp16: the GradScaler's scale and growth tracker back to their start (private
            # attributes; the warm-up's steps counted towards growth_interval).
            scaler = getattr(self.step, "scaler", None)
            if scaler is not None:
                scaler._scale.fill_(scaler._init_scale)
                scaler._growth_tracker.zero_()
        # Gradients are None here, so backward allocates them from the graph's pool and each
        # replay writes them afresh (the step's own zero_grad is then a no-op during capture).
        self.opt.zero_grad(set_to_none=True)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.static_loss = self.step(self.static_x, self.static_y)

    def __call__(self, x, y):
        if self.graph is None:
            self._capture(x, y)
        self.static_x.copy_(x)
        self.static_y.copy_(y)
        self.graph.replay()
        return self.static_loss


def make_stepper(torch, mode, model, opt, step):
    if mode == "eager":
        return step
    if mode == "cuda-graph":
        return CudaGraphStep(torch, model, opt, step)
    if mode == "dynamic":
        return torch.compile(step, dynamic=True)
    compiled = torch.compile(step, mode=mode)
    if mode not in GRAPH_TREE_MODES:
        return compiled
    mark = torch.compiler.cudagraph_mark_step_begin

    def run(x, y):
        mark()  # the previous step's outputs (its loss, already read) may be overwritten
        return compiled(x, y)

    return run


def calls_until_compiled(mode):
    """Step calls until the first that runs in the mode's final form (first_step_ms)."""
    return 3 if mode in GRAPH_TREE_MODES else 1


def graphs_compiled(torch):
    try:
        from torch._dynamo.utils import counters
        return int(counters["stats"]["unique_graphs"])
    except Exception:
        return None


def count_device_ops(torch, one_step, n):
    """Kernels + memcpy + memset per step seen by the profiler over n steps."""
    from torch.profiler import ProfilerActivity, profile
    try:
        from torch.autograd import DeviceType
    except ImportError:
        from torch.profiler import DeviceType
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            one_step()
        torch.cuda.synchronize()
    count = 0
    results = getattr(prof.profiler, "kineto_results", None)
    if results is not None:
        for e in results.events():
            if e.device_type() != DeviceType.CUDA:
                continue
            if hasattr(e, "is_user_annotation") and e.is_user_annotation():
                continue
            count += 1
    else:  # older profilers: the parsed events
        count = sum(1 for e in prof.events() if e.device_type == DeviceType.CUDA)
    return count / n


def release(torch, cuda):
    """Frees the previous row: compiled code, CUDA graph trees and their pools, cached blocks."""
    try:  # PyTorch before 2.0 (Debian's 1.13) has no Dynamo: nothing compiled to drop
        import torch._dynamo
        torch._dynamo.reset()
    except ImportError:
        pass
    gc.collect()
    if cuda:
        try:  # private API; the graph trees' memory pools outlive dynamo's reset otherwise
            from torch._inductor.cudagraph_trees import reset_cudagraph_trees
            reset_cudagraph_trees()
        except Exception:
            pass
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


# --ddp: set by join_data_parallel(); read by build_training and the row's figures.
DDP = {"on": False, "rank": 0, "world": 1, "local_rank": 0}


def join_data_parallel(torch, device):
    """The process group of the ranks a launcher (ember-run, torchrun) started: NCCL on the GPU
    of LOCAL_RANK, or Gloo on the CPU."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        sys.exit("torch_mlp --ddp: RANK and WORLD_SIZE are not set; start it under a launcher, "
                 "e.g. `ember-run --nproc-per-node 2 python3 bench/torch_mlp.py --ddp ...`")
    import torch.distributed as dist
    local = int(os.environ.get("LOCAL_RANK", "0"))
    if device == "cuda":
        torch.cuda.set_device(local)
    dist.init_process_group("nccl" if device == "cuda" else "gloo")
    DDP.update(on=True, rank=dist.get_rank(), world=dist.get_world_size(), local_rank=local)


def batch_seed(seed):
    """Each rank of a data-parallel run draws batches of its own."""
    return seed + 1 + DDP["rank"] if DDP["on"] else seed


def ranks_identical(torch, model):
    """Whether every rank's parameters equal rank 0's, bit for bit (every rank calls it)."""
    import torch.distributed as dist
    differ = 0
    with torch.no_grad():
        for p in model.parameters():
            root = p.detach().clone()
            dist.broadcast(root, 0)
            differ += int(not torch.equal(root, p.detach()))
        count = torch.tensor([float(differ)], device=next(model.parameters()).device)
        dist.all_reduce(count)
    return bool(count.item() == 0)


class Ctx:
    """What every row needs: torch, the device and the run's configuration."""

    def __init__(self, torch, device, args):
        self.torch, self.device, self.cuda, self.args = torch, device, device == "cuda", args


def measure_row(ctx, workload, batch, mode):
    torch, args = ctx.torch, ctx.args
    spec = WORKLOADS[workload]
    schedule = dynamic_schedule(batch) if mode == "dynamic" else [batch]
    release(torch, ctx.cuda)
    if ctx.cuda:
        torch.cuda.reset_peak_memory_stats()
    model, opt, step = build_training(torch, spec, ctx.device, args.seed, mode, args.amp)
    stepper = make_stepper(torch, mode, model, opt, step)
    batches = Batches(torch, ctx.device, batch_seed(args.seed), schedule, sample_shape(spec),
                      spec["layers"][-1], spec.get("arch") == "gpt")

    def one():
        x, y = batches.next()
        return stepper(x, y).item()

    loss = one()
    compiled_at = []  # step numbers after which new graphs had appeared (stderr diagnosis)
    base = last = graphs_compiled(torch)
    for k in range(2, args.loss_steps + args.warmup + 1):
        value = one()
        if k <= args.loss_steps:
            loss = value
        now = graphs_compiled(torch)
        if now is not None and last is not None and now != last:
            compiled_at.append(k)
        last = now
    samples = []
    for _ in range(args.repeats):
        t0 = time.perf_counter()
        for _ in range(args.steps):
            one()
        samples.append((time.perf_counter() - t0) * 1e6 / args.steps)
        now = graphs_compiled(torch)
        if now is not None and last is not None and now != last:
            compiled_at.append("timed sample {}".format(len(samples)))
        last = now
    recompiles = None
    if mode in COMPILED_MODES and base is not None and last is not None:
        recompiles = last - base
        if compiled_at:
            progress("  {} B={} {}: graphs compiled after the first call at step(s) {}".format(
                workload, batch, mode, ", ".join(str(s) for s in compiled_at)))
    if not math.isfinite(loss):
        raise RuntimeError("the loss after {} steps is {}".format(args.loss_steps, loss))
    peak_mem = int(torch.cuda.max_memory_allocated()) if ctx.cuda else None
    kernels = None
    if ctx.cuda and not args.no_kernel_count:
        try:  # a secondary figure: a profiler problem costs it, not the row
            kernels = count_device_ops(torch, one, PROFILE_STEPS)
        except Exception as e:
            progress("  {} B={} {}: no kernel count: {}".format(workload, batch, mode,
                                                                error_message(e)))
    out = {"samples_us": samples, "loss": loss, "recompiles": recompiles,
           "peak_memory_bytes": peak_mem, "kernels_per_step": kernels}
    if DDP["on"]:
        out["ranks_identical"] = ranks_identical(torch, model)
    return out


def eager_loss(ctx, workload, schedule):
    """The eager reference: loss after loss_steps steps from the seed over a batch schedule."""
    torch = ctx.torch
    release(torch, ctx.cuda)
    spec = WORKLOADS[workload]
    _, _, step = build_training(torch, spec, ctx.device, ctx.args.seed, None, ctx.args.amp)
    batches = Batches(torch, ctx.device, batch_seed(ctx.args.seed), schedule, sample_shape(spec),
                      spec["layers"][-1], spec.get("arch") == "gpt")
    loss = None
    for _ in range(ctx.args.loss_steps):
        x, y = batches.next()
        loss = step(x, y).item()
    return loss


# ---------------------------------------------------------------------------------------------
# first_step_ms: this script re-run in new processes.

def probe_main(args):
    """The child: time from the first step call to the end of the first compiled step."""
    torch = import_torch()
    workload, batch, mode = args.probe.split(",")
    batch = int(batch)
    configure_tf32(torch, args.tf32)
    device = resolve_device(torch, args.device)
    check_amp_device(args.amp, device)
    spec = WORKLOADS[workload]
    schedule = dynamic_schedule(batch) if mode == "dynamic" else [batch]
    model, opt, step = build_training(torch, spec, device, args.seed, mode, args.amp)
    stepper = make_stepper(torch, mode, model, opt, step)
    batches = Batches(torch, device, args.seed, schedule, sample_shape(spec), spec["layers"][-1],
                      spec.get("arch") == "gpt")
    if device == "cuda":
        torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(calls_until_compiled(mode)):
        x, y = batches.next()
        stepper(x, y).item()
    print("FIRST_STEP_MS {!r}".format((time.perf_counter() - t0) * 1e3), flush=True)
    return 0


def run_probe(cmd, env):
    try:
        r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        progress("  first-step probe timed out: " + " ".join(cmd))
        return None
    for line in reversed(r.stdout.splitlines()):
        if line.startswith("FIRST_STEP_MS "):
            return float(line.split()[1])
    tail = (r.stderr.strip().splitlines() or ["(no output)"])[-1]
    progress("  first-step probe failed (exit {}): {}".format(r.returncode, tail))
    return None


def probe_first_step(args, device, workload, batch, mode):
    """(cold_ms, warm_ms): two new processes sharing a fresh compile cache directory."""
    cmd = [sys.executable, os.path.abspath(__file__), "--probe",
           "{},{},{}".format(workload, batch, mode), "--device", device, "--seed",
           str(args.seed), "--optimizer", args.optimizer, "--amp", args.amp] + \
        (["--tf32"] if args.tf32 else [])
    with tempfile.TemporaryDirectory(prefix="torch_mlp_cache_") as cache:
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=cache,
                   TRITON_CACHE_DIR=os.path.join(cache, "triton"))
        cold = run_probe(cmd, env)
        warm = run_probe(cmd, env)
    return cold, warm


# ---------------------------------------------------------------------------------------------
# The run.

def error_message(e):
    text = "{}: {}".format(type(e).__name__, e).strip()
    lines = [l for l in text.splitlines() if l.strip()]
    return " | ".join(lines[:3])[:500] or type(e).__name__


def check_amp_device(amp, device):
    if amp == "fp16" and device != "cuda":
        sys.exit("torch_mlp: --amp fp16 needs CUDA (float16 autocast with a GradScaler); on the "
                 "CPU use --amp bf16 or none")


def run_benchmark(args):
    torch = import_torch()
    configure_tf32(torch, args.tf32)
    if args.threads:
        torch.set_num_threads(args.threads)
    device = resolve_device(torch, args.device)
    check_amp_device(args.amp, device)
    if args.ddp:
        join_data_parallel(torch, device)
        args.no_first_step = True  # the probes' new processes would not be ranks of the group
        args.no_kernel_count = True
    lead = DDP["rank"] == 0  # the rank that reports
    say = progress if lead else (lambda msg: None)
    for k, v in DEFAULTS[device].items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    first_step_batches = args.first_step_batches or args.batches
    ctx = Ctx(torch, device, args)
    say("torch_mlp: PyTorch {} on {}; measuring the peak".format(torch.__version__, device))
    peak = measure_peak(torch, device, args.tf32)
    release(torch, ctx.cuda)
    modes = [m for m in MODES if m in args.modes]
    plan = [(w, b, m) for w in args.workloads for b in args.batches for m in modes]
    rows, eager_refs = [], {}
    for i, (w, b, m) in enumerate(plan, 1):
        tag = "[{:>{}}/{}] {} B={} {}".format(i, len(str(len(plan))), len(plan), w, b, m)
        if args.amp != "none":
            tag += " amp " + args.amp
        if args.ddp and m == "cuda-graph":
            rows.append(failed_row(w, b, m, "skipped",
                                   "not measured with DistributedDataParallel", args.amp))
            say(tag + ": skipped (ddp)")
            continue
        if device == "cpu" and m not in CPU_MODES:
            rows.append(failed_row(w, b, m, "skipped", "needs CUDA: not run on the CPU",
                                   args.amp))
            say(tag + ": skipped (CPU)")
            continue
        skip = amp_skip_reason(m, args.amp, args.optimizer)
        if skip:
            rows.append(failed_row(w, b, m, "skipped", skip, args.amp))
            say("{}: skipped: {}".format(tag, skip))
            continue
        say(tag + ": running")
        try:
            meas = measure_row(ctx, w, b, m)
            schedule = tuple(dynamic_schedule(b) if m == "dynamic" else [b])
            if m == "eager":
                eager_refs[(w, schedule)] = meas["loss"]
            elif (w, schedule) not in eager_refs:
                try:  # without a reference the row keeps its figures, rel diff null
                    eager_refs[(w, schedule)] = eager_loss(ctx, w, list(schedule))
                except Exception as e:
                    eager_refs[(w, schedule)] = None
                    say("  eager reference failed: " + error_message(e))
            first = (None, None)
            if not args.no_first_step and m in args.first_step_modes \
                    and b in first_step_batches:
                release(torch, ctx.cuda)
                say(tag + ": first-step probes (2 new processes)")
                first = probe_first_step(args, device, w, b, m)
            row = ok_row(w, b, m, meas, peak, first, args.loss_steps, eager_refs[(w, schedule)],
                         args.amp)
            if args.ddp:
                row["samples_per_s"] = DDP["world"] * b * 1e6 / row["us_per_step"]
                row["ranks_identical"] = meas["ranks_identical"]
            say("{}: {:.1f} us/step, {:.0f} steps/s, loss {:.6f}".format(
                tag, row["us_per_step"], row["steps_per_s"], row["loss"]))
        except Exception as e:  # a failing mode is a result, not the end of the run
            row = failed_row(w, b, m, "error", error_message(e), args.amp)
            say("{}: error: {}".format(tag, row["error"]))
        rows.append(row)
    config = {"warmup": args.warmup, "steps": args.steps, "repeats": args.repeats,
              "seed": args.seed, "tf32": args.tf32, "loss_steps": args.loss_steps,
              "threads": torch.get_num_threads()}
    if args.ddp:
        config["world_size"] = DDP["world"]
    command = " ".join(shlex.quote(a) for a in [os.path.relpath(sys.argv[0])] + sys.argv[1:])
    return make_document(str(torch.__version__), machine_info(torch, device, peak), config,
                         args.workloads, rows, "python3 " + command)


def csv_list(kind, allowed=None, convert=str):
    def parse(text):
        items = [t.strip() for t in text.split(",") if t.strip()]
        if not items:
            raise argparse.ArgumentTypeError("empty {} list".format(kind))
        out = []
        for t in items:
            try:
                v = convert(t)
            except ValueError:
                raise argparse.ArgumentTypeError("bad {}: {!r}".format(kind, t))
            if allowed is not None and v not in allowed:
                raise argparse.ArgumentTypeError("unknown {} {!r} (known: {})".format(
                    kind, t, ", ".join(allowed)))
            if convert is int and v < 1:
                raise argparse.ArgumentTypeError("{} must be >= 1: {}".format(kind, t))
            out.append(v)
        return out
    return parse


def positive(text):
    v = int(text)
    if v < 1:
        raise argparse.ArgumentTypeError("must be >= 1: {}".format(text))
    return v


def non_negative(text):
    v = int(text)
    if v < 0:
        raise argparse.ArgumentTypeError("must be >= 0: {}".format(text))
    return v


def parse_args(argv=None):
    ap = argparse.ArgumentParser(
        description="Ember's benchmark workloads in PyTorch (eager, torch.compile modes, a "
                    "hand-captured CUDA graph), written in bench/schema/bench.schema.json.",
        epilog="GPU defaults: warmup 50, steps 100, repeats 11, loss-steps 100, batches "
               "64,1024,8192. CPU: 3, 10, 5, 20, 64,1024.")
    ap.add_argument("--device", choices=["auto", "cpu", "cuda"], default="auto")
    ap.add_argument("--workloads", type=csv_list("workload", list(WORKLOADS)),
                    default=["mlp", "deep_mlp"], help="default: mlp,deep_mlp (also: cnn, resnet, lstm, gru2, gpt_small, gpt_base)")
    ap.add_argument("--batches", type=csv_list("batch", convert=int), default=None)
    ap.add_argument("--modes", type=csv_list("mode", MODES), default=list(MODES),
                    help="default: " + ",".join(MODES))
    ap.add_argument("--warmup", type=non_negative, default=None)
    ap.add_argument("--steps", type=positive, default=None, help="steps per timed sample")
    ap.add_argument("--repeats", type=positive, default=None, help="timed samples")
    ap.add_argument("--loss-steps", type=positive, default=None)
    ap.add_argument("--seed", type=non_negative, default=0)
    ap.add_argument("--tf32", action="store_true", help="allow TF32 matmuls (off by default)")
    ap.add_argument("--threads", type=positive, default=None,
                    help="torch.set_num_threads (CPU intra-op threads; default: torch's)")
    ap.add_argument("--optimizer", choices=["sgd", "adamw", "adamw-fused"], default="sgd",
                    help="sgd (each workload's own) or AdamW for every workload, foreach=True "
                         "(adamw) or fused=True (adamw-fused)")
    ap.add_argument("--amp", choices=["none", "bf16", "fp16"], default="none",
                    help="mixed precision: torch.autocast to bfloat16 or float16 around forward "
                         "+ loss; fp16 adds a GradScaler (CUDA only). Default none")
    ap.add_argument("--json", metavar="PATH", help="write the results here")
    ap.add_argument("--ddp", action="store_true",
                    help="DistributedDataParallel over the ranks a launcher started (ember-run "
                         "--nproc-per-node N): NCCL on LOCAL_RANK's GPU, Gloo on the CPU; the "
                         "batch is per rank, rank 0 reports")
    ap.add_argument("--no-first-step", action="store_true",
                    help="skip the first-step probes (new processes); first_step_ms is null")
    ap.add_argument("--first-step-modes", type=csv_list("mode", MODES),
                    default=DEFAULT_FIRST_STEP_MODES,
                    help="modes that get first-step probes (default: all but max-autotune, "
                         "whose cold compile takes minutes); the others get null")
    ap.add_argument("--first-step-batches", type=csv_list("batch", convert=int), default=None,
                    help="batches that get first-step probes (default: all)")
    ap.add_argument("--no-kernel-count", action="store_true",
                    help="skip the profiler pass; kernels_per_step is null")
    ap.add_argument("--merge", nargs="+", metavar="FILE",
                    help="merge result files of this script (same config) into --json; "
                         "runs nothing")
    ap.add_argument("--probe", help=argparse.SUPPRESS)  # WORKLOAD,BATCH,MODE: the child
    return ap.parse_args(argv)


def write_json(doc, path):
    parent = os.path.dirname(os.path.abspath(path))
    os.makedirs(parent, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=2, allow_nan=False)
        f.write("\n")


def main(argv=None):
    global WORKLOADS
    args = parse_args(argv)
    WORKLOADS = {w: with_optimizer(s, args.optimizer) for w, s in WORKLOADS.items()}
    if args.probe:
        return probe_main(args)
    if args.merge:
        if not args.json:
            sys.exit("torch_mlp: --merge needs --json OUT")
        docs = []
        for p in args.merge:
            with open(p, encoding="utf-8") as f:
                docs.append(json.load(f))
        try:
            doc = merge_documents(docs)
        except ValueError as e:
            sys.exit("torch_mlp: {}".format(e))
    else:
        doc = run_benchmark(args)
        if DDP["on"]:
            import torch.distributed as dist
            dist.destroy_process_group()
            if DDP["rank"] != 0:
                return 0
            for r in doc["results"]:
                if r["status"] == "ok":
                    print("ddp {} batch {} per rank x {} ranks, {}: {:.6g} M samples/s, parameters "
                          "{} across ranks".format(r["workload"], r["batch"], DDP["world"],
                                                   r["mode"], r["samples_per_s"] / 1e6,
                                                   "identical" if r["ranks_identical"]
                                                   else "DIFFERENT"))
    print(format_table(doc["results"]))
    if args.json:
        write_json(doc, args.json)
        progress("torch_mlp: wrote " + args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
