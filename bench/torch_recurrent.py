#!/usr/bin/env python3
"""PyTorch's nn.LSTM and nn.GRU on the shapes of bench/bench_nn.cpp's Recurrent_Kiln, run right after it in the
same session: L = 64 steps, batch 32, 128 inputs, 256 hidden, float32, forward + backward of sum(output), at 1 and
2 threads. Prints the median milliseconds of 5 runs after a warm-up, as Recurrent_Kiln/{0 LSTM, 1 GRU}/{threads}.

Needs torch (pip install torch). docs/performance.md has the command and the figures.
"""
import statistics
import time

import torch

STEPS, BATCH, INPUTS, HIDDEN = 64, 32, 128, 256
REPS = 5


def median_ms(module, x):
    def step():
        module.zero_grad()
        module(x)[0].sum().backward()

    step()
    times = []
    for _ in range(REPS):
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main():
    torch.manual_seed(1)
    x = torch.randn(STEPS, BATCH, INPUTS, requires_grad=True)
    for cell, make in ((0, torch.nn.LSTM), (1, torch.nn.GRU)):
        for threads in (1, 2):
            torch.set_num_threads(threads)
            print(f"torch {make.__name__} ({cell}/{threads}): {median_ms(make(INPUTS, HIDDEN), x):.2f} ms")


if __name__ == "__main__":
    main()
