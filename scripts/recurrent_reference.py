#!/usr/bin/env python3
"""PyTorch's RNN, LSTM and GRU on fixed inputs, for tests/nn/test_recurrent.cpp (which reads the file and does not
need PyTorch).

  python3 scripts/recurrent_reference.py      writes tests/fixtures/nn/recurrent_torch.safetensors

Needs torch and safetensors (pip install torch safetensors; generated with torch 2.15.0 from pip).

For each case below, with prefix "<case>.": the module's state_dict under "state." (PyTorch's names), the input
"input", the initial state "h0" (and "c0") where the case passes one, the outputs "output", "h_n" (and "c_n"),
the weights "w_output", "w_h_n" (and "w_c_n") of the loss sum(output * w_output) + sum(h_n * w_h_n) + ..., and
the loss's gradients "grad.input", "grad.h0", "grad.c0" and "grad.state.<parameter>". Dropout is 0, so the
module is deterministic in train mode.
"""
import pathlib

import torch
from safetensors.torch import save_file

FIXTURE = pathlib.Path(__file__).resolve().parent.parent / "tests/fixtures/nn/recurrent_torch.safetensors"

# name: (module, input shape, pass an initial state)
CASES = {
    "rnn_tanh": (lambda: torch.nn.RNN(5, 4), (6, 3, 5), True),
    "rnn_relu_bidirectional_nobias": (
        lambda: torch.nn.RNN(5, 4, nonlinearity="relu", bias=False, bidirectional=True), (6, 3, 5), False),
    "lstm_two_layers_bidirectional": (lambda: torch.nn.LSTM(5, 4, num_layers=2, bidirectional=True), (6, 3, 5), True),
    "lstm_batch_first": (lambda: torch.nn.LSTM(5, 3, batch_first=True), (2, 7, 5), False),
    "lstm_unbatched": (lambda: torch.nn.LSTM(5, 4, num_layers=2), (6, 5), True),
    "gru_two_layers_batch_first": (lambda: torch.nn.GRU(5, 4, num_layers=2, batch_first=True), (3, 6, 5), True),
    "gru_bidirectional": (lambda: torch.nn.GRU(5, 4, bidirectional=True), (6, 2, 5), False),
}


def case(name, make, input_shape, with_state, out):
    module = make()
    is_lstm = isinstance(module, torch.nn.LSTM)
    batched = len(input_shape) == 3
    x = torch.randn(input_shape, requires_grad=True)
    layers = module.num_layers * (2 if module.bidirectional else 1)
    batch = input_shape[0 if module.batch_first else 1] if batched else None
    state_shape = (layers, batch, module.hidden_size) if batched else (layers, module.hidden_size)
    h0 = torch.randn(state_shape, requires_grad=True) if with_state else None
    c0 = torch.randn(state_shape, requires_grad=True) if with_state and is_lstm else None
    hx = ((h0, c0) if is_lstm else h0) if with_state else None
    output, state = module(x, hx)
    results = {"output": output}
    if is_lstm:
        results["h_n"], results["c_n"] = state
    else:
        results["h_n"] = state
    loss = 0
    for key, value in results.items():
        w = torch.randn(value.shape)
        out[f"{name}.w_{key}"] = w
        loss = loss + (value * w).sum()
    loss.backward()
    for key, value in module.state_dict().items():
        out[f"{name}.state.{key}"] = value
    for key, param in module.named_parameters():
        out[f"{name}.grad.state.{key}"] = param.grad
    out[f"{name}.input"] = x.detach()
    out[f"{name}.grad.input"] = x.grad
    for key, t in (("h0", h0), ("c0", c0)):
        if t is not None:
            out[f"{name}.{key}"] = t.detach()
            out[f"{name}.grad.{key}"] = t.grad
    for key, value in results.items():
        out[f"{name}.{key}"] = value.detach()


def main():
    torch.manual_seed(0)
    out = {}
    for name, (make, shape, with_state) in CASES.items():
        case(name, make, shape, with_state, out)
    FIXTURE.parent.mkdir(parents=True, exist_ok=True)
    save_file({k: v.contiguous() for k, v in out.items()}, str(FIXTURE))
    print(f"wrote {FIXTURE} ({len(out)} tensors)")


if __name__ == "__main__":
    main()
