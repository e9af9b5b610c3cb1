#!/usr/bin/env python3
"""PyTorch's activation functions on fixed inputs, for tests/nn/test_activation.cpp (which reads the file and does
not need PyTorch).

  python3 scripts/activation_reference.py      writes tests/fixtures/nn/activation_torch.safetensors

Needs torch and safetensors (pip install torch safetensors; generated with torch 2.15.0 from pip).

In float64: "input" [4, 3, 17] holds the kinks of every function (0, +-0.5, +-1, +-3, 6, the softplus threshold)
and values far out (+-40, +-100), "weight" the same shape; for each case below "<case>.output" is f(input) and
"<case>.grad" the gradient of sum(f(input) * weight) with respect to input. PReLU's cases also hold
"<case>.prelu_weight" and "<case>.grad_weight".
"""
import pathlib

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

FIXTURE = pathlib.Path(__file__).resolve().parent.parent / "tests/fixtures/nn/activation_torch.safetensors"

CASES = {
    "relu": F.relu,
    "leaky_relu": F.leaky_relu,
    "leaky_relu_0.2": lambda x: F.leaky_relu(x, 0.2),
    "elu": F.elu,
    "elu_0.5": lambda x: F.elu(x, 0.5),
    "selu": F.selu,
    "celu_2": lambda x: F.celu(x, 2.0),
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
    "mish": F.mish,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "hardtanh": F.hardtanh,
    "hardtanh_-2_3": lambda x: F.hardtanh(x, -2.0, 3.0),
    "relu6": F.relu6,
    "hardsigmoid": F.hardsigmoid,
    "hardswish": F.hardswish,
    "softplus": F.softplus,
    "softplus_2_3": lambda x: F.softplus(x, beta=2.0, threshold=3.0),
    "softsign": F.softsign,
    "logsigmoid": F.logsigmoid,
    "tanhshrink": F.tanhshrink,
    "softshrink": F.softshrink,
    "softshrink_1": lambda x: F.softshrink(x, 1.0),
    "hardshrink": F.hardshrink,
    "hardshrink_1": lambda x: F.hardshrink(x, 1.0),
    "softmax_1": lambda x: F.softmax(x, 1),
    "log_softmax_2": lambda x: F.log_softmax(x, 2),
}


def main():
    torch.manual_seed(0)
    kinks = [0.0, 0.5, -0.5, 1.0, -1.0, 3.0, -3.0, 6.0, 1.5, 2.0, 20.0, -20.0, 40.0, -40.0, 100.0, -100.0, 2.5]
    x = torch.randn(4, 3, 17, dtype=torch.float64) * 3
    x[0, :, :] = torch.tensor(kinks, dtype=torch.float64)
    x[1, 0, :] = -torch.tensor(kinks, dtype=torch.float64)
    weight = torch.randn(4, 3, 17, dtype=torch.float64)
    out = {"input": x, "weight": weight}
    for name, f in CASES.items():
        xi = x.clone().requires_grad_()
        y = f(xi)
        (y * weight).sum().backward()
        out[f"{name}.output"] = y.detach()
        out[f"{name}.grad"] = xi.grad
    for name, a in {"prelu_shared": torch.tensor([0.25]), "prelu_channels": torch.tensor([0.1, -0.3, 2.0])}.items():
        xi = x.clone().requires_grad_()
        w = a.to(torch.float64).requires_grad_()
        y = F.prelu(xi, w)
        (y * weight).sum().backward()
        out[f"{name}.prelu_weight"] = w.detach()
        out[f"{name}.output"] = y.detach()
        out[f"{name}.grad"] = xi.grad
        out[f"{name}.grad_weight"] = w.grad
    save_file({k: v.contiguous() for k, v in out.items()}, str(FIXTURE), metadata={"torch": torch.__version__})
    print(f"wrote {FIXTURE} ({len(out)} tensors)")


if __name__ == "__main__":
    main()
