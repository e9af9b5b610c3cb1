#!/usr/bin/python3
"""PyTorch eager baselines for bench_elementwise (run in the same session, interleaved with it).

Usage: OPENBLAS_CORETYPE=SkylakeX /usr/bin/python3 bench/torch_elementwise.py [repetitions]
Prints the median milliseconds of each workload at 1 and 2 threads, eager and writing into
preallocated outputs (out=), for 16M floats.
"""
import statistics
import sys
import time

import torch

N = 16 << 20
A, B = 1.5, -0.75
REPS = int(sys.argv[1]) if len(sys.argv) > 1 else 7


def median_ms(fn, reps=REPS):
    fn()  # warm-up
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main():
    torch.manual_seed(0)
    x, y, z = torch.rand(N), torch.rand(N), torch.rand(N)
    out, t1, t2 = torch.empty(N), torch.empty(N), torch.empty(N)

    def axpby_eager():
        return A * x + B * y + z

    def axpby_out():
        torch.mul(x, A, out=t1)
        torch.add(t1, y, alpha=B, out=t2)
        torch.add(t2, z, out=out)

    def tanhexp_eager():
        return torch.tanh(x) * torch.exp(-(y * y)) + z

    def tanhexp_out():
        torch.tanh(x, out=t1)
        torch.mul(y, y, out=t2)
        torch.neg(t2, out=t2)
        torch.exp(t2, out=t2)
        torch.mul(t1, t2, out=t1)
        torch.add(t1, z, out=out)

    print(f"torch {torch.__version__}")
    for threads in (1, 2):
        torch.set_num_threads(threads)
        for name, fn in (("Axpby_TorchEager", axpby_eager), ("Axpby_TorchOut", axpby_out),
                         ("TanhExp_TorchEager", tanhexp_eager), ("TanhExp_TorchOut", tanhexp_out)):
            print(f"{name}/{threads} median_ms {median_ms(fn):.2f}")


if __name__ == "__main__":
    main()
