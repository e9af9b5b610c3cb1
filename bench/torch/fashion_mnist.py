#!/usr/bin/python3
"""PyTorch's side of the training-speed comparison (docs/performance.md): the same CNN, optimizer, batch
size and data as examples/fashion_mnist, timed per training epoch with the same thread count. Not needed by
the tests. Uses Debian's python3-torch (run with /usr/bin/python3) or pip's torch, and numpy.

  /usr/bin/python3 bench/torch/fashion_mnist.py --threads 2 [--epochs 1] [--limit-batches N]
"""
import argparse
import gzip
import time

import numpy as np
import torch
import torch.nn as nn


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--epochs", type=int, default=1)
    p.add_argument("--limit-batches", type=int, default=0)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    x = torch.from_numpy(read_idx(f"{args.data}/train-images-idx3-ubyte.gz").astype(np.float32) / 255)
    x = ((x - 0.2860) / 0.3530).reshape(-1, 1, 28, 28)
    y = torch.from_numpy(read_idx(f"{args.data}/train-labels-idx1-ubyte.gz").astype(np.int64))
    net = nn.Sequential(nn.Conv2d(1, 64, 3, padding=1), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Conv2d(64, 128, 3, padding=1), nn.BatchNorm2d(128), nn.ReLU(), nn.MaxPool2d(2),
                        nn.Flatten(), nn.Linear(6272, 512), nn.ReLU(), nn.Linear(512, 10))
    opt = torch.optim.Adam(net.parameters(), 1e-3)
    batches = (len(x) + 63) // 64
    if args.limit_batches:
        batches = min(batches, args.limit_batches)
    blas = [line.strip() for line in torch.__config__.show().splitlines() if "BLAS" in line]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {blas[0] if blas else 'BLAS unknown'}")
    for epoch in range(args.epochs):
        order = torch.randperm(len(x))
        start = time.perf_counter()
        for b in range(batches):
            idx = order[b * 64:(b + 1) * 64]
            opt.zero_grad()
            loss = nn.functional.cross_entropy(net(x[idx]), y[idx])
            loss.backward()
            opt.step()
        seconds = time.perf_counter() - start
        print(f"epoch {epoch + 1}: {batches} batches in {seconds:.1f} s, {seconds / batches * 1e3:.1f} ms/batch, "
              f"{batches * 64 / seconds:.0f} img/s")


if __name__ == "__main__":
    main()
