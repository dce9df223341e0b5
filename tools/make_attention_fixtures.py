#!/usr/bin/env python3
"""Makes the PyTorch fixture of Ember's attention layers (nn/attention.h, nn/transformer.h) that
tests/nn/test_attention_parity.cpp checks Ember against, on the CPU and on CUDA.

    /usr/bin/python3 tools/make_attention_fixtures.py [--out tests/fixtures]

Writes attention_layers.safetensors. Each case <c> holds, in float64 (masks as bool or float64):
  <c>.param.<name>: the module's parameters under PyTorch's state_dict names (none for sdpa)
  <c>.q, <c>.k, <c>.v (MultiheadAttention and sdpa) or <c>.x (TransformerEncoderLayer)
  <c>.attn_mask, <c>.key_padding_mask where the case passes them
  <c>.out and, for MultiheadAttention with need_weights, <c>.weights
  <c>.grad_out: the weights of the scalar sum(out * grad_out)
  <c>.grad_q, <c>.grad_k, <c>.grad_v or <c>.grad_x, <c>.grad.<name>: its gradients
and metadata "<c>" holds the kind and the constructor's and call's arguments as JSON.

torch 1.13 has no F.scaled_dot_product_attention: the sdpa cases are its definition written out
in PyTorch (softmax(q k^T / sqrt(E) + mask) v, a bool mask true where attention is allowed),
independent of Ember's code.
"""

import argparse
import json
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_parity_fixtures as mpf  # noqa: E402

F64 = torch.float64

# name: (kind, constructor args, call args, shapes)
CASES = {
    "mha_self_batch_first_padding": (
        "MultiheadAttention", dict(embed_dim=8, num_heads=2, batch_first=True),
        dict(self_attention=True, key_padding_mask=True, need_weights=True), dict(N=3, L=5)),
    "mha_cross_float_mask": (
        "MultiheadAttention", dict(embed_dim=6, num_heads=3),
        dict(float_mask=True, need_weights=True, average_attn_weights=False),
        dict(N=2, L=4, S=7)),
    "mha_causal_bool_mask_no_bias": (
        "MultiheadAttention", dict(embed_dim=8, num_heads=4, bias=False),
        dict(self_attention=True, causal_bool_mask=True, need_weights=False), dict(N=2, L=6)),
    "mha_unbatched": (
        "MultiheadAttention", dict(embed_dim=4, num_heads=1),
        dict(need_weights=True), dict(L=3, S=5)),
    "encoder_post_norm_relu": (
        "TransformerEncoderLayer", dict(d_model=8, nhead=2, dim_feedforward=16, dropout=0.0),
        dict(key_padding_mask=True), dict(N=3, L=5)),
    "encoder_pre_norm_gelu_causal": (
        "TransformerEncoderLayer", dict(d_model=12, nhead=3, dim_feedforward=20, dropout=0.0,
                                        activation="gelu", batch_first=True, norm_first=True),
        dict(causal_bool_mask=True), dict(N=2, L=7)),
    "sdpa_plain": ("sdpa", {}, {}, dict(B=(2, 3), L=5, S=6, E=4, Ev=3)),
    "sdpa_causal": ("sdpa", {}, dict(is_causal=True), dict(B=(2,), L=6, S=6, E=5, Ev=5)),
    "sdpa_bool_mask_scale": ("sdpa", {}, dict(bool_mask=True, scale=0.3),
                             dict(B=(3,), L=4, S=5, E=3, Ev=2)),
}


def sdpa(q, k, v, mask=None, is_causal=False, scale=None):
    s = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q * s) @ k.transpose(-2, -1)
    if is_causal:
        keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
        scores = scores.masked_fill(~keep, float("-inf"))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf")) if mask.dtype == torch.bool else scores + mask
    return torch.softmax(scores, -1) @ v


def run(kind, ctor, call, shp, gen):
    torch.manual_seed(int(torch.randint(0, 2**31, (1,), generator=gen)))
    t = {}
    randn = lambda *s: torch.randn(*s, dtype=F64, generator=gen)  # noqa: E731
    if kind == "sdpa":
        B = shp["B"]
        q = randn(*B, shp["L"], shp["E"]).requires_grad_()
        k = randn(*B, shp["S"], shp["E"]).requires_grad_()
        v = randn(*B, shp["S"], shp["Ev"]).requires_grad_()
        mask = None
        if call.get("bool_mask"):
            mask = torch.rand(shp["L"], shp["S"], generator=gen) > 0.3
            mask[:, 0] = True  # every row attends somewhere
            t["attn_mask"] = mask
        out = sdpa(q, k, v, mask, call.get("is_causal", False), call.get("scale"))
        ins = {"q": q, "k": k, "v": v}
        module = None
    elif kind == "MultiheadAttention":
        module = torch.nn.MultiheadAttention(**ctor).double()
        E, bf = ctor["embed_dim"], ctor.get("batch_first", False)
        N, L = shp.get("N"), shp["L"]
        S = L if call.get("self_attention") else shp.get("S", L)

        def seq(length):
            if N is None:
                return randn(length, E)
            return randn(N, length, E) if bf else randn(length, N, E)
        q = seq(L).requires_grad_()
        if call.get("self_attention"):
            k = v = q
            ins = {"q": q}
        else:
            k, v = seq(S).requires_grad_(), seq(S).requires_grad_()
            ins = {"q": q, "k": k, "v": v}
        kw = dict(need_weights=call.get("need_weights", True),
                  average_attn_weights=call.get("average_attn_weights", True))
        if call.get("key_padding_mask"):
            kpm = torch.zeros(N, S, dtype=torch.bool)
            kpm[0, -2:] = True
            kpm[-1, -1] = True
            kw["key_padding_mask"] = kpm
            t["key_padding_mask"] = kpm
        if call.get("float_mask"):
            m = randn(L, S)
            kw["attn_mask"] = m
            t["attn_mask"] = m
        if call.get("causal_bool_mask"):
            m = torch.ones(L, S, dtype=torch.bool).triu(1)  # true: not allowed
            kw["attn_mask"] = m
            t["attn_mask"] = m
        out, w = module(q, k, v, **kw)
        if w is not None:
            t["weights"] = w.detach()
    else:
        module = torch.nn.TransformerEncoderLayer(**ctor).double().eval()
        E, bf, N, L = ctor["d_model"], ctor.get("batch_first", False), shp["N"], shp["L"]
        x = (randn(N, L, E) if bf else randn(L, N, E)).requires_grad_()
        ins = {"x": x}
        kw = {}
        if call.get("key_padding_mask"):
            kpm = torch.zeros(N, L, dtype=torch.bool)
            kpm[0, -1] = True
            kw["src_key_padding_mask"] = kpm
            t["key_padding_mask"] = kpm
        if call.get("causal_bool_mask"):
            m = torch.ones(L, L, dtype=torch.bool).triu(1)
            kw["src_mask"] = m
            t["attn_mask"] = m
        out = module(x, **kw)
    g = randn(*out.shape)
    (out * g).sum().backward()
    t["out"] = out.detach()
    t["grad_out"] = g
    for name, x in ins.items():
        t[name] = x.detach()
        t["grad_" + name] = x.grad.detach()
    if module is not None:
        for name, p in module.named_parameters():
            t["param." + name] = p.detach()
            t["grad." + name] = p.grad.detach()
    return t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests",
                                                  "fixtures"))
    args = ap.parse_args()
    gen = torch.Generator().manual_seed(2025)
    tensors, meta = {}, {}
    for name, (kind, ctor, call, shp) in CASES.items():
        for k, v in run(kind, ctor, call, shp, gen).items():
            tensors[name + "." + k] = v.contiguous()
        meta[name] = json.dumps(dict(kind=kind, ctor=ctor, call=call))
    meta["torch_version"] = torch.__version__
    meta["generator"] = "tools/make_attention_fixtures.py"
    path = os.path.join(args.out, "attention_layers.safetensors")
    mpf.save(tensors, path, meta)
    print("wrote", path, len(tensors), "tensors")


if __name__ == "__main__":
    main()
