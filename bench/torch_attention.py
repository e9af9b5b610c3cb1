#!/usr/bin/env python3
"""PyTorch's F.scaled_dot_product_attention on the shapes of bench/bench_attention.cpp, run right after it in
the same session: B = 4, H = 8, D = 64, L = 1024 and 4096, dense and causal (is_causal), forward and
forward + backward, float32, 2 threads (or argv[1]). Prints the median milliseconds of 3 runs after a warm-up
and GFLOP/s with bench_attention's count (4 B H L^2 D forward, halved when causal; x 3.5 with the backward).

Needs torch >= 2.0 (Debian's 1.13 has no scaled_dot_product_attention): pip install torch, e.g. into a venv:
  python3 -m venv /opt/torchvenv && /opt/torchvenv/bin/pip install torch
  setsid bash -c 'echo -19 > /proc/$$/autogroup; exec nice -n -19 /opt/torchvenv/bin/python bench/torch_attention.py 2'
"""
import statistics
import sys
import time

import torch
import torch.nn.functional as F

B, H, D = 4, 8, 64
THREADS = int(sys.argv[1]) if len(sys.argv) > 1 else 2
REPS = 3


def median_ms(fn):
    fn()
    times = []
    for _ in range(REPS):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main():
    torch.set_num_threads(THREADS)
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {torch.backends.cpu.get_cpu_capability()}")
    for L in (1024, 4096):
        q, k, v, g = (torch.randn(B, H, L, D) for _ in range(4))
        for causal in (False, True):
            for backward in (False, True):
                if backward:
                    qg, kg, vg = (t.clone().requires_grad_() for t in (q, k, v))

                    def step():
                        F.scaled_dot_product_attention(qg, kg, vg, is_causal=causal).backward(g)
                else:
                    def step():
                        with torch.no_grad():
                            F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                ms = median_ms(step)
                flops = 4.0 * B * H * L * L * D * (0.5 if causal else 1.0) * (3.5 if backward else 1.0)
                print(f"sdpa L={L} causal={int(causal)} backward={int(backward)}: {ms:.1f} ms, {flops / ms * 1e-6:.1f} GFLOP/s")


if __name__ == "__main__":
    main()
