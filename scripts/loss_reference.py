#!/usr/bin/env python3
"""PyTorch's float64 values for the binary_cross_entropy, binary_cross_entropy_with_logits(weight=) and
kl_div(reduction='batchmean') cases of tests/nn/test_loss.cpp, printed as the comments and constants written
there (the tests hold the numbers; they do not need PyTorch).

Usage: python3 scripts/loss_reference.py   (needs torch; generated with torch 2.15.0 from pip)

  bce         F.binary_cross_entropy on [2, 4] probabilities with 0 and 1 in the input (the log terms clamped
              at -100, the gradient's denominator at PyTorch's EPSILON, the float 1e-12, so 1 / EPSILON is
              1000000003995.8), weight [4] broadcast over the rows, the values it refuses
  bce_logits  F.binary_cross_entropy_with_logits on [2, 3] logits with weight [2, 1] and pos_weight [3]
  kl_batch    F.kl_div(reduction='batchmean') on [3, 2], with and without log_target, and on a 0-d input
"""
import torch
import torch.nn.functional as F

torch.set_default_dtype(torch.float64)


def show(name, t):
    print(f"{name}: {[float(v) for v in t.detach().reshape(-1)]}")


def bce():
    x = torch.tensor([[0.2, 0.9, 0.5, 0.0], [1.0, 1e-50, 0.7, 0.35]], requires_grad=True)
    y = torch.tensor([[0.0, 1.0, 0.3, 0.0], [0.0, 1.0, 0.25, 0.6]], requires_grad=True)
    w = torch.tensor([0.5, 2.0, 1.0, 1.5])
    none = F.binary_cross_entropy(x, y, reduction="none")
    none.sum().backward()
    show("bce none", none)
    show("bce none: x.grad of its sum", x.grad)
    show("bce none: y.grad of its sum", y.grad)
    x.grad = None
    mean = F.binary_cross_entropy(x, y.detach(), weight=w)
    mean.backward()
    show("bce mean, weight", mean)
    show("bce mean, weight: x.grad", x.grad)
    show("bce sum, weight", F.binary_cross_entropy(x, y, weight=w, reduction="sum"))
    for bad in (1.5, -0.1, float("nan")):
        for which in ("input", "target"):
            a = torch.tensor([bad if which == "input" else 0.5])
            b = torch.tensor([bad if which == "target" else 0.5])
            try:
                F.binary_cross_entropy(a, b)
                print(f"bce {which} {bad}: accepted")
            except RuntimeError as e:
                print(f"bce {which} {bad}: {e}")


def bce_logits():
    x = torch.tensor([[0.3, -1.2, 2.5], [-0.4, 0.0, 4.0]], requires_grad=True)
    y = torch.tensor([[1.0, 0.0, 0.6], [0.2, 0.5, 1.0]])
    w = torch.tensor([[0.5], [2.0]])
    pw = torch.tensor([1.0, 3.0, 0.5])
    none = F.binary_cross_entropy_with_logits(x, y, weight=w, reduction="none")
    show("bce_logits none, weight", none)
    mean = F.binary_cross_entropy_with_logits(x, y, weight=w, pos_weight=pw)
    mean.backward()
    show("bce_logits mean, weight, pos_weight", mean)
    show("bce_logits mean, weight, pos_weight: x.grad", x.grad)
    show("bce_logits sum, weight, pos_weight",
         F.binary_cross_entropy_with_logits(x, y, weight=w, pos_weight=pw, reduction="sum"))
    for shape in ((2,), (2, 2, 1)):
        try:
            F.binary_cross_entropy_with_logits(x, y, weight=torch.ones(shape))
            print(f"bce_logits weight {shape}: accepted")
        except RuntimeError as e:
            print(f"bce_logits weight {shape}: {e}")


def kl_batch():
    x = torch.tensor([[-1.2, -0.3], [-2.5, -0.7], [-1.0, -0.1]], requires_grad=True)
    t = torch.tensor([[0.2, 0.0], [0.5, 0.3], [0.0, 1.0]])
    lt = torch.tensor([[-1.0, -2.0], [0.3, -0.5], [-3.0, 0.0]])
    batch = F.kl_div(x, t, reduction="batchmean")
    batch.backward()
    show("kl batchmean", batch)
    show("kl batchmean: x.grad", x.grad)
    show("kl batchmean, log_target", F.kl_div(x, lt, reduction="batchmean", log_target=True))
    show("kl batchmean, 0-d", F.kl_div(torch.tensor(-0.5), torch.tensor(0.4), reduction="batchmean"))
    try:
        F.mse_loss(x, t, reduction="batchmean")
    except ValueError as e:
        print(f"mse_loss batchmean: {e}")


print(f"torch {torch.__version__}")
bce()
bce_logits()
kl_batch()
