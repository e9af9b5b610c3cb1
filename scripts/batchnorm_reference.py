#!/usr/bin/env python3
"""A state_dict as PyTorch saves it, for tests/nn/test_torch_state_dict.cpp, and the other direction.

  python3 scripts/batchnorm_reference.py write        writes tests/fixtures/nn/batchnorm_torch.safetensors and
                                                      batchnorm_torch_io.safetensors (the tests read the files;
                                                      they do not need PyTorch)
  python3 scripts/batchnorm_reference.py check DIR    loads the state_dict kiln wrote into DIR into the same
                                                      PyTorch model with load_state_dict(strict=True)

Needs torch and safetensors (pip install torch safetensors; generated with torch 2.15.0 from pip).

The model: Conv2d(1, 2, 3), BatchNorm2d(2), ReLU, Flatten, Linear(8, 3), BatchNorm1d(3), with random parameters,
after 5 forward passes in train() (so running_mean, running_var and num_batches_tracked = 5 have moved).
batchnorm_torch.safetensors is safetensors.torch.save_file(model.state_dict()) as a PyTorch user writes it:
float32 parameters and running statistics, num_batches_tracked as int64 0-d tensors.
batchnorm_torch_io.safetensors holds an input x [6, 1, 4, 4] and the model's eval() output y [6, 3].

For `check`, let the C++ test write kiln's file:
  KILN_INTEROP_DIR=/tmp/kiln_interop build/tests/kiln_tests -tc='*KILN_INTEROP_DIR*'
  python3 scripts/batchnorm_reference.py check /tmp/kiln_interop
kiln writes num_batches_tracked as float32 (its modules hold float tensors); PyTorch's load_state_dict copies it
into the int64 buffer with copy_, so strict loading takes it, and the model then gives kiln's output.
"""
import pathlib
import sys

import torch
from safetensors.torch import load_file, save_file

FIXTURES = pathlib.Path(__file__).resolve().parent.parent / "tests/fixtures/nn"


def make_model():
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 2, 3),
        torch.nn.BatchNorm2d(2),
        torch.nn.ReLU(),
        torch.nn.Flatten(),
        torch.nn.Linear(8, 3),
        torch.nn.BatchNorm1d(3),
    )


def write():
    torch.manual_seed(0)
    model = make_model()
    with torch.no_grad():
        for bn in (model[1], model[5]):
            bn.weight.uniform_(0.5, 1.5)
            bn.bias.normal_()
        model.train()
        for _ in range(5):
            model(torch.randn(8, 1, 4, 4) * 2 + 0.5)
        model.eval()
        x = torch.randn(6, 1, 4, 4)
        y = model(x)
    state = model.state_dict()
    assert state["1.num_batches_tracked"].dtype == torch.int64 and state["1.num_batches_tracked"].item() == 5
    FIXTURES.mkdir(parents=True, exist_ok=True)
    save_file(state, str(FIXTURES / "batchnorm_torch.safetensors"))
    save_file({"x": x, "y": y}, str(FIXTURES / "batchnorm_torch_io.safetensors"))
    print(f"wrote {len(state)} state_dict entries and x, y to {FIXTURES} (torch {torch.__version__})")


def check(directory):
    directory = pathlib.Path(directory)
    state = load_file(str(directory / "kiln_batchnorm.safetensors"))
    io = load_file(str(directory / "kiln_batchnorm_io.safetensors"))
    assert state["1.num_batches_tracked"].dtype == torch.float32, state["1.num_batches_tracked"].dtype
    model = make_model()
    result = model.load_state_dict(state, strict=True)
    assert not result.missing_keys and not result.unexpected_keys, result
    for name in ("1.num_batches_tracked", "5.num_batches_tracked"):
        buffer = model.state_dict()[name]
        assert buffer.dtype == torch.int64 and buffer.item() == int(state[name].item()), (name, buffer)
    for name, value in model.state_dict().items():
        if value.dtype == torch.float32:
            assert torch.equal(value, state[name]), name
    model.eval()
    with torch.no_grad():
        y = model(io["x"])
    assert torch.allclose(y, io["y"], rtol=1e-5, atol=1e-5), (y - io["y"]).abs().max()
    print(f"torch {torch.__version__}: load_state_dict(strict=True) took kiln's state_dict "
          f"(num_batches_tracked {int(state['1.num_batches_tracked'].item())}); outputs match")


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "check" and len(sys.argv) == 3:
        check(sys.argv[2])
    elif len(sys.argv) == 2 and sys.argv[1] == "write":
        write()
    else:
        sys.exit(__doc__)
