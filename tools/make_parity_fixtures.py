#!/usr/bin/env python3
"""Makes the PyTorch parity fixtures that tests/nn/test_parity_torch.cpp checks Ember against.

Run it where PyTorch is installed (the GPU machine), from anywhere:

    python3 tools/make_parity_fixtures.py [--out tests/fixtures]

and commit the files it writes. Everything runs on the CPU, single-threaded, with deterministic
algorithms, from fixed torch.Generator seeds, so a rerun reproduces the same numbers.

Files (safetensors; written with the `safetensors` package when it is installed, otherwise with
the small writer below, which follows the same format; each file is read back and compared):

  mlp_inputs.safetensors        the fixed start of both training runs
      init.fc1.weight [512, 784], init.fc1.bias [512], init.fc2.weight [10, 512],
      init.fc2.bias [10]          stored as BF16: drawn like nn.Linear's default init, then
                                  rounded to the bfloat16 grid, so they are exact float32 values
                                  at half the bytes; both sides train on float32(stored value)
      batch.x [20, 16, 784]     BF16 likewise (randn rounded to the bfloat16 grid)
      batch.y [20, 16]          I64 class indices in [0, 10)
  mlp_sgd_plain.safetensors     SGD(lr=0.01)
  mlp_sgd_momentum.safetensors  SGD(lr=0.01, momentum=0.9, dampening=0, nesterov=True,
                                weight_decay=1e-4)
      loss [20]                 F32, the loss of each step's forward pass (what loss.item()
                                returns in that step, before that step's update)
      final.fc1.bias, final.fc2.weight, final.fc2.bias
                                F32, the parameters after the 20 updates
      final.fc1.weight.every13  F32, fc1.weight.flatten()[::13] after the updates (13 is
                                coprime with 784 and 512: the sample covers every row and column)
      final.fc1.weight.row_sum  F64 [512], final.fc1.weight.double().sum(1)
      final.fc1.weight.col_sum  F64 [784], final.fc1.weight.double().sum(0)
                                (the full final fc1.weight is 1.6 MB per run; the sample and the
                                sums, which every element enters, keep all fixtures under 2 MB)
  nn_layers.safetensors         float64 forward values and gradients of layers and losses; keys
                                "<case>.<tensor>", the case list in metadata "cases" and each
                                case's options in metadata "<case>.options". For a case:
      x (input), w / b (weight / bias of Linear, LayerNorm, Embedding), target, weight /
      pos_weight (BCEWithLogits), gy (the upstream gradient: backward runs y.backward(gy)),
      y (output), gx, gw, gb (gradients of x, w, b).

Ember's CPU and CUDA training must reproduce the losses to relative 1e-5 and the weights to
float32 rounding; the float64 layers to 1e-10.
"""

import argparse
import json
import math
import os
import sys

import torch

MLP_IN, MLP_HIDDEN, MLP_OUT = 784, 512, 10
MLP_BATCH, MLP_STEPS = 16, 20
MLP_LR = 0.01
SAMPLE_STRIDE = 13
MLP_SEED = 20240611
LAYER_SEED = 20240612

RUNS = {
    "plain": dict(lr=MLP_LR),
    "momentum": dict(lr=MLP_LR, momentum=0.9, dampening=0.0, nesterov=True, weight_decay=1e-4),
}

# --------------------------------------------------------------------------------------------
# safetensors I/O


def _dtype_code(dtype):
    codes = {torch.float32: "F32", torch.float64: "F64", torch.float16: "F16",
             torch.bfloat16: "BF16", torch.int32: "I32", torch.int64: "I64", torch.bool: "BOOL"}
    return codes[dtype]


def _tensor_bytes(t):
    flat = t.contiguous().reshape(-1).view(torch.uint8)
    try:
        return flat.numpy().tobytes()
    except (RuntimeError, TypeError):  # torch without numpy
        return bytes(flat.tolist())


def _write_fallback(tensors, path, metadata):
    """The safetensors layout: u64 LE header length, JSON header padded with spaces to a
    multiple of 8, then the tensors' bytes back to back in header order."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        t = tensors[name]
        data = _tensor_bytes(t)
        header[name] = {"dtype": _dtype_code(t.dtype), "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(len(text).to_bytes(8, "little"))
        f.write(text)
        for data in blobs:
            f.write(data)


def _read_back(path):
    """An independent reader, to check the written file before it is committed."""
    with open(path, "rb") as f:
        raw = f.read()
    n = int.from_bytes(raw[:8], "little")
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    metadata = header.pop("__metadata__", {})
    data = raw[8 + n:]
    dtypes = {"F32": torch.float32, "F64": torch.float64, "F16": torch.float16,
              "BF16": torch.bfloat16, "I32": torch.int32, "I64": torch.int64, "BOOL": torch.bool}
    out = {}
    for name, info in header.items():
        begin, end = info["data_offsets"]
        buf = bytearray(data[begin:end])
        t = torch.frombuffer(buf, dtype=torch.uint8) if buf else torch.empty(0, dtype=torch.uint8)
        out[name] = t.view(dtypes[info["dtype"]]).reshape(info["shape"]).clone()
    return out, metadata


def save(tensors, path, metadata):
    assert sys.byteorder == "little", "safetensors stores little-endian data"
    tensors = {k: v.detach().contiguous().clone() for k, v in tensors.items()}
    metadata = {k: str(v) for k, v in metadata.items()}
    try:
        from safetensors.torch import save_file
        save_file(tensors, path, metadata=metadata)
        writer = "safetensors"
    except ImportError:
        _write_fallback(tensors, path, metadata)
        writer = "built-in writer (safetensors package not installed)"
    back, back_meta = _read_back(path)
    assert set(back) == set(tensors), f"{path}: names differ after reading back"
    for k, v in tensors.items():
        assert back[k].dtype == v.dtype and back[k].shape == v.shape, f"{path}: {k} metadata"
        assert torch.equal(back[k], v), f"{path}: {k} differs after reading back"
    assert back_meta == metadata, f"{path}: metadata differs after reading back"
    print(f"wrote {path} ({os.path.getsize(path)} bytes, {len(tensors)} tensors, {writer})")


# --------------------------------------------------------------------------------------------
# The MLP: 784 -> 512 -> ReLU -> 10, CrossEntropyLoss, 20 SGD steps on fixed batches of 16


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(MLP_IN, MLP_HIDDEN)
        self.fc2 = torch.nn.Linear(MLP_HIDDEN, MLP_OUT)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))


def bf16_grid(t):
    """Rounds to bfloat16 (nearest even) and keeps it so: stored as BF16, exact in float32."""
    return t.to(torch.bfloat16)


def make_mlp_inputs():
    g = torch.Generator().manual_seed(MLP_SEED)

    def uniform(shape, bound):  # nn.Linear's default init: U(-1/sqrt(fan_in), 1/sqrt(fan_in))
        return (torch.rand(shape, generator=g, dtype=torch.float32) * 2 - 1) * bound

    b1, b2 = 1 / math.sqrt(MLP_IN), 1 / math.sqrt(MLP_HIDDEN)
    inputs = {
        "init.fc1.weight": bf16_grid(uniform((MLP_HIDDEN, MLP_IN), b1)),
        "init.fc1.bias": bf16_grid(uniform((MLP_HIDDEN,), b1)),
        "init.fc2.weight": bf16_grid(uniform((MLP_OUT, MLP_HIDDEN), b2)),
        "init.fc2.bias": bf16_grid(uniform((MLP_OUT,), b2)),
        "batch.x": bf16_grid(torch.randn((MLP_STEPS, MLP_BATCH, MLP_IN), generator=g)),
        "batch.y": torch.randint(0, MLP_OUT, (MLP_STEPS, MLP_BATCH), generator=g,
                                 dtype=torch.int64),
    }
    return inputs


def train_mlp(inputs, sgd_options):
    net = Net()
    with torch.no_grad():
        for name, p in net.named_parameters():
            p.copy_(inputs["init." + name].to(torch.float32))
    # foreach=False: the plain per-parameter loop, torch.optim.sgd._single_tensor_sgd.
    opt = torch.optim.SGD(net.parameters(), foreach=False, **sgd_options)
    criterion = torch.nn.CrossEntropyLoss()
    xs = inputs["batch.x"].to(torch.float32)
    ys = inputs["batch.y"]
    losses = []
    for step in range(MLP_STEPS):
        opt.zero_grad()
        loss = criterion(net(xs[step]), ys[step])
        loss.backward()
        opt.step()
        losses.append(loss.item())
    params = {name: p.detach().clone() for name, p in net.named_parameters()}
    w1 = params["fc1.weight"]
    out = {
        "loss": torch.tensor(losses, dtype=torch.float32),
        "final.fc1.bias": params["fc1.bias"],
        "final.fc2.weight": params["fc2.weight"],
        "final.fc2.bias": params["fc2.bias"],
        "final.fc1.weight.every13": w1.reshape(-1)[::SAMPLE_STRIDE].clone(),
        "final.fc1.weight.row_sum": w1.double().sum(1),
        "final.fc1.weight.col_sum": w1.double().sum(0),
    }
    return out, losses


# --------------------------------------------------------------------------------------------
# Layers and losses in float64


class LayerCases:
    """Each case draws its inputs from one generator, runs the PyTorch module, and backprops a
    random upstream gradient gy, recording the output and the gradients."""

    def __init__(self):
        self.g = torch.Generator().manual_seed(LAYER_SEED)
        self.tensors = {}
        self.options = {}

    def randn(self, *shape, scale=1.0):
        return torch.randn(shape, generator=self.g, dtype=torch.float64) * scale

    def add(self, case, options, module, x, extra_inputs=(), params=()):
        """`module(x, *extra_inputs)`; gradients of x (when floating) and of `params`
        (name, tensor) pairs that belong to the module."""
        assert case not in self.options, case
        if x.is_floating_point():
            x = x.clone().requires_grad_(True)
        y = module(x, *extra_inputs)
        gy = self.randn(*y.shape)
        y.backward(gy)
        t = {"x": x.detach(), "gy": gy, "y": y.detach()}
        if x.is_floating_point():
            t["gx"] = x.grad.detach()
        for short, p in params:
            t[short] = p.detach().clone()
            t["g" + short] = p.grad.detach().clone()
        for i, e in enumerate(extra_inputs):
            t[("target", "extra1", "extra2")[i]] = e.detach().clone()
        for k, v in t.items():
            self.tensors[f"{case}.{k}"] = v
        self.options[case] = json.dumps(options, sort_keys=True)

    def add_buffers(self, case, **named):
        for k, v in named.items():
            self.tensors[f"{case}.{k}"] = v.detach().clone()


def make_layer_cases():
    c = LayerCases()
    d = torch.float64

    # Linear over a 3-D input, so the leading dims are flattened and the bias broadcast.
    lin = torch.nn.Linear(7, 4).to(d)
    with torch.no_grad():
        lin.weight.copy_(c.randn(4, 7, scale=0.5))
        lin.bias.copy_(c.randn(4))
    c.add("linear", {}, lin, c.randn(2, 3, 7), params=[("w", lin.weight), ("b", lin.bias)])

    c.add("relu", {}, torch.nn.ReLU(), c.randn(5, 6))
    c.add("gelu_none", {"approximate": "none"}, torch.nn.GELU(approximate="none"),
          c.randn(5, 6, scale=2))
    c.add("gelu_tanh", {"approximate": "tanh"}, torch.nn.GELU(approximate="tanh"),
          c.randn(5, 6, scale=2))
    c.add("sigmoid", {}, torch.nn.Sigmoid(), c.randn(5, 6, scale=2))
    c.add("tanh", {}, torch.nn.Tanh(), c.randn(5, 6, scale=2))

    # LayerNorm over the last two dims, with non-trivial affine parameters.
    ln = torch.nn.LayerNorm([4, 5], eps=1e-5).to(d)
    with torch.no_grad():
        ln.weight.copy_(1 + c.randn(4, 5, scale=0.3))
        ln.bias.copy_(c.randn(4, 5, scale=0.3))
    c.add("layer_norm", {"normalized_shape": [4, 5], "eps": 1e-5}, ln, c.randn(3, 4, 5, scale=2),
          params=[("w", ln.weight), ("b", ln.bias)])

    # Embedding with repeated indices: their rows' gradients must add up.
    emb = torch.nn.Embedding(10, 6).to(d)
    with torch.no_grad():
        emb.weight.copy_(c.randn(10, 6))
    idx = torch.tensor([[1, 3, 3, 9], [0, 1, 7, 3], [9, 2, 5, 1]], dtype=torch.int64)
    c.add("embedding", {"num_embeddings": 10, "embedding_dim": 6}, emb, idx,
          params=[("w", emb.weight)])

    # Cross entropy: logits [6, 5] (and [2, 5, 3] with targets [2, 3]).
    target = torch.tensor([0, 4, 2, 2, 1, 3], dtype=torch.int64)
    ignored = torch.tensor([0, -100, 2, 4, -100, 3], dtype=torch.int64)
    custom_ignored = torch.tensor([3, 4, 2, 3, 1, 0], dtype=torch.int64)
    ce_cases = [
        ("cross_entropy_mean", target, dict(reduction="mean")),
        ("cross_entropy_sum", target, dict(reduction="sum")),
        ("cross_entropy_none", target, dict(reduction="none")),
        ("cross_entropy_ignore", ignored, dict(reduction="mean")),
        ("cross_entropy_ignore_sum", ignored, dict(reduction="sum")),
        ("cross_entropy_ignore_index3", custom_ignored, dict(reduction="mean", ignore_index=3)),
        ("cross_entropy_smooth", target, dict(reduction="mean", label_smoothing=0.1)),
        ("cross_entropy_smooth_sum", target, dict(reduction="sum", label_smoothing=0.1)),
        ("cross_entropy_smooth_ignore", ignored, dict(reduction="mean", label_smoothing=0.1)),
        ("cross_entropy_smooth_none", ignored, dict(reduction="none", label_smoothing=0.1)),
    ]
    for name, tgt, opts in ce_cases:
        full_opts = dict(ignore_index=-100, label_smoothing=0.0)
        full_opts.update(opts)
        c.add(name, full_opts, torch.nn.CrossEntropyLoss(**full_opts), c.randn(6, 5, scale=2),
              extra_inputs=(tgt,))
    spatial_target = torch.tensor([[0, 4, 1], [2, 2, 3]], dtype=torch.int64)
    c.add("cross_entropy_spatial", dict(reduction="mean", ignore_index=-100, label_smoothing=0.1),
          torch.nn.CrossEntropyLoss(reduction="mean", label_smoothing=0.1),
          c.randn(2, 5, 3, scale=2), extra_inputs=(spatial_target,))

    # MSE between two float64 tensors (the gradient of the input only).
    for red in ("mean", "sum", "none"):
        c.add(f"mse_{red}", {"reduction": red}, torch.nn.MSELoss(reduction=red), c.randn(4, 5),
              extra_inputs=(c.randn(4, 5),))

    # NLL of log-probabilities.
    for name, tgt, red in (("nll_mean", target, "mean"), ("nll_sum", target, "sum"),
                           ("nll_none", ignored, "none"), ("nll_ignore", ignored, "mean")):
        logp = torch.log_softmax(c.randn(6, 5, scale=2), dim=1)
        c.add(name, {"reduction": red, "ignore_index": -100},
              torch.nn.NLLLoss(reduction=red), logp, extra_inputs=(tgt,))

    # BCE with logits: soft targets in [0, 1]; weight [5] and pos_weight [5] broadcast.
    def soft_target():
        return torch.rand((4, 5), generator=c.g, dtype=d)

    c.add("bce_mean", {"reduction": "mean"}, torch.nn.BCEWithLogitsLoss(),
          c.randn(4, 5, scale=3), extra_inputs=(soft_target(),))
    w, pw = torch.rand(5, generator=c.g, dtype=d) + 0.5, torch.rand(5, generator=c.g, dtype=d) * 3
    c.add("bce_weight_pos_weight_sum", {"reduction": "sum", "weight": "[5]", "pos_weight": "[5]"},
          torch.nn.BCEWithLogitsLoss(weight=w, pos_weight=pw, reduction="sum"),
          c.randn(4, 5, scale=3), extra_inputs=(soft_target(),))
    c.add_buffers("bce_weight_pos_weight_sum", weight=w, pos_weight=pw)
    pw2 = torch.rand(5, generator=c.g, dtype=d) * 3
    c.add("bce_pos_weight_none", {"reduction": "none", "pos_weight": "[5]"},
          torch.nn.BCEWithLogitsLoss(pos_weight=pw2, reduction="none"),
          c.randn(4, 5, scale=3), extra_inputs=(soft_target(),))
    c.add_buffers("bce_pos_weight_none", pos_weight=pw2)

    metadata = {"cases": ",".join(c.options), "dtype": "float64"}
    metadata.update({f"{k}.options": v for k, v in c.options.items()})
    return c.tensors, metadata


# --------------------------------------------------------------------------------------------


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default=os.path.join(root, "tests", "fixtures"),
                    help="directory for the fixture files (default: tests/fixtures)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    common = {"torch_version": torch.__version__, "generator": "tools/make_parity_fixtures.py"}

    inputs = make_mlp_inputs()
    save(inputs, os.path.join(args.out, "mlp_inputs.safetensors"),
         dict(common, model=f"{MLP_IN}-{MLP_HIDDEN}-relu-{MLP_OUT}", batch=MLP_BATCH,
              steps=MLP_STEPS, seed=MLP_SEED))
    for run, sgd in RUNS.items():
        out, losses = train_mlp(inputs, sgd)
        meta = dict(common, optimizer="SGD", steps=MLP_STEPS, sample_stride=SAMPLE_STRIDE,
                    loss_first=repr(losses[0]), loss_last=repr(losses[-1]))
        meta.update({k: repr(v) for k, v in sgd.items()})
        save(out, os.path.join(args.out, f"mlp_sgd_{run}.safetensors"), meta)
        print(f"  {run}: loss {losses[0]:.6f} -> {losses[-1]:.6f}")

    tensors, meta = make_layer_cases()
    meta.update(common)
    save(tensors, os.path.join(args.out, "nn_layers.safetensors"), meta)

    total = sum(os.path.getsize(os.path.join(args.out, f)) for f in os.listdir(args.out)
                if f.endswith(".safetensors"))
    print(f"total {total} bytes of fixtures in {args.out}")


if __name__ == "__main__":
    main()
