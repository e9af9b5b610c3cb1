#!/usr/bin/env python3
"""PyTorch's values for tests/attention/test_multihead.cpp, written once to
tests/fixtures/attention/multihead.safetensors (the tests read the file; they do not need PyTorch).

Usage: python3 scripts/attention_reference.py   (needs torch >= 2.0 and safetensors; generated with
torch 2.15.0 from pip)

A torch.nn.MultiheadAttention(E=8, H=2) with random parameters and:
  self.*   self-attention on x [L=5, N=3, E], need_weights (averaged), and the gradients of
           sum(out * g) with respect to x and every parameter;
  cross.*  cross-attention, query [5, 3, 8], key/value [7, 3, 8], key_padding_mask [3, 7] and a bool attn_mask
           [5, 7] (true: not allowed), weights per head;
  sdpa.*   F.scaled_dot_product_attention on [2, 2, 5, 4] / [2, 2, 7, 4] with a float mask [2, 1, 5, 7] and
           with is_causal.
"""
import pathlib

import torch
from safetensors.torch import save_file

torch.manual_seed(0)
E, H, L, S, N = 8, 2, 5, 7, 3
mha = torch.nn.MultiheadAttention(E, H).double()
with torch.no_grad():
    for p in mha.parameters():
        p.copy_(torch.randn_like(p) * 0.5)
t = {name: p.detach().clone() for name, p in mha.state_dict().items()}

x = torch.randn(L, N, E, dtype=torch.float64, requires_grad=True)
g = torch.randn(L, N, E, dtype=torch.float64)
out, weights = mha(x, x, x, need_weights=True)
(out * g).sum().backward()
t.update({"self.x": x.detach(), "self.g": g, "self.out": out.detach(), "self.weights": weights.detach(),
          "self.grad_x": x.grad})
for name, p in mha.named_parameters():
    t["self.grad." + name] = p.grad.clone()

q = torch.randn(L, N, E, dtype=torch.float64)
kv = torch.randn(S, N, E, dtype=torch.float64)
kpm = torch.zeros(N, S, dtype=torch.bool)
kpm[1, 5:] = True
kpm[2, 0] = True
am = torch.triu(torch.ones(L, S, dtype=torch.bool), diagonal=3)
with torch.no_grad():
    out, weights = mha(q, kv, kv, key_padding_mask=kpm, attn_mask=am, need_weights=True, average_attn_weights=False)
t.update({"cross.q": q, "cross.kv": kv, "cross.key_padding_mask": kpm, "cross.attn_mask": am, "cross.out": out,
          "cross.weights": weights})

sq, sk, sv = (torch.randn(2, 2, n, 4, dtype=torch.float64) for n in (L, S, S))
fmask = torch.randn(2, 1, L, S, dtype=torch.float64)
F = torch.nn.functional
t.update({"sdpa.q": sq, "sdpa.k": sk, "sdpa.v": sv, "sdpa.mask": fmask,
          "sdpa.out_mask": F.scaled_dot_product_attention(sq, sk, sv, attn_mask=fmask),
          "sdpa.out_causal": F.scaled_dot_product_attention(sq, sk, sv, is_causal=True)})

path = pathlib.Path(__file__).resolve().parent.parent / "tests/fixtures/attention/multihead.safetensors"
path.parent.mkdir(parents=True, exist_ok=True)
save_file({k: v.contiguous() for k, v in t.items()}, str(path))
print(f"wrote {len(t)} tensors to {path} (torch {torch.__version__})")
