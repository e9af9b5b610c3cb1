#!/usr/bin/env python3
"""PyTorch's conv_transpose2d, conv1d and conv_transpose1d on fixed inputs, for tests/nn/test_conv_variants.cpp
(which reads the file and does not need PyTorch).

  python3 scripts/conv_reference.py      writes tests/fixtures/nn/conv_torch.safetensors

Needs torch and safetensors (pip install torch safetensors; generated with torch 2.15.0 from pip).

For each case: "<case>.x", "<case>.weight", "<case>.bias" (float32 values stored as float64), "<case>.w" (the
weights of the loss sum(output * w)), and computed by PyTorch in float64 and in float32 (suffix "32"):
"<case>.output", "<case>.grad.x", "<case>.grad.weight", "<case>.grad.bias".
"""
import pathlib

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

FIXTURE = pathlib.Path(__file__).resolve().parent.parent / "tests/fixtures/nn/conv_torch.safetensors"

# name: (function, x shape, weight shape, keyword arguments)
CASES = {
    "transpose2d_stride2": (F.conv_transpose2d, (2, 4, 5, 6), (4, 3, 3, 3),
                            dict(stride=2, padding=1, output_padding=1)),
    "transpose2d_groups_dilation": (F.conv_transpose2d, (2, 4, 4, 5), (4, 3, 2, 3),
                                    dict(stride=(1, 2), padding=(0, 2), groups=2, dilation=2)),
    "transpose2d_plain": (F.conv_transpose2d, (1, 3, 4, 4), (3, 2, 4, 4), dict()),
    "conv1d": (F.conv1d, (2, 4, 11), (6, 2, 3), dict(stride=2, padding=1, dilation=2, groups=2)),
    "conv1d_plain": (F.conv1d, (3, 3, 8), (5, 3, 4), dict()),
    "transpose1d": (F.conv_transpose1d, (2, 4, 7), (4, 3, 3), dict(stride=3, padding=1, output_padding=2)),
    "transpose2d_outpad_dilation": (F.conv_transpose2d, (1, 2, 4, 4), (2, 3, 3, 3), dict(dilation=2, output_padding=1)),
    "transpose1d_outpad_dilation": (F.conv_transpose1d, (2, 3, 5), (3, 2, 3), dict(dilation=2, output_padding=1)),
}


def main():
    torch.manual_seed(0)
    out = {}
    for case, (f, xs, ws, kw) in CASES.items():
        x, weight = torch.randn(xs), torch.randn(ws)
        cout = weight.shape[1] * kw.get("groups", 1) if "transpose" in case else weight.shape[0]
        bias = torch.randn(cout)
        out[f"{case}.x"], out[f"{case}.weight"], out[f"{case}.bias"] = x.double(), weight.double(), bias.double()
        w = None
        for dtype, suffix in ((torch.float64, ""), (torch.float32, "32")):
            args = [t.to(dtype).clone().requires_grad_() for t in (x, weight, bias)]
            y = f(*args, **kw)
            if w is None:
                w = torch.randn(y.shape, dtype=torch.float64)
                out[f"{case}.w"] = w
            (y * w.to(dtype)).sum().backward()
            out[f"{case}.output{suffix}"] = y.detach().double()
            for name, a in zip(("x", "weight", "bias"), args):
                out[f"{case}.grad{suffix}.{name}"] = a.grad.double()
    save_file({k: v.contiguous() for k, v in out.items()}, str(FIXTURE), metadata={"torch": torch.__version__})
    print(f"wrote {FIXTURE} ({len(out)} tensors)")


if __name__ == "__main__":
    main()
