#!/usr/bin/env python3
"""Makes the PyTorch fixture of Ember's recurrent layers (nn/rnn.h) that
tests/nn/test_rnn_parity.cpp checks Ember against, on the CPU and on CUDA.

    /usr/bin/python3 tools/make_rnn_fixtures.py [--out tests/fixtures]

Writes rnn_layers.safetensors. Each case <c> holds, in float64:
  <c>.param.<name>: the layer's parameters under PyTorch's state_dict names
  <c>.x, and <c>.h0 / <c>.c0 where the case passes initial states
  <c>.out, <c>.h_n, <c>.c_n: the outputs (a cell's: h_n, and c_n for LSTMCell)
  <c>.grad_out, <c>.grad_h_n, <c>.grad_c_n: weights of the scalar
      sum(out * grad_out) + sum(h_n * grad_h_n) + sum(c_n * grad_c_n)
  <c>.grad_x, <c>.grad_h0, <c>.grad_c0, <c>.grad.<name>: its gradients
and metadata "<c>" holds the constructor's arguments as JSON.
"""

import argparse
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_parity_fixtures as mpf  # noqa: E402

# kind, constructor arguments, input shape, whether initial states are passed
CASES = {
    "lstm": ("LSTM", dict(input_size=5, hidden_size=7), (6, 3, 5), True),
    "lstm_2layer_bidir_batch_first": ("LSTM", dict(input_size=4, hidden_size=6, num_layers=2,
                                                   bidirectional=True, batch_first=True),
                                      (3, 5, 4), False),
    "lstm_unbatched": ("LSTM", dict(input_size=3, hidden_size=4), (5, 3), True),
    "gru_2layer": ("GRU", dict(input_size=5, hidden_size=4, num_layers=2), (7, 2, 5), True),
    "gru_bidir": ("GRU", dict(input_size=3, hidden_size=5, bidirectional=True), (4, 3, 3), False),
    "rnn_tanh": ("RNN", dict(input_size=4, hidden_size=6), (5, 2, 4), True),
    "rnn_relu_2layer_nobias": ("RNN", dict(input_size=4, hidden_size=5, num_layers=2,
                                           nonlinearity="relu", bias=False), (4, 3, 4), False),
    "lstm_cell": ("LSTMCell", dict(input_size=5, hidden_size=6), (3, 5), True),
    "gru_cell": ("GRUCell", dict(input_size=4, hidden_size=3), (2, 4), True),
    "rnn_cell_relu": ("RNNCell", dict(input_size=3, hidden_size=4, nonlinearity="relu"),
                      (2, 3), False),
}


def run(kind, args, xshape, with_state, gen):
    torch.manual_seed(int(torch.randint(0, 2**31, (1,), generator=gen)))
    layer = getattr(torch.nn, kind)(**args).double()
    x = torch.randn(xshape, dtype=torch.float64, generator=gen).requires_grad_()
    cell = kind.endswith("Cell")
    lstm = kind.startswith("LSTM")
    hid = args["hidden_size"]
    states = {}
    if with_state:
        if cell:
            shape = (xshape[0], hid) if len(xshape) == 2 else (hid,)
        else:
            d = 2 if args.get("bidirectional") else 1
            lead = args.get("num_layers", 1) * d
            if len(xshape) == 2:
                shape = (lead, hid)
            else:
                shape = (lead, xshape[0] if args.get("batch_first") else xshape[1], hid)
        states["h0"] = torch.randn(shape, dtype=torch.float64, generator=gen).requires_grad_()
        if lstm:
            states["c0"] = torch.randn(shape, dtype=torch.float64, generator=gen).requires_grad_()
    hx = None
    if states:
        hx = (states["h0"], states["c0"]) if lstm else states["h0"]
    y = layer(x, hx)
    outs = {}
    if cell:
        if lstm:
            outs["h_n"], outs["c_n"] = y
        else:
            outs["h_n"] = y
    else:
        outs["out"], st = y
        if lstm:
            outs["h_n"], outs["c_n"] = st
        else:
            outs["h_n"] = st
    loss = 0
    t = {"x": x.detach()}
    for k, v in outs.items():
        g = torch.randn(v.shape, dtype=torch.float64, generator=gen)
        t["grad_" + k] = g
        t[k] = v.detach()
        loss = loss + (v * g).sum()
    loss.backward()
    t["grad_x"] = x.grad.detach()
    for k, v in states.items():
        t[k] = v.detach()
        t["grad_" + k] = v.grad.detach()
    for name, p in layer.named_parameters():
        t["param." + name] = p.detach()
        t["grad." + name] = p.grad.detach()
    return t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests",
                                                  "fixtures"))
    args = ap.parse_args()
    gen = torch.Generator().manual_seed(2024)
    tensors, meta = {}, {}
    for name, (kind, ctor, xshape, with_state) in CASES.items():
        for k, v in run(kind, ctor, xshape, with_state, gen).items():
            tensors[name + "." + k] = v.contiguous()
        meta[name] = json.dumps(dict(kind=kind, **ctor))
    meta["torch_version"] = torch.__version__
    meta["generator"] = "tools/make_rnn_fixtures.py"
    path = os.path.join(args.out, "rnn_layers.safetensors")
    mpf.save(tensors, path, meta)
    print("wrote", path, len(tensors), "tensors")


if __name__ == "__main__":
    main()
