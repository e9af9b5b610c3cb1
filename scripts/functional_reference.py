#!/usr/bin/env python3
"""PyTorch's pad, interpolate, normalize, cosine_similarity and pairwise_distance on fixed inputs, for
tests/nn/test_resample.cpp (which reads the file and does not need PyTorch).

  python3 scripts/functional_reference.py      writes tests/fixtures/nn/functional_torch.safetensors

Needs torch and safetensors (pip install torch safetensors; generated with torch 2.15.0 from pip).

Inputs "x3" [2, 3, 6], "x4" [2, 3, 5, 7], "x5" [1, 2, 3, 4, 5], "a" [4, 6], "b" [4, 6], "b1" [1, 6] hold float32
values (stored as float64). For each case below, in float64 and in float32 (suffix "32"): "<case>.output", "<case>.w"
(float64, the output's shape) and "<case>.grad" (per input, "<case>.grad.<input>"), the gradient of
sum(output * w).
"""
import pathlib

import torch
import torch.nn.functional as F
from safetensors.torch import save_file

FIXTURE = pathlib.Path(__file__).resolve().parent.parent / "tests/fixtures/nn/functional_torch.safetensors"


def interp(**kw):
    return lambda x: F.interpolate(x, **kw)


# name: (function, input names)
CASES = {
    "pad3_constant": (lambda x: F.pad(x, (2, 1), value=0.5), ["x3"]),
    "pad3_crop": (lambda x: F.pad(x, (-1, 2)), ["x3"]),
    "pad3_reflect": (lambda x: F.pad(x, (2, 3), mode="reflect"), ["x3"]),
    "pad3_replicate": (lambda x: F.pad(x, (3, 1), mode="replicate"), ["x3"]),
    "pad3_circular": (lambda x: F.pad(x, (2, 4), mode="circular"), ["x3"]),
    "pad4_constant": (lambda x: F.pad(x, (1, 2, 0, 1), value=-2.0), ["x4"]),
    "pad4_crop": (lambda x: F.pad(x, (-1, 1, -2, 0)), ["x4"]),
    "pad4_reflect": (lambda x: F.pad(x, (1, 2, 3, 1), mode="reflect"), ["x4"]),
    "pad4_replicate": (lambda x: F.pad(x, (2, 0, 1, 3), mode="replicate"), ["x4"]),
    "pad4_circular": (lambda x: F.pad(x, (1, 1, 2, 3), mode="circular"), ["x4"]),
    "nearest_size": (interp(size=(8, 11)), ["x4"]),
    "nearest_scale2": (interp(scale_factor=2), ["x4"]),
    "nearest_down": (interp(scale_factor=0.5), ["x4"]),
    "nearest_scale1.7": (interp(scale_factor=1.7), ["x4"]),
    "bilinear_size": (interp(size=(8, 11), mode="bilinear"), ["x4"]),
    "bilinear_size_corners": (interp(size=(8, 11), mode="bilinear", align_corners=True), ["x4"]),
    "bilinear_scale": (interp(scale_factor=(2, 1.5), mode="bilinear"), ["x4"]),
    "bilinear_down": (interp(size=(3, 4), mode="bilinear"), ["x4"]),
    "bilinear_down_corners": (interp(size=(3, 4), mode="bilinear", align_corners=True), ["x4"]),
    "bilinear_scale0.6": (interp(scale_factor=0.6, mode="bilinear"), ["x4"]),
    "linear_size": (interp(size=10, mode="linear"), ["x3"]),
    "linear_size_corners": (interp(size=10, mode="linear", align_corners=True), ["x3"]),
    "linear_scale2.5": (interp(scale_factor=2.5, mode="linear"), ["x3"]),
    "nearest1d_size": (interp(size=4), ["x3"]),
    "trilinear_size": (interp(size=(5, 6, 7), mode="trilinear"), ["x5"]),
    "nearest3d_scale2": (interp(scale_factor=2), ["x5"]),
    "normalize": (lambda a: F.normalize(a), ["a"]),
    "normalize_p1_dim0": (lambda a: F.normalize(a, p=1, dim=0), ["a"]),
    "cosine_similarity": (lambda a, b: F.cosine_similarity(a, b), ["a", "b"]),
    "cosine_similarity_broadcast": (lambda a, b1: F.cosine_similarity(a, b1, dim=1), ["a", "b1"]),
    "pairwise_distance": (lambda a, b: F.pairwise_distance(a, b), ["a", "b"]),
    "pairwise_distance_p1_keepdim": (lambda a, b: F.pairwise_distance(a, b, p=1, keepdim=True), ["a", "b"]),
}


def main():
    torch.manual_seed(0)
    inputs = {
        "x3": torch.randn(2, 3, 6),
        "x4": torch.randn(2, 3, 5, 7),
        "x5": torch.randn(1, 2, 3, 4, 5),
        "a": torch.randn(4, 6),
        "b": torch.randn(4, 6),
        "b1": torch.randn(1, 6),
    }
    out = {name: t.double() for name, t in inputs.items()}
    for case, (f, names) in CASES.items():
        w = None
        for dtype, suffix in ((torch.float64, ""), (torch.float32, "32")):
            args = [inputs[n].detach().to(dtype).clone().requires_grad_() for n in names]
            y = f(*args)
            if w is None:
                w = torch.randn(y.shape, dtype=torch.float64)
                out[f"{case}.w"] = w
            (y * w.to(dtype)).sum().backward()
            out[f"{case}.output{suffix}"] = y.detach().double()
            for n, a in zip(names, args):
                out[f"{case}.grad{suffix}.{n}"] = a.grad.double()
    save_file({k: v.contiguous() for k, v in out.items()}, str(FIXTURE), metadata={"torch": torch.__version__})
    print(f"wrote {FIXTURE} ({len(out)} tensors)")


if __name__ == "__main__":
    main()
